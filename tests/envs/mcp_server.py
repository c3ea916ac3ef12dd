"""A real MCP server over stdio for the tests: a calculator, a lookup table, and tools that fail.

Run as ``python tests/envs/mcp_server.py``; written with the ``mcp`` package's ``MCPServer``.
"""

from __future__ import annotations

import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("rlvr-test-tools")

CAPITALS = {"alderholm": "Vesk", "brannoch": "Tilly"}


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def lookup(key: str) -> str:
    """Return the capital of a country, by name."""
    return CAPITALS.get(key.strip().lower(), f"no entry for {key!r}")


@server.tool()
def fail(message: str) -> str:
    """Always raises (a tool that breaks)."""
    raise ValueError(message)


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep, then say so (a tool that is slow)."""
    time.sleep(seconds)
    return "slept"


if __name__ == "__main__":
    server.run()
