"""The ``rlvr`` command: ``rlvr train CONFIG [key=value ...] [--import MODULE]`` and ``rlvr eval``.

``rlvr train`` loads the YAML config, applies the dotted overrides, checks everything (an unknown
key or a bad value stops here, before any work, with a message naming the key) and runs
``rlvr.trainer.train``. ``rlvr eval ...`` parses its arguments here and runs
``rlvr.eval.evaluator.evaluate``, then prints the summary table.
``rlvr check-env ENV_ID [--import MODULE]`` runs ``rlvr.envs.check_env(env, deep=True)`` and prints
its table (exit code 1 when a check failed). ``rlvr serve --model PATH`` serves a checkpoint
behind an OpenAI-compatible API (``rlvr.serve``). ``rlvr model import FILE.gguf OUT/`` writes a
GGUF file as a plain safetensors HF folder (``rlvr.gguf_import``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.envs.errors import EnvError
from rlvr.errors import ConfigError, RlvrError, RunStoppedError

USAGE = """usage: rlvr {train,eval,check-env,serve,model} ...

  rlvr train CONFIG [key=value ...] [--import MODULE]   train with a YAML config
  rlvr eval --model PATH --suite NAME [key=value ...]  evaluate checkpoints (rlvr eval -h)
  rlvr check-env ENV_ID [--import MODULE]              check an env's contract and hackability
  rlvr serve --model PATH [--host H] [--port P]        an OpenAI-compatible API on a checkpoint
  rlvr model import FILE.gguf OUT/ [--dtype D]         a GGUF file as a safetensors HF folder
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
            from rlvr import envs

            envs.import_plugins(args.imports)
        config = load_config(args.config, overrides)
        config.env.imports = [*config.env.imports, *args.imports]
        from rlvr.trainer import preflight, train

        plan = preflight(config)
    except (RlvrError, EnvError, ValueError, ImportError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"rlvr train: error: {message}", file=sys.stderr)
        return 2

    finished = False
    try:
        train(config, plan=plan)
        finished = True
    except ConfigError as err:  # found once a model is loaded (a teacher, LoRA, a resume)
        print(f"rlvr train: error: {err}", file=sys.stderr)
        return 2
    except RunStoppedError as err:  # the run stopped on purpose: say why, no traceback
        print(f"rlvr train: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(interrupted_hint(config, list(argv)), file=sys.stderr)
        return 130
    except Exception as err:
        full = disk_full_at(err, Path(config.trainer.output_dir))
        if full is None:
            raise
        print(f"rlvr train: error: no space left on device at {full}; free some space and "
              "resume with trainer.resume=true (the last complete checkpoint is intact)",
              file=sys.stderr)
        return 1
    finally:
        from rlvr.learner.parallel import close_distributed

        # gloo's threads end here, not in the interpreter's teardown (where a rank can abort)
        close_distributed(barrier=finished)
    return 0


def disk_full_at(err: BaseException, out: Path) -> str | None:
    """Where the disk filled up, when that is what ``err`` (or what led to it) says; else None.

    torch reports a short write as its own ``RuntimeError`` ("unexpected pos ..."): then a
    full filesystem under ``out`` is the answer.
    """
    import errno
    import shutil

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return str(seen.filename or out)
        seen = seen.__cause__ or seen.__context__
    try:
        free = shutil.disk_usage(out).free
    except OSError:
        return None
    return str(out) if free < 1 << 20 else None


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
    """``rlvr eval``'s flags: each config flag's ``dest`` is its ``SuiteEvalConfig`` key."""
    from rlvr.agents.engine_registry import engine_names
    from rlvr.eval.evaluator import SuiteEvalConfig as C

    parser = argparse.ArgumentParser(
        prog="rlvr eval",
        description="Evaluate checkpoints on an env suite: pass@k table, report.md, plots, "
        "episodes.jsonl and episodes.html. The flags set keys of the evaluation config; "
        "any key can be set as a dotted key=value after them (e.g. transformers.threads=2, "
        "sglang.weight_sync=disk), checked like rlvr train's.",
        epilog="Example: rlvr eval --model M --suite arith_small --samples 4 "
               "transformers.threads=2",
    )
    add = parser.add_argument

    def key(flag: str, dest: str, **kwargs: Any) -> None:  # a config key: unset stays unset
        add(flag, dest=dest, default=argparse.SUPPRESS, **kwargs)

    add("--model", action="append", required=True, metavar="PATH",
        help="HF checkpoint directory; repeat to compare (deltas are vs the first)")
    key("--suite", "suite", required=True,
        help="suite name (configs/suites/NAME.yaml) or a YAML path")
    key("--samples", "samples", type=int,
        help=f"episodes per task: the k of pass@k (default {C.samples})")
    key("--temperature", "temperature", type=float,
        help="sampling temperature (default: 0 for --samples 1, else 1.0)")
    key("--top-p", "top_p", type=float, help=f"nucleus sampling mass (default {C.top_p})")
    key("--max-turns", "max_turns", type=int,
        help="model turns per episode (default: the runner's)")
    key("--max-new-tokens", "max_new_tokens", type=int,
        help=f"tokens per model turn (default {C.max_new_tokens})")
    key("--max-response-tokens", "max_response_tokens", type=int,
        help="model + env tokens per episode")
    key("--stop", "stop", action="append", metavar="TEXT",
        help="extra string that ends a model turn; repeatable")
    key("--seed", "seed", type=int, help=f"root seed of every episode (default {C.seed})")
    key("--engine", "engine", help=f"rollout engine: {', '.join(engine_names())} "
        f"(default {C.engine})")
    key("--device", "device", help="device of the transformers engine (default cpu)")
    key("--sglang-url", "sglang.url", metavar="URL",
        help="with --engine sglang: attach to this server (it loads each --model from disk) "
             "instead of launching one per model (the key sglang.url)")
    key("--sglang-allow-unseeded", "sglang.allow_unseeded", action="store_true",
        help="with --engine sglang: accept a server that ignores sampling seeds (CPU sglang); "
             "sampled episodes are then not reproducible (the key sglang.allow_unseeded)")
    key("--vllm-url", "vllm.url", metavar="URL",
        help="with --engine vllm: attach to this server (it loads each --model from disk) "
             "instead of launching one per model (the key vllm.url)")
    key("--concurrency", "concurrency", type=int,
        help=f"episodes in flight (default {C.concurrency})")
    key("--env-step-timeout-s", "env_step_timeout_s", type=float, metavar="SECONDS",
        help="limit of one env call (reset, a step): past it the episode ends with reason "
             f"'timeout' and the call is stopped (default {C.env_step_timeout_s:g})")
    add("overrides", nargs="*", metavar="key=value",
        help="dotted overrides of the evaluation config, applied after the flags")
    add("--out", default=None, metavar="DIR", help="output directory (default outputs/eval/SUITE)")
    add("--import", dest="imports", action="append", default=[], metavar="MODULE",
        help="import a module first (it registers its envs); repeatable")
    add("--no-progress", action="store_true", help="hide the progress bar")
    add("--log-to", dest="loggers", action="append", default=[], metavar="LOGGER",
        help="also log the pass@k table and the report to this tracker (mlflow, wandb, a "
             "plugin's; the run is named after --out); repeatable")
    return parser


_NOT_CONFIG = ("model", "overrides", "out", "imports", "no_progress", "loggers")


def eval_args(argv: Sequence[str]) -> tuple[argparse.Namespace, Any]:
    """``rlvr eval``'s arguments and its ``SuiteEvalConfig``.

    The config flags (each ``dest`` a dotted key) and then the dotted ``key=value`` overrides
    build one config with the loader and checks of ``rlvr train``
    (``rlvr.eval.evaluator.eval_config``).

    Raises:
        ConfigError: an unknown key or a bad value (the message names the dotted key).
    """
    from rlvr.eval.evaluator import eval_config

    args = _eval_parser().parse_intermixed_args(list(argv))
    fields: dict[str, Any] = {}
    for dotted, value in vars(args).items():
        if dotted in _NOT_CONFIG:
            continue
        *sections, name = dotted.split(".")
        node = fields
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return args, eval_config(fields, args.overrides)


def eval_main(argv: Sequence[str]) -> int:
    """``rlvr eval``: run ``rlvr.eval.evaluator.evaluate``, write the report files, print the table.

    Returns:
        The exit status: 0 on success, 2 on a bad argument, suite, model path or env (the
        message goes to stderr).
    """
    try:
        from rlvr.agents.errors import AgentError
        from rlvr.eval.evaluator import evaluate
        from rlvr.eval.report import summary_table
    except ImportError as err:
        print(f"rlvr eval: error: the evaluation module is not available ({err})",
              file=sys.stderr)
        return 2
    try:
        args, config = eval_args(argv)
        out = Path(args.out) if args.out else Path("outputs") / "eval" / Path(config.suite).stem
        results = evaluate(args.model, config=config, out_dir=out, imports=args.imports,
                           progress=not args.no_progress, loggers=args.loggers)
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
        "limits, anti-hacking probes, tool calls (rlvr.envs.check_env with deep=True).")
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
    parser.add_argument("--call-timeout-s", type=float, default=None,
                        help="deadline of every reset/step call; a call past it is reported "
                             "as a hang (default: 3x the step budget, at least 30 s)")
    args = parser.parse_args(list(argv))
    if args.tasks < 1:
        parser.error(f"--tasks must be >= 1; got {args.tasks}")
    if args.call_timeout_s is not None and not args.call_timeout_s > 0:
        parser.error(f"--call-timeout-s must be > 0; got {args.call_timeout_s}")
    import json

    from rlvr import envs

    try:
        envs.import_plugins(args.imports)
        env = envs.make(args.env_id, **json.loads(args.kwargs))
    except (EnvError, ValueError) as err:
        print(f"rlvr check-env: error: {err}", file=sys.stderr)
        return 2
    report = envs.check_env(env, deep=not args.quick, seed=args.seed, raise_on_failure=False,
                            tasks=args.tasks, call_timeout_s=args.call_timeout_s)
    print(report.table())
    return 0 if report.passed else 1


