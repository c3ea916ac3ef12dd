r"""rlvr/ToolUse-v0: answer questions that need several tool calls, in the Hermes/Qwen format.

Each turn the model either calls tools (one or more ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` blocks) or gives its final answer (a turn without tool calls, e.g.
``Answer: 42`` or ``\boxed{42}``), which ``rlvr.verifiers.math.verify`` grades against the gold
answer.

Tool results come back as ``{"role": "tool", "name": ..., "content": ...}`` messages, one per
call, in order. A malformed call (bad JSON, unknown tool, arguments that break the schema, no
closing tag) or a tool that fails comes back the same way with an ``Error (...)`` content and is
counted in ``info["tool_errors"]``; it never raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.envs.base import Message
from rlvr.envs.errors import EnvArgumentError
from rlvr.envs.task_env import StepResult, TaskEnv
from rlvr.envs.tasks import SourceSpec, Task
from rlvr.envs.tasks.tool_tasks import FACTS_FILE
from rlvr.envs.tools import Tool
from rlvr.envs.toolsets import build_toolset
from rlvr.verifiers.math import verify
from rlvr.verifiers.tools import ToolCallError, format_error, parse_tool_calls

DEFAULT_TOOL_SYSTEM_PROMPT = (
    "You can call tools to answer the question. To call a tool, write\n"
    '<tool_call>\n{"name": <tool name>, "arguments": <JSON object>}\n</tool_call>\n'
    "You may call several tools in one turn; their results come back in the next message. "
    "When you know the answer, reply without any tool call and end with 'Answer: <number>'."
)


#: The built-in calculator tool's name (``rlvr.envs.tools``).
CALCULATOR = "calculator"


def calculator_call(expression: str, tool: str = CALCULATOR) -> str:
    """The Hermes tool-call text that calls ``tool`` on ``expression``."""
    payload = json.dumps({"name": tool, "arguments": {"expression": expression}})
    return f"<tool_call>\n{payload}\n</tool_call>"


class ToolUseEnv(TaskEnv):
    """Multi-turn question answering with tools; the final answer is verified.

    Args:
        split: ``"train"`` or ``"test"``.
        source: task source or spec (tasks need ``question`` and ``answer``); default the
            bundled two-fact questions (``"facts"``).
        source_kwargs: arguments for the source.
        tools: built-in tool names (``calculator``, ``python``, ``search``, ``lookup``),
            functions with type hints and a Google-style docstring,
            :class:`rlvr.envs.tools.Tool`, or MCP servers as ``{"mcp": "<command or URL>"}``
            (:mod:`rlvr.envs.mcp_tools`).
        documents: the collection ``search``/``lookup`` read (JSON lines; default: bundled facts).
        system_prompt: the system message, or None. Tool schemas are in ``info["tools"]`` for
            the chat template to render.
        prompt_template: the user message, formatted with the task's fields.
        max_tool_calls: tool calls allowed per episode (malformed ones count). A turn whose calls
            would go past it ends the episode with ``truncated=True`` and reward 0.
        max_turns: turns allowed; a last turn spent on tool calls truncates the episode.
        max_tool_output_chars: each tool result is cut to this length.
        python_timeout_s: wall-clock limit of the ``python`` tool.

    Step reward: the verdict's score (1.0 right, 0.0 wrong) on the answering turn, 0.0 on tool
    turns and on truncation. ``info`` carries ``tool_calls`` and ``tool_errors`` (episode
    counts so far) and, at reset, ``tools`` (schemas in the OpenAI function format).
    """

    def __init__(
        self,
        split: str = "train",
        *,
        source: SourceSpec = "facts",
        source_kwargs: Mapping[str, Any] | None = None,
        tools: Sequence[str | Callable[..., Any] | Tool | Mapping[str, Any]] = (
            "search", "calculator", "python"),
        documents: str | Path | Sequence[Mapping[str, Any]] = FACTS_FILE,
        system_prompt: str | None = DEFAULT_TOOL_SYSTEM_PROMPT,
        prompt_template: str = "{question}",
        max_tool_calls: int = 8,
        max_turns: int = 10,
        max_tool_output_chars: int = 2000,
        python_timeout_s: float = 5.0,
    ) -> None:
        for name, value in (("max_tool_calls", max_tool_calls), ("max_turns", max_turns)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise EnvArgumentError(f"{name} must be an int >= 1, got {value!r}")
        if isinstance(tools, str):
            raise EnvArgumentError(f"tools must be a list of tools, got the string {tools!r}")
        self.toolset = build_toolset(
            tools,
            documents=documents,
            python_timeout_s=python_timeout_s,
            max_output_chars=max_tool_output_chars,
        )
        super().__init__(
            source,
            split=split,
            source_kwargs=source_kwargs,
            system_prompt=system_prompt,
            prompt_template=prompt_template,
            required_fields=("question", "answer"),
        )
        self.max_tool_calls = max_tool_calls
        self.max_turns = max_turns
        self.reward_range = (0.0, 1.0)
        self._schemas = self.toolset.schemas()
        self._tool_calls = 0
        self._tool_errors = 0

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools' schemas (OpenAI function format), whatever ``reset``'s info carries."""
        return self.toolset.schemas()

    def demonstration(self, tool_results: Sequence[Message], *,
                      use_tool: bool = True) -> str | None:
        """The calculator path when one is on offer and ``use_tool``, else the gold answer.

        The calculator path calls it on the task's expression, then answers with its result.
        """
        task = self._task
        if task is None or CALCULATOR not in self.toolset.tools or not use_tool:
            return super().demonstration(tool_results, use_tool=use_tool)
        if not tool_results:
            return calculator_call(str(task.get("expression", task["question"])))
        return str(tool_results[-1]["content"])

    def _on_reset(self, task: Task) -> None:
        self._tool_calls = 0
        self._tool_errors = 0

    def _reset_info(self) -> dict[str, Any]:
        return {"tools": self.toolset.schemas()}

    def _step(self, action: str, task: Task) -> StepResult:
        calls = parse_tool_calls(action, self._schemas)
        if not calls:
            verdict = verify(action, str(task["answer"]))
            return StepResult([], float(verdict.score), terminated=True, info=self._info(verdict))
        if self._tool_calls + len(calls) > self.max_tool_calls:
            info = self._info(None, stop_reason="max_tool_calls")
            return StepResult([], 0.0, truncated=True, info=info)
        messages: list[Message] = []
        for call in calls:
            self._tool_calls += 1
            if isinstance(call, ToolCallError):
                self._tool_errors += 1
                messages.append(_tool_message(call.name or "invalid", format_error(call)))
                continue
            content, ok = self.toolset.execute(call)
            self._tool_errors += 0 if ok else 1
            messages.append(_tool_message(call.name, content))
        if self._turn >= self.max_turns:
            return StepResult([], 0.0, truncated=True, info=self._info(None, "max_turns"))
        return StepResult(messages, 0.0, info=self._info(None))

    def _info(self, verdict: Any, stop_reason: str | None = None) -> dict[str, Any]:
        info: dict[str, Any] = {"tool_calls": self._tool_calls, "tool_errors": self._tool_errors}
        if verdict is not None:
            info["verdict"] = verdict
        if stop_reason is not None:
            info["stop_reason"] = stop_reason
        return info


def _tool_message(name: str, content: str) -> Message:
    return {"role": "tool", "name": name, "content": content}
