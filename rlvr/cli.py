"""The ``rlvr`` command: ``rlvr train CONFIG [key=value ...] [--import MODULE]`` and ``rlvr eval``.

``rlvr train`` loads the YAML config, applies the dotted overrides, checks everything (an unknown
key or a bad value stops here, before any work, with a message naming the key) and runs
``rlvr.trainer.train``. ``rlvr eval ...`` parses its arguments here and runs
``rlvr.evaluate.evaluate``, then prints the summary table.
``rlvr check-env ENV_ID [--import MODULE]`` runs ``envs.check_env(env, deep=True)`` and prints
its table (exit code 1 when a check failed). ``rlvr serve --model PATH`` serves a checkpoint
behind an OpenAI-compatible API (``rlvr.serve``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.errors import EnvError
from rlvr.errors import RlvrError, RunStoppedError

USAGE = """usage: rlvr {train,eval,check-env,serve} ...

  rlvr train CONFIG [key=value ...] [--import MODULE]   train with a YAML config
  rlvr eval --model PATH --suite NAME [...]            evaluate checkpoints (rlvr eval -h)
  rlvr check-env ENV_ID [--import MODULE]              check an env's contract and hackability
  rlvr serve --model PATH [--host H] [--port P]        an OpenAI-compatible API on a checkpoint
