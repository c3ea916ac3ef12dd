"""What rlvr reads from a vLLM server on attach, and what it refuses.

``read_server_info`` asks ``GET /server_info?config_format=json`` (dev mode) for the server's
config, ``GET /v1/models`` for its served name and context length, and each worker's facts from
rlvr's worker extension (``rlvr_info``). A server rlvr cannot use correctly is refused on attach
(``VLLMError`` naming the fix): no dev mode or no worker extension (no weight sync, no checks), a
``--logprobs-mode`` other than ``processed_logprobs`` (its logprobs would not be the tempered
ones the learner recomputes), data parallelism inside one server (rlvr would reach one replica's
workers only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.agents.errors import VLLMError
from rlvr.agents.sglang.client import ServerClient
from rlvr.agents.vllm.rpc import DEV_MODE_HINT, ServerRPC

LOGPROBS_MODE = "processed_logprobs"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class VLLMServerInfo:
    """One vLLM server, as read on attach.

    Attributes:
        url: its base URL.
        model: the served model name (what ``/v1/completions`` requests name).
        max_model_len: its context length.
        dtype: the dtype its workers hold the weights in.
        device: ``cpu`` or ``cuda``.
        workers: its workers (tensor x pipeline parallel ranks), each's ``rlvr_info``.
        lora_max_rank: the largest LoRA rank it serves (None: started without ``--enable-lora``).
        sleep_mode: started with ``--enable-sleep-mode`` (``/sleep`` and ``/wake_up`` work).
        version: the vLLM release.
    """

    url: str
    model: str
    max_model_len: int
    dtype: torch.dtype
    device: str
    workers: list[dict[str, Any]] = field(default_factory=list)
    lora_max_rank: int | None = None
    sleep_mode: bool = False
    version: str = ""

    @property
    def gpus(self) -> set[int]:
        """The (physical) GPU ids its workers use."""
        return {int(w["gpu"]) for w in self.workers if w.get("gpu") is not None}


def _config(client: ServerClient) -> dict[str, Any]:
    try:
        body = client.get("/server_info?config_format=json")
    except Exception as exc:  # noqa: BLE001 - 404 without dev mode, or unreachable
        raise VLLMError(f"{client.url}/server_info failed ({exc}): {DEV_MODE_HINT}") from None
    config = body.get("vllm_config")
    if isinstance(config, str):
        import json

        config = json.loads(config)
    if not isinstance(config, dict):
        raise VLLMError(f"{client.url}/server_info has no vllm_config: {str(body)[:300]}")
    return config


def read_server_info(client: ServerClient, rpc: ServerRPC) -> VLLMServerInfo:
    """Read and check one server (see the module docstring).

    Raises:
        VLLMError: the server is unusable; the message says why and how to fix it.
    """
    config = _config(client)
    model_cfg = config.get("model_config") or {}
    parallel = config.get("parallel_config") or {}
    mode = model_cfg.get("logprobs_mode")
    if mode != LOGPROBS_MODE:
        raise VLLMError(f"{client.url} reports logprobs_mode {mode!r}: rlvr needs the sampled "
                        f"tokens' tempered logprobs; start it with --logprobs-mode {LOGPROBS_MODE}")
    if int(parallel.get("data_parallel_size", 1) or 1) != 1:
        raise VLLMError(f"{client.url} runs data_parallel_size="
                        f"{parallel.get('data_parallel_size')}: start one server per replica "
                        "and list them in rollout.vllm.url and server_urls")
    models = client.get("/v1/models").get("data") or []
    if not models:
        raise VLLMError(f"{client.url}/v1/models lists no model")
    try:
        workers = rpc.collective(client, "rlvr_info")
    except VLLMError as exc:
        raise VLLMError(f"{exc}; the worker extension is missing or failed: start the server "
                        "with --worker-extension-cls rlvr_vllm_worker.RlvrWorkerExtension and "
                        "its folder on PYTHONPATH (docs/engines.md, \"vLLM\")") from None
    dtype = _DTYPES.get(str(workers[0].get("dtype"))) if workers else None
    if dtype is None:
        raise VLLMError(f"{client.url}: workers report dtype {workers[:1]}; rlvr sends "
                        f"{', '.join(_DTYPES)}")
    max_len = int(models[0].get("max_model_len") or model_cfg.get("max_model_len") or 0)
    if max_len < 1:
        raise VLLMError(f"{client.url} reports no context length (max_model_len)")
    lora = config.get("lora_config")
    try:
        version = str(client.get("/version").get("version", ""))
    except Exception:  # noqa: BLE001 - optional
        version = ""
    return VLLMServerInfo(
        url=client.url, model=str(models[0]["id"]),
        max_model_len=max_len,
        dtype=dtype, device=str(workers[0].get("device", "cpu")), workers=workers,
        lora_max_rank=int(lora["max_lora_rank"]) if isinstance(lora, dict) else None,
        sleep_mode=bool(model_cfg.get("enable_sleep_mode")), version=version)
