"""VLLMEngine: the rollout engine over vLLM servers' OpenAI-compatible HTTP API.

Talks to ``python -m vllm.entrypoints.openai.api_server`` processes (launched by
``VLLMEngine.launch``, or attached to by URL) with the standard library only, so importing it
needs no vLLM. Its parts, one topic each: the command line ``rlvr.agents.vllm.launch``; the wire
format ``rlvr.agents.vllm.wire``; what is read and refused on attach
``rlvr.agents.vllm.server_info``; the dev-mode calls ``rlvr.agents.vllm.rpc``; weight sync, one
strategy per mode, ``rlvr.agents.vllm.weight_sync``; the code inside the servers
``rlvr.agents.vllm.server_side``.

* Generation: ``/inference/v1/generate`` (servers started with ``--enable-scale-out``) with the
  prompt as token ids; the answer's ``token_ids``, their logprobs (``processed_logprobs``:
  tempered, as ``rlvr.agents.engine`` says) and weight-version spans. Several
  servers are used round-robin. ``max_new_tokens`` is clamped to the context left after the
  prompt (a prompt filling it is a "length" finish). Seeds are vLLM's per-request seeds
  (honoured on every server). ``top_p < 1`` or ``top_k`` are refused: vLLM's processed logprobs
  are then renormalised over the kept tokens, not the full tempered distribution.
* Weights: a HF directory is loaded by every worker (its safetensors files); ``(name, tensor)``
  pairs go through the ``WeightSync`` chosen on attach by sglang's placement rules
  (``rlvr.agents.sglang.placement.choose_weight_sync``): ``distributed`` (broadcast; gloo on CPU
  servers, NCCL on GPUs of their own) or ``disk`` (colocated, or different NCCL versions).
  Every update resets the servers' prefix caches.
* LoRA (``serve_lora``): the servers keep the base and serve the policy's adapter, which each
  ``update_weights`` with ``(name, tensor)`` pairs loads under a new name
  (``rlvr.agents.vllm.lora``); every request names the current adapter.
* Memory: servers started with ``--enable-sleep-mode`` sleep (level 1: weights to host memory,
  KV cache dropped) in ``release_memory`` and wake in ``resume_memory``; elsewhere both are
  no-ops (CPU vLLM has no sleep mode).
* Only the ``leader`` (trainer rank 0) sends weight and memory calls; other ranks' engines drain
  the (collective) weight iterator and return.
* Versions and in-flight updates (``rlvr.agents.engine.VersionedEngine``,
  ``rlvr.agents.vllm.versions``): ``set_weight_version`` labels the servers' weights
  (``/update_weight_version``); each completion's ``versions`` come from its answer's spans.
  ``update_weights_in_flight`` pauses (``/pause?mode=keep`` for "continue", ``mode=abort`` for
  "abort"), updates, labels the version and resumes (``/resume``); aborted requests are sent
  again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
from collections.abc import Sequence
from os import PathLike
from typing import Any

import torch

from rlvr.agents.engine import Completion, InflightMode, SamplingParams, WeightsSource
from rlvr.agents.errors import EngineClosedError, RequestError, SGLangError, VLLMError
from rlvr.agents.sglang.client import ServerClient, SGLangHTTPError
from rlvr.agents.sglang.placement import SyncFacts, choose_weight_sync, is_local, trainer_gpus
from rlvr.agents.sglang.placement import trainer_nccl as trainer_nccl_version
from rlvr.agents.sglang.server_process import ServerProcess, local_address
from rlvr.agents.sglang.weight_sync import DrainSync, SyncDir, WeightSync
from rlvr.agents.sglang.weights import DEFAULT_BUCKET_BYTES
from rlvr.agents.vllm.launch import VLLMLaunch, launch_servers, stop_servers
from rlvr.agents.vllm.lora import VLLMAdapterSync, serving_refusal
from rlvr.agents.vllm.rpc import ServerRPC, sleep_path, wake_path
from rlvr.agents.vllm.server_info import VLLMServerInfo, read_server_info
from rlvr.agents.vllm.versions import VLLMVersions
from rlvr.agents.vllm.weight_sync import (
    VLLMBroadcastSync,
    VLLMDiskSync,
    checkpoint_files,
    load_shards,
)
from rlvr.agents.vllm.wire import GENERATE, generate_payload, parse_generate

logger = logging.getLogger(__name__)

_CONTEXT_ERRORS = ("maximum context length", "max_model_len", "too long")
"""In vLLM's HTTP 400s for a prompt (+ max_tokens) over the context length."""


