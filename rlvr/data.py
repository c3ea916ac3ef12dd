"""Trajectories (one episode each) and the collated RolloutBatch the learner trains on.

Per-token quantities are aligned with ``response_ids``: position ``t`` of ``response_mask``,
``rollout_logprobs`` and ``token_level_scores`` describes ``response_ids[t]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Trajectory:
    """One episode, token-exact, as the rollout engine saw it.

    Attributes:
        prompt_ids: the tokens of the opening messages plus the generation prompt.
        response_ids: everything after the prompt: model tokens AND env/tool/template tokens, in
            the order the engine saw them.
        response_mask: 1 where the model generated the token (trained on), 0 for env tokens.
        rollout_logprobs: the engine's logprob of each response token (0.0 where mask is 0).
        token_level_scores: reward placed on tokens (turn rewards on the last model token of the
            turn, reward spans on the token covering the span end); 0 elsewhere.
        group_id: episodes sampled from the same task in one step share it (GRPO's uid).
        env_id: the gymnasium id of the env, e.g. "rlvr/Math-v0".
        task_id: the task inside the env.
        finish_reason: why the episode ended: "stop" (env terminated), "length" (token budget),
            "max_turns", "truncated" (env truncated) or "error" (env raised).
        metadata: per-episode stats (turns, tool calls, verdict reason, ...), JSON-serialisable.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    rollout_logprobs: list[float]
    token_level_scores: list[float]
    group_id: Any = None
    env_id: str = ""
    task_id: str = ""
    finish_reason: str = "stop"
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def reward(self) -> float:
        """The episode's total reward (sum of token-level scores)."""
        return float(sum(self.token_level_scores))
