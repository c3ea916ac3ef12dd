"""A toolset from what a config names (built-in names, functions, ``Tool`` objects, MCP servers).

``build_toolset`` reads an entry ``{"mcp": "<command line or URL>"}`` as an MCP server. It lives
apart from ``rlvr.envs.tools`` (what a tool is, and the built-in tools) so that the tools module
and the MCP adapter (``rlvr.envs.mcp_tools``, which builds ``Tool`` objects) do not import each
other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.envs.errors import EnvArgumentError
from rlvr.envs.tools import (
    FACTS_FILE,
    Tool,
    Toolset,
    calculator,
    make_python_tool,
    make_search_tools,
)

BUILTIN_TOOLS = ("calculator", "python", "search", "lookup")
"""Names :func:`build_toolset` understands."""


def build_toolset(
    tools: Sequence[str | Callable[..., Any] | Tool | Mapping[str, Any]],
    *,
    documents: str | Path | Sequence[Mapping[str, Any]] = FACTS_FILE,
    python_timeout_s: float = 5.0,
    max_output_chars: int = 2000,
) -> Toolset:
    """Build a toolset from built-in names, plain functions, :class:`Tool` objects and MCP servers.

    An entry ``{"mcp": "<command line or URL>"}`` adds every tool the MCP server lists
    (:mod:`rlvr.envs.mcp_tools`).

    Raises:
        EnvArgumentError: for an unknown built-in name (the message lists them).
    """
    built: list[Tool] = []
    search_tools: dict[str, Tool] | None = None
    for item in tools:
        if isinstance(item, Tool):
            built.append(item)
        elif isinstance(item, str):
            if item == "calculator":
                built.append(Tool.from_function(calculator))
            elif item == "python":
                built.append(make_python_tool(timeout_s=python_timeout_s))
            elif item in ("search", "lookup"):
                if search_tools is None:
                    search_tools = {t.name: t for t in make_search_tools(documents)}
                built.append(search_tools[item])
            else:
                raise EnvArgumentError(
                    f"unknown tool {item!r}; built-in tools: {list(BUILTIN_TOOLS)} "
                    "(or pass a function / rlvr.envs.tools.Tool)"
                )
        elif isinstance(item, Mapping) and "mcp" in item:
            from rlvr.envs.mcp_tools import mcp_tools  # the mcp package only when asked for

            built.extend(mcp_tools(item))
        elif callable(item):
            built.append(Tool.from_function(item))
        else:
            raise EnvArgumentError(f"tools entries must be names, functions, Tools or "
                                   f"{{'mcp': <command or URL>}}, got {item!r}")
    return Toolset(built, max_output_chars=max_output_chars)
