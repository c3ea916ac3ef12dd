"""Local OpenEnv servers started as processes: ``rlvr/OpenEnv-v0``'s ``command`` kwarg.

A command line with ``{port}`` in it (``python server.py --port {port}``) is started as a child
process (no Docker) on a free port of 127.0.0.1, in a process group of its own; rlvr waits until
its ``GET /health`` answers, and stops the group ``LINGER_S`` seconds after the last env using it
closed (an env built again in that time takes it back: a run builds and closes envs of one
command several times before training, and a server can take seconds to start), or when Python
exits (a process killed by a signal skips that and leaves the server running).
One server per command line and process is shared by all the envs built with it: each env
opens its own WebSocket session on it. The server's output goes to a temporary file, named in
the error when it fails to start.
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time

from rlvr.envs.errors import EnvArgumentError
from rlvr.envs.openenv_client import OpenEnvError, get_json

#: Seconds a server with no env left keeps running before it is stopped.
LINGER_S = 30.0
_LOCK = threading.Lock()
_SERVERS: dict[str, LocalServer] = {}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalServer:
    """One OpenEnv server process (see the module docstring).

    Args:
        command: the command line, with ``{port}`` where the port goes.
        start_timeout_s: seconds to wait for ``/health``.
    """

    def __init__(self, command: str, start_timeout_s: float) -> None:
        if "{port}" not in command:
            raise EnvArgumentError(
                f"command: {command!r} has no {{port}}; write where the server's port goes, "
                "e.g. 'python server.py --port {port}' (rlvr picks a free port)")
        self.command = command
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.users = 0
        self._stopper: threading.Timer | None = None
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept open for the process
            prefix="rlvr-openenv-", suffix=".log", delete=False)
        argv = shlex.split(command.replace("{port}", str(self.port)))
        try:
            self.process = subprocess.Popen(  # noqa: S603 - the user's own command line
                argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                start_new_session=True)
        except OSError as exc:
            raise OpenEnvError(f"command: cannot start {command!r}: {exc}") from exc
        try:
            self._wait_healthy(start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise OpenEnvError(f"command: the OpenEnv server {self.command!r} exited with "
                                   f"code {code} before it was up; its output: {self.log.name}")
            try:
                get_json(self.url + "/health", timeout_s=2.0)
                return
            except OpenEnvError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise OpenEnvError(f"command: the OpenEnv server {self.command!r} did not answer "
                           f"/health within {timeout_s} s ({last}); its output: {self.log.name}")

    def stop(self) -> None:
        """Stop the server's process group (TERM, then KILL after 5 s)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
            except ProcessLookupError:
                pass
        self.log.close()


def acquire(command: str, start_timeout_s: float) -> LocalServer:
    """The running server of ``command`` (started now if none runs), with one more user."""
    with _LOCK:
        server = _SERVERS.get(command)
        if server is None or server.process.poll() is not None:
            server = LocalServer(command, start_timeout_s)
            _SERVERS[command] = server
        server.users += 1
        if server._stopper is not None:
            server._stopper.cancel()
            server._stopper = None
        return server


def release(server: LocalServer, linger_s: float = LINGER_S) -> None:
    """One user fewer; ``linger_s`` seconds after the last one, the server stops."""
    with _LOCK:
        server.users -= 1
        if server.users > 0:
            return
        server._stopper = threading.Timer(linger_s, _stop_unused, args=(server,))
        server._stopper.daemon = True
        server._stopper.start()


def _stop_unused(server: LocalServer) -> None:
    with _LOCK:
        if server.users > 0:
            return
        if _SERVERS.get(server.command) is server:
            del _SERVERS[server.command]
    server.stop()


@atexit.register
def _stop_all() -> None:
    with _LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.stop()
