"""Run the gateway's app on a real socket with uvicorn: in this thread, or in a background one."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from rlvr.agents.errors import MissingDependencyError
from rlvr.agents.gateway.app import create_app
from rlvr.agents.gateway.service import Gateway


class GatewayServer:
    """A uvicorn server for ``gateway`` on ``host:port`` (port 0: a free one).

    Args:
        gateway: what to serve.
        host: the address to bind (127.0.0.1 by default: local clients only).
        port: the TCP port; 0 picks a free one (``url`` says which).
    """

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0) -> None:
        try:
            import uvicorn
        except ImportError as exc:  # pragma: no cover - the gateway extra is missing
            raise MissingDependencyError(
                "the gateway needs fastapi and uvicorn: pip install 'rlvr[gateway]'") from exc
        self.gateway = gateway
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        # Listen now: a client that connects once ``url`` is known (``rlvr serve`` prints it
        # before uvicorn's loop starts) waits in the queue instead of being refused.
        self._sock.listen(socket.SOMAXCONN)
        self.host, self.port = host, self._sock.getsockname()[1]
        config = uvicorn.Config(create_app(gateway), log_level="warning", access_log=False,
                                lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The OpenAI base URL: ``http://host:port/v1``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C)."""
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def start(self, timeout_s: float = 30.0) -> GatewayServer:
        """Serve in a daemon thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self.serve_forever, name="rlvr-gateway",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the gateway did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._sock.close()

    def __enter__(self) -> GatewayServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
