"""SGLangEngine's distributed weight path: one process group with every server, broadcasts.

``DistributedWeights`` is this process's end of the weight-update group (rank 0) and its update
sessions, for ``rlvr.agents.sglang.weight_sync.BroadcastSync``:

* ``join``: every server gets ``/init_weights_update_group`` with its ``rank_offset`` (``1 +`` the
  ranks of the servers before it; a server has ``tp_size * pp_size`` ranks) while this process
  joins as rank 0; the servers block in that request until the group forms, so the POSTs run on
  the engine's HTTP pool meanwhile.
* ``update``: ``/begin_weight_update`` (sglang >= 0.5.23 refuses
  ``/update_weights_from_distributed`` outside a session; older servers 404 and need none), then
  one request plus one broadcast round per bucket, then ``/end_weight_update``.
* A server that refuses a bucket never joins its broadcast, so ours could never complete: the
  group is abandoned (destroyed on the servers, forgotten here with its pending work) and the
  next update forms a new one, under a new name.
* ``leave``: destroys the group on the servers and here (best effort).

How a group is made (``GroupFactory``) and how buckets are cut: ``rlvr.agents.sglang.weights``.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import uuid
from collections.abc import Iterable
from typing import Any

import torch

from rlvr.agents.errors import SGLangError
from rlvr.agents.sglang.client import ServerClient, SGLangHTTPError, check_success
from rlvr.agents.sglang.server_info import ServerInfo
from rlvr.agents.sglang.server_process import free_port, local_address
from rlvr.agents.sglang.weights import GroupFactory, WeightGroup, bracket_host, buckets, meta


class DistributedWeights:
    """This process's end of the weight-update group with SGLang servers.

    Args:
        clients: an HTTP client per server URL.
        server_urls: the servers, in rank order.
        pool: where the blocking POSTs run while this process broadcasts.
    """

    def __init__(self, clients: dict[str, ServerClient], server_urls: list[str],
                 pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self.clients = clients
        self.server_urls = server_urls
        self.pool = pool
        self.group: WeightGroup | None = None
        """The live group (None before ``join`` and after ``leave`` or a failed bucket)."""
        self.group_name = "weight_update_group"
        self.broadcast_device = "cpu"
        self.abandoned: list[WeightGroup | None] = []
        """Groups left after a failed bucket: pending work, never destroyed, only kept alive."""

    def join(self, infos: dict[str, ServerInfo], address: str | None = None,
             port: int | None = None, *, backend: str | None = None,
             group_name: str | None = None, factory: GroupFactory) -> None:
        """Form the group: rank 0 here at ``address:port``, the servers' ranks after it.

        Args:
            infos: each server's info (its ranks).
            address: this host as the servers reach it (default: the local end of a
                connection to the first server).
            port: a free port here (default: picked).
            backend: "nccl" for GPU servers, "gloo" for CPU ones (default: by server device).
            group_name: the group's name (default: a fresh ``rlvr_weights_<hex>``; a group
                abandoned after a failure keeps its name registered in torch, so a new one
                needs another).
            factory: makes this end of the group.

        Raises:
            SGLangError: a server refused to join.
        """
        address = address or local_address(self.server_urls[0])
        port = port or free_port(address)
        backend = backend or ("gloo" if all(i.device == "cpu" for i in infos.values())
                              else "nccl")
        group_name = group_name or f"rlvr_weights_{uuid.uuid4().hex[:12]}"
        world = 1 + sum(i.ranks for i in infos.values())
        offsets = list(itertools.accumulate([1] + [infos[u].ranks for u in self.server_urls]))
        posts = [
            self.pool.submit(self.clients[url].post, "/init_weights_update_group", {
                "master_address": bracket_host(address), "master_port": port,
                "rank_offset": offsets[i], "world_size": world, "group_name": group_name,
                "backend": backend,
            })
            for i, url in enumerate(self.server_urls)
        ]
        try:
            self.group = factory(backend=backend,
                                 init_method=f"tcp://{bracket_host(address)}:{port}",
                                 world_size=world, rank=0, group_name=group_name)
        finally:
            answers = [p.result() for p in posts]
        for answer in answers:
            check_success("/init_weights_update_group", answer)
        self.group_name = group_name
        self.broadcast_device = "cuda" if backend == "nccl" else "cpu"

    def update(self, weights: Iterable[tuple[str, torch.Tensor]], weight_version: str | None, *,
               dtype: torch.dtype, bucket_bytes: int) -> None:
        """One update session: every bucket of ``weights`` (cast to ``dtype``) broadcast.

        Raises:
            SGLangError: no group, or a server refused a bucket (the group is then abandoned).
        """
        session = self.session_call("/begin_weight_update", {})
        try:
            for bucket in buckets(weights, max_bytes=bucket_bytes, dtype=dtype,
                                  device=self.broadcast_device):
                self._send_bucket(bucket, weight_version)
        finally:
            if session:
                self.session_call("/end_weight_update", {})

    def session_call(self, path: str, payload: dict[str, Any]) -> bool:
        """POST a session route to every server; False where none has it (older sglang)."""
        opened = False
        for url in self.server_urls:
            try:
                check_success(path, self.clients[url].post(path, payload))
                opened = True
            except SGLangHTTPError as exc:
                if exc.status != 404:
                    raise
        return opened

    def leave(self) -> None:
        """Destroy the group on the servers and here (best effort)."""
        group, self.group = self.group, None
        self._destroy_on_servers()
        if group is not None:
            try:
                group.destroy()
            except Exception:  # noqa: BLE001 - a dead peer must not block closing
                pass

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]],
                     weight_version: str | None) -> None:
        group = self.group
        if group is None:
            raise SGLangError("no weight-update group (init_weight_update_group failed)")
        payload: dict[str, Any] = {**meta(bucket), "group_name": self.group_name,
                                   "flush_cache": False}
        if weight_version is not None:
            payload["weight_version"] = weight_version
        posts = [self.pool.submit(self.clients[u].post, "/update_weights_from_distributed",
                                  payload) for u in self.server_urls]
        works = [group.broadcast(tensor) for _, tensor in bucket]
        errors: list[str] = []
        for url, post in zip(self.server_urls, posts):
            try:
                answer = post.result()
                if answer.get("success") is False:
                    errors.append(f"{url}: {answer.get('message', answer)}")
            except SGLangError as exc:
                errors.append(str(exc))
        if errors:
            # A server that refused never joined the broadcast: ours can never complete. Leave
            # the group (the next update forms a new one) instead of waiting on it forever.
            self._abandon()
            raise SGLangError("/update_weights_from_distributed failed: " + "; ".join(errors))
        for work in works:
            if work is not None:
                work.wait()

    def _abandon(self) -> None:
        group, self.group = self.group, None
        self._destroy_on_servers()
        self.abandoned.append(group)  # pending work: never destroyed, only forgotten

    def _destroy_on_servers(self) -> None:
        for url in self.server_urls:
            try:
                self.clients[url].post("/destroy_weights_update_group",
                                       {"group_name": self.group_name}, timeout_s=30)
            except SGLangError:
                pass  # an older or dead server: nothing to free there
