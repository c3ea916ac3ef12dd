"""SGLangEngine: the rollout engine over SGLang servers' native HTTP API.

Talks to ``python -m sglang.launch_server`` processes (a ``ServerFleet``: launched with
``rlvr.agents.sglang.fleet.launch_fleet``, or attached to by URL) with the standard library only,
so importing it needs neither sglang nor an HTTP package. Its parts, one topic each: wire format
``rlvr.agents.sglang.wire``; the servers and their checks ``rlvr.agents.sglang.server_calls``,
``rlvr.agents.sglang.server_info``; weight sync, one strategy per mode,
``rlvr.agents.sglang.weight_sync``; memory release ``rlvr.agents.sglang.memory``.

* Several servers: ``urls`` are used round-robin for ``/generate`` (give one sglang-router URL to
  let the router balance with prefix-cache affinity); weight, memory and cache calls go to every
  server in ``server_urls`` (default: ``urls``), never to a router.
* Attach (first use): each server's ``/server_info`` is read and checked (version >= 0.5.5,
  ``dp_size == 1``, tempered logprobs); seeded requests are refused on a server without
  ``--enable-deterministic-inference`` unless ``allow_unseeded``; ``max_new_tokens`` is clamped
  to the context length left after the prompt (an over-long request is an HTTP 400 on sglang, a
  "length" finish here).
* Weights: a HF directory goes to ``/update_weights_from_disk``; ``(name, tensor)`` pairs go
  through the engine's ``WeightSync``, chosen once on attach: broadcast over the weight-update
  group (``"distributed"``: NCCL on GPU servers, gloo on CPU ones) or shards reloaded from
  ``sync_dir`` (``"disk"``); ``weight_sync="auto"`` picks one from where the servers are and
  their NCCL version (``rlvr.agents.sglang.placement``). Casts to the server's dtype
  (``--dtype auto`` resolved as sglang does), buckets of ``bucket_bytes``.
* Memory: ``release_memory`` / ``resume_memory`` (``rlvr.agents.sglang.memory``); weights released
  without a CPU backup are stale until the next ``update_weights``, and generation is refused
  meanwhile.
* LoRA (``serve_lora``): the servers keep the base and serve the policy's adapter, which each
  ``update_weights`` with ``(name, tensor)`` pairs loads as the next version
  (``weight_sync.AdapterSync``); every ``/generate`` names the current adapter.
* Versions and in-flight updates (``rlvr.agents.engine.VersionedEngine``): ``set_weight_version``
  names the servers' weights ``str(version)`` (``/update_weight_version``); from then on each
  completion's ``versions`` come from the server's ``meta_info.weight_versions`` spans.
  ``update_weights_in_flight`` pauses generation (``/pause_generation``), updates with the
  version, and continues (``/continue_generation``): mode "continue" pauses ``in_place`` (the
  running requests keep their KV cache; the update does not flush the prefix cache, which
  sglang refuses while requests run: the next update between steps flushes it), mode "abort"
  aborts the running requests, which ``generate`` then sends again, counted in
  ``Completion.regenerated``.
* Only the ``leader`` (trainer rank 0) sends weight and memory calls; other ranks' engines drain
  the (collective) weight iterator and return.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import torch

from rlvr.agents.engine import (
    INFLIGHT_MODES,
    Completion,
    InflightMode,
    SamplingParams,
    WeightsSource,
    check_score_request,
)
from rlvr.agents.errors import EngineClosedError, RequestError, SGLangError
from rlvr.agents.sglang.client import ServerClient, SGLangHTTPError
from rlvr.agents.sglang.dist_sync import DistributedWeights
from rlvr.agents.sglang.fleet import LaunchSpec, ServerFleet, launch_fleet
from rlvr.agents.sglang.lora import serving_refusal
from rlvr.agents.sglang.memory import ServerMemory
from rlvr.agents.sglang.placement import sync_mode
from rlvr.agents.sglang.scoring import parse_scores, score_payload
from rlvr.agents.sglang.server_calls import FLUSH_WAIT_S, ServerCalls, server_dtype
from rlvr.agents.sglang.server_info import (
    ServerInfo,
    generation_room,
    seed_refusal,
    smallest_limit,
)
from rlvr.agents.sglang.server_process import ServerProcess
from rlvr.agents.sglang.versions import ServedVersions
from rlvr.agents.sglang.weight_sync import (
    AdapterSync,
    BroadcastSync,
    DiskSync,
    DrainSync,
    SyncDir,
    WeightSync,
)
from rlvr.agents.sglang.weights import DEFAULT_BUCKET_BYTES, GroupFactory, sglang_layout_group
from rlvr.agents.sglang.wire import aborted, generate_payload, parse_generate_response

_CONTEXT_ERRORS = ("context length", "maximum allowed length")
"""In sglang's HTTP 400s for a prompt (+ max_new_tokens) over the context or input limit."""


