"""The ``rlvr`` command: ``rlvr train CONFIG [key=value ...] [--import MODULE]`` and ``rlvr eval``.

``rlvr train`` loads the YAML config, applies the dotted overrides, checks everything (an unknown
key or a bad value stops here, before any work, with a message naming the key) and runs
``rlvr.trainer.train``. ``rlvr eval ...`` hands its arguments to ``rlvr.evaluate.cli_main``.
``rlvr check-env ENV_ID [--import MODULE]`` runs ``envs.check_env(env, deep=True)`` and prints
its table (exit code 1 when a check failed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from envs.errors import EnvError
from rlvr.errors import RlvrError

USAGE = """usage: rlvr {train,eval,check-env} ...

  rlvr train CONFIG [key=value ...] [--import MODULE]   train with a YAML config
  rlvr eval --model PATH --suite NAME [...]            evaluate checkpoints (rlvr eval -h)
  rlvr check-env ENV_ID [--import MODULE]              check an env's contract and hackability
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
    args = _train_parser().parse_args(list(argv))
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

    train(config)
    return 0


def eval_main(argv: Sequence[str]) -> int:
    """``rlvr eval``: delegates to ``rlvr.evaluate.cli_main``."""
    try:
        from rlvr.evaluate import cli_main
    except ImportError as err:
        print(f"rlvr eval: error: the evaluation module is not available ({err})",
              file=sys.stderr)
        return 2
    return int(cli_main(list(argv)) or 0)


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
    args = parser.parse_args(list(argv))
    import json

    import envs

    try:
        envs.import_plugins(args.imports)
        env = envs.make(args.env_id, **json.loads(args.kwargs))
    except (EnvError, ValueError) as err:
        print(f"rlvr check-env: error: {err}", file=sys.stderr)
        return 2
    report = envs.check_env(env, deep=not args.quick, seed=args.seed, raise_on_failure=False)
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
    print(f"rlvr: error: unknown command {command!r}; allowed: train, eval, check-env\n{USAGE}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
