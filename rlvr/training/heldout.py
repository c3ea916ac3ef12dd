"""The trainer's held-out evaluation: an ``rlvr.evaluate.Evaluator`` on the training engine.

The held-out suite is ``eval.suite`` when one is named, else built in memory from the training
env: the same id and kwargs merged with ``env.eval_kwargs``, ``tasks`` tasks of its split
(``"test"`` unless the eval kwargs name one), under the entry key ``heldout``; the run writes
it to ``output_dir/eval_suite.yaml`` for ``rlvr eval --suite`` (training never reads it back).
Episodes sample at ``rlvr.eval.plan.default_temperature(eval.samples)``, with the rollout's turn
limit, env-call time limit (``rollout.runner.env_step_timeout_s``) and env threads, and
``eval.max_new_tokens`` tokens per turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.agents.engine import SamplingParams
from rlvr.agents.runner import RunnerConfig
from rlvr.config import TrainConfig, merge
from rlvr.eval.plan import SuiteEntry, default_temperature
from rlvr.evaluate import Evaluator, load_suite_entries, suite_entries, write_suite


def heldout_entries(config: TrainConfig, suite: str | None, tasks: int) -> list[SuiteEntry]:
    """The entries of ``suite``, or the training env's held-out split (``tasks`` tasks)."""
    if suite:
        return load_suite_entries(suite)
    from rlvr.envs.suites import SuiteEntry as EnvSuiteEntry

    kwargs = merge(config.env.kwargs, config.env.eval_kwargs)
    split = kwargs.pop("split", "test")
    return suite_entries([EnvSuiteEntry(env_id=config.env.id, kwargs=kwargs, split=split,
                                        n_tasks=tasks, name="heldout")])


def heldout_evaluator(config: TrainConfig, engine: Any, tokenizer: Any, *, suite: str | None,
                      tasks: int, every: int, suite_path: Path | None = None) -> Evaluator:
    """The held-out ``Evaluator`` of a run (``evaluate(step)`` adds ``eval/accuracy``).

    ``suite_path``: where to write the suite built from the env, for ``rlvr eval --suite``
    (nothing reads it back).
    """
    ev = config.eval
    train_runner = config.rollout.runner
    runner = RunnerConfig(
        max_turns=train_runner.max_turns, max_tokens_per_turn=ev.max_new_tokens,
        env_step_timeout_s=train_runner.env_step_timeout_s, env_workers=train_runner.env_workers,
        sampling=SamplingParams(temperature=default_temperature(ev.samples)),
    )
    entries = heldout_entries(config, suite, tasks)
    if suite_path is not None and not suite:
        write_suite(entries, suite_path)
    return Evaluator(entries, runner, engine=engine, tokenizer=tokenizer, samples=ev.samples,
                     seed=config.trainer.seed, every=every)
