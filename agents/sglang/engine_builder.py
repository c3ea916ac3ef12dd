"""``build``: the SGLang entry of ``agents.engines.ENGINES`` (attach by URL, or launch one)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.engines import BuiltEngine, EngineRequest
from agents.errors import EngineConfigError
from agents.sglang.engine import SGLangEngine
from agents.sglang.options import SGLangOptions


def build(request: EngineRequest) -> BuiltEngine:
    """Attach to ``options.url``, or launch a server on ``request.model`` (one rank only).

    Raises:
        EngineConfigError: launching asked with several trainer ranks, or options of a wrong type.
        SGLangError: the server is unusable (``agents.sglang.server_info``) or did not start.
    """
    opts = request.options if request.options is not None else SGLangOptions()
    if isinstance(opts, Mapping):
        opts = SGLangOptions(**opts)
    if not isinstance(opts, SGLangOptions):
        raise EngineConfigError(f"the sglang engine takes SGLangOptions; got {type(opts).__name__}")
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
        engine = SGLangEngine(opts.url, server_urls=opts.server_urls or None,
                              api_key=opts.api_key, **common)
    else:
        if request.world_size > 1:
            raise EngineConfigError(
                "rollout.sglang.url is null (launch a server) but the run has "
                f"{request.world_size} trainer ranks: start the servers yourself and set "
                "rollout.sglang.url"
            )
        engine = SGLangEngine.launch(str(request.model_path), python=opts.python,
                                     api_key=opts.api_key, extra_args=opts.launch_args,
                                     startup_timeout_s=opts.startup_timeout_s, **common)
    try:
        dtype = engine.dtype  # attaches: reads and checks every server
        if opts.url and request.serve_model and request.leader:
            engine.update_weights(str(request.model_path))
    except BaseException:
        engine.close()
        raise
    return BuiltEngine(engine, dtype, info={"urls": list(engine.urls)})
