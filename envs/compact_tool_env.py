r"""rlvr/CompactToolUse-v0: ToolUse-v0 with a one-line tool prompt, for models with tiny contexts.

The chat template's tool section (the Qwen/Hermes header plus each tool's JSON schema) costs ~500
tokens with the tiny quickstart tokenizer, ten times the rest of a calculator episode; a model of
a few million parameters would spend most of its compute re-reading it every turn. This variant
keeps everything else of :class:`rlvr.envs.tool_env.ToolUseEnv` (the Hermes
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` format, schema-checked calls, tool
results as ``tool`` messages, the verified final answer) and only changes how the tools are
announced: a system message listing each tool's signature, e.g. ``Tools: calculator(expression)``,
and no schemas in ``reset``'s info (so the chat template renders no tool section, and the agent
does not stop generation at ``</tool_call>``: the model ends its tool turn itself). With no tools
there is no system message at all: the model must answer from its weights.

With ``announce="template"`` the env writes no tool line and gives the schemas in ``reset``'s
info instead, for the chat template to render: what an agent that passes ``tools=`` to the
gateway sends. The tiny quickstart model's template with ``model.tiny.tool_prompt: line``
renders them as the same ``Tools: calculator(expression)`` line, token for token.

Its ``calculator`` reports a bad expression as a failed call (counted in ``info["tool_errors"]``),
where ToolUse-v0's answers with an error text that counts as a successful call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr.envs.calculator import evaluate, format_number
from rlvr.envs.errors import EnvArgumentError
from rlvr.envs.tool_env import ToolUseEnv
from rlvr.envs.tools import Tool


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: e.g. "347*58".

    Raises:
        rlvr.envs.calculator.CalculatorError: the expression is not allowed or not well formed
            (the env shows it to the model as a failed call).
    """
    return format_number(evaluate(expression))


STRICT_CALCULATOR = Tool.from_function(calculator)
"""The calculator whose failures count as tool errors."""

#: The values of ``CompactToolUseEnv(announce=...)``.
ANNOUNCE = ("line", "template")


class CompactToolUseEnv(ToolUseEnv):
    """Tool use announced in one line; defaults to the tool quickstart's multiplication task.

    Args:
        split: ``"train"`` or ``"test"``.
        source: task source or spec (tasks need ``question`` and ``answer``).
        source_kwargs: arguments for the source.
        tools: as for ToolUse-v0; the name ``calculator`` means :data:`STRICT_CALCULATOR`.
            ``[]`` disables tools (the model answers directly).
        system_prompt: the system message; None (the default) writes ``Tools: name(param, ...)``
            from the tools' schemas (with ``announce="line"``), or no system message when there
            are no tools.
        announce: how the tools are announced: ``"line"`` (a system message, no schemas in
            ``reset``'s info) or ``"template"`` (no tool line; the schemas in ``reset``'s info,
            for the chat template to render).
        **kwargs: the other :class:`~rlvr.envs.tool_env.ToolUseEnv` arguments (``prompt_template``,
            ``max_tool_calls``, ``max_turns``, ...).
    """

    def __init__(
        self,
        split: str = "train",
        *,
        source: Any = "multiplication",
        source_kwargs: Mapping[str, Any] | None = None,
        tools: Sequence[str | Callable[..., Any] | Tool | Mapping[str, Any]] = ("calculator",),
        system_prompt: str | None = None,
        announce: str = "line",
        **kwargs: Any,
    ) -> None:
        if announce not in ANNOUNCE:
            raise EnvArgumentError(f"announce must be one of {list(ANNOUNCE)}, got {announce!r}")
        if not isinstance(tools, str):
            tools = [STRICT_CALCULATOR if t == "calculator" else t for t in tools]
        kwargs.setdefault("max_tool_calls", 2)
        kwargs.setdefault("max_turns", 3)
        super().__init__(
            split,
            source=source,
            source_kwargs=source_kwargs,
            tools=tools,
            system_prompt=system_prompt,
            **kwargs,
        )
        self.announce = announce
        if system_prompt is None and announce == "line":
            self.system_prompt = tool_line(self.toolset.schemas())

    def _reset_info(self) -> dict[str, Any]:
        return {} if self.announce == "line" else super()._reset_info()


def tool_line(schemas: Sequence[Mapping[str, Any]]) -> str | None:
    """``"Tools: calculator(expression)"`` for the given schemas; None when there are none."""
    if not schemas:
        return None
    signatures = []
    for schema in schemas:
        function = schema.get("function", schema)
        params = ", ".join(function.get("parameters", {}).get("properties", {}))
        signatures.append(f"{function['name']}({params})")
    return "Tools: " + ", ".join(signatures)