def model_main(argv: Sequence[str]) -> int:
    """``rlvr model import FILE.gguf OUT/``: 0 when written, 2 on a usage or input error."""
    parser = argparse.ArgumentParser(
        prog="rlvr model", description="Model files: `import` writes a .gguf file as a plain "
        "safetensors HuggingFace folder (tokenizer and chat template included) that every "
        "rlvr command, transformers and sglang load; its logits are checked against "
        "transformers' own GGUF reading.")
    sub = parser.add_subparsers(dest="action", required=True)
    imp = sub.add_parser("import", help="write FILE.gguf as a HF folder OUT/")
    imp.add_argument("gguf_file", help="a .gguf file (needs the gguf package)")
    imp.add_argument("out_dir", help="the folder to write (must not exist)")
    imp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                     help="the weights' dtype in the folder (default float32)")
    args = parser.parse_args(list(argv))
    from rlvr.gguf_import import import_gguf

    try:
        report = import_gguf(args.gguf_file, args.out_dir, args.dtype)
    except RlvrError as err:
        print(f"rlvr model import: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {report.out_dir}: {report.architecture}, {report.parameters / 1e6:.1f} M "
          f"parameters, {report.dtype}; max |logit diff| vs transformers' GGUF reading "
          f"{report.max_logit_diff:.2g}; {report.seconds:.0f} s")
    return 0


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
    if command == "model":
        return model_main(rest)
    print(f"rlvr: error: unknown command {command!r}; allowed: train, eval, check-env, "
          f"serve, model\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
