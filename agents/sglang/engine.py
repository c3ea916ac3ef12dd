"""SGLangEngine: the rollout engine over SGLang servers' native HTTP API.

Talks to ``python -m sglang.launch_server`` processes (launched here with ``launch``, or attached
to by URL) with the standard library only, so importing it needs neither sglang nor an HTTP
package. Wire format: ``rlvr.agents.sglang.wire``; server checks:
``rlvr.agents.sglang.server_info``;
weight movement: ``rlvr.agents.sglang.weights``; the distributed weight path (process group, update
sessions, broadcasts): ``rlvr.agents.sglang.dist_sync``.

* Several servers: ``urls`` are used round-robin for ``/generate`` (give one sglang-router URL to
  let the router balance with prefix-cache affinity); weight, memory and cache calls go to every
  server in ``server_urls`` (default: ``urls``), never to a router.
* Attach (first use): each server's ``/server_info`` is read and checked (version >= 0.5.5,
  ``dp_size == 1``, tempered logprobs); seeded requests are refused on a server without
  ``--enable-deterministic-inference`` unless ``allow_unseeded``; ``max_new_tokens`` is clamped
  to the context length left after the prompt (an over-long request is an HTTP 400 on sglang, a
  "length" finish here).
* Weights: a HF directory goes to ``/update_weights_from_disk``; ``(name, tensor)`` pairs are cast
  to the server's dtype (``--dtype auto`` resolved as sglang does) and sent in buckets of
  ``bucket_bytes``, either broadcast over the weight-update group (``"distributed"``: NCCL on GPU
  servers, gloo on CPU ones) or written as safetensors shards to ``sync_dir`` and reloaded from
  disk (``"disk"``). ``weight_sync="auto"`` picks one on attach from where the servers are and
  their NCCL version (``rlvr.agents.sglang.placement``).
* Memory: ``release_memory`` pauses generation, then releases the servers' memory (only servers
  with ``--enable-memory-saver``: elsewhere it frees nothing and is skipped); ``resume_memory``
  resumes the tags asked (default: all released), continues generation once nothing is left
  released, and marks the weights stale when they did not survive (no
  ``--enable-weights-cpu-backup``) until the next ``update_weights``. The colocated order is the
  caller's: free its own cached memory, ``resume_memory(("weights",))``, ``update_weights``,
  ``resume_memory()`` (KV cache and CUDA graphs come back after the update, not before).
* LoRA (``serve_lora``): the servers keep the base and serve the policy's adapter; each
  ``update_weights`` with ``(name, tensor)`` pairs takes the adapter alone, writes it in peft's
  format under ``sync_dir/lora/<name>``, loads it as ``<prefix>-v<n>`` and unloads the previous
  one; every ``/generate`` names the current adapter (``rlvr.agents.sglang.lora``).
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
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
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
from rlvr.agents.sglang.client import ServerClient, SGLangHTTPError, check_success
from rlvr.agents.sglang.dist_sync import DistributedWeights
from rlvr.agents.sglang.lora import serving_refusal, write_peft_adapter
from rlvr.agents.sglang.placement import (
    SyncFacts,
    choose_weight_sync,
    colocated_servers,
    server_nccl,
    trainer_nccl,
)
from rlvr.agents.sglang.process import ServerProcess, free_port, local_address
from rlvr.agents.sglang.router import is_router_info
from rlvr.agents.sglang.scoring import parse_scores, score_payload
from rlvr.agents.sglang.server_info import (
    ServerInfo,
    check_server,
    context_length_from,
    resolved_dtype,
)
from rlvr.agents.sglang.weights import (
    DEFAULT_BUCKET_BYTES,
    GroupFactory,
    buckets,
    sglang_layout_group,
    write_shards,
)
from rlvr.agents.sglang.wire import (
    aborted,
    parse_generate_response,
    sampling_payload,
    token_versions,
)

_DTYPES = {"float32": torch.float32, "float": torch.float32, "bfloat16": torch.bfloat16,
           "float16": torch.float16, "half": torch.float16}
ALL_TAGS = ("kv_cache", "weights", "cuda_graph")
_CONTEXT_ERRORS = ("context length", "maximum allowed length")
"""In sglang's HTTP 400s for a prompt (+ max_new_tokens) over the context or input limit."""


