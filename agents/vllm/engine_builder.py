"""``build``: the vLLM entry of ``rlvr.agents.engine_registry.ENGINES`` (attach or launch).

Attached (``url`` set) it talks to running servers; else it launches ``servers`` servers on the
policy (one trainer rank only) with the flags of ``rlvr.agents.vllm.launch`` (and LoRA enabled
for a LoRA policy). A LoRA policy's adapter is served (``rlvr.agents.vllm.lora``) when every
server can; otherwise the servers take merged weights.
"""

from __future__ import annotations

import hashlib
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
            log_dir=request.work_dir,
            lora_rank=int(request.lora["r"]) if request.lora is not None else None), **common)
    try:
        dtype = engine.dtype  # attaches: reads and checks every server
        if opts.url and request.serve_model and request.leader:
            engine.update_weights(str(request.model_path))
        serves_adapter = request.lora is not None and _serve_lora(engine, request)
    except BaseException:
        engine.close()
        raise
    return BuiltEngine(engine, dtype, serves_adapter=serves_adapter,
                       info={"urls": list(engine.urls),
                             "weight_sync": "adapter" if serves_adapter else engine.weight_sync})


def _serve_lora(engine: VLLMEngine, request: EngineRequest) -> bool:
    """Make ``engine`` serve the request's adapter if its servers can; else log why not."""
    lora = request.lora or {}
    why = engine.lora_refusal(lora)
    if why is not None:
        if request.leader:
            logger.warning("vllm cannot serve the LoRA adapter (%s): each sync sends the merged "
                           "weights instead (a full-model update)", why)
        return False
    seed = str(request.work_dir or request.model_path).encode()
    engine.serve_lora(lora, prefix=f"rlvr-{hashlib.sha1(seed).hexdigest()[:8]}",
                      base_model=str(request.model_path))
    return True
