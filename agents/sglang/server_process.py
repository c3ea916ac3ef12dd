"""One SGLang server process: its command line and environment by device, starting and stopping it.

Defaults that work on the server's device (``docs/engines.md``, "SGLang on CPU", for the CPU facts):

* CUDA: ``--enable-memory-saver`` (release/resume GPU memory around training) and
  ``--enable-fp32-lm-head`` (logits in float32, as the learner computes them: bf16 logits alone
  move token logprobs by a few hundredths). No ``--enable-weights-cpu-backup``: the trainer
  re-pushes the weights after every release, so a host copy of them would only cost memory and
  time.
* CPU: ``SGLANG_USE_CPU_ENGINE=1``, ``--device cpu --attention-backend torch_native
  --dtype float32`` (sglang's default runs a float32 checkpoint in float16: logprobs then differ
  by ~1e-2), ``--sleep-on-idle`` (an idle scheduler spins a core otherwise),
  ``--max-total-tokens 65536`` (the KV pool takes 4.2 GB otherwise),
  ``--disable-overlap-schedule`` (``/flush_cache`` right after a request returns 400 otherwise)
  and ``--mem-fraction-static 0.2``. No memory saver (it needs ``libcuda``).
* Seeded sampling needs ``--enable-deterministic-inference`` (``deterministic=True``); sglang
  refuses it with ``torch_native`` attention, so not on CPU.
* ``SGLANG_RETURN_ORIGINAL_LOGPROB`` is removed from the server's environment: it would make the
  reported logprobs un-tempered, against ``rlvr.agents.engine``'s convention.

``ServerProcess`` runs a command (``python -m sglang.launch_server``, or the router's) in its own
session, so stopping it also stops its scheduler and detokenizer children; the engine itself
only speaks HTTP. The fleet of servers (and router) a launch starts: ``rlvr.agents.sglang.fleet``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from urllib.parse import urlsplit

CPU_FLAGS = ("--device", "cpu", "--attention-backend", "torch_native", "--dtype", "float32",
             "--sleep-on-idle", "--max-total-tokens", "65536", "--disable-overlap-schedule",
             "--mem-fraction-static", "0.2")
CUDA_FLAGS = ("--enable-memory-saver", "--enable-fp32-lm-head")
SCRUBBED_ENV = ("SGLANG_RETURN_ORIGINAL_LOGPROB",)
PYTHON_ENV = "RLVR_SGLANG_PYTHON"


def default_device() -> str:
    """``cuda`` when this machine has an NVIDIA driver or CUDA torch, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() or shutil.which("nvidia-smi") else "cpu"


def server_python(python: str | PathLike[str] | None = None) -> str:
    """The interpreter for the server: ``python``, else ``$RLVR_SGLANG_PYTHON``, else this one."""
    return str(python or os.environ.get(PYTHON_ENV) or sys.executable)


def launch_command(
    model_path: str | PathLike[str],
    *,
    python: str,
    host: str,
    port: int,
    device: str,
    tp_size: int = 1,
    api_key: str | None = None,
    deterministic: bool = False,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The ``launch_server`` argv for ``device`` (``extra_args`` last, so they can override)."""
    cmd = [python, "-m", "sglang.launch_server", "--model-path", str(model_path),
           "--host", host, "--port", str(port), "--tp-size", str(tp_size)]
    cmd += list(CPU_FLAGS if device == "cpu" else CUDA_FLAGS)
    if deterministic:
        cmd.append("--enable-deterministic-inference")
    if api_key:
        cmd += ["--api-key", api_key]
    return cmd + list(extra_args)


def launch_env(device: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default ours) minus the logprob-flipping variable.

    On CPU it adds ``SGLANG_USE_CPU_ENGINE=1``.
    """
    env = dict(os.environ if base is None else base)
    for name in SCRUBBED_ENV:
        env.pop(name, None)
    if device == "cpu":
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    return env


class ServerProcess:
    """One launched process (a server, or the router) and its log file.

    Args:
        popen: the process (started with ``start_new_session=True``).
        log: the file its stdout and stderr go to.
    """

    def __init__(self, popen: subprocess.Popen[bytes], log: Path | None = None) -> None:
        self.popen = popen
        self.log = log

    @classmethod
    def start(cls, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              log_path: str | PathLike[str] | None = None) -> ServerProcess:
        """Run ``argv`` in its own session, its output to ``log_path`` (not ready yet).

        Args:
            argv: the command (``launch_command``, or the router's ``router_command``).
            env: its environment (None: ours).
            log_path: its log (default: ``server.log`` in a fresh temporary directory).
        """
        log = Path(log_path or Path(tempfile.mkdtemp(prefix="sglang-")) / "server.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as sink:
            popen = subprocess.Popen(list(argv), stdout=sink, stderr=subprocess.STDOUT,
                                     env=None if env is None else dict(env),
                                     start_new_session=True)
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