FLUSH_WAIT_S = 600.0
"""How long a prefix-cache flush waits for a moment when no request runs on a server."""


class SGLangEngine:
    """A rollout engine over one or more SGLang servers.

    Args:
        urls: where ``/generate`` goes: one server, one sglang-router, or several servers
            (round-robin).
        server_urls: the servers themselves, for weight/memory/cache calls (default ``urls``).
        api_key: the servers' ``--api-key`` (sent as ``Authorization: Bearer``).
        request_timeout_s: HTTP timeout of one request.
        max_concurrency: requests in flight at once (threads of the HTTP pool).
        process: the server process(es) this engine owns (``launch`` sets them;
            ``ServerProcess``); ``close`` stops them.
        allow_unseeded: send seeded requests to servers that ignore seeds instead of refusing.
        weight_sync: how ``(name, tensor)`` pairs reach the servers: "auto" (chosen on attach,
            ``rlvr.agents.sglang.placement``), "distributed" or "disk".
        bucket_bytes: the most bytes per weight-update request.
        sync_dir: where "disk" sync writes its shards (default: a temporary directory).
        master_address: this host as the servers reach it (default: found per connection).
        leader: whether this engine sends weight/memory calls (trainer rank 0).
        group_factory: makes this end of the weight-update group (default
            ``sglang_layout_group``; see ``rlvr.agents.sglang.weights`` for what one must do).
        server_python: the servers' interpreter when known (probed for its NCCL version).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        server_urls: Sequence[str] | None = None,
        api_key: str | None = None,
        request_timeout_s: float = 600.0,
        max_concurrency: int = 256,
        process: ServerProcess | Sequence[ServerProcess] | None = None,
        allow_unseeded: bool = False,
        weight_sync: str = "auto",
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        sync_dir: str | PathLike[str] | None = None,
        master_address: str | None = None,
        leader: bool = True,
        group_factory: GroupFactory | None = None,
        server_python: str | None = None,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise RequestError("SGLangEngine needs at least one URL in urls")
        if weight_sync not in ("auto", "distributed", "disk"):
            raise RequestError("weight_sync must be 'auto', 'distributed' or 'disk'; got "
                               f"{weight_sync!r}")
        self.server_urls = list(server_urls) if server_urls else list(self.urls)
        every = dict.fromkeys(self.urls + self.server_urls)
        self.clients = {u: ServerClient(u, api_key=api_key, timeout_s=request_timeout_s)
                        for u in every}
        self.processes: list[ServerProcess] = (
            [] if process is None else [process] if isinstance(process, ServerProcess)
            else list(process))
        """The processes this engine launched and stops on ``close`` (servers, router)."""
        self.allow_unseeded = allow_unseeded
        self.weight_sync = weight_sync
        """As asked; after attach on the leader, the mode in use ("distributed" or "disk")."""
        self.server_python = server_python
        self.bucket_bytes = bucket_bytes
        self._sync_dir = Path(sync_dir) if sync_dir else None
        self.master_address = master_address
        self.leader = leader
        self.group_factory = group_factory or sglang_layout_group
        self._next_url = itertools.cycle(self.urls)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_concurrency, "sglang-http")
        # Weight, pause and memory calls have threads of their own: while generation is paused
        # in place, every /generate thread may be waiting on the server, and an update sent
        # through that pool would wait behind them forever.
        self._control = concurrent.futures.ThreadPoolExecutor(
            max(4, 2 * len(self.server_urls)), "sglang-control")
        self._attach_lock = threading.Lock()
        self._infos: dict[str, ServerInfo] | None = None
        self._dist = DistributedWeights(self.clients, self.server_urls, self._control)
        self._released: dict[str, tuple[str, ...]] = {}
        self._weights_stale = False
        self._closed = False
        self._lora: dict[str, Any] | None = None
        self._lora_prefix = ""
        self._lora_base = ""
        self._lora_version = 0
        self._lora_name: str | None = None
        self._version = 0
        self._versioned = False
        self._regenerated = 0
        self._abort_epoch = 0  # odd while an "abort" in-flight update runs
        self._inflight_lock = threading.Lock()

    # ------------------------------------------------------------------ launching
    @classmethod
    def launch(
        cls,
        model_path: str | PathLike[str],
        *,
        python: str | PathLike[str] | None = None,
        device: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        tp_size: int = 1,
        mem_fraction_static: float | None = None,
        deterministic: bool = False,
        api_key: str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 900.0,
        log_path: str | PathLike[str] | None = None,
        servers: int = 1,
        router_args: Sequence[str] = (),
        **engine_kwargs: Any,
    ) -> SGLangEngine:
        """Start ``python -m sglang.launch_server`` on ``model_path`` and wait for ``/health``.

        With ``servers > 1`` it starts that many servers at once (free ports) and, once all
        are healthy, an ``sglang-router`` on ``port`` in front of them (same interpreter:
        ``pip install sglang-router`` there); ``/generate`` then goes to the router and every
        other call to each server (``rlvr.agents.sglang.router``). ``close`` stops them all.

        Args:
            model_path: a HuggingFace model directory.
            python: the server's interpreter (default ``$RLVR_SGLANG_PYTHON``, else this one).
            device: "cuda" or "cpu" (default: cuda when this machine has one); chooses the
                defaults in ``rlvr.agents.sglang.launch`` (memory saver on CUDA only).
            host: where the server listens.
            port: its port (default: a free one).
            tp_size: tensor-parallel size.
            mem_fraction_static: sglang's ``--mem-fraction-static``.
            deterministic: add ``--enable-deterministic-inference`` (seeded sampling works).
            api_key: the server's ``--api-key`` (this engine sends it).
            extra_args: more ``launch_server`` flags (last, so they override the defaults).
            startup_timeout_s: how long ``/health`` may take to answer 200.
            log_path: the server's log (default: a temporary file); with several servers,
                server ``i`` logs to ``<stem>-<i><suffix>`` and the router to
                ``<stem>-router<suffix>`` beside it.
            servers: how many servers (more than one: behind a router); on GPUs server ``i``
                gets ``--base-gpu-id i * tp_size`` (unless ``extra_args`` sets it).
            router_args: more ``launch_router`` flags (e.g. ``--policy round_robin``).
            **engine_kwargs: passed to ``SGLangEngine``.

        Raises:
            MissingDependencyError: sglang is not installed for ``python``.
            SGLangError: the server exited or was not healthy within ``startup_timeout_s``
                (the message ends with the server log's tail).
        """
        from rlvr.agents.sglang.startup import launch_engine

        return launch_engine(
            cls, model_path, python=python, device=device, host=host, port=port,
            tp_size=tp_size, mem_fraction_static=mem_fraction_static,
            deterministic=deterministic, api_key=api_key, extra_args=extra_args,
            startup_timeout_s=startup_timeout_s, log_path=log_path, servers=servers,
            router_args=router_args, **engine_kwargs)

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Block until every server answers ``GET /health`` with 200.

        Raises:
            SGLangError: the launched process exited, or ``timeout_s`` passed.
        """
        deadline = time.monotonic() + timeout_s
        for url in self.server_urls:
            while True:
                for proc in self.processes:
                    code = proc.exit_code()
                    if code is not None:
                        raise SGLangError(f"sglang server exited with {code}" + proc.tail())
                try:
                    self.clients[url].get("/health", timeout_s=10)
                    break
                except SGLangError:
                    pass
                if time.monotonic() > deadline:
                    raise SGLangError(f"{url}/health not ready after {timeout_s}s"
                                      + self._log_tail())
                time.sleep(1.0)

    def _log_tail(self) -> str:
        return "".join(proc.tail(1500) for proc in self.processes)

    @property
    def process(self) -> ServerProcess | None:
        """The (first) server process this engine launched; None when it attached."""
        return self.processes[0] if self.processes else None

    # ------------------------------------------------------------------ attach
    @property
    def infos(self) -> dict[str, ServerInfo]:
        """Each server's checked ``ServerInfo`` (read and checked on first use)."""
        if self._infos is None:
            with self._attach_lock:
                if self._infos is None:
                    infos = {u: self._attach(u) for u in self.server_urls}
                    if self.leader:
                        self.weight_sync = self._choose_sync(infos)
                    self._infos = infos
        return self._infos

    def _choose_sync(self, infos: dict[str, ServerInfo]) -> str:
        """The weight-sync mode for these servers (``rlvr.agents.sglang.placement``)."""
        all_cpu = all(i.device == "cpu" for i in infos.values())
        colocated = () if all_cpu else colocated_servers(infos)
        mine = None
        theirs: dict[str, str | None] = {}
        if not all_cpu and not colocated and self.weight_sync != "disk":
            mine = trainer_nccl()
            if mine is not None:
                theirs = {u: server_nccl(i, self.server_python) for u, i in infos.items()}
        return choose_weight_sync(self.weight_sync, SyncFacts(colocated, mine, theirs, all_cpu))

    def _attach(self, url: str) -> ServerInfo:
        client = self.clients[url]
        raw = _first_answer(client, ("/server_info", "/get_server_info"))
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
        models = _first_answer(client, ("/v1/models",)) or {}  # max_model_len: the real limit
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

    @property
    def context_length(self) -> int | None:
        """The smallest context length of the servers (None when none reports one)."""
        known = [i.context_length for i in self.infos.values() if i.context_length]
        return min(known) if known else None

    @property
    def max_input_len(self) -> int | None:
        """The smallest prompt limit of the servers (prompts must be shorter)."""
        known = [i.max_input_len for i in self.infos.values() if i.max_input_len]
        return min(known) if known else None

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the servers compute in (``--dtype auto`` resolved as sglang does).

        Raises:
            SGLangError: a dtype rlvr cannot send, or ``auto`` on a model it cannot read.
        """
        name = resolved_dtype(next(iter(self.infos.values())))
        if name not in _DTYPES:
            raise SGLangError(f"the server computes in {name!r}; rlvr sends weights in "
                              f"{', '.join(sorted(_DTYPES))} only")
        return _DTYPES[name]

    # ------------------------------------------------------------------ Engine protocol
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """POST ``/generate`` (see the module docstring) and parse the completion."""
        if self._closed:
            raise EngineClosedError("SGLangEngine.generate called after close()")
        # Aborts: sglang answers an aborted request that carries a status code (timeouts: 503;
        # out of memory: 500) with an HTTP error, others with finish_reason "abort".
        if len(prompt_ids) == 0:
            raise RequestError("prompt_ids is empty; a completion needs at least one token")
        if self._weights_stale:
            raise SGLangError("the servers' weights were released without "
                              "--enable-weights-cpu-backup; call update_weights before generating")
        loop = asyncio.get_running_loop()
        if self._infos is None:
            await loop.run_in_executor(self._pool, lambda: self.infos)
        self._check_seed(sampling)
        max_new = sampling.max_new_tokens
        ctx = self.context_length
        max_input = self.max_input_len
        if max_input is not None and len(prompt_ids) >= max_input:
            return Completion([], [], "length", {"max_input_len": max_input})
        if ctx is not None:
            room = ctx - len(prompt_ids)  # sglang refuses prompt + max_new_tokens > context
            if room < 1:
                return Completion([], [], "length", {"context_length": ctx})
            max_new = min(max_new, room)
        payload = {
            "input_ids": list(prompt_ids),
            "sampling_params": sampling_payload(sampling, max_new_tokens=max_new),
            "return_logprob": True,
            "logprob_start_len": -1,
            "stream": False,
        }
        if self._lora_name is not None:
            payload["lora_path"] = self._lora_name
        regenerated = 0
        while True:
            epoch = self._abort_epoch
            out = await self._post_generate(loop, payload)
            if out.finish_reason != "abort" or epoch == self._abort_epoch:
                break
            regenerated += 1  # aborted by an in-flight update: again, under the new weights
            self._regenerated += 1
        if self._versioned and out.token_ids:
            out = replace(out, versions=token_versions(out), regenerated=regenerated)
        elif regenerated:
            out = replace(out, regenerated=regenerated)
        return out

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
        payload = score_payload(token_ids, start, self._lora_name)
        futures = {u: self._control.submit(self.clients[u].post, "/generate", payload)
                   for u in self.server_urls}
        return {u: parse_scores(fut.result(), token_ids, start) for u, fut in futures.items()}

    def _check_seed(self, sampling: SamplingParams) -> None:
        if sampling.seed is None or self.allow_unseeded:
            return
        plain = [u for u, i in self.infos.items() if not i.deterministic]
        if plain:
            raise SGLangError(
                f"seeded sampling asked (seed={sampling.seed}) but {', '.join(plain)} runs "
                "without --enable-deterministic-inference, where sglang silently ignores "
                "sampling_seed: launch with that flag (SGLangEngine.launch(deterministic=True)), "
                "or accept unseeded sampling (allow_unseeded=True; rollout.sglang.allow_unseeded)"
            )

    # ------------------------------------------------------------------ versions, in flight
    @property
    def weight_version(self) -> int:
        """The version of the servers' weights (``VersionedEngine``)."""
        return self._version

    @property
    def regenerated(self) -> int:
        """Requests aborted by "abort" in-flight updates and sent again so far."""
        return self._regenerated

    def set_weight_version(self, version: int) -> None:
        """Name the servers' current weights ``str(version)``; completions report versions."""
        if self.leader and not self._closed:
            self._post_all("/update_weight_version", {"new_version": str(int(version)),
                                                      "abort_all_requests": False})
        self._version = int(version)
        self._versioned = True

    def served_version(self) -> int | None:
        """The oldest version the servers hold (``SharedEngine``; ``/model_info``).

        Read from each server's ``weight_version``; None while one holds no numbered version
        (``"default"`` before the first ``set_weight_version``, or a name that is no number).
        """
        futures = [self._control.submit(self.clients[u].get, "/model_info")
                   for u in self.server_urls]
        versions = [str(fut.result().get("weight_version", "")) for fut in futures]
        if not all(v.lstrip("-").isdigit() for v in versions):
            return None
        return min(int(v) for v in versions)

    def update_weights_in_flight(self, weights: WeightsSource, version: int,
                                 mode: InflightMode) -> None:
        """Pause, update to ``version``, continue (module docstring; ``VersionedEngine``).

        Raises:
            RequestError: an unknown ``mode``.
            SGLangError: a server refused a call (generation is continued before it is raised).
        """
        if mode not in INFLIGHT_MODES:
            raise RequestError(f"mode must be one of {', '.join(INFLIGHT_MODES)}; got {mode!r}")
        if self._closed:
            raise EngineClosedError("SGLangEngine.update_weights_in_flight called after close()")
        _ = self.infos  # attach first: attaching generates, which a paused server never answers
        with self._inflight_lock:
            if mode == "abort":
                self._abort_epoch += 1
            try:
                if self.leader:
                    self._post_all("/pause_generation",
                                   {"mode": "in_place" if mode == "continue" else "abort"})
                try:
                    self.update_weights(weights, weight_version=str(int(version)),
                                        flush=mode == "abort")
                finally:
                    if self.leader:
                        self._post_all("/continue_generation", {})
            finally:
                if mode == "abort":
                    self._abort_epoch += 1
            self._version = int(version)
            self._versioned = True

    def update_weights(self, weights: WeightsSource, *, weight_version: str | None = None,
                       flush: bool = True) -> None:
        """Load new weights: a HF directory, or ``(name, tensor)`` pairs sent in buckets.

        On a non-leader engine the pairs are drained (the learner's iterator is collective) and
        nothing is sent. ``flush=False`` keeps the prefix cache (required while requests sit
        paused in place: sglang refuses to flush then). ``weight_version`` names the new
        weights on the servers (None: the name stays).

        Raises:
            SGLangError: a server refused the update or could not be reached.
        """
        if self._closed:
            raise EngineClosedError("SGLangEngine.update_weights called after close()")
        if self._lora is not None and not isinstance(weights, str | PathLike):
            self._load_adapter(weights, self._lora)
            return
        if not self.leader:
            if not isinstance(weights, str | PathLike):
                for _ in weights:
                    pass
            return
        if isinstance(weights, str | PathLike):
            self._load_from_disk(str(weights), weight_version, flush)
            self._weights_stale = False
            return
        _ = self.infos  # attach: decides "auto"
        if self.weight_sync == "disk":
            write_shards(buckets(weights, max_bytes=self.bucket_bytes, dtype=self.dtype),
                         self.sync_dir)
            self._load_from_disk(str(self.sync_dir), weight_version, flush)
        else:
            self._update_from_distributed(weights, weight_version, flush)
        self._weights_stale = False

    # ------------------------------------------------------------------ LoRA
    def serve_lora(self, lora: dict[str, Any], *, prefix: str, base_model: str = "") -> None:
        """Serve the policy's LoRA adapter instead of taking merged weights.

        From now on ``update_weights`` with ``(name, tensor)`` pairs takes the adapter's
        entries alone (``...lora_A.default.weight``) and every ``/generate`` names the adapter
        last loaded. Check the servers first with ``lora_refusal``.

        Args:
            lora: the adapter as ``peft.LoraConfig`` arguments.
            prefix: the adapters' served names are ``<prefix>-v<n>``, the same on every rank
                (non-leaders name the adapter the leader loaded).
            base_model: the base model's directory: written as the adapter's
                ``base_model_name_or_path``, and reloaded when a memory release dropped the
                servers' weights.
        """
        self._lora = dict(lora)
        self._lora_prefix = prefix
        self._lora_base = base_model

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
        return self._lora_name

    def _load_adapter(self, weights: Iterable[tuple[str, torch.Tensor]],
                      lora: dict[str, Any]) -> None:
        """Load the adapter as the next version, then unload the previous one (leader)."""
        self._lora_version += 1
        name = f"{self._lora_prefix}-v{self._lora_version}"
        old = self._lora_name
        if not self.leader:
            for _ in weights:
                pass
            self._lora_name = name
            return
        if old is None:
            self._unload_stale()
        if self._weights_stale:  # the base was released without a CPU backup: reload it
            self._load_from_disk(self._lora_base, None)
        root = self.sync_dir / "lora"
        path = write_peft_adapter(weights, lora, self._lora_base, root / name,
                                  dtype=self.dtype)
        self._post_all("/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        self._lora_name = name
        self._weights_stale = False
        if old is not None:
            self._post_all("/unload_lora_adapter", {"lora_name": old})
            shutil.rmtree(root / old, ignore_errors=True)

    def _unload_stale(self) -> None:
        """Unload adapters of an earlier process with this prefix (their names would clash)."""
        for url in self.server_urls:
            listed = _first_answer(self.clients[url], ("/v1/models",)) or {}
            for entry in listed.get("data", []) or []:
                ident = entry.get("id") if isinstance(entry, dict) else None
                if isinstance(ident, str) and ident.startswith(f"{self._lora_prefix}-v"):
                    check_success("/unload_lora_adapter", self.clients[url].post(
                        "/unload_lora_adapter", {"lora_name": ident}))

    @property
    def sync_dir(self) -> Path:
        """Where "disk" sync writes (created on first use)."""
        if self._sync_dir is None:
            self._sync_dir = Path(tempfile.mkdtemp(prefix="rlvr-sglang-sync-"))
        return self._sync_dir

    def _load_from_disk(self, path: str, weight_version: str | None, flush: bool = True) -> None:
        payload: dict[str, Any] = {"model_path": path, "flush_cache": flush}
        if weight_version is not None:
            payload["weight_version"] = weight_version
        self._post_all("/update_weights_from_disk", payload)

    def release_memory(self, tags: Sequence[str] | None = None) -> None:
        """Free the servers' memory before training (servers with the memory saver only).

        Generation is paused first (sglang asserts an idle scheduler; a failure there kills
        it); the released tags are remembered so ``resume_memory`` resumes exactly those.
        """
        if not self.leader or self._closed:
            return
        wanted = tuple(tags) if tags else ALL_TAGS
        targets = [u for u, i in self.infos.items() if i.memory_saver and u not in self._released]
        for url in targets:
            self.clients[url].post("/pause_generation", {"mode": "abort"})
            self._released[url] = wanted
            check_success("/release_memory_occupation",
                          self.clients[url].post("/release_memory_occupation",
                                                 {"tags": list(wanted)}))

    def resume_memory(self, tags: Sequence[str] | None = None) -> None:
        """Take back memory ``release_memory`` freed; continue generation once all is back.

        Args:
            tags: the tags to resume now (default: every tag still released). A weight sync
                into a colocated server resumes ``("weights",)`` first, updates, then resumes
                the rest, so the KV cache and CUDA graphs are not allocated while the update
                needs memory.

        Weights released on a server without ``--enable-weights-cpu-backup`` are gone: the
        engine refuses to generate until the next ``update_weights``.
        """
        if not self.leader or self._closed:
            return
        for url, released in list(self._released.items()):
            now = [t for t in released if tags is None or t in tags]
            left = tuple(t for t in released if t not in now)
            if now:
                check_success("/resume_memory_occupation",
                              self.clients[url].post("/resume_memory_occupation", {"tags": now}))
            if left:
                self._released[url] = left
            else:
                del self._released[url]
                self.clients[url].post("/continue_generation", {})
            if "weights" in now and not self.infos[url].weights_cpu_backup:
                self._weights_stale = True

    def flush_cache(self, wait_s: float = FLUSH_WAIT_S) -> None:
        """Drop the servers' prefix caches, retried while sglang answers 400 (requests run).

        Requests of other clients (other trainer ranks on shared servers) may be running: the
        flush waits for a moment without any, up to ``wait_s`` seconds per server.
        """
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

    def close(self) -> None:
        """Stop the HTTP pool, leave the weight group, stop the launched server. Idempotent."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._control.shutdown(wait=False, cancel_futures=True)
        if self._dist.group is not None:
            self._dist.leave()
        for proc in reversed(self.processes):  # the router first, then the servers, at once
            proc.terminate()
        for proc in reversed(self.processes):
            proc.stop()

    # ------------------------------------------------------------------ distributed weight path
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

        See ``rlvr.agents.sglang.dist_sync.DistributedWeights.join`` for the ranks and the group.

        Args:
            master_address: this host as the servers reach it (default: ``master_address`` of
                the engine, else the local end of a connection to the first server).
            master_port: a free port here (default: picked).
            backend: "nccl" for GPU servers, "gloo" for CPU ones (default: by server device).
            group_name: the group's name (default: a fresh ``rlvr_weights_<hex>``; a group
                abandoned after a failure keeps its name registered in torch, so a new one
                needs another).
            group_factory: overrides the engine's factory.
        """
        infos = self.infos
        address = master_address or self.master_address or local_address(self.server_urls[0])
        self._dist.join(
            infos, address, master_port or free_port(address),
            backend=backend or ("gloo" if all(i.device == "cpu" for i in infos.values())
                                else "nccl"),
            group_name=group_name or f"rlvr_weights_{uuid.uuid4().hex[:12]}",
            factory=group_factory or self.group_factory,
        )

    def _update_from_distributed(self, weights: Iterable[tuple[str, torch.Tensor]],
                                 weight_version: str | None, flush: bool = True) -> None:
        """One weight-update session over the group (joined first if need be), then a flush."""
        if self._dist.group is None:
            self.init_weight_update_group()
        self._dist.update(weights, weight_version, dtype=self.dtype,
                          bucket_bytes=self.bucket_bytes)
        if flush:
            self.flush_cache()

    # ------------------------------------------------------------------ HTTP
    def _post_all(self, path: str, payload: dict[str, Any]) -> None:
        futures = [self._control.submit(self.clients[u].post, path, payload)
                   for u in self.server_urls]
        for fut in futures:
            check_success(path, fut.result())


def _first_answer(client: ServerClient, paths: Sequence[str]) -> dict[str, Any] | None:
    for path in paths:
        try:
            return client.get(path)
        except SGLangHTTPError as exc:
            if exc.status in (401, 403):
                raise SGLangError(f"{client.url}{path}: HTTP {exc.status}; pass the server's "
                                  "--api-key (api_key=..., rollout.sglang.api_key)") from None
    return None
