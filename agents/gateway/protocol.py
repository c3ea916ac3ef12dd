"""The OpenAI request bodies the gateway accepts, validated into typed objects, and its errors.

``parse_chat`` and ``parse_completion`` turn a JSON body into a ``ChatRequest`` or a
``CompletionRequest``, or raise ``GatewayHTTPError`` (HTTP 400 with an OpenAI error object that
names the offending field). Fields that change the tokens but that the gateway cannot honour
(``top_logprobs``, penalties, ``logit_bias``, ``echo``, JSON response formats, ``min_p``,
``min_tokens``, ``ignore_eos``, ``best_of`` > 1, legacy ``functions``, non-text
``modalities``, a forced ``tool_choice``; ``NEUTRAL`` lists them) are refused with a 400 rather
than silently ignored; fields that do not change the generated tokens (``user``, ``metadata``,
``store``, ...) are accepted and ignored, so clients and frameworks that send them work
unchanged. ``parallel_tool_calls: false`` is honoured: a choice stops at its first call's end.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

#: The roles a chat message may have (``developer`` is rendered as ``system``).
ROLES = ("system", "developer", "user", "assistant", "tool")
#: The most choices one request may ask for.
MAX_N = 16
#: The most stop strings one request may give (OpenAI's limit).
MAX_STOPS = 4


class GatewayHTTPError(Exception):
    """An error the gateway answers with an OpenAI error object.

    Args:
        status: the HTTP status (400 bad request, 401 bad key, 404 unknown episode/route, ...).
        message: what was wrong, naming the field.
        param: the request field at fault, or None.
        code: a short machine-readable code, or None.
        kind: the OpenAI error ``type`` (``invalid_request_error`` by default).
    """

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None
                ) -> GatewayHTTPError:
    """A 400 ``invalid_request_error`` naming ``param``."""
    return GatewayHTTPError(400, message, param=param, code=code)


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """The sampling fields shared by both endpoints (None: the server's default).

    Attributes:
        n: choices to generate (1 to ``MAX_N``).
        temperature: in [0, 2].
        top_p: in (0, 1].
        top_k: keep the k most likely tokens (-1 or None: all).
        max_tokens: the most tokens per choice, or None for the server's default.
        stop: strings that end a choice (not included in its text).
        seed: sampling seed, or None.
        stream: answer as server-sent events.
        include_usage: with ``stream``, send a last chunk with token counts.
    """

    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """A validated ``/v1/chat/completions`` body.

    Attributes:
        model: the model name the client asked for (echoed back).
        messages: chat messages ready for the chat template (``developer`` -> ``system``, text
            parts joined, tool-call arguments decoded to objects).
        tools: function schemas (OpenAI format), or None.
        tool_choice: "auto" or "none" ("none": no tool calls are parsed; "required" and a
            named tool are refused: the engine cannot force a call).
        logprobs: return each generated token's logprob.
        sampling: n, temperature, top_p, max tokens, stop, seed, stream.
        parallel_tool_calls: False: at most one tool call per choice (generation stops at the
            first call's ``</tool_call>``).
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: str
    logprobs: bool
    sampling: Sampling
    parallel_tool_calls: bool = True


@dataclass(frozen=True, kw_only=True)
class CompletionRequest:
    """A validated ``/v1/completions`` body (one prompt: text or token ids).

    Attributes:
        model: the model name the client asked for (echoed back).
        prompt: the prompt text, or None when ``prompt_ids`` is given.
        prompt_ids: the prompt as token ids, or None when ``prompt`` is given.
        logprobs: return each generated token's logprob.
        sampling: n, temperature, top_p, max tokens (default 16, as OpenAI's), stop, seed.
    """

    model: str
    prompt: str | None
    prompt_ids: list[int] | None
    logprobs: bool
    sampling: Sampling


def parse_chat(body: Any) -> ChatRequest:
    """Validate a chat completions body.

    Raises:
        GatewayHTTPError: 400, naming the field that is missing or malformed.
    """
    body = _object(body)
    _refuse_unsupported(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array of messages", "messages")
    tools = _tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    logprobs = body.get("logprobs", False)
    if not isinstance(logprobs, bool) and logprobs is not None:
        raise bad_request("'logprobs' must be a boolean", "logprobs")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    max_tokens = body.get("max_completion_tokens")
    key = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, key = body.get("max_tokens"), "max_tokens"
    return ChatRequest(
        model=_model(body),
        messages=[_message(m, i) for i, m in enumerate(messages)],
        tools=tools,
        tool_choice=tool_choice,
        logprobs=bool(logprobs),
        sampling=_sampling(body, max_tokens, key),
        parallel_tool_calls=parallel is not False,
    )


def parse_completion(body: Any) -> CompletionRequest:
    """Validate a (legacy) completions body.

    Raises:
        GatewayHTTPError: 400, naming the field that is missing or malformed.
    """
    body = _object(body)
    _refuse_unsupported(body)
    if body.get("echo"):
        raise bad_request("'echo' is not supported", "echo")
    if body.get("suffix") is not None:
        raise bad_request("'suffix' is not supported", "suffix")
    prompt = body.get("prompt")
    text: str | None = None
    ids: list[int] | None = None
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        text = prompt
    elif isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
        ids = list(prompt)
    else:
        raise bad_request("'prompt' must be a non-empty string or a non-empty array of token ids "
                          "(one prompt per request)", "prompt")
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                 or not 0 <= logprobs <= 5):
        raise bad_request("'logprobs' must be an integer in [0, 5]", "logprobs")
    if logprobs:
        raise bad_request("'logprobs' > 0 asks for top alternatives, which are not supported; "
                          "use 0 for the sampled tokens' logprobs", "logprobs")
    max_tokens = body.get("max_tokens", 16)
    return CompletionRequest(model=_model(body), prompt=text, prompt_ids=ids,
                             logprobs=logprobs is not None,
                             sampling=_sampling(body, max_tokens, "max_tokens"))


# ---------------------------------------------------------------------- fields
def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must be a non-empty string", "model")
    return model


#: Fields that change the generated tokens and that the engine cannot honour, with the only
#: values accepted (the neutral ones): anything else is refused with a 400 naming the field.
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "length_penalty": (None, 1, 1.0),
    "min_p": (None, 0, 0.0),
    "min_tokens": (None, 0),
    "ignore_eos": (None, False),
    "best_of": (None, 1),
    "use_beam_search": (None, False),
    "include_stop_str_in_output": (None, False),
    "skip_special_tokens": (None, True),
    "stop_token_ids": (None, []),
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "reasoning_effort": (None,),
    "web_search_options": (None,),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "structured_outputs": (None,),
}


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name, neutral in NEUTRAL.items():
        value = body.get(name)
        if not any(value == ok and type(value) is type(ok) or (
                isinstance(value, float) and isinstance(ok, int) and not isinstance(ok, bool)
                and value == ok) for ok in neutral):
            hint = " (use 'tools')" if name in ("functions", "function_call") else ""
            allowed = ", ".join(json.dumps(v) for v in neutral)
            raise bad_request(f"'{name}' is not supported{hint}: the engine cannot honour it; "
                              f"only {allowed} is accepted", name)
    if body.get("logit_bias"):
        raise bad_request("'logit_bias' is not supported", "logit_bias")
    if body.get("top_logprobs"):
        raise bad_request("'top_logprobs' is not supported (only 0): the engine returns the "
                          "sampled tokens' logprobs", "top_logprobs")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad_request("'response_format' supports only {\"type\": \"text\"}",
                          "response_format")


def _sampling(body: dict[str, Any], max_tokens: Any, max_key: str) -> Sampling:
    n = body.get("n", 1)
    if n is None:
        n = 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise bad_request(f"'n' must be an integer in [1, {MAX_N}]", "n")
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p is not None and top_p == 0:
        raise bad_request("'top_p' must be in (0, 1]", "top_p")
    top_k = body.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                              or not (top_k == -1 or top_k >= 1)):
        raise bad_request("'top_k' must be an integer >= 1, or -1 for all tokens", "top_k")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise bad_request(f"'{max_key}' must be an integer >= 1", max_key)
    stop = body.get("stop")
    stops: tuple[str, ...]
    if stop is None:
        stops = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and len(stop) <= MAX_STOPS and all(
            isinstance(s, str) and s for s in stop):
        stops = tuple(stop)
    else:
        raise bad_request(f"'stop' must be a non-empty string or an array of at most {MAX_STOPS} "
                          "non-empty strings", "stop")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad_request("'seed' must be an integer", "seed")
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise bad_request("'stream' must be a boolean", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    return Sampling(n=n, temperature=temperature, top_p=top_p, top_k=top_k,
                    max_tokens=max_tokens, stop=stops,
                    seed=None if seed is None else seed % 2**63, stream=bool(stream),
                    include_usage=bool(options.get("include_usage", False)))


def _number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not low <= value <= high:
        raise bad_request(f"'{name}' must be a number in [{low:g}, {high:g}]", name)
    return float(value)


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise bad_request("'tools' must be an array of function tools", "tools")
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not (isinstance(tool, dict) and tool.get("type", "function") == "function"
                and isinstance(function, dict) and isinstance(function.get("name"), str)
                and function["name"]):
            raise bad_request('each tool must be {"type": "function", "function": {"name": ..., '
                              '"parameters": {...}}}', f"tools[{i}]")
        params = function.get("parameters")
        if params is not None and not (isinstance(params, dict) and params.get(
                "type", "object") == "object" and isinstance(params.get("properties", {}), dict)
                and isinstance(params.get("required", []), list)):
            raise bad_request("a tool's 'parameters' must be a JSON schema of an object "
                              '({"type": "object", "properties": {...}, "required": [...]})',
                              f"tools[{i}].function.parameters")
        if function["name"] in names:
            raise bad_request(f"two tools are named {function['name']!r}",
                              f"tools[{i}].function.name")
        names.add(function["name"])
        out.append({"type": "function", "function": dict(function)})
    return out


def _tool_choice(choice: Any, tools: list[dict[str, Any]] | None) -> str:
    """``"auto"`` or ``"none"``; ``"required"`` and a named tool are validated, then refused.

    The engine cannot force a tool call (no constrained decoding), so a request that demands one
    gets a 400 rather than an answer that may ignore the demand.
    """
    if choice is None:
        return "auto"
    names = [t["function"]["name"] for t in tools or []]
    if choice in ("auto", "none"):
        return str(choice)
    if choice == "required":
        if not tools:
            raise bad_request("'tool_choice' is 'required' but the request has no 'tools'",
                              "tool_choice")
        raise bad_request("'tool_choice': 'required' is not supported: the engine cannot force "
                          "a tool call; use 'auto'", "tool_choice", code="unsupported_tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise bad_request("a named 'tool_choice' must be "
                              '{"type": "function", "function": {"name": ...}}', "tool_choice")
        if name not in names:
            raise bad_request(f"'tool_choice' names {name!r}, which is not in 'tools' "
                              f"({names})", "tool_choice")
        raise bad_request("a named 'tool_choice' is not supported: the engine cannot force a "
                          "tool call; use 'auto'", "tool_choice", code="unsupported_tool_choice")
    raise bad_request("'tool_choice' must be 'auto', 'none', 'required' or "
                      '{"type": "function", "function": {"name": ...}}', "tool_choice")


def _message(message: Any, i: int) -> dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise bad_request("each message must be an object with a 'role'", where)
    role = message.get("role")
    if role not in ROLES:
        raise bad_request(f"'role' must be one of {list(ROLES)}; got {role!r}", f"{where}.role")
    content = _content(message.get("content"), f"{where}.content")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role}
    calls = message.get("tool_calls") if role == "assistant" else None
    if content is None and not calls:
        raise bad_request("a message needs 'content' (an assistant message may have "
                          "'tool_calls' instead)", f"{where}.content")
    out["content"] = content if content is not None else ""
    if calls:
        out["tool_calls"] = _tool_calls(calls, where)
    if role == "tool":
        if message.get("tool_call_id") is not None:
            out["tool_call_id"] = str(message["tool_call_id"])
        if isinstance(message.get("name"), str):
            out["name"] = message["name"]
    elif isinstance(message.get("name"), str):
        out["name"] = message["name"]
    return out


def _content(content: Any, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                raise bad_request("only text content parts are supported: "
                                  '{"type": "text", "text": ...}', f"{where}[{j}]")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request("'content' must be a string or an array of text parts", where)


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise bad_request("'tool_calls' must be an array", f"{where}.tool_calls")
    out = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not (isinstance(function, dict) and isinstance(function.get("name"), str)):
            raise bad_request('each tool call must be {"id": ..., "type": "function", '
                              '"function": {"name": ..., "arguments": "<JSON>"}}',
                              f"{where}.tool_calls[{j}]")
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                raise bad_request("'arguments' must be a JSON object encoded as a string",
                                  f"{where}.tool_calls[{j}].function.arguments") from None
        out.append({"id": str(call.get("id", "")), "type": "function",
                    "function": {"name": function["name"], "arguments": arguments}})
    return out
