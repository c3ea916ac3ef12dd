"""The rollout engine contract: token ids in, token ids and their logprobs out, async.

Logprob convention (every engine follows it, and the learner computes its logprobs the same way):

* With ``temperature = T > 0`` the reported logprob of a sampled token ``y`` at step ``t`` is
  ``log_softmax(logits_t / T)[y]``: the temperature-scaled distribution over the FULL vocabulary.
  ``top_p`` and ``top_k`` only restrict which token may be sampled; they do NOT renormalise the
  reported logprob. (SGLang's default, ``output_token_logprobs`` without
  ``SGLANG_RETURN_ORIGINAL_LOGPROB``, uses the same convention.)
* ``temperature = 0`` is greedy decoding (argmax); the logprob is then reported under ``T = 1``,
  i.e. ``log_softmax(logits_t)[y]``.
* The token that ended generation (an eos or a ``stop_token_ids`` id) IS part of
  ``Completion.token_ids`` and has a logprob: the model generated it, so it is trained on.

The learner therefore recomputes ``log_softmax(logits / T)`` at the sampled tokens with the same
``T`` the rollout used (``T = 1`` for greedy rollouts).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from os import PathLike
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from rlvr.agents.errors import RequestError, SamplingParamsError

FinishReason = Literal["stop", "length", "abort"]
"""Why one generation ended: a stop token/string ("stop"), ``max_new_tokens`` or the context
limit ("length"), or the engine gave up on the request ("abort")."""

FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort")

WeightsSource = Iterable[tuple[str, torch.Tensor]] | str | PathLike[str]
"""What ``Engine.update_weights`` takes: ``(name, tensor)`` pairs or a HF checkpoint directory."""


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How to sample one completion (validated on construction).

    Attributes:
        temperature: ``>= 0``; 0 means greedy decoding (see the module docstring for logprobs).
        top_p: nucleus sampling mass in ``(0, 1]``; 1 disables it. Does not change logprobs.
        top_k: keep the ``k`` most likely tokens; ``-1`` disables it, else ``>= 1``.
        max_new_tokens: ``>= 1``; generation stops with reason "length" after this many tokens.
        stop_token_ids: extra ids that end generation (the engine's eos ids always do); the id
            that matched is included in the completion.
        stop: strings that end generation as soon as the decoded completion contains one; the
            token that completed the match is included (nothing is trimmed).
        seed: if set, sampling is reproducible: the same prompt, params and seed give the same
            tokens, whatever else the engine batches alongside.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        """Validate every field (``SamplingParamsError``'s ``key`` names it); lists to tuples."""
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        object.__setattr__(self, "stop", tuple(self.stop))
        if not (isinstance(self.temperature, int | float) and math.isfinite(self.temperature)
                and self.temperature >= 0):
            raise SamplingParamsError(
                f"temperature must be a finite number >= 0 (0 = greedy); got {self.temperature!r}",
                key="temperature")
        if not (isinstance(self.top_p, int | float) and 0 < self.top_p <= 1):
            raise SamplingParamsError(
                f"top_p must be in (0, 1] (1 disables it); got {self.top_p!r}", key="top_p")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or (
            self.top_k != -1 and self.top_k < 1
        ):
            raise SamplingParamsError(
                f"top_k must be -1 (disabled) or an int >= 1; got {self.top_k!r}", key="top_k")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or (
            self.max_new_tokens < 1
        ):
            raise SamplingParamsError(
                f"max_new_tokens must be an int >= 1; got {self.max_new_tokens!r}",
                key="max_new_tokens")
        for tok in self.stop_token_ids:
            if isinstance(tok, bool) or not isinstance(tok, int) or tok < 0:
                raise SamplingParamsError(
                    f"stop_token_ids must hold non-negative ints; got {tok!r}",
                    key="stop_token_ids")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise SamplingParamsError(f"stop must hold non-empty strings; got {s!r}",
                                          key="stop")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or self.seed < 0):
            raise SamplingParamsError(
                f"seed must be None or an int >= 0; got {self.seed!r}", key="seed")

    @property
    def greedy(self) -> bool:
        """True when ``temperature == 0`` (argmax decoding)."""
        return self.temperature == 0

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)

    def seeded(self, seed: int | None) -> SamplingParams:
        """A copy with ``seed`` (only the seed is validated: the rest was on construction).

        The runner makes one per turn; this costs a tenth of ``replace(seed=...)``.
        """
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise SamplingParamsError(
                f"SamplingParams.seed must be None or an int >= 0; got {seed!r}"
            )
        out = object.__new__(SamplingParams)
        out.__dict__.update(self.__dict__)
        out.__dict__["seed"] = seed
        return out


