"""Tools for ToolUse environments: Python functions whose JSON schemas come from their signature.

:func:`function_schema` reads a function's type hints (-> JSON types) and its Google-style
docstring (summary -> description, ``Args:`` -> parameter descriptions) and returns the OpenAI
function format that chat templates take. :class:`Toolset` runs parsed calls and turns every
failure (unknown tool, bad arguments, an exception in the tool) into an error string for the
model.

Built-in tools: ``calculator`` (a safe evaluator, :mod:`rlvr.envs.calculator`), ``python`` (runs
code
in ``rlvr.verifiers.code``'s sandbox and returns stdout), ``search`` and ``lookup`` over a document
collection (JSON lines with ``id``, ``title``, ``text``).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from rlvr.envs.calculator import CalculatorError, evaluate, format_number
from rlvr.envs.errors import EnvArgumentError, ToolSchemaError
from rlvr.envs.tasks.tool_tasks import FACTS_FILE, load_facts
from rlvr.verifiers import Verdict
from rlvr.verifiers.code import SandboxPool, StdioTests
from rlvr.verifiers.process_wide import ProcessWide
from rlvr.verifiers.tools import ToolCall

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}


def json_type(annotation: Any, *, where: str = "") -> dict[str, Any]:
    """Map a Python type hint to a JSON schema fragment.

    Supports ``str int float bool``, ``list[X]``/``tuple[X, ...]``/``Sequence[X]``,
    ``dict[str, X]``, ``Literal[...]`` and ``X | None`` (the ``None`` only makes it optional).

    Raises:
        ToolSchemaError: for anything else (named with ``where``).
    """
    origin = get_origin(annotation)
    args = get_args(annotation)
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return json_type(non_none[0], where=where)
        return {"anyOf": [json_type(a, where=where) for a in non_none]}
    if origin in (list, tuple, Sequence):
        items = [a for a in args if a is not Ellipsis]
        schema: dict[str, Any] = {"type": "array"}
        if len(set(items)) == 1:
            schema["items"] = json_type(items[0], where=where)
        return schema
    if origin in (dict, Mapping):
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = json_type(args[1], where=where)
        return schema
    raise ToolSchemaError(f"{where}: type hint {annotation!r} has no JSON schema equivalent")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {argument name: description}).

    The description is the text before the first section header (``Args:``, ``Returns:``, ...);
    argument entries are ``name: text`` or ``name (type): text`` lines of the ``Args:`` section,
    with more-indented lines continuing the entry above.
    """
    if not doc:
        return "", {}
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    entry_indent: int | None = None
    current: str | None = None
    for line in inspect.cleandoc(doc).splitlines():
        if re.fullmatch(r"[A-Z][A-Za-z ]*:\s*", line):
            section, entry_indent, current = line.strip()[:-1].lower(), None, None
            continue
        if section is None:
            summary.append(line.strip())
            continue
        if section not in ("args", "arguments", "parameters") or not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        entry = re.match(r"^\s+\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
        if entry and (entry_indent is None or indent <= entry_indent):
            entry_indent = indent
            current = entry.group(1)
            args[current] = entry.group(2).strip()
        elif current is not None:
            args[current] = f"{args[current]} {line.strip()}".strip()
    return " ".join(" ".join(summary).split()), args


def function_schema(fn: Callable[..., Any], *, name: str | None = None) -> dict[str, Any]:
    """Derive the OpenAI function schema of ``fn``.

    Args:
        fn: a function with type hints on every parameter and a docstring.
        name: the tool name (default ``fn.__name__``).

    Returns:
        ``{"type": "function", "function": {"name", "description", "parameters"}}``; parameters
        without a default are ``required``.

    Raises:
        ToolSchemaError: when a parameter lacks a type hint or the function lacks a docstring.
    """
    tool_name = name or fn.__name__
    description, arg_docs = parse_docstring(inspect.getdoc(fn))
    if not description:
        raise ToolSchemaError(f"tool {tool_name!r}: the function needs a docstring summary")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ToolSchemaError(f"tool {tool_name!r}: cannot resolve type hints ({exc})") from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolSchemaError(f"tool {tool_name!r}: *args/**kwargs cannot be described")
        if parameter.name not in hints:
            raise ToolSchemaError(
                f"tool {tool_name!r}: parameter {parameter.name!r} needs a type hint"
            )
        schema = json_type(hints[parameter.name], where=f"tool {tool_name!r} {parameter.name!r}")
        if arg_docs.get(parameter.name):
            schema["description"] = arg_docs[parameter.name]
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        elif parameter.default is not None:
            schema["default"] = parameter.default
        properties[parameter.name] = schema
    return {
        "type": "function",
        "function": {
            "name": tool_name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


@dataclass(frozen=True)
class Tool:
    """A callable tool and its schema."""

    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None) -> Tool:
        """Wrap ``fn``, deriving its schema with :func:`function_schema`."""
        schema = function_schema(fn, name=name)
        return cls(name=schema["function"]["name"], fn=fn, schema=schema)


class Toolset:
    """Named tools: their schemas for the prompt, and safe execution of parsed calls.

    Args:
        tools: the tools; names must be unique.
        max_output_chars: tool output is cut to this length.
    """

    def __init__(self, tools: Sequence[Tool], *, max_output_chars: int = 2000) -> None:
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise EnvArgumentError(
                    f"two tools are named {tool.name!r}; tool names must be unique"
                )
            self.tools[tool.name] = tool
        self.max_output_chars = max_output_chars

    def schemas(self) -> list[dict[str, Any]]:
        """Fresh copies of the tools' schemas (OpenAI function format)."""
        import copy

        return [copy.deepcopy(tool.schema) for tool in self.tools.values()]

    def execute(self, call: ToolCall) -> tuple[str, bool]:
        """Run a validated call.

        Returns:
            ``(content, ok)``: the tool's output as text (cut to ``max_output_chars``), or an
            error message and ``ok=False`` when the tool is unknown or raised.
        """
        tool = self.tools.get(call.name)
        if tool is None:
            return f"Error (unknown_tool): unknown tool {call.name!r}", False
        try:
            output = tool.fn(**call.arguments)
        except Exception as exc:  # a tool's failure is shown to the model, never raised
            return f"Error (tool_error): {type(exc).__name__}: {exc}"[
                : self.max_output_chars
            ], False
        text = output if isinstance(output, str) else str(output)
        if len(text) > self.max_output_chars:
            text = text[: self.max_output_chars] + "\n[output truncated]"
        return text, True


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: e.g. "(43645 + 20972) * 2" or "sqrt(2)"; supports + - * / // % ** and
            parentheses, plus sqrt, abs, round, min, max, log, exp, sin, cos, floor, ceil.
    """
    try:
        return format_number(evaluate(expression))
    except CalculatorError as exc:
        return f"Error: {exc}"


_tool_pool = ProcessWide(SandboxPool, close_at_exit=SandboxPool.close)


def tool_pool() -> SandboxPool:
    """The sandboxes of the ``python`` tool: a pool of their own, never the grading pool.

    A tool call runs model-written code before the graded answer; sharing the graders' warm
    sandboxes would let it leave state where the graded program runs next.
    """
    return _tool_pool.get()


def make_python_tool(*, timeout_s: float = 5.0, memory_mb: int = 256) -> Tool:
    """The ``python`` tool: run a program in the code sandbox, return its stdout."""

    def python(code: str) -> str:
        """Run a Python program in a sandbox (no network, no files kept) and return its output.

        Args:
            code: a complete Python program; print what you want to see.
        """
        return run_python(code, timeout_s=timeout_s, memory_mb=memory_mb)

    return Tool.from_function(python)


def run_python(code: str, *, timeout_s: float = 5.0, memory_mb: int = 256) -> str:
    """Run ``code`` in the tools' sandbox pool; return its stdout, and stderr on failure."""
    verdict: Verdict = tool_pool().run_tests(
        code, StdioTests(cases=(("", "\x00"),)), timeout_s=timeout_s, memory_mb=memory_mb
    )
    stdout = str(verdict.details.get("stdout") or "")
    if verdict.reason in ("runtime_error", "syntax_error"):
        stderr = str(verdict.details.get("stderr") or "").strip()
        return f"{stdout}Error ({verdict.reason}):\n{stderr[-1000:]}"
    if verdict.reason in ("timeout", "memory_limit", "output_limit", "sandbox_error"):
        return f"{stdout}Error ({verdict.reason}): the program was stopped"
    return stdout or "(no output)"


def make_search_tools(
    documents: str | Path | Sequence[Mapping[str, Any]] = FACTS_FILE,
) -> list[Tool]:
    """The ``search`` and ``lookup`` tools over a document collection.

    Args:
        documents: a JSON-lines file or a list of ``{"id", "title", "text"}`` dicts.
    """
    docs = load_facts(documents) if isinstance(documents, str | Path) else list(documents)
    index = [(_words(f"{d['title']} {d['text']}"), d) for d in docs]
    by_title = {str(d["title"]).lower(): d for d in docs}

    def search(query: str, k: int = 3) -> str:
        """Search the document collection by keywords; returns the best matching documents.

        Args:
            query: keywords, e.g. "population Alderholm".
            k: how many documents to return (1 to 10).
        """
        words = _words(query)
        k = max(1, min(int(k), 10))
        scored = sorted(
            ((len(words & doc_words), i) for i, (doc_words, _) in enumerate(index)),
            key=lambda pair: (-pair[0], pair[1]),
        )
        hits = [index[i][1] for score, i in scored[:k] if score > 0]
        if not hits:
            return "No documents match the query."
        return "\n".join(f"[{d['title']}] {d['text']}" for d in hits)

    def lookup(title: str) -> str:
        """Return the full text of the document with this exact title.

        Args:
            title: a document title as shown by search, e.g. "Alderholm".
        """
        doc = by_title.get(title.strip().lower())
        if doc is None:
            return f"No document titled {title!r}. Use search to find titles."
        return str(doc["text"])

    return [Tool.from_function(search), Tool.from_function(lookup)]


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 1 or w.isdigit()}
