"""MCP tool servers as tools of the tool envs: a ``tools`` entry ``{"mcp": "<command or URL>"}``.

``rlvr/ToolUse-v0`` and ``rlvr/CompactToolUse-v0`` take, beside built-in names and functions, an
entry ``{"mcp": "python -m mypkg.server"}`` (a command line: the server runs as a child process
and speaks MCP over its stdin/stdout) or ``{"mcp": "http://127.0.0.1:8000/mcp"}`` (a running
server, Streamable HTTP). Optional keys: ``timeout_s`` (per call, default 30) and ``tools`` (the
names to offer; default all the server lists). Needs ``pip install 'rlvr[mcp]'`` (the ``mcp``
package, 2.x; 2.3.0 is tested).

The server's tools are listed once, at connection: each becomes a :class:`rlvr.envs.tools.Tool`
whose schema is the server's own (name, description and ``inputSchema`` as the function's
``parameters``), so the chat template renders it like a built-in tool and the tool env checks
the model's arguments against it before anything is sent. A call goes to the server; its text
content comes back as the ``tool`` message. A result the server flags as an error, a call that
takes longer than ``timeout_s``, or a connection that broke raise :class:`McpToolError`, which
the tool env shows to the model as ``Error (tool_error): ...`` and counts in ``tool_errors``,
as for a built-in tool that fails.

A stdio server's stderr (its log) goes to a temporary file, named in connection errors.

One connection per (target, process) is shared by every env of that process and closed at exit:
starting a server per episode would cost more than the episode. Tools that keep state between
calls therefore share it across episodes; give such servers a per-call key.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import os
import shlex
import tempfile
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from rlvr.envs.errors import EnvArgumentError, MissingDependencyError
from rlvr.envs.tools import Tool

DEFAULT_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 60.0
_ENTRY_KEYS = ("mcp", "timeout_s", "tools")


class McpToolError(RuntimeError):
    """A call the MCP server answered with an error, or that timed out or lost its connection."""


class McpConnection:
    """One live MCP client session on a background event loop (thread-safe, blocking calls).

    Args:
        target: a command line (stdio) or an ``http(s)://`` URL (Streamable HTTP).
    """

    def __init__(self, target: str) -> None:
        try:
            mcp = importlib.import_module("mcp")
        except ImportError as exc:
            raise MissingDependencyError(
                "MCP tools need the mcp package: pip install 'rlvr[mcp]'") from exc
        self.target = target
        self.errlog: Any = None
        if target.startswith(("http://", "https://")):
            server: Any = target
        else:
            argv = shlex.split(target)
            if not argv:
                raise EnvArgumentError("an MCP tools entry needs a command line or a URL")
            # the server is the user's own command: it gets this process's environment (mcp's
            # default passes only a few variables, so PYTHONPATH or API keys would be lost)
            params = mcp.StdioServerParameters(command=argv[0], args=argv[1:],
                                               env=dict(os.environ))
            # the server's own log (a traceback per failed call) goes to a file, not the run's
            self.errlog = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in close())
                "w", prefix="rlvr-mcp-", suffix=".log", delete=False)
            server = importlib.import_module("mcp.client.stdio").stdio_client(
                params, errlog=self.errlog)
        self._client = mcp.Client(server)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"mcp:{target[:40]}")
        self._thread.start()
        self._closed = threading.Event()
        self._stop: asyncio.Event | None = None
        ready = asyncio.run_coroutine_threadsafe(self._open(), self._loop)
        try:
            self.schemas: list[dict[str, Any]] = ready.result(CONNECT_TIMEOUT_S)
        except Exception as exc:
            self.close()
            where = f" (its log: {self.errlog.name})" if self.errlog is not None else ""
            raise EnvArgumentError(
                f"cannot connect to the MCP server {target!r}{where}: "
                f"{type(exc).__name__}: {exc}") from exc

    async def _open(self) -> list[dict[str, Any]]:
        opened: asyncio.Future[list[dict[str, Any]]] = self._loop.create_future()
        self._stop = asyncio.Event()
        self._session_task = asyncio.ensure_future(self._hold(opened))
        return await opened

    async def _hold(self, opened: asyncio.Future[list[dict[str, Any]]]) -> None:
        """Enter the client, list its tools, and keep it open until :meth:`close`."""
        try:
            async with self._client as client:
                listing = await client.list_tools()
                opened.set_result([_schema(tool) for tool in listing.tools])
                if self._stop is not None:
                    await self._stop.wait()
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(exc)
            else:
                raise

    def call(self, name: str, arguments: Mapping[str, Any], timeout_s: float) -> str:
        """Call tool ``name``; its text content, or :class:`McpToolError`."""
        if self._closed.is_set():
            raise McpToolError(f"the MCP server {self.target!r} is closed")
        future = asyncio.run_coroutine_threadsafe(
            self._client.call_tool(name, dict(arguments), read_timeout_seconds=timeout_s),
            self._loop)
        try:
            result = future.result(timeout_s + 5.0)
        except FutureTimeout as exc:
            future.cancel()
            raise McpToolError(f"{name} timed out after {timeout_s:g} s") from exc
        except Exception as exc:  # a timeout the client reports, a broken pipe, a server error
            raise McpToolError(f"{name} failed: {exc}") from exc
        text = "\n".join(str(getattr(block, "text", "")) or f"[{getattr(block, 'type', '?')}]"
                         for block in result.content)
        if result.is_error:
            raise McpToolError(text or f"{name} reported an error")
        return text

    def close(self) -> None:
        """End the session (and a stdio server's process) and stop the loop."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._stop is not None:
            stop = self._stop
            done = asyncio.run_coroutine_threadsafe(_set(stop), self._loop)
            try:
                done.result(5.0)
                asyncio.run_coroutine_threadsafe(
                    asyncio.wait_for(self._session_task, 10.0), self._loop).result(15.0)
            except Exception:  # closing is best effort; the loop stops below either way
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        if self.errlog is not None:
            self.errlog.close()


async def _set(event: asyncio.Event) -> None:
    event.set()


def _schema(tool: Any) -> dict[str, Any]:
    parameters = dict(getattr(tool, "input_schema", None) or {"type": "object",
                                                              "properties": {}})
    return {"type": "function", "function": {
        "name": str(tool.name), "description": str(tool.description or ""),
        "parameters": parameters}}


_connections: dict[str, McpConnection] = {}
_lock = threading.Lock()


def connection(target: str) -> McpConnection:
    """The process's connection to ``target`` (opened on first use, closed at exit)."""
    with _lock:
        live = _connections.get(target)
        if live is None or live._closed.is_set():
            live = McpConnection(target)
            _connections[target] = live
        return live


def close_all() -> None:
    """Close every MCP connection of this process."""
    with _lock:
        for live in _connections.values():
            live.close()
        _connections.clear()


atexit.register(close_all)


def is_mcp_entry(item: Any) -> bool:
    """Whether a ``tools`` entry is an MCP server (a mapping with an ``mcp`` key)."""
    return isinstance(item, Mapping) and "mcp" in item


def mcp_tools(entry: Mapping[str, Any]) -> list[Tool]:
    """The tools of the MCP server an entry names (see the module docstring).

    Raises:
        EnvArgumentError: an unknown key, a bad value, a server that cannot be reached, or a
            requested tool the server does not list.
    """
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
    if unknown:
        raise EnvArgumentError(f"MCP tools entry {dict(entry)!r}: unknown key(s) {unknown}; "
                               f"accepted: {list(_ENTRY_KEYS)}")
    target = entry["mcp"]
    if not isinstance(target, str) or not target.strip():
        raise EnvArgumentError(f"tools entry 'mcp' must be a command line or a URL, got {target!r}")
    timeout_s = entry.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise EnvArgumentError(
            f"MCP tools entry: timeout_s must be a number > 0, got {timeout_s!r}")
    live = connection(target.strip())
    wanted: Sequence[str] | None = entry.get("tools")
    by_name = {s["function"]["name"]: s for s in live.schemas}
    if wanted is not None:
        missing = [name for name in wanted if name not in by_name]
        if missing:
            raise EnvArgumentError(f"the MCP server {target!r} has no tool(s) {missing}; it "
                                   f"lists {sorted(by_name)}")
        by_name = {name: by_name[name] for name in wanted}
    return [Tool(name=name, fn=_caller(live, name, float(timeout_s)), schema=schema)
            for name, schema in by_name.items()]


def _caller(live: McpConnection, name: str, timeout_s: float) -> Any:
    def call(**arguments: Any) -> str:
        return live.call(name, arguments, timeout_s)

    call.__name__ = name
    return call


__all__ = ["McpConnection", "McpToolError", "close_all", "connection", "is_mcp_entry",
           "mcp_tools"]