class SGLangEngine:
    """A rollout engine over one or more SGLang servers.

    Args:
        urls: where ``/generate`` goes: one server, one sglang-router, or several servers
            (round-robin); or a ``ServerFleet`` (``launch_fleet``), which ``close`` stops.
        server_urls: the servers themselves, for weight/memory/cache calls (default ``urls``;
            not with a fleet, which has its own).
        api_key: the servers' ``--api-key`` (sent as ``Authorization: Bearer``; default: the
            fleet's).
        request_timeout_s: HTTP timeout of one request.
        max_concurrency: requests in flight at once (threads of the HTTP pool).
        allow_unseeded: send seeded requests to servers that ignore seeds instead of refusing.
        weight_sync: how ``(name, tensor)`` pairs reach the servers: "auto" (chosen on attach,
            ``rlvr.agents.sglang.placement``), "distributed" or "disk".
        bucket_bytes: the most bytes per weight-update request.
        sync_dir: where "disk" sync writes its shards (default: a temporary directory).
        master_address: this host as the servers reach it (default: found per connection).
        leader: whether this engine sends weight/memory calls (trainer rank 0).
        group_factory: makes this end of the weight-update group (default
            ``sglang_layout_group``; see ``rlvr.agents.sglang.weights`` for what one must do).
        server_python: the servers' interpreter when known (probed for its NCCL version;
            default: the fleet's).
    """

    def __init__(
        self,
        urls: str | Sequence[str] | ServerFleet,
        *,
        server_urls: Sequence[str] | None = None,
        api_key: str | None = None,
        request_timeout_s: float = 600.0,
        max_concurrency: int = 256,
        allow_unseeded: bool = False,
        weight_sync: str = "auto",
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        sync_dir: str | PathLike[str] | None = None,
        master_address: str | None = None,
        leader: bool = True,
        group_factory: GroupFactory | None = None,
        server_python: str | None = None,
    ) -> None:
        if isinstance(urls, ServerFleet) and server_urls is not None:
            raise RequestError("server_urls is given by the fleet; pass one or the other")
        self.fleet = urls if isinstance(urls, ServerFleet) else ServerFleet(
            urls, server_urls, api_key=api_key)
        """The servers (and router) this engine talks to; ``close`` stops those it launched."""
        self.urls, self.server_urls = self.fleet.urls, self.fleet.server_urls
        self.processes: list[ServerProcess] = self.fleet.processes
        if weight_sync not in ("auto", "distributed", "disk"):
            raise RequestError("weight_sync must be 'auto', 'distributed' or 'disk'; got "
                               f"{weight_sync!r}")
        self.calls = ServerCalls(self.fleet.urls, self.fleet.server_urls,
                                 api_key=api_key or self.fleet.api_key,
                                 timeout_s=request_timeout_s)
        self.clients: dict[str, ServerClient] = self.calls.clients
        self.allow_unseeded = allow_unseeded
        self.weight_sync = weight_sync
        """As asked; after attach on the leader, the mode in use ("distributed" or "disk")."""
        self.server_python = server_python or self.fleet.python
        self.bucket_bytes = bucket_bytes
        self._sync_dir = SyncDir(sync_dir)
        self.master_address = master_address
        self.leader = leader
        self.group_factory = group_factory or sglang_layout_group
        self._next_url = itertools.cycle(self.urls)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_concurrency, "sglang-http")
        self._attach_lock = threading.Lock()
        self._infos: dict[str, ServerInfo] | None = None
        self._dist = DistributedWeights(self.clients, self.server_urls, self.calls.control)
        self._memory = ServerMemory(self.calls)
        self._sync: WeightSync | None = None if leader else DrainSync()
        """How pairs are sent: chosen on attach (leader), or by ``serve_lora``."""
        self._adapter: AdapterSync | None = None
        """The served LoRA adapter (``serve_lora``), whose name every request carries."""
        self._closed = False
        self._versions = ServedVersions(self.calls, leader)

    # ------------------------------------------------------------------ the fleet
    @classmethod
    def launch(cls, model_path: str | PathLike[str], **kwargs: Any) -> SGLangEngine:
        """Launch servers on ``model_path`` (``launch_fleet``); the engine owns and stops them.

        Keyword arguments named like a ``rlvr.agents.sglang.fleet.LaunchSpec`` field (python,
        device, host, port, tp_size, mem_fraction_static, deterministic, api_key, extra_args,
        startup_timeout_s, log_path, servers, router_args) configure the launch; the others go
        to ``SGLangEngine``. With several servers, ``/generate`` goes to the router and every
        other call to each server (``rlvr.agents.sglang.router``).

        Raises:
            MissingDependencyError: sglang is not installed for ``python``.
            SGLangError: a server exited or was not healthy within ``startup_timeout_s``
                (the message ends with the server log's tail).
        """
        spec, engine_kwargs = LaunchSpec.split(kwargs)
        fleet = launch_fleet(model_path, spec)
        try:
            return cls(fleet, api_key=spec.api_key, **engine_kwargs)
        except BaseException:
            fleet.close()
            raise

    @property
    def process(self) -> ServerProcess | None:
        """The (first) server process this engine launched; None when it attached."""
        return self.fleet.process

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Block until every server answers ``GET /health`` with 200 (``ServerFleet``)."""
        self.fleet.wait_healthy(timeout_s)

    # ------------------------------------------------------------------ attach
    @property
    def infos(self) -> dict[str, ServerInfo]:
        """Each server's checked ``ServerInfo`` (read and checked on first use).

        On the leader, attaching also chooses the weight sync (``weight_sync`` names it).
        """
        if self._infos is None:
            with self._attach_lock:
                if self._infos is None:
                    infos = self.calls.attach()
                    if self.leader:
                        self.weight_sync = sync_mode(self.weight_sync, infos,
                                                     self.server_python)
                        if self._sync is None:
                            self._sync = self._full_weight_sync()
                    self._infos = infos
        return self._infos

    def _full_weight_sync(self) -> WeightSync:
        """The leader's strategy for ``weight_sync`` (once it is "distributed" or "disk")."""
        if self.weight_sync == "disk":
            return DiskSync(self.calls, self._sync_dir, lambda: self.dtype)
        return BroadcastSync(self.calls, self._dist, self.init_weight_update_group,
                             lambda: self.dtype)

    @property
    def context_length(self) -> int | None:
        """The smallest context length of the servers (None when none reports one)."""
        return smallest_limit(self.infos, "context_length")

    @property
    def max_input_len(self) -> int | None:
        """The smallest prompt limit of the servers (prompts must be shorter)."""
        return smallest_limit(self.infos, "max_input_len")

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the servers compute in (``--dtype auto`` resolved as sglang does).

        Raises:
            SGLangError: a dtype rlvr cannot send, or ``auto`` on a model it cannot read.
        """
        return server_dtype(self.infos)

    # ------------------------------------------------------------------ Engine protocol
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """POST ``/generate`` (see the module docstring) and parse the completion."""
        if self._closed:
            raise EngineClosedError("SGLangEngine.generate called after close()")
        # Aborts: sglang answers an aborted request that carries a status code (timeouts: 503;
        # out of memory: 500) with an HTTP error, others with finish_reason "abort".
        if len(prompt_ids) == 0:
            raise RequestError("prompt_ids is empty; a completion needs at least one token")
        if self._memory.weights_stale:
            raise SGLangError("the servers' weights were released without "
                              "--enable-weights-cpu-backup; call update_weights before generating")
        loop = asyncio.get_running_loop()
        if self._infos is None:
            await loop.run_in_executor(self._pool, lambda: self.infos)
        why = None if self.allow_unseeded else seed_refusal(sampling.seed, self.infos)
        if why is not None:
            raise SGLangError(why)
        max_new = generation_room(len(prompt_ids), sampling.max_new_tokens, self.infos)
        if isinstance(max_new, Completion):
            return max_new
        payload = generate_payload(prompt_ids, sampling, max_new, self.lora_name)
        return await self._versions.regenerating(lambda: self._post_generate(loop, payload))

    async def _post_generate(self, loop: asyncio.AbstractEventLoop,
                             payload: dict[str, Any]) -> Completion:
        client = self.clients[next(self._next_url)]
        try:
            body = await loop.run_in_executor(self._pool, client.post, "/generate", payload)
        except SGLangHTTPError as exc:
            if any(e in exc.detail for e in _CONTEXT_ERRORS):  # limits unknown here
                return Completion([], [], "length", {"error": exc.detail})
            if exc.status >= 500:
                return aborted(exc.detail)
            raise
        return parse_generate_response(body)

    def score(self, token_ids: list[int], start: int) -> dict[str, list[float]]:
        """Each server's logprobs of ``token_ids[start:]`` (``ScoringEngine``; by server URL).

        Sent to every server in ``server_urls`` (never through a router), so each server's
        weights are proven; with a served adapter, under the adapter.
        """
        check_score_request(token_ids, start)
        if self._closed:
            raise EngineClosedError("SGLangEngine.score called after close()")
        payload = score_payload(token_ids, start, self.lora_name)
        futures = {u: self.calls.control.submit(self.clients[u].post, "/generate", payload)
                   for u in self.server_urls}
        return {u: parse_scores(fut.result(), token_ids, start) for u, fut in futures.items()}

    # ------------------------------------------------------------------ versions, in flight
    @property
    def weight_version(self) -> int:
        """The version of the servers' weights (``VersionedEngine``)."""
        return self._versions.version

    @property
    def regenerated(self) -> int:
        """Requests aborted by "abort" in-flight updates and sent again so far."""
        return self._versions.regenerated

    def set_weight_version(self, version: int) -> None:
        """Name the servers' current weights ``str(version)``; completions report versions."""
        self._versions.declare(version, send=self.leader and not self._closed)

    def served_version(self) -> int | None:
        """The oldest version the servers hold (``SharedEngine``; ``ServedVersions.served``)."""
        return self._versions.served()

    def update_weights_in_flight(self, weights: WeightsSource, version: int,
                                 mode: InflightMode) -> None:
        """Pause, update to ``version``, continue (``rlvr.agents.sglang.versions``).

        Raises:
            RequestError: an unknown ``mode``.
            SGLangError: a server refused a call (generation is continued before it is raised).
        """
        if mode not in INFLIGHT_MODES:
            raise RequestError(f"mode must be one of {', '.join(INFLIGHT_MODES)}; got {mode!r}")
        if self._closed:
            raise EngineClosedError("SGLangEngine.update_weights_in_flight called after close()")
        _ = self.infos  # attach first: attaching generates, which a paused server never answers
        self._versions.in_flight(
            lambda name, flush: self.update_weights(weights, weight_version=name, flush=flush),
            version, mode)

    def update_weights(self, weights: WeightsSource, *, weight_version: str | None = None,
                       flush: bool = True) -> None:
        """Load new weights: a HF directory, or ``(name, tensor)`` pairs (``weight_sync``).

        On a non-leader engine the pairs are drained (the learner's iterator is collective) and
        nothing is sent. ``flush=False`` keeps the prefix cache (required while requests sit
        paused in place: sglang refuses to flush then). ``weight_version`` names the new
        weights on the servers (None: the name stays).

        Raises:
            SGLangError: a server refused the update or could not be reached.
        """
        if self._closed:
            raise EngineClosedError("SGLangEngine.update_weights called after close()")
        if isinstance(weights, str | PathLike):
            if self.leader:
                self.calls.load_from_disk(str(weights), weight_version, flush)
                self._memory.weights_stale = False
            return
        self._weight_sync().push(weights, weight_version=weight_version, flush=flush,
                                 bucket_bytes=self.bucket_bytes)
        if self.leader:
            self._memory.weights_stale = False

    def _weight_sync(self) -> WeightSync:
        """The strategy for ``(name, tensor)`` pairs (attaching first chooses it on the leader)."""
        if self._sync is None:
            _ = self.infos
        if self._sync is None:  # pragma: no cover - attach sets it on the leader
            raise SGLangError("no weight sync was chosen on attach")
        return self._sync

    # ------------------------------------------------------------------ LoRA
    def serve_lora(self, lora: dict[str, Any], *, prefix: str, base_model: str = "") -> None:
        """Serve the policy's LoRA adapter instead of taking merged weights.

        From now on ``update_weights`` with ``(name, tensor)`` pairs takes the adapter's
        entries alone (``...lora_A.default.weight``) and every ``/generate`` names the adapter
        last loaded; the arguments: ``rlvr.agents.sglang.weight_sync.AdapterSync``. Check the
        servers first with ``lora_refusal``.
        """
        self._adapter = AdapterSync(self.calls, self._memory, self._sync_dir,
                                    lambda: self.dtype, lora=lora, prefix=prefix,
                                    base_model=base_model, leader=self.leader)
        self._sync = self._adapter

    def lora_refusal(self, lora: dict[str, Any]) -> str | None:
        """Why these servers cannot serve ``lora`` (None: every one can)."""
        for url, info in self.infos.items():
            why = serving_refusal(info, lora)
            if why is not None:
                return f"{url}: {why}"
        return None

    @property
    def lora_name(self) -> str | None:
        """The adapter ``/generate`` requests name (None: the base, or merged weights)."""
        return self._adapter.name if self._adapter is not None else None

    @property
    def sync_dir(self) -> Path:
        """Where "disk" sync writes (created on first use)."""
        return self._sync_dir.path

    # ------------------------------------------------------------------ memory
    def release_memory(self, tags: Sequence[str] | None = None) -> None:
        """Pause generation, free the servers' memory (``rlvr.agents.sglang.memory``; leader)."""
        if not self.leader or self._closed:
            return
        self._memory.release(self.infos, tags)

    def resume_memory(self, tags: Sequence[str] | None = None) -> None:
        """Take back ``tags`` (default: all) ``release_memory`` freed (``ServerMemory.resume``).

        Weights released on a server without ``--enable-weights-cpu-backup`` are gone: the
        engine refuses to generate until the next ``update_weights``.
        """
        if not self.leader or self._closed:
            return
        self._memory.resume(tags)

    def flush_cache(self, wait_s: float = FLUSH_WAIT_S) -> None:
        """Drop the servers' prefix caches, retried while sglang answers 400 (requests run).

        Requests of other clients (other trainer ranks on shared servers) may be running: the
        flush waits for a moment without any, up to ``wait_s`` seconds per server.
        """
        self.calls.flush_cache(wait_s)

    def close(self) -> None:
        """Stop the HTTP pools, leave the weight group, stop the launched servers. Idempotent."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.calls.close()
        if self._dist.group is not None:
            self._dist.leave()
        self.fleet.close()

    # ------------------------------------------------------------------ the weight-update group
    def init_weight_update_group(
        self,
        master_address: str | None = None,
        master_port: int | None = None,
        *,
        backend: str | None = None,
        group_name: str | None = None,
        group_factory: GroupFactory | None = None,
    ) -> None:
        """Join this process (rank 0) and every server's ranks in one process group.

        The arguments and their defaults: ``rlvr.agents.sglang.dist_sync.DistributedWeights.join``
        (``master_address`` defaults to the engine's; ``group_factory`` to the engine's).
        """
        self._dist.join(self.infos, master_address or self.master_address, master_port,
                        backend=backend, group_name=group_name,
                        factory=group_factory or self.group_factory)
