import pytest

from rlvr.verifiers.tools import (
    ToolCall,
    ToolCallError,
    format_error,
    has_tool_call,
    parse_tool_calls,
    strip_tool_calls,
    validate_call,
)

SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate arithmetic.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search documents.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
                "required": ["query"],
            },
        },
    },
]


def test_several_calls_in_one_turn_in_order_with_spans():
    text = (
        "Let me look.\n<tool_call>\n"
        '{"name": "search", "arguments": {"query": "Alderholm"}}\n</tool_call>\n'
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'
    )
    calls = parse_tool_calls(text, SCHEMAS)
    assert [type(c) for c in calls] == [ToolCall, ToolCall]
    assert calls[0].name == "search" and calls[0].arguments == {"query": "Alderholm"}
    assert calls[1].arguments == {"expression": "2+3"}
    start, end = calls[1].span
    assert text[start:end].startswith("<tool_call>") and text[start:end].endswith("</tool_call>")
    assert strip_tool_calls(text).strip() == "Let me look."


def test_no_tool_call_gives_empty_list():
    assert parse_tool_calls("The answer is 4.", SCHEMAS) == []
    assert not has_tool_call("The answer is 4.")


@pytest.mark.parametrize(
    ("body", "kind", "needle"),
    [
        ('{"name": "calculator", "arguments": {"expression": "1+1"', "bad_json", "not valid JSON"),
        ('["calculator"]', "bad_structure", "JSON object"),
        ('{"arguments": {}}', "bad_structure", '"name"'),
        ('{"name": "calculator", "arguments": [1]}', "bad_structure", "must be a JSON object"),
        ('{"name": "weather", "arguments": {}}', "unknown_tool", "tools: calculator, search"),
        ('{"name": "calculator", "arguments": {}}', "schema_violation", "is a required"),
        ('{"name": "calculator", "arguments": {"expression": 3}}', "schema_violation", "expr"),
        ('{"name": "search", "arguments": {"query": "x", "k": "two"}}', "schema_violation", "k:"),
        ('{"name": "calculator", "arguments": "{not json"}', "bad_json", "arguments"),
    ],
)
def test_errors_are_data_not_exceptions(body, kind, needle):
    calls = parse_tool_calls(f"<tool_call>{body}</tool_call>", SCHEMAS)
    assert len(calls) == 1
    error = calls[0]
    assert isinstance(error, ToolCallError)
    assert error.kind == kind
    assert needle in error.message
    assert format_error(error).startswith(f"Error ({kind}):")


def test_arguments_as_json_string_are_decoded():
    arguments = '"{\\"expression\\": \\"2*3\\"}"'
    text = f'<tool_call>{{"name": "calculator", "arguments": {arguments}}}</tool_call>'
    (call,) = parse_tool_calls(text, SCHEMAS)
    assert isinstance(call, ToolCall) and call.arguments == {"expression": "2*3"}


def test_missing_close_tag_then_a_good_call():
    text = (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}\n'
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2"}}</tool_call>'
    )
    first, second = parse_tool_calls(text, SCHEMAS)
    assert isinstance(first, ToolCallError) and first.kind == "missing_close_tag"
    assert isinstance(second, ToolCall) and second.arguments == {"expression": "2"}
    (only,) = parse_tool_calls('<tool_call>{"name": "x"', SCHEMAS)
    assert only.kind == "missing_close_tag"


def test_without_schemas_only_syntax_is_checked():
    (call,) = parse_tool_calls('<tool_call>{"name": "anything", "arguments": {"a": 1}}</tool_call>')
    assert isinstance(call, ToolCall) and call.name == "anything"
    assert validate_call(call, SCHEMAS).kind == "unknown_tool"


def test_hostile_output_never_raises():
    nasty = [
        "<tool_call>" + "[" * 100_000 + "</tool_call>",
        "<tool_call></tool_call>",
        "</tool_call><tool_call>",
        "<tool_call>null</tool_call>",
        '<tool_call>{"name": 5}</tool_call>',
        "<tool_call>" * 50,
    ]
    for text in nasty:
        for item in parse_tool_calls(text, SCHEMAS):
            assert isinstance(item, ToolCallError)


def test_bad_schema_is_a_programmer_error():
    with pytest.raises(ValueError, match="function name"):
        parse_tool_calls("<tool_call>{}</tool_call>", [{"type": "function", "function": {}}])