"""


def _train_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr train",
        description="Train a policy with RL on verifiable rewards.",
        epilog="Example: rlvr train configs/quickstart.yaml trainer.steps=50 "
               "actor.optim.lr=3e-4",
    )
    parser.add_argument("config", help="a YAML config file (see configs/)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="dotted overrides, e.g. rollout.group_size=4")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE",
                        help="import MODULE first so it can register its envs (repeatable)")
    return parser


def train_main(argv: Sequence[str]) -> int:
    """``rlvr train``: returns the process exit code (2 for a config error)."""
    args = _train_parser().parse_intermixed_args(list(argv))  # overrides after --import too
    from rlvr.config import load_config

    overrides = list(args.overrides)
    try:
        if args.imports:
            import envs

            envs.import_plugins(args.imports)
        config = load_config(args.config, overrides)
        config.env.imports = [*config.env.imports, *args.imports]
        from rlvr.trainer import check_env, train

        check_env(config)
    except (RlvrError, EnvError, ValueError, ImportError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"rlvr train: error: {message}", file=sys.stderr)
        return 2

    try:
        train(config)
    except RunStoppedError as err:  # the run stopped on purpose: say why, no traceback
        print(f"rlvr train: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(interrupted_hint(config, list(argv)), file=sys.stderr)
        return 130
    finally:
        import torch.distributed as dist

        if dist.is_initialized():  # join gloo's threads before exit (else a rank can abort)
            dist.destroy_process_group()
    return 0


def interrupted_hint(config: Any, argv: list[str]) -> str:
    """What Ctrl-C prints: where the run stands and how to resume it (no traceback)."""
    from rlvr.learner import latest_checkpoint

    out = Path(config.trainer.output_dir)
    checkpoint = latest_checkpoint(out / "checkpoints")
    if checkpoint is None:
        return (f"rlvr train: interrupted; {out} has no checkpoint to resume from (set "
                "trainer.checkpoint_every to save some); start again with "
                "trainer.overwrite=true")
    again = " ".join(a for a in argv if not a.startswith("trainer.resume="))
    return (f"rlvr train: interrupted; the last checkpoint is {checkpoint}. Resume with:\n"
            f"  rlvr train {again} trainer.resume=true")


def _eval_parser() -> argparse.ArgumentParser:
    from agents.engines import engine_names

    parser = argparse.ArgumentParser(
        prog="rlvr eval",
        description="Evaluate checkpoints on an env suite: pass@k table, report.md, plots, "
        "episodes.jsonl and episodes.html.",
    )
    add = parser.add_argument
    add("--model", action="append", required=True, metavar="PATH",
        help="HF checkpoint directory; repeat to compare (deltas are vs the first)")
    add("--suite", required=True, help="suite name (configs/suites/NAME.yaml) or a YAML path")
    add("--samples", type=int, default=1, help="episodes per task: the k of pass@k (default 1)")
    add("--temperature", type=float, default=None,
        help="sampling temperature (default: 0 for --samples 1, else 1.0)")
    add("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0)")
    add("--max-turns", type=int, default=None,
        help="model turns per episode (default: the runner's)")
    add("--max-new-tokens", type=int, default=256, help="tokens per model turn (default 256)")
    add("--max-response-tokens", type=int, default=None, help="model + env tokens per episode")
    add("--stop", action="append", default=[], metavar="TEXT",
        help="extra string that ends a model turn; repeatable")
    add("--out", default=None, metavar="DIR", help="output directory (default outputs/eval/SUITE)")
    add("--seed", type=int, default=0, help="root seed of every episode (default 0)")
    add("--engine", choices=engine_names(), default="transformers", help="rollout engine")
    add("--device", default=None, help="device for the transformers engine (default cpu)")
    add("--sglang-url", default=None, metavar="URL",
        help="with --engine sglang: attach to this server (it loads each --model from disk) "
             "instead of launching one per model")
    add("--sglang-allow-unseeded", action="store_true",
        help="with --engine sglang: accept a server that ignores sampling seeds (CPU sglang); "
             "sampled episodes are then not reproducible")
    add("--import", dest="imports", action="append", default=[], metavar="MODULE",
        help="import a module first (it registers its envs); repeatable")
    add("--concurrency", type=int, default=64, help="episodes in flight (default 64)")
    add("--env-step-timeout-s", type=float, default=60.0, metavar="SECONDS",
        help="limit of one env call (reset, a step): past it the episode ends with reason "
             "'timeout' and the call is stopped (default 60)")
    add("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def eval_main(argv: Sequence[str]) -> int:
    """``rlvr eval``: run ``rlvr.evaluate.evaluate``, write the report files, print the table.

    Returns:
        The exit status: 0 on success, 2 on a bad argument, suite, model path or env (the
        message goes to stderr).
    """
    try:
        from agents.errors import AgentError
        from rlvr.eval.report import summary_table
        from rlvr.evaluate import evaluate
    except ImportError as err:
        print(f"rlvr eval: error: the evaluation module is not available ({err})",
              file=sys.stderr)
        return 2
    args = _eval_parser().parse_args(list(argv))
    out = Path(args.out) if args.out else Path("outputs") / "eval" / Path(args.suite).stem
    engine_kwargs: dict[str, Any] = {}
    if args.device and args.engine == "transformers":
        engine_kwargs["device"] = args.device
    if args.engine == "sglang":
        if args.sglang_url:
            engine_kwargs["url"] = args.sglang_url
        if args.sglang_allow_unseeded:
            engine_kwargs["allow_unseeded"] = True
    try:
        results = evaluate(
            args.model, args.suite, samples=args.samples, temperature=args.temperature,
            max_turns=args.max_turns, out_dir=out, seed=args.seed, engine=args.engine,
            engine_kwargs=engine_kwargs, imports=args.imports, progress=not args.no_progress,
            top_p=args.top_p, max_new_tokens=args.max_new_tokens,
            max_response_tokens=args.max_response_tokens, stop=tuple(args.stop),
            concurrency=args.concurrency, env_step_timeout_s=args.env_step_timeout_s,
        )
    except (RlvrError, EnvError, AgentError) as err:
        print(f"rlvr eval: error: {err}", file=sys.stderr)
        return 2
    print(summary_table(results))
    print(f"\nwrote {out}/: results.json, report.md, plots/, episodes.jsonl, episodes.html")
    return 0


def check_env_main(argv: Sequence[str]) -> int:
    """``rlvr check-env``: 0 when every check passed, 1 when one failed, 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog="rlvr check-env", description="Check a registered env: contract, determinism, "
        "limits, anti-hacking probes, tool calls (envs.check_env with deep=True).")
    parser.add_argument("env_id", help="a registered id, e.g. rlvr/Math-v0")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE", help="import MODULE first so it can register its envs")
    parser.add_argument("--kwargs", default="{}",
                        help='env arguments as JSON, e.g. \'{"max_attempts": 2}\'')
    parser.add_argument("--seed", type=int, default=0, help="reset seed of every episode")
    parser.add_argument("--quick", action="store_true", help="contract and determinism only")
    parser.add_argument("--tasks", type=int, default=3,
                        help="tasks (reset seeds seed, seed+1, ...) the contract episodes and "
                             "probes play (default 3)")
    args = parser.parse_args(list(argv))
    if args.tasks < 1:
        parser.error(f"--tasks must be >= 1; got {args.tasks}")
    import json

    import envs

    try:
        envs.import_plugins(args.imports)
        env = envs.make(args.env_id, **json.loads(args.kwargs))
    except (EnvError, ValueError) as err:
        print(f"rlvr check-env: error: {err}", file=sys.stderr)
        return 2
    report = envs.check_env(env, deep=not args.quick, seed=args.seed, raise_on_failure=False,
                            tasks=args.tasks)
    print(report.table())
    return 0 if report.passed else 1


def _quiet_transformers() -> None:
    """Hide transformers' per-load "Loading weights" bars: rlvr shows its own progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rlvr`` console script.

    Args:
        argv: the arguments after the program name (default ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 2 on a usage or config error (``check-env``: 1 when a
        check failed).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    _quiet_transformers()
    if command == "train":
        return train_main(rest)
    if command == "eval":
        return eval_main(rest)
    if command == "check-env":
        return check_env_main(rest)
    if command == "serve":
        from rlvr.serve import serve_main

        return serve_main(rest)
    print(f"rlvr: error: unknown command {command!r}; allowed: train, eval, check-env, "
          f"serve\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
