"""Trajectories: one played episode each, as agents produce them and the learner collates them.

Per-token quantities are aligned with ``response_ids``: position ``t`` of ``response_mask``,
``rollout_logprobs`` and ``token_level_scores`` describes ``response_ids[t]``. This module is plain
data (no torch): it is what ``agents`` may import from ``rlvr``; the collated tensors the learner
trains on are ``rlvr.batch.RolloutBatch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

#: The finish reason of an episode that ended in an env/sandbox error (its row is not valid).
ERROR_FINISH_REASON = "error"
#: The finish reasons of episodes never trained on: an env error, or an env call that ran past
#: the runner's ``env_step_timeout_s`` ("timeout").
INVALID_FINISH_REASONS = frozenset({ERROR_FINISH_REASON, "timeout"})


def logprob_temperature(temperature: float) -> float:
    """The ``T`` of ``softmax(logits / T)`` that a trajectory's logprobs are taken under.

    The sampling temperature, except that greedy decoding (temperature 0) counts as 1: its
    logprobs are the model's own distribution. Engines (``rlvr.agents.hf.sampling``) and the
    learner (``rlvr.learner.logits``, the trainer) all score tokens through this function, so
    ``rollout_logprobs`` and the learner's logprobs always mean the same distribution.
    """
    return 1.0 if temperature == 0 else float(temperature)


class VerdictLike(Protocol):
    """What a verifier decided: the shape of ``rlvr.verifiers.Verdict`` (never imported here)."""

    @property
    def score(self) -> float:
        """In [0, 1]."""

    @property
    def passed(self) -> bool:
        """Whether the task is solved."""

    @property
    def reason(self) -> str:
        """A short tag: "correct", "wrong_answer", "no_answer", "timeout", ..."""

    @property
    def details(self) -> dict[str, Any]:
        """What the verifier saw (e.g. ``extracted``: the answer it graded)."""


@dataclass(kw_only=True)
class EpisodeOutcome:
    """What one episode came to, filled once by the episode runner (``rlvr.agents.runner``).

    Training metrics (``rlvr.metrics``, ``rlvr.tool_metrics``) and evaluation
    (``rlvr.eval.episodes``) read these fields; nothing guesses keys of a dict. Why the episode
    ended is ``Trajectory.finish_reason`` (the learner's error rows need it next to the tokens).

    Attributes:
        verdict: the last verdict an env step made (``info["verdict"]``, details included), or
            None when no step made one.
        answer: the extracted final answer: ``info["answer"]`` when the env gives one, else the
            verdict's ``details["extracted"]``; None when there is none.
        turns: model turns played.
        tool_calls: tool calls made: the env's ``info["tool_calls"]`` count when it keeps one,
            else the ``<tool_call>`` tags in the model's actions.
        tool_errors: malformed calls and calls whose tool failed, as the env counted them
            (``info["tool_errors"]``); None when the env does not count them.
        error: why an episode with finish reason "error" ended (``"TypeName: message"``).
        gold: the task's reference answer as the env gave it on the step that ended the episode
            (``info["gold"]``; never earlier, so it cannot reach the model), for reports; None
            when the env gives none.
        metrics: the env's own measurements of the episode by name (``info["metrics"]``, the
            last step's that gave one: finite numbers only), logged as ``env/<name>`` means by
            ``rlvr.metrics.rollout_metrics``; empty when the env gives none.
    """

    verdict: VerdictLike | None = None
    answer: Any = None
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int | None = None
    error: str | None = None
    gold: Any = None
    metrics: dict[str, float] = field(default_factory=dict)


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
            "max_turns", "truncated" (env truncated), "error" (env raised) or "timeout" (an
            env call ran past the runner's limit).
        outcome: the verdict, answer, turns, tool calls and error of the episode.
        metadata: the rest, JSON-serialisable: ``messages`` (the chat), ``n_model_tokens``,
            ``n_env_tokens``, ``reset_seed``; ``traceback`` (the formatted error) when the
            episode ended in an error or a timeout; ``task`` (the task's own metadata from the
            env's ``reset`` info, e.g. verl's ``data_source``) when it has one.
        extra_rows: more rows of the same episode, for an episode whose token sequence broke
            (an agent behind ``rlvr.agents.gateway`` edited its history, or sampled several
            choices):
            each is token-exact on its own and carries the episode's reward on its last model
            token. ``RolloutBatch.from_trajectories`` collates them right after this row (same
            group); the episode's reward, outcome and metrics are this row's.
        policy_versions: the version of the policy weights that generated each response token
            (asynchronous RL, ``rlvr.training.versions``; the learner's version counts its
            updates), one entry per response token (env tokens carry their turn's version);
            None (the default): every token by the learner's current weights.
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
    outcome: EpisodeOutcome = field(default_factory=EpisodeOutcome)
    metadata: dict[str, Any] = field(default_factory=dict)
    extra_rows: list[Trajectory] = field(default_factory=list)
    policy_versions: list[int] | None = None

    @property
    def reward(self) -> float:
        """The episode's total reward (sum of token-level scores)."""
        return float(sum(self.token_level_scores))

    @property
    def passed(self) -> bool:
        """Whether the episode solved its task: the one definition of "passed".

        The final verdict's ``passed`` when a verdict was made, else whether the reward is
        positive; never for an episode that ended in an error. Training accuracy
        (``reward/accuracy``) and evaluation pass@k both count this.
        """
        if self.finish_reason in INVALID_FINISH_REASONS:
            return False
        if self.outcome.verdict is not None:
            return bool(self.outcome.verdict.passed)
        return self.reward > 0
