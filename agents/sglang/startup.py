"""Launching sglang servers for an engine: one, or several behind an ``sglang-router``.

``SGLangEngine.launch`` (its docstring has the arguments) starts the server processes at once
(``rlvr.agents.sglang.process``; their command lines: ``rlvr.agents.sglang.launch``), attaches an
engine to
them, waits for every ``/health``, and with several servers starts the router in front of them
and waits until it lists every server (``rlvr.agents.sglang.router``). Whatever fails on the way
stops what was started.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.agents.errors import MissingDependencyError, RequestError
from rlvr.agents.sglang.launch import default_device, server_python
from rlvr.agents.sglang.process import ServerProcess, free_port
from rlvr.agents.sglang.router import router_refusal, start_router, wait_router_ready
from rlvr.agents.sglang.weights import bracket_host

if TYPE_CHECKING:
    from rlvr.agents.sglang.engine import SGLangEngine


def launch_engine(
    cls: type[SGLangEngine],
    model_path: str | PathLike[str],
    *,
    python: str | PathLike[str] | None,
    device: str | None,
    host: str,
    port: int | None,
    tp_size: int,
    mem_fraction_static: float | None,
    deterministic: bool,
    api_key: str | None,
    extra_args: Sequence[str],
    startup_timeout_s: float,
    log_path: str | PathLike[str] | None,
    servers: int,
    router_args: Sequence[str],
    **engine_kwargs: Any,
) -> SGLangEngine:
    """``SGLangEngine.launch``'s work (see its docstring); ``cls`` is the engine class."""
    exe = server_python(python)
    if exe == sys.executable and importlib.util.find_spec("sglang") is None:
        raise MissingDependencyError(
            "SGLangEngine.launch needs sglang: pip install 'rlvr[sglang]', or point "
            "$RLVR_SGLANG_PYTHON at a venv that has it (bash dev.sh setup-sglang builds a "
            "CPU one); or attach to running servers with SGLangEngine(urls)"
        )
    if not Path(exe).exists():
        raise MissingDependencyError(f"the sglang server's python {exe!r} does not exist")
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise RequestError(f"servers must be an int >= 1; got {servers!r}")
    if servers > 1:
        why = router_refusal(exe)
        if why is not None:
            raise MissingDependencyError(f"{servers} servers need sglang-router: {why}")
    device = device or default_device()
    port = port or free_port(host)
    extra = list(extra_args)
    if mem_fraction_static is not None:
        extra += ["--mem-fraction-static", str(mem_fraction_static)]
    base = f"http://{bracket_host(host)}"
    ports = [port] if servers == 1 else [free_port(host) for _ in range(servers)]
    logs = launch_logs(log_path, servers)
    procs: list[ServerProcess] = []
    try:
        for i, (server_port, log) in enumerate(zip(ports, logs)):
            procs.append(ServerProcess.start(
                model_path, python=exe, host=host, port=server_port, device=device,
                tp_size=tp_size, api_key=api_key, deterministic=deterministic,
                extra_args=server_args(extra, i, servers, device, tp_size), log_path=log))
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    server_urls = [f"{base}:{p}" for p in ports]
    engine_kwargs.setdefault("server_python", exe)
    router_url = f"{base}:{port}"
    engine = cls(server_urls[0] if servers == 1 else router_url,
                 server_urls=None if servers == 1 else server_urls, process=procs,
                 api_key=api_key, **engine_kwargs)
    try:
        engine.wait_healthy(startup_timeout_s)
        if servers > 1:
            router = start_router(exe, host=host, port=port, worker_urls=server_urls,
                                  api_key=api_key, extra_args=router_args,
                                  log_path=logs[-1])
            engine.processes.append(router)
            wait_router_ready(engine.clients[router_url], server_urls, startup_timeout_s,
                              router)
    except BaseException:
        engine.close()
        raise
    return engine


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
