"""A warning when training steps have no reward variance: nothing can be learned from them.

Group-relative estimators (GRPO and kin) learn from reward differences between the episodes of
a group; when every episode of a step gets the same reward (most often 0: a new env, a model
that never answers in the expected format, responses cut off before the answer), every
advantage is 0 and the step changes nothing. ``RewardWatch`` says so once, after
``ZERO_VARIANCE_STEPS`` such steps in a row, naming the likely causes.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Steps in a row without reward variance before the warning.
ZERO_VARIANCE_STEPS = 5


class RewardWatch:
    """Counts steps in a row whose valid episodes all got one reward; warns once.

    Args:
        steps: steps in a row before the warning (``ZERO_VARIANCE_STEPS``).
    """

    def __init__(self, steps: int = ZERO_VARIANCE_STEPS) -> None:
        self.steps = steps
        self.flat = 0
        self.warned = False

    def observe(self, metrics: Mapping[str, float]) -> str | None:
        """Look at one step's ``reward/mean`` and ``reward/std``; the warning line, once."""
        mean, std = metrics.get("reward/mean"), metrics.get("reward/std")
        if mean is None or std is None or std > 1e-9:
            self.flat = 0
            return None
        self.flat += 1
        if self.flat < self.steps or self.warned:
            return None
        self.warned = True
        causes = ("the model never produces a rewarded answer: no warm-up (sft.enabled=false) "
                  "on a model that does not follow the env's answer format, responses cut off "
                  "before the answer (rollout.runner.max_response_tokens, "
                  "max_tokens_per_turn), or a verifier that never passes (try rlvr check-env)"
                  ) if mean == 0 else ("every episode gets the same reward: a task set too easy "
                                       "for the model, or a verifier that ignores the answer")
        return (f"[rlvr] WARNING: the last {self.flat} steps had no reward variance (every "
                f"episode's reward was {mean:g}): advantages are 0 and nothing is learned. "
                f"Likely: {causes}")


__all__ = ["ZERO_VARIANCE_STEPS", "RewardWatch"]
