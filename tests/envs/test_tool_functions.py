from typing import Literal

import pytest

from rlvr.envs import Tool, ToolSchemaError, Toolset, function_schema
from rlvr.envs.tools import (
    calculator,
    make_search_tools,
    parse_docstring,
    run_python,
)
from rlvr.envs.toolsets import build_toolset
from rlvr.verifiers.tools import ToolCall


def shop(
    item: str,
    qty: int,
    price: float = 1.5,
    tags: list[str] | None = None,
    size: Literal["s", "m", "l"] = "m",
    gift: bool = False,
    extra: dict[str, int] | None = None,
) -> str:
    """Buy something at the shop.

    Longer explanation that is part of the description.

    Args:
        item: what to buy.
        qty: how many; a positive
            integer (continued line).
        price (float): unit price in dollars.
        tags: labels.
        size: the size.
        gift: wrap it.
        extra: anything else.

    Returns:
        A receipt.
    """
    return f"{qty} x {item}"


def test_schema_from_signature_and_docstring():
    schema = function_schema(shop)
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "shop"
    assert function["description"] == (
        "Buy something at the shop. Longer explanation that is part of the description."
    )
    parameters = function["parameters"]
    assert parameters["required"] == ["item", "qty"]
    assert parameters["additionalProperties"] is False
    props = parameters["properties"]
    assert props["item"] == {"type": "string", "description": "what to buy."}
    assert props["qty"] == {
        "type": "integer",
        "description": "how many; a positive integer (continued line).",
    }
    assert props["price"] == {
        "type": "number",
        "description": "unit price in dollars.",
        "default": 1.5,
    }
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "description": "labels."}
    assert props["size"]["enum"] == ["s", "m", "l"]
    assert props["gift"]["type"] == "boolean"
    assert props["extra"]["additionalProperties"] == {"type": "integer"}


def test_schema_errors_name_the_problem():
    def no_doc(x: int) -> int:
        return x

    def no_hint(x) -> int:
        """Do it."""
        return x

    def star(*xs: int) -> int:
        """Do it."""
        return 0

    def weird(x: set[int]) -> int:
        """Do it."""
        return 0

    with pytest.raises(ToolSchemaError, match="'no_doc': the function needs a docstring"):
        function_schema(no_doc)
    with pytest.raises(ToolSchemaError, match="parameter 'x' needs a type hint"):
        function_schema(no_hint)
    with pytest.raises(ToolSchemaError, match=r"\*args/\*\*kwargs"):
        function_schema(star)
    with pytest.raises(ToolSchemaError, match="no JSON schema equivalent"):
        function_schema(weird)


def test_parse_docstring_sections():
    description, args = parse_docstring("Summary.\n\nArgs:\n    a: first.\n    b (int): second.\n")
    assert description == "Summary." and args == {"a": "first.", "b": "second."}
    assert parse_docstring(None) == ("", {})


def test_toolset_turns_exceptions_into_errors():
    def boom(x: int) -> str:
        """Fail loudly.

        Args:
            x: ignored.
        """
        raise RuntimeError("kaput")

    toolset = Toolset(
        [Tool.from_function(boom), Tool.from_function(calculator)], max_output_chars=40
    )
    assert toolset.execute(ToolCall("boom", {"x": 1}, (0, 0))) == (
        "Error (tool_error): RuntimeError: kaput",
        False,
    )
    assert toolset.execute(ToolCall("calculator", {"expression": "2**200"}, (0, 0)))[0] == (
        str(2**200)[:40] + "\n[output truncated]"
    )
    assert toolset.execute(ToolCall("nope", {}, (0, 0)))[1] is False
    schemas = toolset.schemas()
    schemas[0]["function"]["name"] = "mutated"
    assert toolset.schemas()[0]["function"]["name"] == "boom"


def test_calculator_tool_never_raises():
    assert calculator("(43645 + 20972) * 2") == "129234"
    assert calculator("__import__('os')").startswith("Error: ")


def test_search_and_lookup_over_documents():
    docs = [
        {"id": "a", "title": "Alderholm", "text": "Alderholm has 43645 people."},
        {"id": "b", "title": "Brennick", "text": "Brennick has 20972 people."},
    ]
    search, lookup = make_search_tools(docs)
    assert search.fn(query="people in Brennick", k=1) == "[Brennick] Brennick has 20972 people."
    assert search.fn(query="zebra") == "No documents match the query."
    assert lookup.fn(title="alderholm") == "Alderholm has 43645 people."
    assert "No document titled" in lookup.fn(title="Corvale")
    bundled_search, _ = make_search_tools()
    assert "population" in bundled_search.fn(query="Alderholm population", k=1)


def test_python_tool_runs_in_the_sandbox():
    assert run_python("print(6 * 7)") == "42\n"
    assert "ZeroDivisionError" in run_python("print(1)\n1/0")
    assert run_python("pass") == "(no output)"
    assert "timeout" in run_python("while True: pass", timeout_s=0.5)


def test_build_toolset_names_functions_and_errors():
    def double(x: int) -> int:
        """Double a number.

        Args:
            x: the number.
        """
        return 2 * x

    toolset = build_toolset(["calculator", "search", "lookup", double])
    assert list(toolset.tools) == ["calculator", "search", "lookup", "double"]
    with pytest.raises(Exception, match=r"unknown tool 'browser'; built-in tools: \['calculator'"):
        build_toolset(["browser"])
    with pytest.raises(Exception, match="two tools are named 'calculator'"):
        build_toolset(["calculator", "calculator"])
