"""``build``: the vLLM entry of ``rlvr.agents.engine_registry.ENGINES`` (attach or launch).

Attached (``url`` set) it talks to running servers; else it launches ``servers`` servers on the
policy (one trainer rank only) with the flags of ``rlvr.agents.vllm.launch``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rlvr.agents.engine_registry import BuiltEngine, EngineRequest, engine_options
from rlvr.agents.errors import EngineConfigError
from rlvr.agents.vllm.engine import VLLMEngine
from rlvr.agents.vllm.launch import VLLMLaunch
from rlvr.agents.vllm.options import VLLMOptions

logger = logging.getLogger(__name__)


def build(request: EngineRequest) -> BuiltEngine:
    """Attach to ``options.url`` (and ``server_urls``), or launch servers on ``request.model``.

    Raises:
        EngineConfigError: launching asked with several trainer ranks.
        VLLMError: a server is unusable (``rlvr.agents.vllm.server_info``) or did not start.
    """
    opts: VLLMOptions = engine_options(request)
    sync_dir = opts.sync_dir or (str(Path(request.work_dir) / "weights_sync")
                                 if request.work_dir else None)
    common: dict[str, Any] = {"request_timeout_s": opts.request_timeout_s,
              "max_concurrency": max(8, min(256, request.max_batch_size)),
              "weight_sync": opts.weight_sync, "bucket_bytes": opts.bucket_bytes,
              "sync_dir": sync_dir, "master_address": opts.master_address,
              "leader": request.leader}
    if opts.url:
        engine = VLLMEngine([opts.url, *opts.server_urls], api_key=opts.api_key, **common)
    else:
        if request.world_size > 1:
            raise EngineConfigError(
                "rollout.vllm.url is null (launch a server) but the run has "
                f"{request.world_size} trainer ranks: start the servers yourself and set "
                "rollout.vllm.url")
        engine = VLLMEngine.launch(str(request.model_path), VLLMLaunch(
            python=opts.python, api_key=opts.api_key, servers=opts.servers,
            extra_args=tuple(opts.launch_args), startup_timeout_s=opts.startup_timeout_s,
            log_dir=request.work_dir), **common)
    try:
        dtype = engine.dtype  # attaches: reads and checks every server
        if opts.url and request.serve_model and request.leader:
            engine.update_weights(str(request.model_path))
    except BaseException:
        engine.close()
        raise
    if request.lora is not None and request.leader:
        logger.warning("the vllm engine takes merged weights for a LoRA policy (each sync "
                       "sends the full model)")
    return BuiltEngine(engine, dtype, serves_adapter=False,
                       info={"urls": list(engine.urls), "weight_sync": engine.weight_sync})
