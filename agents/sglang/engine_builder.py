"""``build``: the SGLang entry of ``rlvr.agents.engine_registry.ENGINES`` (attach or launch).

It composes the two halves: the servers (attached by URL, or launched as a fleet by
``rlvr.agents.sglang.fleet.launch_fleet``) and the ``SGLangEngine`` that talks to them.

With a LoRA policy (``request.lora``) a launched server is started with LoRA enabled and serves
the adapter; an attached one serves it when its launch arguments allow
(``rlvr.agents.sglang.lora.serving_refusal``). Otherwise the engine takes merged weights, and the
log says why, once.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from rlvr.agents.engine_registry import BuiltEngine, EngineRequest, engine_options
from rlvr.agents.errors import EngineConfigError
from rlvr.agents.sglang.client import ServerClient
from rlvr.agents.sglang.engine import SGLangEngine
from rlvr.agents.sglang.fleet import LaunchSpec, launch_fleet
from rlvr.agents.sglang.lora import launch_flags, launchable
from rlvr.agents.sglang.options import SGLangOptions
from rlvr.agents.sglang.router import router_workers
from rlvr.agents.sglang.server_process import PYTHON_ENV, default_device

logger = logging.getLogger(__name__)


def build(request: EngineRequest) -> BuiltEngine:
    """Attach to ``options.url``, or launch servers on ``request.model`` (one rank only).

    Attached to a router without ``server_urls``, the servers are the router's ``/workers``.

    Raises:
        EngineConfigError: launching asked with several trainer ranks, or options of a wrong type.
        SGLangError: the server is unusable (``rlvr.agents.sglang.server_info``) or did not start.
    """
    opts: SGLangOptions = engine_options(request)
    sync_dir = opts.sync_dir or (str(Path(request.work_dir) / "weights_sync")
                                 if request.work_dir else None)
    common: dict[str, Any] = {
        "request_timeout_s": opts.request_timeout_s,
        "max_concurrency": max(8, min(256, request.max_batch_size)),
        "allow_unseeded": opts.allow_unseeded,
        "weight_sync": opts.weight_sync,
        "bucket_bytes": opts.bucket_bytes,
        "sync_dir": sync_dir,
        "master_address": opts.master_address,
        "leader": request.leader,
    }
    if opts.url:
        server_urls = opts.server_urls or router_workers(ServerClient(
            opts.url, api_key=opts.api_key, timeout_s=opts.request_timeout_s))
        engine = SGLangEngine(opts.url, server_urls=server_urls or None,
                              api_key=opts.api_key, server_python=opts.python
                              or os.environ.get(PYTHON_ENV), **common)
    else:
        if request.world_size > 1:
            raise EngineConfigError(
                "rollout.sglang.url is null (launch a server) but the run has "
                f"{request.world_size} trainer ranks: start the servers (and sglang-router) "
                "yourself and set rollout.sglang.url"
            )
        extra = list(opts.launch_args)
        if request.lora is not None and launchable(request.lora, default_device()) is None:
            extra = launch_flags(request.lora, default_device()) + extra
        fleet = launch_fleet(str(request.model_path), LaunchSpec(
            python=opts.python, api_key=opts.api_key, extra_args=extra,
            startup_timeout_s=opts.startup_timeout_s, servers=opts.servers,
            router_args=opts.router_args))
        try:
            engine = SGLangEngine(fleet, api_key=opts.api_key, **common)
        except BaseException:
            fleet.close()
            raise
    try:
        dtype = engine.dtype  # attaches: reads and checks every server
        if opts.url and request.serve_model and request.leader:
            engine.update_weights(str(request.model_path))
        serves_adapter = request.lora is not None and _serve_lora(engine, request)
    except BaseException:
        engine.close()
        raise
    return BuiltEngine(engine, dtype, serves_adapter=serves_adapter,
                       info={"urls": list(engine.urls), "server_urls": list(engine.server_urls)})


def _serve_lora(engine: SGLangEngine, request: EngineRequest) -> bool:
    """Make ``engine`` serve the request's adapter if its servers can; else log why not."""
    lora = request.lora or {}
    launched = engine.process is not None  # on this machine's device
    why = (launchable(lora, default_device()) if launched else None) or engine.lora_refusal(lora)
    if why is not None:
        if request.leader:
            logger.warning("sglang cannot serve the LoRA adapter (%s): each sync sends the "
                           "merged weights instead (a full-model update)", why)
        return False
    seed = str(request.work_dir or request.model_path).encode()
    engine.serve_lora(lora, prefix=f"rlvr-{hashlib.sha1(seed).hexdigest()[:8]}",
                      base_model=str(request.model_path))
    return True
