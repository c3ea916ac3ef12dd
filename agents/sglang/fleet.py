"""The SGLang servers an engine talks to, and launching them: one, or several behind a router.

A ``ServerFleet`` is where ``/generate`` goes (``urls``: one server, one sglang-router, or several
servers used round-robin), the servers themselves (``server_urls``: weight, memory and cache
calls go to each, never to a router), and the processes it started (none when it was attached
by URL), which ``close`` stops.

``launch_fleet(model_path, LaunchSpec(...))`` starts the server processes at once
(``rlvr.agents.sglang.server_process``), waits for every ``/health``, and with several servers
starts an ``sglang-router`` in front of them and waits until it lists every server
(``rlvr.agents.sglang.router``). Whatever fails on the way stops what was started. The engine
that talks to the fleet is built apart (``rlvr.agents.sglang.engine_builder``, or
``SGLangEngine.launch``).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from os import PathLike
from pathlib import Path
from typing import Any

from rlvr.agents.errors import MissingDependencyError, RequestError, SGLangError
from rlvr.agents.sglang.client import ServerClient
from rlvr.agents.sglang.router import router_refusal, start_router, wait_router_ready
from rlvr.agents.sglang.server_process import (
    ServerProcess,
    default_device,
    free_port,
    launch_command,
    launch_env,
    server_python,
)
from rlvr.agents.sglang.weights import bracket_host


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    """How to start ``python -m sglang.launch_server`` (and, for several, the router).

    Attributes:
        python: the server's interpreter (default ``$RLVR_SGLANG_PYTHON``, else this one).
        device: "cuda" or "cpu" (default: cuda when this machine has one); chooses the
            defaults in ``rlvr.agents.sglang.server_process`` (memory saver on CUDA only).
        host: where the servers listen.
        port: the port of the server, or of the router in front of several (default: a free
            one).
        tp_size: tensor-parallel size.
        mem_fraction_static: sglang's ``--mem-fraction-static``.
        deterministic: add ``--enable-deterministic-inference`` (seeded sampling works).
        api_key: the servers' ``--api-key``.
        extra_args: more ``launch_server`` flags (last, so they override the defaults).
        startup_timeout_s: how long ``/health`` may take to answer 200.
        log_path: the server's log (default: a temporary file); with several servers, server
            ``i`` logs to ``<stem>-<i><suffix>`` and the router to ``<stem>-router<suffix>``
            beside it.
        servers: how many servers (more than one: behind a router, ``pip install
            sglang-router`` in the same interpreter); on GPUs server ``i`` gets
            ``--base-gpu-id i * tp_size`` (unless ``extra_args`` sets it).
        router_args: more ``launch_router`` flags (e.g. ``--policy round_robin``).
    """

    python: str | PathLike[str] | None = None
    device: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    tp_size: int = 1
    mem_fraction_static: float | None = None
    deterministic: bool = False
    api_key: str | None = None
    extra_args: Sequence[str] = ()
    startup_timeout_s: float = 900.0
    log_path: str | PathLike[str] | None = None
    servers: int = 1
    router_args: Sequence[str] = ()

    @classmethod
    def split(cls, kwargs: Mapping[str, Any]) -> tuple[LaunchSpec, dict[str, Any]]:
        """The spec from the entries of ``kwargs`` named like its fields, and the others."""
        names = {f.name for f in fields(cls)}
        return (cls(**{k: v for k, v in kwargs.items() if k in names}),
                {k: v for k, v in kwargs.items() if k not in names})


class ServerFleet:
    """SGLang servers (and their router, if any) as an engine reaches them.

    Args:
        urls: where ``/generate`` goes: one server, one sglang-router, or several servers.
        server_urls: the servers themselves (default ``urls``).
        processes: the processes this fleet started, servers first, router last (none when
            attached); ``close`` stops them.
        python: the servers' interpreter when known (probed for its NCCL version).
        api_key: the servers' ``--api-key`` (for the health checks).

    Raises:
        RequestError: no URL in ``urls``.
    """

    def __init__(self, urls: str | Sequence[str], server_urls: Sequence[str] | None = None, *,
                 processes: Sequence[ServerProcess] = (), python: str | None = None,
                 api_key: str | None = None) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise RequestError("SGLangEngine needs at least one URL in urls")
        self.server_urls = list(server_urls) if server_urls else list(self.urls)
        self.processes = list(processes)
        """The processes this fleet launched and stops on ``close`` (servers, router)."""
        self.python = python
        self.api_key = api_key

    @property
    def process(self) -> ServerProcess | None:
        """The (first) server process launched; None when the fleet was attached."""
        return self.processes[0] if self.processes else None

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Block until every server answers ``GET /health`` with 200.

        Raises:
            SGLangError: a launched process exited, or ``timeout_s`` passed.
        """
        deadline = time.monotonic() + timeout_s
        for url in self.server_urls:
            client = ServerClient(url, api_key=self.api_key)
            while True:
                for proc in self.processes:
                    code = proc.exit_code()
                    if code is not None:
                        raise SGLangError(f"sglang server exited with {code}" + proc.tail())
                try:
                    client.get("/health", timeout_s=10)
                    break
                except SGLangError:
                    pass
                if time.monotonic() > deadline:
                    raise SGLangError(f"{url}/health not ready after {timeout_s}s"
                                      + self.log_tail())
                time.sleep(1.0)

    def log_tail(self) -> str:
        """The tails of the launched processes' logs, as a message suffix."""
        return "".join(proc.tail(1500) for proc in self.processes)

    def close(self) -> None:
        """Stop the launched processes: the router first, then the servers, at once."""
        for proc in reversed(self.processes):
            proc.terminate()
        for proc in reversed(self.processes):
            proc.stop()


