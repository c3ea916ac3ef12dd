"""sglang-router support without servers: options, the router's argv and logs, finding the
servers behind a router, refusing a router as a server (test_sglang_router.py runs the real ones).

The loopback router below answers ``/workers`` and ``/get_server_info`` with the shapes
sglang-router 0.3.2 gave in front of two real servers, and 404 elsewhere (as it does for
``/server_info`` and every weight route).
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlvr.agents.errors import EngineConfigError, MissingDependencyError, SGLangError
from rlvr.agents.sglang import SGLangEngine, SGLangOptions
from rlvr.agents.sglang.client import ServerClient
from rlvr.agents.sglang.fleet import launch_logs as _launch_logs
from rlvr.agents.sglang.fleet import server_args as _server_args
from rlvr.agents.sglang.router import (
    ROUTER_VERSION,
    is_router_info,
    router_command,
    router_refusal,
    router_workers,
)

WORKERS = ["http://127.0.0.1:31002", "http://127.0.0.1:31001"]


class _Router(BaseHTTPRequestHandler):
    workers: list[dict] = [{"id": str(i), "url": u, "is_healthy": True, "load": 0}
                           for i, u in enumerate(WORKERS)]

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/workers":
            body = {"workers": self.workers, "total": len(self.workers)}
        elif self.path == "/get_server_info":
            body = {"router_manager": True, "routers_count": 1,
                    "workers_count": len(self.workers)}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def router_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Router)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_router_workers_reads_the_servers_and_none_for_a_server(router_url):
    assert router_workers(ServerClient(router_url)) == WORKERS
    assert is_router_info(ServerClient(router_url).get("/get_server_info"))
    assert not is_router_info({"version": "0.5.23", "tp_size": 1})


def test_a_router_with_no_workers_is_an_error(router_url, monkeypatch):
    monkeypatch.setattr(_Router, "workers", [])
    with pytest.raises(SGLangError, match="sglang-router with no workers"):
        router_workers(ServerClient(router_url))


def test_a_router_attached_as_its_own_server_is_refused(router_url):
    engine = SGLangEngine(router_url)
    try:
        with pytest.raises(SGLangError, match="is an sglang-router, not a server.*server_urls"):
            _ = engine.infos
    finally:
        engine.close()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"servers": 0}, "^servers must be >= 1; got 0$"),
    ({"servers": True}, "^servers must be an integer; got True$"),
    ({"servers": 2, "url": "http://r:1"}, "leave url null to launch"),
])
def test_servers_option_is_checked(kwargs, match):
    with pytest.raises(EngineConfigError, match=match) as err:
        SGLangOptions(**kwargs)
    assert err.value.key == "servers"


def test_router_argv_and_launch_logs(tmp_path):
    cmd = router_command("py", host="127.0.0.1", port=9, worker_urls=WORKERS, api_key="k",
                         extra_args=["--policy", "round_robin"])
    assert cmd == ["py", "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port",
                   "9", "--worker-urls", *WORKERS, "--api-key", "k", "--policy", "round_robin"]
    log = tmp_path / "server.log"
    assert _launch_logs(log, 1) == [log]
    assert [p.name for p in _launch_logs(log, 2)] == ["server-0.log", "server-1.log",
                                                      "server-router.log"]


def test_several_servers_need_the_router_in_the_servers_venv(tmp_path):
    why = router_refusal(sys.executable)  # the project's venv has no sglang-router
    assert why is not None and f"sglang-router=={ROUTER_VERSION}" in why
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(MissingDependencyError, match="2 servers need sglang-router"):
        SGLangEngine.launch(tmp_path, python=str(fake), servers=2)


def test_launched_gpu_servers_get_gpus_of_their_own():
    """Several CUDA servers from one launch: server i starts at GPU i * tp_size (sglang's
    --base-gpu-id; without it every server loads onto GPU 0); one server, CPU servers or a
    --base-gpu-id of the caller's are left alone."""
    assert [_server_args(["--x"], i, 2, "cuda", 2) for i in range(2)] == [
        ["--x", "--base-gpu-id", "0"], ["--x", "--base-gpu-id", "2"]]
    assert _server_args([], 0, 1, "cuda", 1) == []
    assert _server_args([], 1, 2, "cpu", 1) == []
    assert _server_args(["--base-gpu-id", "4"], 1, 2, "cuda", 1) == ["--base-gpu-id", "4"]


def test_two_launched_routers_share_a_host():
    """sglang-router's Prometheus exporter takes port 29000 by default, and a second router on the
    host panicked at start ("Address already in use"; seen when a run launched its servers while
    another router ran): each launched router gets a free port of its own."""
    import os
    import time
    from pathlib import Path

    from rlvr.agents.sglang.router import start_router
    from rlvr.agents.sglang.server_process import free_port

    python = os.environ.get("RLVR_SGLANG_PYTHON")
    if not python or not Path(python).exists():
        if os.environ.get("RLVR_REQUIRE_SGLANG") == "1":
            pytest.fail(f"real sglang venv absent (RLVR_SGLANG_PYTHON={python!r})")
        pytest.skip("needs the sglang venv (sglang-router): bash dev.sh setup-sglang")
    routers = []
    try:
        for _ in range(2):
            port = free_port("127.0.0.1")
            routers.append((start_router(python, host="127.0.0.1", port=port, worker_urls=[
                f"http://127.0.0.1:{free_port('127.0.0.1')}"]), ServerClient(
                    f"http://127.0.0.1:{port}")))
        for proc, client in routers:
            deadline = time.monotonic() + 120
            while True:
                assert proc.exit_code() is None, proc.tail()
                try:
                    assert client.get("/workers", timeout_s=2)["workers"] == []
                    break
                except SGLangError:
                    assert time.monotonic() < deadline, proc.tail()
                    time.sleep(0.3)
    finally:
        for proc, _ in routers:
            proc.stop()
