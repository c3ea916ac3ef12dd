"""Calls to vLLM servers' dev-mode routes (``VLLM_SERVER_DEV_MODE=1``), one server each.

``collective_rpc`` runs a method of rlvr's worker extension on every worker of one server and
returns each worker's result; the other routes reset the prefix cache, pause, sleep and load
LoRA adapters. A 404 means the server runs without dev mode: rlvr refuses what needs it and says
how to start the server (``DEV_MODE_HINT``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any

from rlvr.agents.errors import SGLangError, VLLMError
from rlvr.agents.sglang.client import ServerClient, SGLangHTTPError

DEV_MODE_HINT = ("start the server with VLLM_SERVER_DEV_MODE=1 and rlvr's worker extension "
                 "(docs/engines.md, \"vLLM\", gives the command)")


def sleep_path(level: int = 1) -> str:
    """``POST`` this to put a server started with ``--enable-sleep-mode`` to sleep.

    vLLM 0.32's ``/sleep`` takes ``level`` (1: weights to host memory, KV cache dropped) and
    ``mode`` (what happens to running requests; default ``abort``) as query parameters.
    """
    return f"/sleep?level={int(level)}"


def wake_path(tags: Sequence[str] | None = None) -> str:
    """``POST`` this to wake a sleeping server: every tag (``tags`` None) or the ones named.

    vLLM 0.32's ``/wake_up`` reads repeated ``tags`` query parameters (``weights``,
    ``kv_cache``); none wakes everything.
    """
    return "/wake_up" + "".join(f"&tags={t}" for t in tags or ()).replace("&", "?", 1)


class ServerRPC:
    """The dev-mode calls to a set of servers (each call goes to every server, in parallel).

    Args:
        clients: one client per server.
    """

    def __init__(self, clients: Sequence[ServerClient]) -> None:
        self.clients = list(clients)
        self.pool = concurrent.futures.ThreadPoolExecutor(max(2, 2 * len(self.clients)),
                                                          "vllm-rpc")

    def post(self, client: ServerClient, path: str, payload: dict[str, Any] | None = None
             ) -> dict[str, Any]:
        """POST ``path`` to one server; a refusal or a 404 (no dev mode) is a ``VLLMError``."""
        try:
            return client.post(path, payload or {})
        except SGLangHTTPError as exc:
            if exc.status == 404:
                raise VLLMError(f"{client.url}{path} answered 404: {DEV_MODE_HINT}") from None
            raise VLLMError(f"{client.url}{path} -> HTTP {exc.status}: {exc.detail[:500]}"
                            ) from None
        except SGLangError as exc:
            raise VLLMError(str(exc)) from None

    def get(self, client: ServerClient, path: str) -> dict[str, Any]:
        """GET ``path`` from one server; errors as in ``post``."""
        try:
            return client.get(path)
        except SGLangHTTPError as exc:
            if exc.status == 404:
                raise VLLMError(f"{client.url}{path} answered 404: {DEV_MODE_HINT}") from None
            raise VLLMError(f"{client.url}{path} -> HTTP {exc.status}: {exc.detail[:500]}"
                            ) from None
        except SGLangError as exc:
            raise VLLMError(str(exc)) from None

    def each(self, call: Callable[[ServerClient], Any]) -> list[Any]:
        """``call`` on every server at once; the results in server order (the first error)."""
        futures = [self.pool.submit(call, c) for c in self.clients]
        return [f.result() for f in futures]

    def collective(self, client: ServerClient, method: str, *args: Any) -> list[Any]:
        """Run ``method`` of the worker extension on every worker of one server."""
        body = self.post(client, "/collective_rpc", {"method": method, "args": list(args)})
        results = body.get("results")
        if not isinstance(results, list):
            raise VLLMError(f"{client.url}/collective_rpc {method}: no results in {body}")
        return results

    def collective_all(self, method: str, *args: Any) -> list[list[Any]]:
        """``collective`` on every server at once."""
        return self.each(lambda c: self.collective(c, method, *args))

    def reset_prefix_cache(self) -> None:
        """Drop every server's prefix cache (its entries hold the old weights' KV).

        Raises:
            VLLMError: a server could not (vLLM answers ``{"success": false}`` while requests
                hold cache blocks).
        """
        for client, body in zip(self.clients, self.each(
                lambda c: self.post(c, "/reset_prefix_cache"))):
            if body.get("success") is False:
                raise VLLMError(f"{client.url}/reset_prefix_cache failed: requests still hold "
                                "cache blocks (an update while generating must pause first)")

    def close(self) -> None:
        """Stop the call pool."""
        self.pool.shutdown(wait=False, cancel_futures=True)