def launch_fleet(model_path: str | PathLike[str], spec: LaunchSpec) -> ServerFleet:
    """Start ``spec.servers`` servers on ``model_path`` (behind a router when several).

    Returns:
        The fleet, every server healthy (and the router listing them all).

    Raises:
        MissingDependencyError: sglang (or, for several servers, sglang-router) is not
            installed for the interpreter.
        RequestError: ``servers`` is not an int >= 1.
        SGLangError: a server exited or was not healthy within ``startup_timeout_s`` (the
            message ends with the server log's tail).
    """
    exe = _checked_python(spec)
    device = spec.device or default_device()
    port = spec.port or free_port(spec.host)
    extra = list(spec.extra_args)
    if spec.mem_fraction_static is not None:
        extra += ["--mem-fraction-static", str(spec.mem_fraction_static)]
    base = f"http://{bracket_host(spec.host)}"
    ports = [port] if spec.servers == 1 else [free_port(spec.host) for _ in range(spec.servers)]
    logs = launch_logs(spec.log_path, spec.servers)
    procs: list[ServerProcess] = []
    try:
        for i, (server_port, log) in enumerate(zip(ports, logs)):
            argv = launch_command(
                model_path, python=exe, host=spec.host, port=server_port, device=device,
                tp_size=spec.tp_size, api_key=spec.api_key, deterministic=spec.deterministic,
                extra_args=server_args(extra, i, spec.servers, device, spec.tp_size))
            procs.append(ServerProcess.start(argv, env=launch_env(device), log_path=log))
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    server_urls = [f"{base}:{p}" for p in ports]
    router_url = f"{base}:{port}"
    fleet = ServerFleet(server_urls[0] if spec.servers == 1 else router_url,
                        None if spec.servers == 1 else server_urls, processes=procs,
                        python=exe, api_key=spec.api_key)
    try:
        fleet.wait_healthy(spec.startup_timeout_s)
        if spec.servers > 1:
            router = start_router(exe, host=spec.host, port=port, worker_urls=server_urls,
                                  api_key=spec.api_key, extra_args=spec.router_args,
                                  log_path=logs[-1])
            fleet.processes.append(router)
            wait_router_ready(ServerClient(router_url, api_key=spec.api_key), server_urls,
                              spec.startup_timeout_s, router)
    except BaseException:
        fleet.close()
        raise
    return fleet


def _checked_python(spec: LaunchSpec) -> str:
    """The servers' interpreter, once it is known to exist and to have what the launch needs."""
    exe = server_python(spec.python)
    if exe == sys.executable and importlib.util.find_spec("sglang") is None:
        raise MissingDependencyError(
            "SGLangEngine.launch needs sglang: pip install 'rlvr[sglang]', or point "
            "$RLVR_SGLANG_PYTHON at a venv that has it (bash dev.sh setup-sglang builds a "
            "CPU one); or attach to running servers with SGLangEngine(urls)"
        )
    if not Path(exe).exists():
        raise MissingDependencyError(f"the sglang server's python {exe!r} does not exist")
    servers = spec.servers
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise RequestError(f"servers must be an int >= 1; got {servers!r}")
    if servers > 1:
        why = router_refusal(exe)
        if why is not None:
            raise MissingDependencyError(f"{servers} servers need sglang-router: {why}")
    return exe


def launch_logs(log_path: str | PathLike[str] | None, servers: int) -> Sequence[Path | None]:
    """Each launched server's log path (None: a temporary file) and the router's, last."""
    if servers == 1:
        return [Path(log_path) if log_path else None]
    if not log_path:
        root = Path(tempfile.mkdtemp(prefix="sglang-"))
        return [root / f"server-{i}.log" for i in range(servers)] + [root / "router.log"]
    path = Path(log_path)
    return ([path.with_name(f"{path.stem}-{i}{path.suffix}") for i in range(servers)]
            + [path.with_name(f"{path.stem}-router{path.suffix}")])


def server_args(extra: Sequence[str], index: int, servers: int, device: str,
                tp_size: int) -> list[str]:
    """Server ``index``'s extra flags.

    On GPUs, several servers get GPUs of their own (``--base-gpu-id index * tp_size``; all
    would load onto GPU 0 otherwise).
    """
    out = list(extra)
    if servers > 1 and device != "cpu" and "--base-gpu-id" not in out:
        out += ["--base-gpu-id", str(index * tp_size)]
    return out
