"""HTTP calls to every SGLang server of a fleet: attach checks, weight loads, cache flushes.

``ServerCalls`` holds one client per URL and a pool of control threads of its own: while
generation is paused in place, every ``/generate`` thread may be waiting on a server, and an
update sent through that pool would wait behind them forever. Calls that concern the servers'
state (weights, memory, versions, caches) go to each server in ``server_urls``, never to a
router.

Attach (``attach``): each server's ``/server_info`` is read and checked (version >= 0.5.5,
``dp_size == 1``: ``rlvr.agents.sglang.server_info``), its ``/v1/models`` gives the real context
limit, and a probe proves its logprobs are tempered (``log_softmax(logits / T)``).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Sequence
from typing import Any

import torch

from rlvr.agents.errors import SGLangError
from rlvr.agents.sglang.client import ServerClient, SGLangHTTPError, check_success
from rlvr.agents.sglang.router import is_router_info
from rlvr.agents.sglang.server_info import (
    ServerInfo,
    check_server,
    context_length_from,
    resolved_dtype,
)

_DTYPES = {"float32": torch.float32, "float": torch.float32, "bfloat16": torch.bfloat16,
           "float16": torch.float16, "half": torch.float16}

FLUSH_WAIT_S = 600.0
"""How long a prefix-cache flush waits for a moment when no request runs on a server."""


class ServerCalls:
    """Clients for ``urls`` and ``server_urls``, and calls that go to every server.

    Args:
        urls: where ``/generate`` goes (a router among them gets a client, never a state call).
        server_urls: the servers themselves.
        api_key: the servers' ``--api-key``.
        timeout_s: HTTP timeout of one request.
    """

    def __init__(self, urls: Sequence[str], server_urls: Sequence[str], *,
                 api_key: str | None, timeout_s: float) -> None:
        self.server_urls = list(server_urls)
        every = dict.fromkeys(list(urls) + self.server_urls)
        self.clients = {u: ServerClient(u, api_key=api_key, timeout_s=timeout_s) for u in every}
        self.control = concurrent.futures.ThreadPoolExecutor(
            max(4, 2 * len(self.server_urls)), "sglang-control")

    def post_all(self, path: str, payload: dict[str, Any]) -> None:
        """POST ``payload`` to every server at once; raise when one answered ``success: false``."""
        futures = [self.control.submit(self.clients[u].post, path, payload)
                   for u in self.server_urls]
        for fut in futures:
            check_success(path, fut.result())

    def load_from_disk(self, path: str, weight_version: str | None, flush: bool = True) -> None:
        """Every server reloads its weights from the HF directory ``path``."""
        payload: dict[str, Any] = {"model_path": path, "flush_cache": flush}
        if weight_version is not None:
            payload["weight_version"] = weight_version
        self.post_all("/update_weights_from_disk", payload)

    def flush_cache(self, wait_s: float = FLUSH_WAIT_S) -> None:
        """Drop the servers' prefix caches, retried while sglang answers 400 (requests run)."""
        for url in self.server_urls:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    self.clients[url].post("/flush_cache", {})
                    break
                except SGLangHTTPError as exc:
                    if exc.status != 400 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def attach(self) -> dict[str, ServerInfo]:
        """Each server's checked ``ServerInfo`` (see the module docstring).

        Raises:
            SGLangError: a URL is a router, not a server; or a server is unusable.
        """
        return {u: self._attach(u) for u in self.server_urls}

    def _attach(self, url: str) -> ServerInfo:
        client = self.clients[url]
        raw = first_answer(client, ("/server_info", "/get_server_info"))
        if is_router_info(raw):
            raise SGLangError(
                f"{url} is an sglang-router, not a server: it forwards /generate but none of "
                "the weight, version or pause calls, which go to each server: give the servers "
                "as server_urls (rollout.sglang.server_urls), or leave them out and build the "
                "engine with rlvr.agents.engine_registry.build_engine, which reads them from the "
                "router")
        if raw is None:
            raise SGLangError(f"{url} answers neither /server_info nor /get_server_info: is it "
                              "an sglang server (not a router)?")
        models = first_answer(client, ("/v1/models",)) or {}  # max_model_len: the real limit
        info = ServerInfo.from_json(raw, context_length_from(models))
        check_server(url, info)
        if not self._logprobs_tempered(url):
            raise SGLangError(
                f"{url} reports un-tempered logprobs (SGLANG_RETURN_ORIGINAL_LOGPROB=1 in the "
                "server's environment?): rlvr's convention is log_softmax(logits / T). Restart "
                "the server without that variable (SGLangEngine.launch removes it)"
            )
        return info

    def _logprobs_tempered(self, url: str) -> bool:
        """Probe: the top-1 logprob of one prompt under T=0.5 must exceed the one under T=1.

        With tempered logprobs (``log_softmax(logits / T)``), a lower temperature sharpens the
        distribution; ``SGLANG_RETURN_ORIGINAL_LOGPROB`` reports the same number for both.
        """
        tops = []
        for t in (1.0, 0.5):
            body = self.clients[url].post("/generate", {
                "input_ids": [1, 2, 3, 4], "return_logprob": True, "logprob_start_len": -1,
                "top_logprobs_num": 1, "stream": False,
                "sampling_params": {"max_new_tokens": 1, "temperature": t, "top_p": 1.0,
                                    "top_k": -1},
            })
            tops.append(float(body["meta_info"]["output_top_logprobs"][0][0][0]))
        return tops[1] > tops[0] + 1e-6 or tops[0] > -1e-6

    def close(self) -> None:
        """Stop the control threads (queued calls are cancelled)."""
        self.control.shutdown(wait=False, cancel_futures=True)


def server_dtype(infos: dict[str, ServerInfo]) -> torch.dtype:
    """The dtype the servers compute in (``--dtype auto`` resolved as sglang does).

    Raises:
        SGLangError: a dtype rlvr cannot send, or ``auto`` on a model it cannot read.
    """
    name = resolved_dtype(next(iter(infos.values())))
    if name not in _DTYPES:
        raise SGLangError(f"the server computes in {name!r}; rlvr sends weights in "
                          f"{', '.join(sorted(_DTYPES))} only")
    return _DTYPES[name]


def first_answer(client: ServerClient, paths: Sequence[str]) -> dict[str, Any] | None:
    """The first of ``paths`` the server answers (None: each is an HTTP error but 401/403).

    Raises:
        SGLangError: the server wants an API key this client does not send.
    """
    for path in paths:
        try:
            return client.get(path)
        except SGLangHTTPError as exc:
            if exc.status in (401, 403):
                raise SGLangError(f"{client.url}{path}: HTTP {exc.status}; pass the server's "
                                  "--api-key (api_key=..., rollout.sglang.api_key)") from None
    return None