_DEAD_ENGINE = ("EngineCore encountered", "EngineDeadError")
"""In vLLM's HTTP 500s once its engine core died: every later request fails, so the engine
raises instead of aborting the one request."""


class VLLMEngine:
    """A rollout engine over one or more vLLM servers.

    Args:
        urls: the servers' base URLs (``/v1/completions`` goes to each in turn; weight, memory
            and cache calls to every one).
        processes: the server processes this engine launched (``close`` stops them).
        api_key: the servers' ``--api-key`` (sent as ``Authorization: Bearer``).
        request_timeout_s: HTTP timeout of one request.
        max_concurrency: requests in flight at once (threads of the HTTP pool).
        weight_sync: "auto", "distributed" or "disk" (see the module docstring).
        bucket_bytes: the most bytes per weight-update call.
        sync_dir: where "disk" sync writes its shards (default: a temporary directory).
        master_address: this host as the servers reach it (default: found per connection).
        leader: whether this engine sends weight/memory calls (trainer rank 0).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        processes: Sequence[ServerProcess] = (),
        api_key: str | None = None,
        request_timeout_s: float = 600.0,
        max_concurrency: int = 256,
        weight_sync: str = "auto",
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        sync_dir: str | PathLike[str] | None = None,
        master_address: str | None = None,
        leader: bool = True,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise RequestError("VLLMEngine needs at least one URL in urls")
        if weight_sync not in ("auto", "distributed", "disk"):
            raise RequestError("weight_sync must be 'auto', 'distributed' or 'disk'; got "
                               f"{weight_sync!r}")
        self.processes = list(processes)
        self.clients = [ServerClient(u, api_key=api_key, timeout_s=request_timeout_s)
                        for u in self.urls]
        self.rpc = ServerRPC(self.clients)
        self.weight_sync = weight_sync
        """As asked; after attach on the leader, the mode in use ("distributed" or "disk")."""
        self.bucket_bytes = bucket_bytes
        self._sync_dir = SyncDir(sync_dir)
        self.master_address = master_address
        self.leader = leader
        self._next = itertools.cycle(self.clients)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_concurrency, "vllm-http")
        self._attach_lock = threading.Lock()
        self._infos: list[VLLMServerInfo] | None = None
        self._sync: WeightSync | None = None if leader else DrainSync()
        self._adapter: VLLMAdapterSync | None = None
        """The served LoRA adapter (``serve_lora``), whose name every request carries."""
        self._versions = VLLMVersions(self.rpc, leader)
        self._sleeping = False
        self._closed = False

    @classmethod
    def launch(cls, model_path: str | PathLike[str], spec: VLLMLaunch | None = None,
               **kwargs: Any) -> VLLMEngine:
        """Launch servers on ``model_path`` (``rlvr.agents.vllm.launch``); the engine stops them.

        ``kwargs`` go to ``VLLMEngine``.
        """
        spec = spec or VLLMLaunch()
        urls, procs = launch_servers(model_path, spec)
        try:
            return cls(urls, processes=procs, api_key=spec.api_key, **kwargs)
        except BaseException:
            stop_servers(procs)
            raise

    # ------------------------------------------------------------------ attach
    @property
    def infos(self) -> list[VLLMServerInfo]:
        """Each server's checked ``VLLMServerInfo`` (read on first use).

        On the leader, attaching also chooses the weight sync (``weight_sync`` names it).
        """
        if self._infos is None:
            with self._attach_lock:
                if self._infos is None:
                    infos = self.rpc.each(lambda c: read_server_info(c, self.rpc))
                    if len({i.model for i in infos}) > 1:
                        raise VLLMError("the servers serve different models: "
                                        f"{sorted({i.model for i in infos})}")
                    if self.leader and self._sync is None:
                        self._sync = self._full_weight_sync(infos)
                    self._infos = infos
        return self._infos

    def _full_weight_sync(self, infos: list[VLLMServerInfo]) -> WeightSync:
        all_cpu = all(i.device == "cpu" for i in infos)
        mine = trainer_gpus()
        colocated = () if all_cpu else tuple(
            i.url for i in infos if is_local(i.url) and i.gpus & mine)
        trainer_nccl = None if all_cpu else trainer_nccl_version()
        theirs = {i.url: next((w.get("nccl") for w in i.workers if w.get("nccl")), None)
                  for i in infos}
        try:
            self.weight_sync = choose_weight_sync(self.weight_sync, SyncFacts(
                colocated, trainer_nccl, theirs, all_cpu))
        except SGLangError as exc:
            raise VLLMError(str(exc).replace("rollout.sglang.", "rollout.vllm.")) from None
        if self.weight_sync == "disk":
            return VLLMDiskSync(self.rpc, self._sync_dir, lambda: self.dtype)
        address = self.master_address or local_address(self.urls[0])
        return VLLMBroadcastSync(self.rpc, [len(i.workers) for i in infos], address,
                                 "gloo" if all_cpu else "nccl", lambda: self.dtype)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the servers hold their weights in."""
        return self.infos[0].dtype

    @property
    def context_length(self) -> int:
        """The smallest context length of the servers."""
        return min(i.max_model_len for i in self.infos)

    # ------------------------------------------------------------------ Engine protocol
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """POST ``/v1/completions`` (see the module docstring) and parse the completion."""
        if self._closed:
            raise EngineClosedError("VLLMEngine.generate called after close()")
        if len(prompt_ids) == 0:
            raise RequestError("prompt_ids is empty; a completion needs at least one token")
        if sampling.top_p < 1 or sampling.top_k != -1:
            raise VLLMError(
                f"top_p={sampling.top_p}, top_k={sampling.top_k}: vLLM reports logprobs "
                "renormalised over the tokens top_p/top_k keep, not the full tempered "
                "distribution the learner recomputes; use top_p=1 and top_k=-1 with the vllm "
                "engine")
        if self._sleeping:
            raise VLLMError("the servers sleep (release_memory); call resume_memory first")
        loop = asyncio.get_running_loop()
        if self._infos is None:
            await loop.run_in_executor(self._pool, lambda: self.infos)
        room = self.context_length - len(prompt_ids)
        if room < 1:
            return Completion([], [], "length", {"context_length": self.context_length})
        max_new = min(sampling.max_new_tokens, room)
        # built per attempt: a request an "abort" update sent back names the adapter now served
        return await self._versions.regenerating(lambda: self._post_generate(
            loop, generate_payload(self.infos[0].model, prompt_ids, sampling, max_new,
                                   self.lora_name)))

    async def _post_generate(self, loop: asyncio.AbstractEventLoop,
                             payload: dict[str, Any]) -> Completion:
        client = next(self._next)
        try:
            body = await loop.run_in_executor(self._pool, client.post, GENERATE, payload)
        except SGLangHTTPError as exc:
            if exc.status == 400 and any(e in exc.detail for e in _CONTEXT_ERRORS):
                return Completion([], [], "length", {"error": exc.detail})
            if exc.status == 403 and "scale-out" in exc.detail:
                raise VLLMError(f"{client.url}{GENERATE} is disabled: start the server with "
                                "--enable-scale-out (rlvr generates through vLLM's "
                                "token-in/token-out route; docs/engines.md, \"vLLM\")") from None
            if exc.status >= 500 and any(e in exc.detail for e in _DEAD_ENGINE):
                raise VLLMError(f"{client.url}: the vLLM engine died (see the server's log): "
                                f"{exc.detail[:500]}") from None
            if exc.status >= 500:
                return Completion([], [], "abort", {"abort": exc.detail})
            raise VLLMError(f"{client.url}{GENERATE} -> HTTP {exc.status}: "
                            f"{exc.detail[:500]}") from None
        except SGLangError as exc:
            raise VLLMError(str(exc)) from None
        return parse_generate(body)

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
        """Label the servers' current weights ``str(version)``; completions report versions."""
        self._versions.declare(version, send=self.leader and not self._closed)

    def served_version(self) -> int | None:
        """The oldest version the servers hold (``SharedEngine``; ``/weight_info``)."""
        return self._versions.served()

    def update_weights_in_flight(self, weights: WeightsSource, version: int,
                                 mode: InflightMode) -> None:
        """Pause, update to ``version``, label it, resume (``rlvr.agents.vllm.versions``).

        Raises:
            VLLMError: a server refused a call (the servers are resumed before it is raised).
        """
        if self._closed:
            raise EngineClosedError("VLLMEngine.update_weights_in_flight called after close()")
        if mode == "continue" and self._adapter is not None:
            raise VLLMError(
                "rollout.inflight_update='continue' with a served LoRA adapter: the requests "
                "vLLM keeps running through the update stay bound to the adapter they started "
                "with, so their later tokens would not be the new version's; use 'abort' (they "
                "are sent again under the new adapter) or 'off'")
        _ = self.infos  # attach first

        def update(name: str, flush: bool) -> None:
            self.update_weights(weights, flush=flush)
            if self.leader:
                self._versions.name_version(name)

        self._versions.in_flight(update, version, mode)

    def update_weights(self, weights: WeightsSource, *, flush: bool = True) -> None:
        """Load new weights: a HF directory, or ``(name, tensor)`` pairs (``weight_sync``).

        On a non-leader engine the pairs are drained (the learner's iterator is collective) and
        nothing is sent. ``flush``: reset the prefix caches after (not while requests are
        paused in place: vLLM refuses it then).

        Raises:
            VLLMError: a server refused the update or could not be reached.
        """
        if self._closed:
            raise EngineClosedError("VLLMEngine.update_weights called after close()")
        if isinstance(weights, str | PathLike):
            if self.leader:
                _ = self.infos
                load_shards(self.rpc, checkpoint_files(str(weights)), flush=flush)
            return
        if self._sync is None:
            _ = self.infos
        if self._sync is None:  # pragma: no cover - attach sets it on the leader
            raise VLLMError("no weight sync was chosen on attach")
        self._sync.push(weights, weight_version=None, flush=flush, bucket_bytes=self.bucket_bytes)

    def serve_lora(self, lora: dict[str, Any], *, prefix: str, base_model: str = "") -> None:
        """Serve the policy's LoRA adapter instead of taking merged weights.

        From now on ``update_weights`` with ``(name, tensor)`` pairs takes the adapter's entries
        alone (``...lora_A.default.weight``), loaded under a new name each time
        (``rlvr.agents.vllm.lora``), and every request names the current adapter. Check the
        servers first with ``lora_refusal``.
        """
        self._adapter = VLLMAdapterSync(self.rpc, self._sync_dir, lambda: self.dtype,
                                        lora=lora, prefix=prefix, base_model=base_model,
                                        leader=self.leader)
        self._sync = self._adapter

    def lora_refusal(self, lora: dict[str, Any]) -> str | None:
        """Why these servers cannot serve ``lora`` (None: every one can)."""
        for info in self.infos:
            why = serving_refusal(info, lora)
            if why is not None:
                return f"{info.url}: {why}"
        return None

    @property
    def lora_name(self) -> str | None:
        """The adapter requests name (None: the base, or merged weights)."""
        return self._adapter.name if self._adapter is not None else None

    def release_memory(self) -> None:
        """Put servers started with ``--enable-sleep-mode`` to sleep (level 1); else a no-op."""
        if not self.leader or self._closed or not all(i.sleep_mode for i in self.infos):
            return
        self.rpc.each(lambda c: self.rpc.post(c, sleep_path(1)))
        self._sleeping = True

    def resume_memory(self, tags: Sequence[str] | None = None) -> None:
        """Wake the servers ``release_memory`` put to sleep (``tags``: vLLM's wake-up tags)."""
        if not self.leader or self._closed or not self._sleeping:
            return
        self.rpc.each(lambda c: self.rpc.post(c, wake_path(tags)))
        self._sleeping = tags is not None and "weights" not in tags

    def close(self) -> None:
        """Stop the HTTP pools, leave the weight group, stop launched servers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(self._sync, VLLMBroadcastSync):
            self._sync.leave()
        self.rpc.close()
        stop_servers(self.processes)
