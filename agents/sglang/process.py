"""A launched SGLang server process: start it, tell whether it exited, read its log, stop it.

``SGLangEngine.launch`` starts one (``python -m sglang.launch_server`` in its own session, so
stopping it also stops its scheduler and detokenizer children) and ``SGLangEngine.close`` stops
it; the engine itself only speaks HTTP.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from urllib.parse import urlsplit

from rlvr.agents.sglang.launch import launch_command, launch_env


class ServerProcess:
    """One ``sglang.launch_server`` process and its log file.

    Args:
        popen: the process (started with ``start_new_session=True``).
        log: the file its stdout and stderr go to.
    """

    def __init__(self, popen: subprocess.Popen[bytes], log: Path | None = None) -> None:
        self.popen = popen
        self.log = log

    @classmethod
    def start(
        cls,
        model_path: str | PathLike[str],
        *,
        python: str,
        device: str,
        host: str,
        port: int,
        tp_size: int = 1,
        api_key: str | None = None,
        deterministic: bool = False,
        extra_args: Sequence[str] = (),
        log_path: str | PathLike[str] | None = None,
    ) -> ServerProcess:
        """Start the server (not healthy yet: poll ``/health``); see ``SGLangEngine.launch``."""
        cmd = launch_command(model_path, python=python, host=host, port=port, device=device,
                             tp_size=tp_size, api_key=api_key, deterministic=deterministic,
                             extra_args=list(extra_args))
        log = Path(log_path or Path(tempfile.mkdtemp(prefix="sglang-")) / "server.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as sink:
            popen = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT,
                                     env=launch_env(device), start_new_session=True)
        return cls(popen, log)

    def exit_code(self) -> int | None:
        """The process's exit code once it has exited, else None."""
        return self.popen.poll()

    def tail(self, n: int = 3000) -> str:
        """The last ``n`` characters of the server log, as a message suffix ("" without a log)."""
        if self.log is None or not self.log.exists():
            return ""
        return "\n--- server log tail ---\n" + self.log.read_text(errors="replace")[-n:]

    def terminate(self) -> None:
        """SIGTERM the process group without waiting (``stop`` waits): several stop at once."""
        if self.popen.poll() is None:
            self._signal(signal.SIGTERM)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace_s``; children left are killed."""
        if self.popen.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.popen.wait()
        self._signal(signal.SIGKILL)  # scheduler/detokenizer children left behind

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def free_port(host: str) -> int:
    """A TCP port free on ``host`` right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host.strip("[]"), 0))
        return int(s.getsockname()[1])


def local_address(url: str) -> str:
    """The local address of a connection to ``url``'s host: how that server reaches us."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return str(s.getsockname()[0])
