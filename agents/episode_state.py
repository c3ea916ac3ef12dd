"""What one episode accumulates besides its tokens, and the env calls that end it.

``EpisodeState`` is the runner's per-episode bookkeeping: the env and its task, the chat so far,
the ``EpisodeRecord`` of its tokens, tool-call and verdict stats, why it ended and its error;
``to_trajectory`` builds the ``Trajectory`` (with its ``EpisodeOutcome``) once, at the end.
``close_quietly`` and ``step_and_close`` are env calls run on the env threads; ``raised_by_env``
tells an episode's own failure from one that stops the run.
"""

from __future__ import annotations

import logging
import math
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.agents.episode import EpisodeRecord, jsonable
from rlvr.agents.errors import AgentError, EngineAbortedError
from rlvr.agents.runner_config import EpisodeSpec
from rlvr.envs.base import Message
from rlvr.trajectory import EpisodeOutcome, Trajectory

logger = logging.getLogger("rlvr.agents.runner")


def finite_metrics(metrics: Mapping[Any, Any]) -> dict[str, float]:
    """An env's ``info["metrics"]`` as ``{name: float}``.

    Entries that are not finite numbers (or are booleans) are left out, so a broken measurement
    never reaches the logs as a number.
    """
    kept: dict[str, float] = {}
    for name, value in metrics.items():
        if isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value):
            kept[str(name)] = float(value)
    return kept


def close_quietly(env: Any) -> None:
    """``env.close()``; closing is best effort, a failure is only logged."""
    try:
        env.close()
    except Exception as exc:
        logger.warning("env.close() failed: %r", exc)


def step_and_close(env: Any, action: str) -> Any:
    """The last turn's ``env.step(action)`` and then ``env.close()``, in one env call."""
    try:
        return env.step(action)
    finally:
        close_quietly(env)


def raised_by_env(exc: BaseException) -> bool:
    """Whether ``exc`` ends only its episode (else it stops the run).

    Env errors and aborted requests end their episode; the agent's own errors (engine failures,
    template and token-exactness checks) stop the run.
    """
    return isinstance(exc, EngineAbortedError) or not isinstance(exc, AgentError)


@dataclass
class EpisodeState:
    """Everything one episode accumulates besides its tokens."""

    spec: EpisodeSpec
    env_id: str
    env: Any = None
    task_id: str = ""
    tools: list[dict[str, Any]] | None = None
    task_metadata: dict[str, Any] | None = None
    messages: list[Message] = field(default_factory=list)
    record: EpisodeRecord | None = None
    finish_reason: str = "error"
    turns: int = 0
    tool_calls_seen: int = 0
    info_tool_calls: int | None = None
    tool_errors: int | None = None
    verdict: Any = None
    answer: Any = None
    gold: Any = None
    env_metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    exc: BaseException | None = None
    closed: bool = False
    reuse_key: str | None = None
    reusable: bool = False

    def note_step(self, action: str, obs: Sequence[Message], info: dict[str, Any]) -> None:
        """Update the per-episode stats after one env step.

        ``<tool_call>`` in the text counts as a call only where the env offers tools.
        """
        if self.tools:
            self.tool_calls_seen += action.count("<tool_call>")
        if isinstance(info.get("tool_calls"), int):
            self.info_tool_calls = info["tool_calls"]
        errors = info.get("tool_errors")
        if isinstance(errors, int):
            self.tool_errors = errors
        elif isinstance(errors, list | tuple):
            self.tool_errors = (self.tool_errors or 0) + len(errors)
        verdict = info.get("verdict")
        if verdict is not None:
            self.verdict = verdict
            extracted = (getattr(verdict, "details", None) or {}).get("extracted")
            if extracted is not None:
                self.answer = jsonable(extracted)
        if "answer" in info:
            self.answer = jsonable(info["answer"])
        if "gold" in info:
            self.gold = jsonable(info["gold"])
        if isinstance(info.get("metrics"), Mapping):
            self.env_metrics = finite_metrics(info["metrics"])
        self.messages.extend(dict(m) for m in obs)

    def fail(self, exc: BaseException) -> None:
        """End the episode with reason "error" ("timeout" for an env call past its limit).

        Keeps ``exc`` and its message and zeroes the scores.
        """
        self.finish_reason = "timeout" if isinstance(exc, TimeoutError) else "error"
        self.exc = exc
        self.error = f"{type(exc).__name__}: {exc}"
        if self.record is not None:
            self.record.zero_scores()

    def traceback(self) -> str | None:
        """The formatted traceback of the error that ended the episode (None without one)."""
        if self.exc is None:
            return None
        return "".join(traceback.format_exception(self.exc))

    def to_trajectory(self, pad_id: int) -> Trajectory:
        """The finished episode (``[pad_id]`` as the prompt when even ``reset`` failed)."""
        record = self.record or EpisodeRecord([pad_id])
        outcome = EpisodeOutcome(
            verdict=self.verdict,
            answer=self.answer,
            turns=self.turns,
            tool_calls=(
                self.info_tool_calls if self.info_tool_calls is not None else self.tool_calls_seen
            ),
            tool_errors=self.tool_errors,
            error=self.error,
            gold=self.gold,
            metrics=dict(self.env_metrics),
        )
        metadata = {
            "n_model_tokens": record.n_model_tokens,
            "n_env_tokens": record.n_env_tokens,
            "reset_seed": self.spec.seed,
            "messages": jsonable(self.messages),
        }
        if self.task_metadata is not None:
            metadata["task"] = self.task_metadata
        if self.exc is not None:
            metadata["traceback"] = self.traceback()
        return record.to_trajectory(
            group_id=self.spec.group_id,
            env_id=self.env_id,
            task_id=self.task_id,
            finish_reason=self.finish_reason,
            outcome=outcome,
            metadata=metadata,
        )


__all__ = ["EpisodeState", "close_quietly", "raised_by_env", "step_and_close"]
