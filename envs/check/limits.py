"""Limits: hostile-sized and hostile-shaped actions return in time and never raise out of step.

Each input is played as every turn of a fresh episode. A step must return within the step
budget: the env's own ``timeout_s`` (when it declares one; else 5 s) plus a fixed slack for a
shared machine, unless the caller sets ``step_timeout_s``.
"""

from __future__ import annotations

import gymnasium

from rlvr.envs.check.episode import Session
from rlvr.envs.check.report import FAIL, PASS, CheckResult

__all__ = ["DEFAULT_ENV_TIMEOUT_S", "LIMIT_INPUTS", "SLACK_S", "check_limits", "step_budget"]

DEFAULT_ENV_TIMEOUT_S = 5.0
"""The step time allowed to an env that declares no ``timeout_s`` (before the slack)."""

SLACK_S = 5.0
"""Added to the env's timeout: process start-up and scheduling on a loaded machine."""

_MB = 1_000_000
LIMIT_INPUTS: dict[str, str] = {
    "1 MB of numbers": ("12 + " * (_MB // 5))[:_MB],
    "1 MB python block": "```python\n" + "x = 1\n" * (_MB // 6) + "```",
    "empty": "",
    "binary-looking": "".join(map(chr, range(256))) * 16 + "\ufffd\x00\x1b[2J",
    "unicode": "３＋４＝７ 𝟕 ½ ⅞ ∞ √２ π 🙂 \u202e\u200b é ﬁ \U0001f9ee " * 200,
    "deeply nested brackets": "(" * 100_000 + "[" * 50_000 + "{" * 50_000,
    "deeply nested boxes": "\\boxed{" * 50_000 + "1" + "}" * 50_000,
    "unclosed boxes": "\\boxed{" * 100_000,
    "deeply nested JSON tool call": (
        '<tool_call>{"name": "x", "arguments": ' + '{"a": ' * 50_000 + "1" + "}" * 50_001
        + "</tool_call>"
    ),
    "deeply nested python": "```python\nx = " + "(" * 5_000 + "1" + ")" * 5_000 + "\n```",
}
"""Input name -> the action played."""


def step_budget(env: gymnasium.Env, step_timeout_s: float | None) -> float:
    """Seconds a step may take: ``step_timeout_s``, or the env's ``timeout_s`` plus the slack."""
    if step_timeout_s is not None:
        return step_timeout_s
    declared = getattr(env.unwrapped, "timeout_s", None)
    base = float(declared) if isinstance(declared, int | float) and declared > 0 else (
        DEFAULT_ENV_TIMEOUT_S)
    return base + SLACK_S


def check_limits(session: Session, budget_s: float, *, max_steps: int = 4) -> list[CheckResult]:
    """Play every :data:`LIMIT_INPUTS` entry; one row per input."""
    results = []
    for name, action in LIMIT_INPUTS.items():
        episode = session.play(action, max_steps=max_steps)
        if episode.error is not None:
            results.append(CheckResult(
                "limits", f"input: {name}", FAIL, episode.error,
                "step must turn any text into a verdict or feedback; catch parse errors, "
                "RecursionError and oversize input inside step"))
        elif episode.slowest_step_s > budget_s:
            results.append(CheckResult(
                "limits", f"input: {name}", FAIL,
                f"a step took {episode.slowest_step_s:.1f} s (budget {budget_s:.1f} s)",
                "keep parsing linear (cap lengths and nesting) and run slow verification "
                "under a wall-clock limit"))
        else:
            results.append(CheckResult(
                "limits", f"input: {name}", PASS,
                f"slowest step {episode.slowest_step_s:.2f} s"))
    return results
