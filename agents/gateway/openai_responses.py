"""The OpenAI Responses API (``POST /v1/responses``) on the chat completions path.

``parse_responses`` turns a Responses body into the ``ChatRequest`` a chat completions call
would make: ``instructions`` becomes a system message, ``input`` items become chat messages
(``message`` items by role, a ``function_call`` item a tool call of the assistant message it
follows, a ``function_call_output`` item a ``tool`` message), function ``tools`` the chat tools.
The call then goes through ``Gateway.chat``, so its tokens are kept by the same capture, with the
same prefix rules, as chat completions: there is no second tokenisation route. ``response_object``
and ``response_events`` give the ``response`` object and its server-sent events
(``response.created`` ... ``response.completed``) from the generated call.

Nothing is stored: ``previous_response_id``, ``conversation`` and stored ``prompt`` templates are
refused (400), as are non-function tools, JSON text formats, reasoning and ``background``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from rlvr.agents.gateway.protocol import (
    NEUTRAL,
    ChatRequest,
    GatewayHTTPError,
    bad_request,
    parse_chat,
)
from rlvr.agents.gateway.render import Templates
from rlvr.agents.gateway.responses import text_pieces, token_logprobs
from rlvr.agents.gateway.service import Generated

#: The ``include`` value that asks for the output text's logprobs.
LOGPROBS = "message.output_text.logprobs"
#: Responses fields with the chat completions field each becomes.
RENAMED = {"max_output_tokens": "max_tokens"}
#: Fields that need state or features the gateway does not have, with the neutral values.
REFUSED: dict[str, tuple[Any, ...]] = {
    "previous_response_id": (None,),
    "conversation": (None,),
    "prompt": (None,),
    "background": (None, False),
    "reasoning": (None,),
    "max_tool_calls": (None,),
    "top_logprobs": (None, 0),
}


def parse_responses(body: Any) -> tuple[ChatRequest, dict[str, Any]]:
    """Validate a Responses body.

    Returns:
        ``(request, echo)``: the chat request, and the fields the response object repeats.

    Raises:
        GatewayHTTPError: 400, naming the (Responses) field that is missing or malformed.
    """
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name, neutral in REFUSED.items():
        value = body.get(name)
        if isinstance(value, dict) and not any(v is not None for v in value.values()):
            value = None  # e.g. "reasoning": {"effort": null}
        if value not in neutral:
            raise bad_request(f"'{name}' is not supported by this server (it stores nothing and "
                              f"runs no reasoning or hosted tools)", name)
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if body.get("text") is not None and not isinstance(body.get("text"), dict):
        raise bad_request("'text' must be an object", "text")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad_request("'text.format' supports only {\"type\": \"text\"}", "text.format")
    include = body.get("include") or []
    if not isinstance(include, list):
        raise bad_request("'include' must be an array", "include")
    messages = _input_messages(body.get("input"), body.get("instructions"))
    chat: dict[str, Any] = {k: body[k] for k in NEUTRAL if k in body}
    chat.update(model=body.get("model"), messages=messages,
                tools=_tools(body.get("tools")), tool_choice=_tool_choice(body.get("tool_choice")),
                logprobs=LOGPROBS in include, max_tokens=body.get("max_output_tokens"),
                stream=body.get("stream", False))
    for name in ("temperature", "top_p", "top_k", "seed", "stop", "parallel_tool_calls"):
        if name in body:
            chat[name] = body[name]
    try:
        req = parse_chat(chat)
    except GatewayHTTPError as exc:
        for theirs, ours in RENAMED.items():
            if exc.param == ours:
                exc.param, exc.message = theirs, exc.message.replace(f"'{ours}'", f"'{theirs}'")
        if exc.param and exc.param.startswith("tool_choice"):
            exc.message = exc.message.replace('{"type": "function", "function": {"name": ...}}',
                                              '{"type": "function", "name": ...}')
        raise
    echo = {"instructions": body.get("instructions"), "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice", "auto"),
            "max_output_tokens": body.get("max_output_tokens"),
            "temperature": body.get("temperature"), "top_p": body.get("top_p"),
            "metadata": body.get("metadata") or {}, "user": body.get("user"),
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "store": bool(body.get("store", False))}
    return req, echo


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") in ("input_text", "output_text",
                                                                    "text")
                    and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, dict) else None
                raise bad_request(f"only text content is supported ({{\"type\": \"input_text\", "
                                  f"\"text\": ...}}); got {kind!r}", f"{where}[{j}]")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request("'content' must be a string or an array of text parts", where)


def _input_messages(items: Any, instructions: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise bad_request("'instructions' must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise bad_request("'input' must be a string or a non-empty array of items", "input")
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request("each input item must be an object", where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise bad_request("'role' must be system, developer, user or assistant",
                                  f"{where}.role")
            messages.append({"role": role,
                             "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            name, arguments = item.get("name"), item.get("arguments", "{}")
            if not isinstance(name, str) or not name or not isinstance(arguments, str):
                raise bad_request("a function_call item needs 'name' and 'arguments' (a JSON "
                                  "string)", where)
            call = {"id": str(item.get("call_id", "")), "type": "function",
                    "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")),
                             "content": _text(output, f"{where}.output")})
        else:
            raise bad_request(f"input items of type {kind!r} are not supported (message, "
                              "function_call, function_call_output)", f"{where}.type")
    return messages


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad_request("'tools' must be an array of function tools", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad_request(f"only function tools are supported; got {kind!r}",
                              f"tools[{i}].type")
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict")
                    if tool.get(k) is not None}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" not in choice:
        return {"type": "function", "function": {"name": choice.get("name")}}
    if isinstance(choice, dict) and choice.get("type") in ("auto", "none", "required"):
        return choice["type"]
    return choice


# ---------------------------------------------------------------------- responses
def _usage(out: Generated) -> dict[str, Any]:
    completion = sum(n for _, n, _ in out.texts)
    return {"input_tokens": out.prompt_len, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": out.prompt_len + completion}


def _items(req: ChatRequest, out: Generated, t: Templates) -> list[dict[str, Any]]:
    [c], [(_, n_tokens, _)], [reply] = out.completions, out.texts, out.replies
    items: list[dict[str, Any]] = []
    if reply.content is not None or not reply.tool_calls:
        part = {"type": "output_text", "text": reply.content or "", "annotations": [],
                "logprobs": token_logprobs(t, c.token_ids[:n_tokens], c.logprobs[:n_tokens])
                if req.logprobs else []}
        items.append({"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed",
                      "role": "assistant", "content": [part]})
    for call in reply.tool_calls:
        items.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex}",
                      "call_id": call["id"], "name": call["function"]["name"],
                      "arguments": call["function"]["arguments"], "status": "completed"})
    return items


def response_object(req: ChatRequest, echo: dict[str, Any], out: Generated, t: Templates,
                    *, response_id: str | None = None, status: str | None = None
                    ) -> dict[str, Any]:
    """The ``response`` object of a generated call (``status`` overrides, for stream events)."""
    [c], [(_, _, stopped)] = out.completions, out.texts
    truncated = c.finish_reason == "length" and not stopped
    final = "incomplete" if truncated else "completed"
    body = {"id": response_id or f"resp_{uuid.uuid4().hex}", "object": "response",
            "created_at": int(time.time()), "status": status or final, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if truncated and not status
            else None, "model": req.model,
            "output": [] if status else _items(req, out, t),
            "reasoning": {"effort": None, "summary": None}, "previous_response_id": None,
            "text": {"format": {"type": "text"}}, "truncation": "disabled",
            "usage": None if status else _usage(out), **echo}
    return body


def response_events(req: ChatRequest, echo: dict[str, Any], out: Generated,
                    t: Templates) -> Iterator[str]:
    """The server-sent events of a finished call, as the Responses API streams them.

    ``response.created`` and ``response.in_progress``; per output item ``output_item.added``,
    its text deltas (one per token, ``output_text.delta``) or function-call arguments, its
    ``.done`` events; then ``response.completed`` (or ``response.incomplete``) with the whole
    object. The engine returns whole completions, so the events come once generation ended.
    """
    final = response_object(req, echo, out, t)
    seq = iter(range(1 << 30))

    def event(kind: str, **fields: Any) -> str:
        return (f"event: {kind}\n"
                f"data: {json.dumps({'type': kind, 'sequence_number': next(seq), **fields})}\n\n")

    pending = response_object(req, echo, out, t, response_id=final["id"], status="in_progress")
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    [c], [(text, n_tokens, _)] = out.completions, out.texts
    for index, item in enumerate(final["output"]):
        if item["type"] == "message":
            part = item["content"][0]
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "content": []})
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            ids = dict(item_id=item["id"], output_index=index, content_index=0)
            yield event("response.content_part.added", **ids, part=empty)
            pieces = _pieces(t, c.token_ids[:n_tokens], text, part["text"])
            for piece, k in pieces:
                lp = (token_logprobs(t, [c.token_ids[k]], [c.logprobs[k]])
                      if req.logprobs and k is not None else [])
                yield event("response.output_text.delta", **ids, delta=piece, logprobs=lp)
            yield event("response.output_text.done", **ids, text=part["text"],
                        logprobs=part["logprobs"])
            yield event("response.content_part.done", **ids, part=part)
        else:
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "arguments": ""})
            ids = dict(item_id=item["id"], output_index=index)
            yield event("response.function_call_arguments.delta", **ids, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **ids, name=item["name"],
                        arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
    done = "response.completed" if final["status"] == "completed" else "response.incomplete"
    yield event(done, response=final)


def _pieces(t: Templates, ids: list[int], text: str, content: str
            ) -> list[tuple[str, int | None]]:
    """The message text as per-token deltas (whole when tool calls were cut out of it)."""
    if content != text:
        return [(content, None)] if content else []
    return text_pieces(t, ids, text)
