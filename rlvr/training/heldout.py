"""The trainer's held-out evaluation: an ``rlvr.eval.evaluator.Evaluator`` on the training engine.

The held-out suite is ``eval.suite`` when one is named, else built in memory from the training
env: the same id and kwargs merged with ``env.eval_kwargs``, ``tasks`` tasks of its split
(``"test"`` unless the eval kwargs name one), under the entry key ``heldout``; the run writes
it to ``output_dir/eval_suite.yaml`` for ``rlvr eval --suite`` (training never reads it back).
Episodes sample at ``rlvr.eval.plan.default_temperature(eval.samples)``, with the rollout's turn
limit, env-call time limit (``rollout.runner.env_step_timeout_s``) and env threads, and
``eval.max_new_tokens`` tokens per turn.

A held-out set built from the training env must not be the training set: when both envs read
a task source that says which rows it serves (``selection``, e.g. a ``DatasetSource``) and the
two are the same rows (one file without ``source_kwargs.split_column`` or
``source_kwargs.holdout``, or ``env.eval_kwargs={}`` on such a file), the run is refused before
any work (``check_heldout``). The log names the held-out rows (``describe()``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.agents.engine import SamplingParams
from rlvr.agents.runner import RunnerConfig
from rlvr.config import TrainConfig, merge
from rlvr.errors import ConfigError
from rlvr.eval.evaluator import Evaluator, load_suite_entries, suite_entries, write_suite
from rlvr.eval.plan import SuiteEntry, default_temperature


def heldout_entries(config: TrainConfig, suite: str | None, tasks: int) -> list[SuiteEntry]:
    """The entries of ``suite``, or the training env's held-out split (``tasks`` tasks)."""
    if suite:
        return load_suite_entries(suite)
    from rlvr.envs.suites import SuiteEntry as EnvSuiteEntry

    kwargs = _heldout_kwargs(config)
    split = kwargs.pop("split")
    return suite_entries([EnvSuiteEntry(env_id=config.env.id, kwargs=kwargs, split=split,
                                        n_tasks=tasks, name="heldout")])


def _heldout_kwargs(config: TrainConfig) -> dict[str, Any]:
    kwargs = merge(config.env.kwargs, config.env.eval_kwargs)
    kwargs.setdefault("split", "test")
    return kwargs


def _source_of(env_id: str, kwargs: dict[str, Any]) -> Any:
    """The task source of the env built with ``kwargs`` (None for an env without one)."""
    from rlvr import envs

    env = envs.make(env_id, **kwargs)
    try:
        return getattr(env.unwrapped, "source", None)
    finally:
        env.close()


def check_heldout(config: TrainConfig) -> str | None:
    """Refuse a held-out set that is the training set; describe the held-out rows.

    Returns:
        A line naming the held-out rows when the source can say (``describe()``), else None;
        None too with ``eval.suite`` (its envs are the user's choice).

    Raises:
        ConfigError: the training and held-out envs read the same rows (names
            ``env.eval_kwargs`` and the three ways to hold rows out).
    """
    if config.eval.suite:
        return None
    kwargs = _heldout_kwargs(config)
    heldout = _source_of(config.env.id, kwargs)
    training = _source_of(config.env.id, dict(config.env.kwargs))
    same = getattr(heldout, "selection", None)
    if same is not None and same == getattr(training, "selection", None):
        where = getattr(heldout, "path", repr(heldout))
        raise ConfigError(
            f"env.eval_kwargs: the held-out tasks of {config.env.id!r} are its training tasks "
            f"(both read every row of {where}, split {kwargs['split']!r} is only a label): the "
            "held-out accuracy would be measured on training rows. Hold rows out with "
            "env.kwargs.source_kwargs.holdout=0.1 (a seeded 10% of the rows), read a split "
            "column with env.kwargs.source_kwargs.split_column=<column>, give a test file in "
            "env.eval_kwargs.source, or name a suite in eval.suite", key="env.eval_kwargs")
    describe = getattr(heldout, "describe", None)
    return f"[rlvr] held-out tasks: {describe()}" if callable(describe) else None


def heldout_evaluator(config: TrainConfig, engine: Any, tokenizer: Any, *, suite: str | None,
                      tasks: int, every: int, suite_path: Path | None = None,
                      log: Any = None) -> Evaluator:
    """The held-out ``Evaluator`` of a run (``evaluate(step)`` adds ``eval/accuracy``).

    ``suite_path``: where to write the suite built from the env, for ``rlvr eval --suite``
    (nothing reads it back). ``log``: called with the line naming the held-out rows.
    """
    ev = config.eval
    train_runner = config.rollout.runner
    runner = RunnerConfig(
        max_turns=train_runner.max_turns, max_tokens_per_turn=ev.max_new_tokens,
        env_step_timeout_s=train_runner.env_step_timeout_s, env_workers=train_runner.env_workers,
        sampling=SamplingParams(temperature=default_temperature(ev.samples)),
    )
    entries = heldout_entries(config, suite, tasks)
    line = check_heldout(config) if log is not None else None
    if line is not None and log is not None:
        log(line)
    if suite_path is not None and not suite:
        write_suite(entries, suite_path)
    return Evaluator(entries, runner, engine=engine, tokenizer=tokenizer, samples=ev.samples,
                     seed=config.trainer.seed, every=every)
