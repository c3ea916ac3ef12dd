"""The gateway's work behind the HTTP routes: requests in, engine calls, OpenAI objects out.

``Gateway`` serves chat and text completions on any ``rlvr.agents.engine.Engine`` (token ids in,
token
ids and logprobs out). A call outside an episode is answered and forgotten. A call on an
episode's endpoint (``open_episode``) is also kept, token-exact, in the episode's
``EpisodeCapture``; there the run's ``EpisodeLimits`` hold: the run's temperature, top_p and
top_k replace the request's (the learner recomputes logprobs at the run's temperature), a call
gets at most ``max_tokens_per_call`` tokens and the run's per-call seed, and the endpoint refuses
calls past ``max_calls`` or the ``max_response_tokens`` budget (HTTP 400, code
``episode_budget_exhausted``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from rlvr.agents.engine import Completion, Engine, SamplingParams
from rlvr.agents.errors import EngineAbortedError, RequestError, SamplingParamsError
from rlvr.agents.gateway.capture import CallChoice, CallNode, EpisodeCapture
from rlvr.agents.gateway.protocol import (
    ChatRequest,
    CompletionRequest,
    GatewayHTTPError,
    Sampling,
    bad_request,
)
from rlvr.agents.gateway.render import Templates, assistant_message, same_assistant

#: Tokens per choice when a request names no ``max_tokens`` (outside episodes).
DEFAULT_MAX_TOKENS = 512
#: The largest request body accepted (bytes); a larger one gets 413 before it is parsed.
DEFAULT_MAX_BODY_BYTES = 2 << 20

T = TypeVar("T")


def engine_context(engine: Any) -> int | None:
    """The engine's context length (prompt + completion tokens), or None when it reports none.

    The transformers engine's ``max_context`` (the model's ``max_position_embeddings``), the
    SGLang engine's ``context_length`` (what its servers report).
    """
    for name in ("max_context", "context_length"):
        try:
            value = getattr(engine, name, None)
        except Exception:  # a property that asks a server that is not up yet
            value = None
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 30:
            return value
    return None


@dataclass(frozen=True, kw_only=True)
class EpisodeLimits:
    """What a training run imposes on an episode's calls.

    Attributes:
        sampling: the run's sampling (temperature, top_p, top_k and extra stops are used).
        max_calls: calls allowed per episode (the runner's ``max_turns``).
        max_tokens_per_call: the most tokens one choice may generate.
        max_response_tokens: the most response tokens (model and env) of one row.
        stop_at_tool_call: with tools, also stop at ``</tool_call>``.
        seed: ``seed(call_index, choice_index)`` gives each choice's sampling seed (or None).
    """

    sampling: SamplingParams
    max_calls: int
    max_tokens_per_call: int
    max_response_tokens: int
    stop_at_tool_call: bool = True
    seed: Callable[[int, int], int | None] | None = None


@dataclass
class Episode:
    """An open episode endpoint: its capture and its limits (None: no limits)."""

    capture: EpisodeCapture
    limits: EpisodeLimits | None


@dataclass(frozen=True)
class Generated:
    """One answered call: the choices, the prompt length, and (chat) each choice's reply."""

    prompt_len: int
    completions: list[Completion]
    texts: list[tuple[str, int, bool]]
    replies: list[Any]


class Gateway:
    """An OpenAI-compatible front for one engine and tokenizer.

    Args:
        engine: any ``Engine``.
        tokenizer: the policy's tokenizer (its chat template renders the messages).
        model_name: the id ``/v1/models`` lists and responses carry by default.
        api_key: when set, requests must send ``Authorization: Bearer <api_key>``.
        stop_at_tool_call: outside episodes, stop a choice at ``</tool_call>`` when the request
            offers tools (the agent then gets one call per turn).
        sampling: defaults outside episodes (temperature, top_p, top_k when the request does
            not say).
    """

    def __init__(self, engine: Engine, tokenizer: Any, *, model_name: str = "rlvr",
                 api_key: str | None = None, stop_at_tool_call: bool = False,
                 sampling: SamplingParams | None = None, strict_model: bool = False,
                 max_context: int | None = None,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.engine = engine
        self.templates = Templates(tokenizer)
        self.model_name = model_name
        self.api_key = api_key
        self.stop_at_tool_call = stop_at_tool_call
        self.defaults = sampling or SamplingParams()
        self.strict_model = strict_model
        self.max_context = max_context if max_context is not None else engine_context(engine)
        self.max_body_bytes = int(max_body_bytes)
        self.episodes: dict[str, Episode] = {}
        self.created = int(time.time())
        # one worker: the tokenizer is not shared between threads, and the event loop (every
        # other client, and in training every agent) never waits on a long prompt's rendering
        self._tokenize = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-tokenize")

    def check_model(self, name: str) -> None:
        """With ``strict_model`` (``rlvr serve``), a request must name the served model.

        Raises:
            GatewayHTTPError: 404 ``model_not_found``.
        """
        if self.strict_model and name != self.model_name:
            raise GatewayHTTPError(404, f"the model {name!r} does not exist; this server serves "
                                   f"{self.model_name!r}", param="model", code="model_not_found")

    async def off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the tokenizer's worker thread (the event loop keeps serving)."""
        return await asyncio.get_running_loop().run_in_executor(self._tokenize, fn, *args)

    # ------------------------------------------------------------------ episodes
    def open_episode(self, limits: EpisodeLimits | None = None) -> Episode:
        """A fresh episode endpoint (its key is ``episode.capture.key``)."""
        key = uuid.uuid4().hex
        episode = Episode(EpisodeCapture(key), limits)
        self.episodes[key] = episode
        return episode

    def close_episode(self, key: str) -> None:
        """Forget an episode; later calls on its endpoint get 404."""
        self.episodes.pop(key, None)

    def episode(self, key: str) -> Episode:
        """The open episode ``key``.

        Raises:
            GatewayHTTPError: 404 when no such episode is open.
        """
        episode = self.episodes.get(key)
        if episode is None:
            raise GatewayHTTPError(404, f"no open episode {key!r} (it ended or never existed)",
                                   code="episode_not_found")
        return episode

    # ------------------------------------------------------------------ calls
    async def chat(self, req: ChatRequest, episode: Episode | None) -> Generated:
        """Generate the choices of a chat request (kept in ``episode`` when given)."""
        t = self.templates
        parent: tuple[int, int] | None = None
        capture = episode.capture if episode is not None else None
        prompt: list[int] | None = None
        self.check_model(req.model)
        if capture is not None and t.delta is not None:
            found = capture.continued_message(req.messages, req.tools, same_assistant)
            if found is not None:
                parent, new = found
                done = capture.context(parent)
                delta = t.delta
                closing = delta.turn_close(done[len(capture.calls[parent[0]].prompt_ids):])
                prompt = done + closing + await self.off_loop(
                    lambda: delta.env_delta(t.prepare(new), req.tools))
        if prompt is None:
            prompt = await self.off_loop(self._render, req)
            if capture is not None:
                parent = capture.longest_prefix(prompt)
        parse_tools = req.tools is not None and req.tool_choice != "none"
        node = CallNode(prompt, parent, messages=req.messages, tools=req.tools)
        one_call = parse_tools and not req.parallel_tool_calls
        out = await self._generate(prompt, req.sampling, parse_tools, episode, node,
                                   one_call=one_call)
        replies = [assistant_message(text, parse_tools) for text, _, _ in out.texts]
        for choice, reply in zip(node.choices, replies):
            choice.message = reply.message()
        return Generated(out.prompt_len, out.completions, out.texts, replies)

    async def complete(self, req: CompletionRequest, episode: Episode | None) -> Generated:
        """Generate the choices of a text completion request (token ids or text)."""
        self.check_model(req.model)
        prompt = req.prompt_ids if req.prompt_ids is not None else await self.off_loop(
            self.templates.encode, req.prompt or "")
        parent = episode.capture.longest_prefix(prompt) if episode is not None else None
        node = CallNode(list(prompt), parent)
        return await self._generate(list(prompt), req.sampling, False, episode, node)

    def _render(self, req: ChatRequest) -> list[int]:
        try:
            return self.templates.render(req.messages, req.tools)
        except Exception as exc:  # a template that rejects the conversation (jinja raise)
            raise bad_request(f"the chat template could not render these messages: {exc}",
                              "messages") from exc

    async def _generate(self, prompt: list[int], sampling: Sampling, tools: bool,
                        episode: Episode | None, node: CallNode, *,
                        one_call: bool = False) -> Generated:
        limits = episode.limits if episode is not None else None
        capture = episode.capture if episode is not None else None
        index = len(capture.calls) if capture is not None else 0
        params = self._params(sampling, tools, limits, capture, node.parent, len(prompt),
                              one_call=one_call)
        seeds = self._seeds(sampling, limits, index)
        if capture is not None:
            capture.add_call(node)
        try:
            completions = list(await asyncio.gather(*(
                self.engine.generate(prompt, params.seeded(seed)) for seed in seeds)))
        except (RequestError, SamplingParamsError) as exc:
            raise bad_request(str(exc), code="invalid_prompt") from exc
        except EngineAbortedError as exc:
            raise GatewayHTTPError(503, f"the engine aborted the request: {exc}",
                                   kind="server_error", code="engine_aborted") from exc
        node.choices = [CallChoice(list(c.token_ids), [float(x) for x in c.logprobs],
                                   c.finish_reason) for c in completions]
        texts = [self.templates.reply_text(c.token_ids, sampling.stop) for c in completions]
        return Generated(len(prompt), completions, texts, [])

    def _params(self, sampling: Sampling, tools: bool, limits: EpisodeLimits | None,
                capture: EpisodeCapture | None, parent: tuple[int, int] | None,
                prompt_len: int, *, one_call: bool = False) -> SamplingParams:
        """The engine's sampling parameters for a call.

        ``one_call`` (``parallel_tool_calls: false``) stops each choice at its first
        ``</tool_call>``, so it holds at most one call; refused (400) when ``</tool_call>`` is
        not one token of this tokenizer, as the stop could not be exact.
        """
        t = self.templates
        if one_call and t.tool_stop_id is None:
            raise bad_request("'parallel_tool_calls': false is not supported with this "
                              "tokenizer ('</tool_call>' is not one token)", "parallel_tool_calls")
        stop_ids = set(t.end_ids)
        if limits is not None:
            base = limits.sampling
            stop_ids |= set(base.stop_token_ids)
            stops = tuple(dict.fromkeys((*base.stop, *sampling.stop)))
            cap = limits.max_tokens_per_call
            if sampling.max_tokens is not None:
                cap = min(cap, sampling.max_tokens)
            if capture is not None:
                if len(capture.calls) >= limits.max_calls:
                    capture.exhausted = "max_turns"
                    raise GatewayHTTPError(400, f"this episode may make {limits.max_calls} calls",
                                           code="episode_budget_exhausted")
                room = limits.max_response_tokens - capture.response_len(parent, prompt_len)
                if room < 1:
                    capture.exhausted = "length"
                    raise GatewayHTTPError(400, "this episode's token budget is spent",
                                           code="episode_budget_exhausted")
                cap = min(cap, room)
            stop_tools = limits.stop_at_tool_call
            temperature, top_p, top_k = base.temperature, base.top_p, base.top_k
        else:
            d = self.defaults
            stops = sampling.stop
            cap = self._room(prompt_len, sampling.max_tokens)
            stop_tools = self.stop_at_tool_call
            temperature = d.temperature if sampling.temperature is None else sampling.temperature
            top_p = d.top_p if sampling.top_p is None else sampling.top_p
            top_k = d.top_k if sampling.top_k is None else sampling.top_k
        if tools and (stop_tools or one_call) and t.tool_stop_id is not None:
            stop_ids.add(t.tool_stop_id)
        return SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k,
                              max_new_tokens=cap, stop_token_ids=tuple(sorted(stop_ids)),
                              stop=stops)

    def _room(self, prompt_len: int, max_tokens: int | None) -> int:
        """Tokens a call outside episodes may generate (``max_tokens``, or the default clipped).

        A prompt at the context, or a prompt + ``max_tokens`` past it, is refused.

        Raises:
            GatewayHTTPError: 400 ``context_length_exceeded`` naming the limit.
        """
        ctx = self.max_context
        if ctx is None:
            return max_tokens or DEFAULT_MAX_TOKENS
        if prompt_len >= ctx:
            raise bad_request(f"the prompt has {prompt_len} tokens; this model's context is "
                              f"{ctx} tokens (prompt + completion)", "messages",
                              code="context_length_exceeded")
        if max_tokens is not None and prompt_len + max_tokens > ctx:
            raise bad_request(f"the prompt ({prompt_len} tokens) + max_tokens ({max_tokens}) "
                              f"is more than this model's context of {ctx} tokens", "max_tokens",
                              code="context_length_exceeded")
        return max_tokens or min(DEFAULT_MAX_TOKENS, ctx - prompt_len)

    @staticmethod
    def _seeds(sampling: Sampling, limits: EpisodeLimits | None, index: int) -> list[int | None]:
        if limits is not None and limits.seed is not None:
            return [limits.seed(index, i) for i in range(sampling.n)]
        if sampling.seed is not None:
            return [(sampling.seed + i) % 2**63 for i in range(sampling.n)]
        return [None] * sampling.n
