"""Determinism: the same reset seed and actions give the same opening messages and verdicts."""

from __future__ import annotations

from collections.abc import Sequence

from rlvr.envs.check.episode import Session
from rlvr.envs.check.report import FAIL, PASS, CheckResult

__all__ = ["check_determinism"]

_FIX = (
    "draw everything random from self.np_random (seeded by reset(seed=...)), never from the "
    "global random module or the clock; build prompts and verdicts from the task alone"
)


def check_determinism(session: Session, actions: Sequence[str]) -> list[CheckResult]:
    """Play the same seed and actions twice (and once more with another seed in between)."""
    first = session.play(actions)
    session.play(actions, seed=session.seed + 1)  # state left by another episode must not leak
    second = session.play(actions)
    results = []
    same_opening = repr(first.opening) == repr(second.opening)
    results.append(CheckResult(
        "determinism", "same seed, same opening messages", PASS if same_opening else FAIL,
        "" if same_opening else f"{first.opening!r:.120} vs {second.opening!r:.120}", _FIX))
    a, b = first.fingerprint()[1:], second.fingerprint()[1:]
    same_steps = a == b and first.error == second.error
    detail = ""
    if not same_steps:
        turn = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        detail = (f"turn {turn + 1} differs: {a[turn] if turn < len(a) else 'ended'!s:.120} vs "
                  f"{b[turn] if turn < len(b) else 'ended'!s:.120}")
    results.append(CheckResult(
        "determinism", "same seed and actions, same rewards and verdicts",
        PASS if same_steps else FAIL, detail, _FIX))
    return results
