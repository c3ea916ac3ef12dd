"""The Anthropic Messages API (``POST /v1/messages``) on the chat completions path.

``parse_messages`` turns a Messages body into the ``ChatRequest`` a chat completions call would
make: ``system`` becomes a system message; a user turn's ``tool_result`` blocks become ``tool``
messages (then its text a user message); an assistant turn's ``text`` and ``tool_use`` blocks
one assistant message with tool calls; ``tools`` (``input_schema``) the chat tools. The call goes
through ``Gateway.chat``, so the same capture keeps its tokens with the same prefix rules: there is
no second tokenisation route. ``message_object`` and ``message_events`` give the ``message`` and
its server-sent events (``message_start`` ... ``message_stop``).

Refused (400 naming the field): image, document and thinking blocks, extended ``thinking``,
server tools, ``tool_choice`` ``any`` or a named tool (the engine cannot force a call), a final
assistant turn (prefill), and the OpenAI-only sampling fields.
"""

from __future__ import annotations

import json
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
from rlvr.agents.gateway.responses import text_pieces
from rlvr.agents.gateway.service import Generated

#: Messages fields with the chat completions field each becomes.
RENAMED = {"stop_sequences": "stop"}
#: Fields the gateway cannot honour, with the neutral values.
REFUSED: dict[str, tuple[Any, ...]] = {
    "thinking": (None, {"type": "disabled"}),
    "mcp_servers": (None, []),
    "container": (None,),
}


def error_body(exc: GatewayHTTPError) -> dict[str, Any]:
    """An Anthropic error object: ``{"type": "error", "error": {"type", "message"}}``."""
    kinds = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
             413: "request_too_large", 500: "api_error", 503: "overloaded_error"}
    message = exc.message if exc.param is None else f"{exc.param}: {exc.message}"
    return {"type": "error", "error": {"type": kinds.get(exc.status, exc.kind),
                                       "message": message}}


def parse_messages(body: Any) -> ChatRequest:
    """Validate a Messages body.

    Raises:
        GatewayHTTPError: 400, naming the (Messages) field that is missing or malformed.
    """
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name, neutral in REFUSED.items():
        if body.get(name) not in neutral:
            raise bad_request(f"'{name}' is not supported by this server", name)
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise bad_request("'max_tokens' is required", "max_tokens")
    temperature = body.get("temperature")
    if temperature is not None and not (isinstance(temperature, int | float)
                                        and not isinstance(temperature, bool)
                                        and 0 <= temperature <= 1):
        raise bad_request("'temperature' must be a number in [0, 1]", "temperature")
    for name in ("n", "presence_penalty", "frequency_penalty", "logprobs", "seed", "stop"):
        if name in body:
            raise bad_request(f"'{name}' is not a Messages API field", name)
    chat: dict[str, Any] = {k: body[k] for k in NEUTRAL if k in body}  # refused as in chat
    chat |= {
        "model": body.get("model"), "messages": _messages(body.get("system"),
                                                          body.get("messages")),
        "tools": _tools(body.get("tools")), "tool_choice": _tool_choice(body.get("tool_choice")),
        "max_tokens": max_tokens, "stream": body.get("stream", False),
        "stop": body.get("stop_sequences")}
    for name in ("temperature", "top_p", "top_k"):
        if name in body:
            chat[name] = body[name]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and "disable_parallel_tool_use" in choice:
        disable = choice["disable_parallel_tool_use"]
        if not isinstance(disable, bool):
            raise bad_request("'tool_choice.disable_parallel_tool_use' must be a boolean",
                              "tool_choice.disable_parallel_tool_use")
        chat["parallel_tool_calls"] = not disable
    try:
        return parse_chat(chat)
    except GatewayHTTPError as exc:
        for theirs, ours in RENAMED.items():
            if exc.param == ours:
                exc.param, exc.message = theirs, exc.message.replace(f"'{ours}'", f"'{theirs}'")
        raise


