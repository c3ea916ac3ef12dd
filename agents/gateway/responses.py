"""OpenAI response objects (and stream chunks) built from a ``Generated`` call."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from rlvr.agents.gateway.protocol import ChatRequest, CompletionRequest
from rlvr.agents.gateway.render import Templates
from rlvr.agents.gateway.service import Generated


def _finish(engine_reason: str, stopped: bool, has_calls: bool) -> str:
    if engine_reason == "length" and not stopped:
        return "length"
    return "tool_calls" if has_calls else "stop"


def _usage(out: Generated) -> dict[str, int]:
    # the tokens the response covers (and its logprobs list): the text's, not a final
    # end-of-turn token nor tokens past a stop string
    completion = sum(n_tokens for _, n_tokens, _ in out.texts)
    return {"prompt_tokens": out.prompt_len, "completion_tokens": completion,
            "total_tokens": out.prompt_len + completion}


def token_logprobs(t: Templates, ids: list[int], logprobs: list[float]) -> list[dict[str, Any]]:
    """One OpenAI logprob entry per sampled token (chat completions and the Responses API)."""
    out = []
    for tok, lp in zip(ids, logprobs):
        text = t.token_text(tok)
        out.append({"token": text, "logprob": lp, "bytes": list(text.encode("utf-8")),
                    "top_logprobs": []})
    return out


def chat_response(req: ChatRequest, out: Generated, t: Templates) -> dict[str, Any]:
    """The ``chat.completion`` object."""
    choices = []
    for i, (c, (_, n_tokens, stopped), reply) in enumerate(
            zip(out.completions, out.texts, out.replies)):
        choices.append({
            "index": i,
            "message": reply.message(),
            "logprobs": {"content": token_logprobs(t, c.token_ids[:n_tokens],
                                                    c.logprobs[:n_tokens]), "refusal": None}
            if req.logprobs else None,
            "finish_reason": _finish(c.finish_reason, stopped, bool(reply.tool_calls)),
        })
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": req.model, "choices": choices,
            "usage": _usage(out)}


def chat_chunks(req: ChatRequest, out: Generated, t: Templates) -> Iterator[str]:
    """The ``chat.completion.chunk`` server-sent events of a finished call, then ``[DONE]``.

    The engine returns whole completions, so the events come once generation ended: one per
    token of text per choice, the tool calls in one event, then the finish reason.
    """
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": req.model}

    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        return f"data: {json.dumps({**head, 'choices': choices, **extra})}\n\n"

    for i, (c, (text, n_tokens, stopped), reply) in enumerate(
            zip(out.completions, out.texts, out.replies)):
        yield event([{"index": i, "delta": {"role": "assistant", "content": ""},
                      "logprobs": None, "finish_reason": None}])
        content = reply.content or ""
        pieces = text_pieces(t, c.token_ids[:n_tokens], text) if not reply.tool_calls else (
            [(content, None)] if content else [])
        for piece, k in pieces:
            lp = None
            if req.logprobs and k is not None:
                lp = {"content": token_logprobs(t, [c.token_ids[k]], [c.logprobs[k]])}
            yield event([{"index": i, "delta": {"content": piece}, "logprobs": lp,
                          "finish_reason": None}])
        if reply.tool_calls:
            calls = [{"index": j, **call} for j, call in enumerate(reply.tool_calls)]
            yield event([{"index": i, "delta": {"tool_calls": calls}, "logprobs": None,
                          "finish_reason": None}])
        yield event([{"index": i, "delta": {}, "logprobs": None,
                      "finish_reason": _finish(c.finish_reason, stopped,
                                               bool(reply.tool_calls))}])
    if req.sampling.include_usage:
        yield event([], usage=_usage(out))
    yield "data: [DONE]\n\n"


def text_pieces(t: Templates, ids: list[int], text: str) -> list[tuple[str, int | None]]:
    """``text`` split at token boundaries (decoded prefixes), each with its token index."""
    pieces: list[tuple[str, int | None]] = []
    done = ""
    for k in range(len(ids)):
        prefix = t.text(ids[: k + 1])[: len(text)]
        if len(prefix) > len(done) and prefix.startswith(done):
            pieces.append((prefix[len(done):], k))
            done = prefix
    if done != text:  # a stop string cut inside a token, or decoding is not incremental
        pieces = [(text, None)] if text else []
    return pieces


def completion_response(req: CompletionRequest, out: Generated, t: Templates) -> dict[str, Any]:
    """The ``text_completion`` object."""
    choices = []
    for i, (c, (text, n_tokens, stopped)) in enumerate(zip(out.completions, out.texts)):
        logprobs = None
        if req.logprobs:
            tokens = [t.token_text(x) for x in c.token_ids[:n_tokens]]
            offsets, at = [], 0
            for tok in tokens:
                offsets.append(at)
                at += len(tok)
            logprobs = {"tokens": tokens, "token_logprobs": list(c.logprobs[:n_tokens]),
                        "top_logprobs": None, "text_offset": offsets}
        choices.append({"index": i, "text": text, "logprobs": logprobs,
                        "finish_reason": _finish(c.finish_reason, stopped, False)})
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
            "created": int(time.time()), "model": req.model, "choices": choices,
            "usage": _usage(out)}


def completion_chunks(req: CompletionRequest, out: Generated, t: Templates) -> Iterator[str]:
    """The streamed ``text_completion`` events of a finished call, then ``[DONE]``."""
    body = completion_response(req, out, t)
    for choice in body["choices"]:
        chunk = {**{k: body[k] for k in ("id", "object", "created", "model")},
                 "choices": [choice]}
        yield f"data: {json.dumps(chunk)}\n\n"
    if req.sampling.include_usage:
        chunk = {**{k: body[k] for k in ("id", "object", "created", "model")}, "choices": [],
                 "usage": body["usage"]}
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"