@dataclass(frozen=True)
class Completion:
    """One generation.

    Attributes:
        token_ids: the generated ids, including the stop token that ended generation, if any.
        logprobs: one per token id (see the module docstring for the convention).
        finish_reason: "stop", "length" or "abort".
        info: engine-specific extras (e.g. SGLang's ``meta_info``), never needed by the runner.
        versions: the policy version of the weights that generated each token (a
            ``VersionedEngine``; one entry per token id); None: the engine does not record
            versions. A completion that lived through an in-flight weight update mixes versions.
        regenerated: how many times the engine dropped a partial generation of this request and
            started it again under new weights (``InflightMode`` "abort"); 0 otherwise.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    info: dict[str, Any] = field(default_factory=dict)
    versions: list[int] | None = None
    regenerated: int = 0


@runtime_checkable
class Engine(Protocol):
    """A token-in/token-out rollout engine. Batching concurrent requests is the engine's job."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Generate one completion of ``prompt_ids``.

        Args:
            prompt_ids: the full context (chat-rendered prompt plus earlier turns), non-empty.
            sampling: the sampling parameters.

        Returns:
            The completion; ``len(token_ids) == len(logprobs) <= sampling.max_new_tokens``.
        """
        ...

    def update_weights(self, weights: WeightsSource) -> None:
        """Load new policy weights: ``(name, tensor)`` pairs or a HF checkpoint directory."""
        ...

    def release_memory(self) -> None:
        """Free accelerator memory before training (a no-op where nothing is held)."""
        ...

    def resume_memory(self, tags: Sequence[str] | None = None) -> None:
        """Take the memory back after training (a no-op where nothing was released).

        ``tags`` resumes only those kinds of memory (``"weights"``, ``"kv_cache"``,
        ``"cuda_graph"``); None resumes everything still released.
        """
        ...

    def close(self) -> None:
        """Stop the engine; pending requests finish with reason "abort". Idempotent."""
        ...


InflightMode = Literal["continue", "abort"]
"""What an in-flight weight update does to generations that are mid-flight:

* ``"continue"``: pause between two decode steps, swap the weights, go on with the same KV cache
  (computed by the old weights); the tokens sampled after the swap carry the new version.
* ``"abort"``: drop the partial generations and generate them again from their prompts under
  the new weights (``Completion.regenerated`` counts it); every token carries the new version.
"""

INFLIGHT_MODES: tuple[str, ...] = ("continue", "abort")


@runtime_checkable
class VersionedEngine(Engine, Protocol):
    """An engine that records the policy version of every token and takes weights mid-flight.

    Versions are the learner's (its number of updates). Each completion's ``versions`` holds the
    version the engine held when it sampled each token.
    """

    @property
    def weight_version(self) -> int:
        """The version of the weights the engine generates with now."""
        ...

    def set_weight_version(self, version: int) -> None:
        """Declare the version of the weights the engine holds (after ``update_weights``)."""
        ...

    def update_weights_in_flight(self, weights: WeightsSource, version: int,
                                 mode: InflightMode) -> None:
        """Load ``version``'s weights now, while generations may be running (see ``InflightMode``).

        Returns once the new weights are in place: every token sampled afterwards carries
        ``version``. An idle engine simply loads them.
        """
        ...

    @property
    def regenerated(self) -> int:
        """Generations dropped and started again by ``"abort"`` updates so far."""
        ...


@runtime_checkable
class ScoringEngine(Engine, Protocol):
    """An engine that can score given tokens under the weights it holds (teacher forcing).

    The sync guard of asynchronous RL uses it to prove each weight version the engine claims to
    hold: the same probe sequence is scored by the engine and by the learner at that version
    (``rlvr.training.version_probe``).
    """

    def score(self, token_ids: list[int], start: int) -> dict[str, list[float]]:
        """Logprobs of ``token_ids[start:]``, each given every token before it.

        At temperature 1 (``log_softmax(logits)``): scoring proves weights, not sampling, and
        sglang's input-token logprobs are untempered whatever the request's temperature
        (measured on 0.5.23).

        Args:
            token_ids: the whole sequence (prompt and continuation).
            start: the first position scored, ``1 <= start < len(token_ids)``.

        Returns:
            One list of ``len(token_ids) - start`` logprobs per replica holding weights (one
            entry for an in-process engine; one per server, by URL, for a server engine), so
            that each replica's weights are proven, not just the one a balancer picked.

        Raises:
            RequestError: an empty sequence or ``start`` out of range.
        """
        ...


def check_score_request(token_ids: list[int], start: int) -> None:
    """Raise ``RequestError`` unless ``ScoringEngine.score`` can score these arguments."""
    if not token_ids or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                for t in token_ids):
        raise RequestError("token_ids must be a non-empty list of token ids (ints >= 0)")
    if isinstance(start, bool) or not isinstance(start, int) or not 1 <= start < len(token_ids):
        raise RequestError(f"start must be an int in [1, {len(token_ids) - 1}] for "
                           f"{len(token_ids)} token ids; got {start!r}")


@runtime_checkable
class SharedEngine(VersionedEngine, Protocol):
    """A versioned engine whose weights live in servers every trainer rank generates on.

    Only the ``leader`` (trainer rank 0) loads weights and names their version on the servers;
    the others read which version the servers hold (asynchronous RL on several ranks:
    ``rlvr.training.async_rollout``).
    """

    leader: bool

    def served_version(self) -> int | None:
        """The oldest version the servers hold now (None while one holds no numbered version)."""
        ...