def _text_blocks(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, block in enumerate(content):
            if not (isinstance(block, dict) and block.get("type") == "text"
                    and isinstance(block.get("text"), str)):
                kind = block.get("type") if isinstance(block, dict) else None
                raise bad_request(f"only text blocks are supported here; got {kind!r}",
                                  f"{where}[{j}]")
            texts.append(block["text"])
        return "".join(texts)
    raise bad_request("must be a string or an array of text blocks", where)


def _messages(system: Any, messages: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if system is not None:
        out.append({"role": "system", "content": _text_blocks(system, "system")})
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array of messages", "messages")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise bad_request("'role' must be 'user' or 'assistant'", f"{where}.role")
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise bad_request("'content' must be a string or an array of blocks",
                              f"{where}.content")
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            at = f"{where}.content[{j}]"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use" and role == "assistant":
                if not isinstance(block.get("name"), str) or not isinstance(
                        block.get("input", {}), dict):
                    raise bad_request("a tool_use block needs 'name' and an object 'input'", at)
                calls.append({"id": str(block.get("id", "")), "type": "function",
                              "function": {"name": block["name"],
                                           "arguments": json.dumps(block.get("input", {}))}})
            elif kind == "tool_result" and role == "user":
                if texts:
                    raise bad_request("tool_result blocks must come before a turn's text", at)
                out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")),
                            "content": _text_blocks(block.get("content", ""), f"{at}.content")})
            else:
                raise bad_request(f"{kind!r} blocks are not supported in a {role} turn (text, "
                                  "tool_use in assistant turns, tool_result in user turns)", at)
        if role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
            if calls:
                entry["tool_calls"] = calls
            elif entry["content"] is None:
                entry["content"] = ""
            out.append(entry)
        elif texts:
            out.append({"role": "user", "content": "".join(texts)})
    if messages[-1].get("role") == "assistant":
        # Anthropic continues a final assistant turn (prefill); the chat template would close it
        raise bad_request("a final assistant turn (prefill) is not supported: the conversation "
                          "must end with a user turn", f"messages[{len(messages) - 1}]")
    return out


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad_request("'tools' must be an array of tools", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "custom") != "custom" or not isinstance(
                tool.get("input_schema"), dict):
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad_request(f"only client tools with an 'input_schema' are supported; got "
                              f"type {kind!r}", f"tools[{i}]")
        function = {"name": tool.get("name")}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        function["parameters"] = tool["input_schema"]
        if tool.get("strict") is not None:
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise bad_request("'tool_choice' must be {\"type\": \"auto\" | \"none\" | \"any\" | "
                      "\"tool\"}", "tool_choice")


# ---------------------------------------------------------------------- responses
def _stop(req: ChatRequest, out: Generated, t: Templates) -> tuple[str, str | None]:
    [c], [(_, _, stopped)], [reply] = out.completions, out.texts, out.replies
    if reply.tool_calls:
        return "tool_use", None
    if stopped:
        full = t.text(c.token_ids)
        hits = [(full.find(s), s) for s in req.sampling.stop if full.find(s) >= 0]
        return "stop_sequence", min(hits)[1] if hits else None
    if c.finish_reason == "length":
        return "max_tokens", None
    return "end_turn", None


def _blocks(out: Generated) -> list[dict[str, Any]]:
    [reply] = out.replies
    blocks: list[dict[str, Any]] = []
    if reply.content:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": json.loads(call["function"]["arguments"])})
    return blocks


def message_object(req: ChatRequest, out: Generated, t: Templates) -> dict[str, Any]:
    """The ``message`` object of a generated call."""
    reason, sequence = _stop(req, out, t)
    return {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
            "model": req.model, "content": _blocks(out), "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": {"input_tokens": out.prompt_len,
                      "output_tokens": sum(n for _, n, _ in out.texts)}}


def message_events(req: ChatRequest, out: Generated, t: Templates) -> Iterator[str]:
    """The server-sent events of a finished call, as the Messages API streams them.

    ``message_start``; per block ``content_block_start``, its deltas (``text_delta`` per token,
    or the tool input as one ``input_json_delta``), ``content_block_stop``; ``message_delta``
    with the stop reason and usage; ``message_stop``. The engine returns whole completions, so
    the events come once generation ended.
    """
    final = message_object(req, out, t)

    def event(kind: str, **fields: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"

    start = {**final, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": out.prompt_len, "output_tokens": 0}}
    yield event("message_start", message=start)
    [c], [(text, n_tokens, _)] = out.completions, out.texts
    for index, block in enumerate(final["content"]):
        if block["type"] == "text":
            yield event("content_block_start", index=index,
                        content_block={"type": "text", "text": ""})
            pieces = (text_pieces(t, c.token_ids[:n_tokens], text) if block["text"] == text
                      else [(block["text"], None)])
            for piece, _ in pieces:
                yield event("content_block_delta", index=index,
                            delta={"type": "text_delta", "text": piece})
        else:
            yield event("content_block_start", index=index,
                        content_block={**block, "input": {}})
            yield event("content_block_delta", index=index,
                        delta={"type": "input_json_delta",
                               "partial_json": json.dumps(block["input"])})
        yield event("content_block_stop", index=index)
    yield event("message_delta",
                delta={"stop_reason": final["stop_reason"],
                       "stop_sequence": final["stop_sequence"]},
                usage={"output_tokens": final["usage"]["output_tokens"]})
    yield event("message_stop")
