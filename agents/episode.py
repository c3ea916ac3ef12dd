"""Token-exact bookkeeping of one episode: what the engine saw, turn by turn.

``EpisodeRecord`` owns the growing token sequence ``prompt_ids + response_ids`` and the per-token
lists aligned with ``response_ids`` (``response_mask``, ``rollout_logprobs``,
``token_level_scores``). Model tokens are appended exactly as generated (mask 1, the engine's
logprobs); env/template tokens are appended with mask 0 and logprob 0. Rewards are written on
tokens: a turn's reward on the last token the model generated in that turn, a reward span on the
model token covering the span's last character.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.agents.chat import ChatRenderer
from rlvr.agents.errors import EnvContractError, TokenMismatchError
from rlvr.trajectory import Trajectory


@dataclass
class _TurnView:
    """What the engine was given and returned in one turn (kept for the checker)."""

    context: list[int] | None
    context_len: int
    token_ids: list[int]
    logprobs: list[float]


@dataclass
class EpisodeRecord:
    """The growing token sequence of one episode and its per-token annotations.

    Attributes:
        prompt_ids: the opening messages plus the generation prompt.
        response_ids: model and env tokens after the prompt, in order.
        response_mask: 1 on model tokens, 0 on env/template tokens.
        rollout_logprobs: the engine's logprob on model tokens, 0.0 elsewhere.
        token_level_scores: rewards placed on tokens.
        versions: the policy version that generated each model token (``Completion.versions``),
            -1 where the engine recorded none; env tokens take their turn's last version.
        keep_contexts: keep a copy of each turn's engine input for ``check`` (memory: one
            context per turn).
    """

    prompt_ids: list[int]
    keep_contexts: bool = False
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    token_level_scores: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    n_model_tokens: int = 0
    n_env_tokens: int = 0
    _turns: list[_TurnView] = field(default_factory=list)

    def context(self) -> list[int]:
        """The full sequence so far: what the engine is given for the next turn."""
        return self.prompt_ids + self.response_ids

    def add_model_turn(
        self, context: list[int], token_ids: Sequence[int], logprobs: Sequence[float],
        versions: Sequence[int] | None = None,
    ) -> int:
        """Append the model's tokens of one turn (mask 1); returns the turn's start offset.

        ``versions``: the policy version of each token (``Completion.versions``), if recorded.
        """
        self._turns.append(
            _TurnView(
                list(context) if self.keep_contexts else None,
                len(context),
                list(token_ids),
                list(logprobs),
            )
        )
        start = len(self.response_ids)
        self.response_ids.extend(token_ids)
        self.response_mask.extend([1] * len(token_ids))
        self.rollout_logprobs.extend(float(x) for x in logprobs)
        self.token_level_scores.extend([0.0] * len(token_ids))
        self.versions.extend(versions if versions is not None else [-1] * len(token_ids))
        self.n_model_tokens += len(token_ids)
        return start

    def add_env_tokens(self, token_ids: Sequence[int]) -> None:
        """Append env/template tokens (mask 0, logprob 0, score 0)."""
        self.response_ids.extend(token_ids)
        self.response_mask.extend([0] * len(token_ids))
        self.rollout_logprobs.extend([0.0] * len(token_ids))
        self.token_level_scores.extend([0.0] * len(token_ids))
        self.versions.extend([self.versions[-1] if self.versions else -1] * len(token_ids))
        self.n_env_tokens += len(token_ids)

    def add_turn_rewards(
        self,
        renderer: ChatRenderer,
        turn_start: int,
        action_tokens: Sequence[int],
        action: str,
        reward: float,
        spans: Any,
        reward_range: Any = None,
    ) -> None:
        """Place a turn's reward and its reward spans on the turn's model tokens.

        Args:
            renderer: maps characters of ``action`` to tokens by incremental decoding.
            turn_start: offset in ``response_ids`` of the turn's first model token.
            action_tokens: the turn's model tokens whose decoding is ``action``.
            action: the text the env was given.
            reward: the step reward, written on the turn's last model token.
            spans: ``info["reward_spans"]``: ``(char_start, char_end, value)`` triples, or None.
            reward_range: the env's declared ``(low, high)``; a step reward outside it is
                refused (None: not checked).

        Raises:
            EnvContractError: a reward that is not a finite int or float (a string such as
                ``"1.0"``, a bool, None, NaN), one outside ``reward_range``, or a malformed span.
        """
        last = len(self.response_ids) - 1
        value = _finite(reward, "reward")
        low, high = _bounds(reward_range)
        if not low <= value <= high:
            raise EnvContractError(f"reward {reward!r} is outside the env's reward_range "
                                   f"{tuple(reward_range)}")
        self.token_level_scores[last] += value
        for span in spans or ():
            if not (isinstance(span, Sequence) and len(span) == 3):
                raise EnvContractError(
                    f"info['reward_spans'] items must be (char_start, char_end, value); got "
                    f"{span!r}"
                )
            start, end, value = span
            if not (isinstance(start, int) and isinstance(end, int)
                    and 0 <= start < end <= len(action)):
                raise EnvContractError(
                    f"reward span {span!r} is outside the action text (0 <= char_start < "
                    f"char_end <= {len(action)} required)"
                )
            index = renderer.token_for_char(action_tokens, end)
            self.token_level_scores[turn_start + index] += _finite(value, "reward span value")

    def zero_scores(self) -> None:
        """Set every score to 0 (an episode that ended with an error earns nothing)."""
        self.token_level_scores = [0.0] * len(self.token_level_scores)

    def check(self) -> None:
        """Confirm the sequence the learner will see equals what the engine saw, turn by turn.

        Raises:
            TokenMismatchError: a turn's engine input is not a prefix of the final sequence, its
                completion is not found right after it with mask 1 and the same logprobs, or the
                per-token lists are misaligned.
        """
        full = self.context()
        n = len(self.response_ids)
        for name in ("response_mask", "rollout_logprobs", "token_level_scores", "versions"):
            if len(getattr(self, name)) != n:
                raise TokenMismatchError(f"{name} has {len(getattr(self, name))} entries, not {n}")
        p = len(self.prompt_ids)
        for t, view in enumerate(self._turns):
            at = view.context_len
            if view.context is not None and full[:at] != view.context:
                raise TokenMismatchError(f"turn {t}: the engine's input is not a prefix of the "
                                         "trajectory's prompt + response")
            got = full[at : at + len(view.token_ids)]
            if got != view.token_ids:
                raise TokenMismatchError(f"turn {t}: the completion tokens are not in place")
            if any(m != 1 for m in self.response_mask[at - p : at - p + len(got)]):
                raise TokenMismatchError(f"turn {t}: a model token has response_mask 0")
            if self.rollout_logprobs[at - p : at - p + len(got)] != view.logprobs:
                raise TokenMismatchError(f"turn {t}: logprobs are not aligned with the tokens")
        if sum(self.response_mask) != sum(len(v.token_ids) for v in self._turns):
            raise TokenMismatchError("response_mask counts tokens the engine never generated")

    def to_trajectory(self, **fields: Any) -> Trajectory:
        """The ``Trajectory`` of this episode (``fields``: group_id, env_id, task_id, ...)."""
        return Trajectory(
            prompt_ids=list(self.prompt_ids),
            response_ids=list(self.response_ids),
            response_mask=list(self.response_mask),
            rollout_logprobs=list(self.rollout_logprobs),
            token_level_scores=list(self.token_level_scores),
            policy_versions=self.policy_versions(),
            **fields,
        )

    def policy_versions(self) -> list[int] | None:
        """``Trajectory.policy_versions``: None when the engine recorded no version.

        Tokens without one (env tokens before the first model token, a turn of an engine that
        recorded none) take the oldest recorded version: staleness is never under-counted.
        """
        known = [v for v in self.versions if v >= 0]
        if not known:
            return None
        oldest = min(known)
        return [v if v >= 0 else oldest for v in self.versions]


def _finite(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or type(x).__name__ == "bool_":
        raise EnvContractError(f"{what} must be an int or a float; got {type(x).__name__} "
                               f"{x!r}")
    value = float(x)
    if value != value or value in (float("inf"), float("-inf")):
        raise EnvContractError(f"{what} must be finite; got {x!r}")
    return value


def _bounds(reward_range: Any) -> tuple[float, float]:
    """``reward_range`` as two floats; no range (or a malformed one) bounds nothing."""
    try:
        low, high = (float(v) for v in reward_range)
    except (TypeError, ValueError):
        return float("-inf"), float("inf")
    return low, high


def jsonable(value: Any) -> Any:
    """``value`` made JSON-serialisable (unknown objects become their ``str``).

    Equal to ``json.loads(json.dumps(value, default=str))``; plain JSON values (str, int,
    float, bool, None, lists/tuples and str-keyed dicts of them: chat messages, verdict
    fields) are copied directly, which costs a fraction of the round trip. Scalars inside a
    list or dict are copied without a call each (a chat message's strings: ~2.5x faster).
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list or kind is tuple:
        return [v if type(v) in _SCALARS else jsonable(v) for v in value]
    if kind is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:  # the round trip turns such keys into strings
                return json.loads(json.dumps(value, default=str))
            out[k] = v if type(v) in _SCALARS else jsonable(v)
        return out
    return json.loads(json.dumps(value, default=str))


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""The types ``jsonable`` copies as they are."""
