"""sglang-router in front of several SGLang servers: finding its workers, launching it.

What the router (``sglang-router`` 0.3.2, ``python -m sglang_router.launch_router``) does with
each route rlvr uses, probed against the released wheel (docs/engines.md, "Several servers"):

* Forwarded to ONE worker chosen by its policy (default ``cache_aware``): ``/generate`` (the
  answer's ``meta_info``, ``weight_versions`` included, passes through unchanged) and the OpenAI
  routes ``/v1/...``. ``/get_model_info`` and ``/v1/models`` answer with one worker's.
* Broadcast to every worker: ``/flush_cache``.
* The router's own: ``GET /health``, ``GET /workers`` (its workers, each with ``url`` and
  ``is_healthy``), ``GET /get_loads``, and ``GET /get_server_info``, which is a summary of the
  router (``{"router_manager": true, "workers_count": ...}``), not a server's info.
* Not routed (HTTP 404): ``/server_info``, every weight route (``/update_weights_from_disk``,
  ``/init_weights_update_group``, ``/update_weights_from_distributed``, ``/begin_weight_update``,
  ``/end_weight_update``, ``/destroy_weights_update_group``), ``/update_weight_version``,
  ``/pause_generation``, ``/continue_generation``, ``/abort_request`` and the memory routes.

So ``SGLangEngine`` sends ``/generate`` to the router and everything else to each server itself
(``server_urls``), which ``router_workers`` reads from the router when not given.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from rlvr.agents.errors import SGLangError
from rlvr.agents.sglang.client import ServerClient, SGLangHTTPError
from rlvr.agents.sglang.server_process import ServerProcess, free_port

ROUTER_MODULE = "sglang_router.launch_router"
ROUTER_VERSION = "0.3.2"
"""The sglang-router release rlvr was tested with (tools/sglang_cpu/requirements.txt)."""


def is_router_info(raw: Any) -> bool:
    """Whether a ``/get_server_info`` answer is a router's summary rather than a server's info."""
    return isinstance(raw, dict) and raw.get("router_manager") is True


def router_workers(client: ServerClient) -> list[str] | None:
    """The worker URLs behind the router at ``client.url``, in the router's order.

    Returns:
        None when ``client.url`` is not a router (``GET /workers`` is a 404 on a server, a 401
        on one with ``--api-key`` asked with another key: attaching then says what is wrong).

    Raises:
        SGLangError: the URL cannot be reached, or it is a router without workers.
    """
    try:
        body = client.get("/workers")
    except SGLangHTTPError as exc:
        if exc.status in (401, 403, 404, 405):  # a server (with --api-key: 401 before 404)
            return None
        raise
    workers = body.get("workers")
    if not isinstance(workers, list):
        return None
    urls = [str(w["url"]).rstrip("/") for w in workers if isinstance(w, dict) and w.get("url")]
    if not urls:
        raise SGLangError(f"{client.url} is an sglang-router with no workers: start the servers "
                          "and register them (--worker-urls, or POST /workers)")
    return urls


def router_command(python: str, *, host: str, port: int, worker_urls: Sequence[str],
                   policy: str | None = None, api_key: str | None = None,
                   metrics_port: int | None = None,
                   extra_args: Sequence[str] = ()) -> list[str]:
    """The ``launch_router`` argv (``extra_args`` last, so they can override).

    ``metrics_port``: its Prometheus exporter's port (``--prometheus-port``). The router's
    default, 29000, is one port per host: a second router there panics at start ("Address
    already in use"), so a launch gives each router a free one unless ``extra_args`` sets it.
    """
    cmd = [python, "-m", ROUTER_MODULE, "--host", host, "--port", str(port),
           "--worker-urls", *worker_urls]
    if metrics_port is not None and "--prometheus-port" not in extra_args:
        cmd += ["--prometheus-port", str(metrics_port)]
    if policy:
        cmd += ["--policy", policy]
    if api_key:
        cmd += ["--api-key", api_key]
    return cmd + list(extra_args)


def start_router(python: str, *, host: str, port: int, worker_urls: Sequence[str],
                 policy: str | None = None, api_key: str | None = None,
                 extra_args: Sequence[str] = (),
                 log_path: str | PathLike[str] | None = None) -> ServerProcess:
    """Start the router in its own session (not ready yet: see ``wait_router_ready``)."""
    cmd = router_command(python, host=host, port=port, worker_urls=worker_urls, policy=policy,
                         api_key=api_key, metrics_port=free_port(host), extra_args=extra_args)
    return ServerProcess.start(cmd, log_path=log_path or Path(
        tempfile.mkdtemp(prefix="sglang-router-")) / "router.log")


def wait_router_ready(client: ServerClient, worker_urls: Sequence[str], timeout_s: float,
                      process: ServerProcess | None = None) -> None:
    """Block until the router lists every one of ``worker_urls`` as healthy.

    The router answers ``/health`` before it has registered its workers, and a ``/generate``
    then is an HTTP 503; its workers' health is what says it can route.

    Args:
        client: the router's client.
        worker_urls: the servers it must list as healthy.
        timeout_s: how long to wait.
        process: the launched router (its exit ends the wait, with its log's tail).

    Raises:
        SGLangError: the process exited, or ``timeout_s`` passed.
    """
    want = {u.rstrip("/") for u in worker_urls}
    deadline = time.monotonic() + timeout_s
    seen: Any = None
    while True:
        if process is not None and (code := process.exit_code()) is not None:
            raise SGLangError(f"sglang-router exited with {code}" + process.tail(1500))
        try:
            seen = client.get("/workers", timeout_s=10).get("workers")
            healthy = {str(w.get("url", "")).rstrip("/") for w in seen or []
                       if isinstance(w, dict) and w.get("is_healthy")}
            if want <= healthy:
                return
        except SGLangError:
            pass
        if time.monotonic() > deadline:
            raise SGLangError(f"{client.url}: sglang-router did not list {sorted(want)} as "
                              f"healthy workers within {timeout_s}s (last /workers: {seen})")
        time.sleep(0.5)


def router_refusal(python: str) -> str | None:
    """Why ``python`` cannot run the router (None: it can), from an import probe."""
    probe = subprocess.run([python, "-c", "import sglang_router.launch_router"],
                           capture_output=True, text=True, check=False)
    if probe.returncode == 0:
        return None
    return (f"{python} cannot import sglang_router ({probe.stderr.strip()[-300:]}): install "
            f"it there (pip install sglang-router=={ROUTER_VERSION})")


__all__ = ["ROUTER_MODULE", "ROUTER_VERSION", "is_router_info", "router_command",
           "router_refusal", "router_workers", "start_router", "wait_router_ready"]
