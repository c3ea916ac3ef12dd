"""Stop a run whose env produces no valid episode, instead of "training" on nothing.

An episode that ended in an env error or an env-call timeout is kept as a row but never
trained on (``rlvr.batch.INVALID_FINISH_REASONS``). When every episode of a step is such a row
(over all ranks), the step taught nothing; after ``trainer.max_failed_steps`` such steps in a
row the run stops with ``RunStoppedError`` naming the env, how its episodes ended and the first
error with its traceback (a reset that always raises, a verifier that always breaks).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rlvr.distributed import all_reduce_sums
from rlvr.errors import RunStoppedError
from rlvr.trajectory import INVALID_FINISH_REASONS, Trajectory


class EnvFailureGuard:
    """Counts the steps in a row with no valid episode; raises at ``limit``.

    Args:
        limit: ``trainer.max_failed_steps`` (>= 1).
        env_id: the training env's id, named in the error.
        device: where the all-reduce of the counts runs.
    """

    def __init__(self, limit: int, env_id: str, device: Any) -> None:
        self.limit = limit
        self.env_id = env_id
        self.device = device
        self.streak = 0

    def check(self, step: int, trajs: Sequence[Trajectory]) -> None:
        """After stage A of ``step`` (collective).

        Raises:
            RunStoppedError: ``limit`` steps in a row had no valid episode on any rank.
        """
        valid = sum(t.finish_reason not in INVALID_FINISH_REASONS for t in trajs)
        total, valid_all = all_reduce_sums([float(len(trajs)), float(valid)], self.device)
        if valid_all > 0:
            self.streak = 0
            return
        self.streak += 1
        if self.streak < self.limit:
            return
        raise RunStoppedError(failure_message(step, self.streak, self.env_id, int(total), trajs))


def failure_message(step: int, streak: int, env_id: str, total: int,
                    trajs: Sequence[Trajectory]) -> str:
    """What the user sees: the env, how its episodes ended, the first error and its traceback."""
    reasons = Counter(t.finish_reason for t in trajs)
    how = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
    steps = f"step {step}" if streak == 1 else f"{streak} steps in a row (up to step {step})"
    lines = [f"the env {env_id!r} produced no valid episode in {steps}: all {total} episodes "
             f"ended in an error or a timeout ({how} on this rank); nothing can be learned, so "
             "the run stops (trainer.max_failed_steps sets how many such steps in a row are "
             "allowed)."]
    first = next((t for t in trajs if t.finish_reason in INVALID_FINISH_REASONS), None)
    if first is not None:
        lines.append(f"first error (task {first.task_id or '?'}): {first.outcome.error}")
        trace = first.metadata.get("traceback")
        if trace:
            lines.append(str(trace).rstrip())
    lines.append(f"Check the env alone with: rlvr check-env {env_id}")
    return "\n".join(lines)


__all__ = ["EnvFailureGuard", "failure_message"]
