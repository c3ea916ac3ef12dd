"""Tool-call parsing for the Hermes/Qwen format, with argument validation against JSON schemas.

A model asks for tools by writing, anywhere in its turn, one or more blocks::

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "2 + 3"}}
    </tool_call>

:func:`parse_tool_calls` returns one item per ``<tool_call>`` block, in order: a :class:`ToolCall`
when the block is well formed (and, when schemas are given, names a known tool whose arguments
satisfy its schema), else a :class:`ToolCallError` that says what went wrong in words an
environment can show the model. Model output never makes these functions raise; only programmer
errors (a malformed schema) do.

Schemas are in the OpenAI function format that chat templates take:
``{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

ERROR_KINDS = (
    "bad_json",
    "bad_structure",
    "unknown_tool",
    "schema_violation",
    "missing_close_tag",
)
"""The ``kind`` tags a :class:`ToolCallError` can carry."""


@dataclass(frozen=True)
class ToolCall:
    """A well-formed tool call.

    Attributes:
        name: the tool's name.
        arguments: the decoded arguments (a JSON object).
        span: ``(start, end)`` character offsets of the whole ``<tool_call>...</tool_call>``
            block in the parsed text.
    """

    name: str
    arguments: dict[str, Any]
    span: tuple[int, int]


@dataclass(frozen=True)
class ToolCallError:
    """A tool call that could not be accepted.

    Attributes:
        kind: one of :data:`ERROR_KINDS`.
        message: a one-line explanation meant for the model.
        span: ``(start, end)`` character offsets of the offending block in the parsed text.
        name: the tool's name when it could be read, else None.
        raw: the text between the tags (truncated to 200 characters).
    """

    kind: str
    message: str
    span: tuple[int, int]
    name: str | None = None
    raw: str = ""
    details: dict[str, Any] = field(default_factory=dict)


ParsedCall = ToolCall | ToolCallError


def has_tool_call(text: str) -> bool:
    """Return whether ``text`` contains an opening ``<tool_call>`` tag."""
    return TOOL_CALL_OPEN in text


def strip_tool_calls(text: str) -> str:
    """Return ``text`` with every ``<tool_call>`` block (closed or not) removed."""
    pieces: list[str] = []
    position = 0
    while True:
        start = text.find(TOOL_CALL_OPEN, position)
        if start < 0:
            pieces.append(text[position:])
            break
        pieces.append(text[position:start])
        end = text.find(TOOL_CALL_CLOSE, start + len(TOOL_CALL_OPEN))
        if end < 0:
            break
        position = end + len(TOOL_CALL_CLOSE)
    return "".join(pieces)


def parse_tool_calls(
    text: str, schemas: Sequence[Mapping[str, Any]] | None = None
) -> list[ParsedCall]:
    """Parse every ``<tool_call>`` block in ``text``.

    Args:
        text: the model's turn.
        schemas: the tools on offer (OpenAI function format). When given, calls to unknown tools
            and arguments that violate a tool's ``parameters`` schema become errors; when None,
            only the syntax is checked.

    Returns:
        One :class:`ToolCall` or :class:`ToolCallError` per block, in order of appearance. An
        empty list when the text has no ``<tool_call>`` tag.
    """
    by_name = _index_schemas(schemas) if schemas is not None else None
    calls: list[ParsedCall] = []
    position = 0
    while True:
        start = text.find(TOOL_CALL_OPEN, position)
        if start < 0:
            return calls
        body_start = start + len(TOOL_CALL_OPEN)
        end = text.find(TOOL_CALL_CLOSE, body_start)
        next_open = text.find(TOOL_CALL_OPEN, body_start)
        if end < 0 or (0 <= next_open < end):
            stop = next_open if next_open >= 0 else len(text)
            calls.append(
                ToolCallError(
                    kind="missing_close_tag",
                    message=f"the tool call is missing its closing {TOOL_CALL_CLOSE} tag",
                    span=(start, stop),
                    raw=_clip(text[body_start:stop]),
                )
            )
            if next_open < 0:
                return calls
            position = next_open
            continue
        span = (start, end + len(TOOL_CALL_CLOSE))
        calls.append(_parse_block(text[body_start:end], span, by_name))
        position = span[1]


def validate_call(call: ToolCall, schemas: Sequence[Mapping[str, Any]]) -> ParsedCall:
    """Check a syntactically valid call against the tools on offer.

    Args:
        call: a parsed call.
        schemas: the tools on offer (OpenAI function format).

    Returns:
        ``call`` itself when the tool exists and its arguments satisfy the schema, else a
        :class:`ToolCallError` of kind ``unknown_tool`` or ``schema_violation``.
    """
    return _check_against(call, _index_schemas(schemas))


def format_error(error: ToolCallError) -> str:
    """Render an error as the text of a tool message shown to the model."""
    return f"Error ({error.kind}): {error.message}"


def _parse_block(
    body: str, span: tuple[int, int], by_name: dict[str, Mapping[str, Any]] | None
) -> ParsedCall:
    raw = _clip(body.strip())
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return ToolCallError(
            kind="bad_json",
            message=f"the tool call is not valid JSON ({_short(exc)})",
            span=span,
            raw=raw,
        )
    if not isinstance(payload, dict):
        return _structure_error("the tool call must be a JSON object", span, raw)
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return _structure_error('the tool call needs a string "name"', span, raw)
    arguments: Any = payload.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            return ToolCallError(
                kind="bad_json",
                message=(
                    f'"arguments" of {name!r} is a string that is not valid JSON ({_short(exc)})'
                ),
                span=span,
                name=name,
                raw=raw,
            )
    if not isinstance(arguments, dict):
        return _structure_error(f'"arguments" of {name!r} must be a JSON object', span, raw, name)
    call = ToolCall(name=name, arguments=arguments, span=span)
    if by_name is None:
        return call
    return _check_against(call, by_name)


def _check_against(call: ToolCall, by_name: dict[str, Mapping[str, Any]]) -> ParsedCall:
    function = by_name.get(call.name)
    if function is None:
        available = ", ".join(sorted(by_name)) or "none"
        return ToolCallError(
            kind="unknown_tool",
            message=f"unknown tool {call.name!r}; available tools: {available}",
            span=call.span,
            name=call.name,
            raw=_clip(json.dumps({"name": call.name, "arguments": call.arguments})),
        )
    parameters = function.get("parameters") or {"type": "object"}
    validator_cls = jsonschema.validators.validator_for(parameters)
    problems = sorted(validator_cls(parameters).iter_errors(call.arguments), key=str)
    if not problems:
        return call
    first = problems[0]
    where = "/".join(str(p) for p in first.absolute_path) or "arguments"
    return ToolCallError(
        kind="schema_violation",
        message=f"invalid arguments for {call.name!r}: {where}: {first.message}",
        span=call.span,
        name=call.name,
        raw=_clip(json.dumps(call.arguments, default=str)),
        details={"violations": [p.message for p in problems[:5]]},
    )


def _index_schemas(schemas: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    by_name: dict[str, Mapping[str, Any]] = {}
    for schema in schemas:
        function = schema.get("function", schema)
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError(
                "each tool schema needs a function name: "
                '{"type": "function", "function": {"name": ..., "parameters": {...}}}, '
                f"got {schema!r}"
            )
        parameters = function.get("parameters")
        if parameters is not None:
            jsonschema.validators.validator_for(parameters).check_schema(parameters)
        by_name[name] = function
    return by_name


def _structure_error(
    message: str, span: tuple[int, int], raw: str, name: str | None = None
) -> ToolCallError:
    return ToolCallError(
        kind="bad_structure",
        message=f'{message}: {{"name": "<tool>", "arguments": {{...}}}}',
        span=span,
        name=name,
        raw=raw,
    )


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _short(exc: BaseException) -> str:
    return _clip(str(exc) or type(exc).__name__, 120)
