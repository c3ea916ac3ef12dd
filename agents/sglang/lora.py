"""Serving the policy's LoRA adapter on SGLang servers (instead of syncing merged weights).

A LoRA run's policy is a frozen base plus a small adapter. A server launched with LoRA enabled
(``launch_flags``) keeps the base and serves the adapter: each sync writes the adapter in peft's
format (``write_peft_adapter``) to a directory the server reads, loads it under a new name
(``POST /load_lora_adapter`` ``{lora_name, lora_path}``), unloads the previous one
(``POST /unload_lora_adapter`` ``{lora_name}``), and every ``/generate`` names the current one
(``lora_path: <name>``). Request fields as in sglang 0.5.23's ``srt/managers/io_struct.py``
(``LoadLoRAAdapterReqInput``, ``UnloadLoRAAdapterReqInput``, ``GenerateReqInput.lora_path``).

An attached server serves the adapter only when its ``/server_info`` says LoRA is enabled with
a large enough ``max_lora_rank`` and target modules covering the adapter's
(``serving_refusal`` says why not); otherwise the engine receives merged weights.

The adapter arrives as ``(name, tensor)`` pairs named as in the learner's module
(``model.layers.0.self_attn.q_proj.lora_A.default.weight``); the file holds them under peft's
``save_pretrained`` keys (``base_model.model.`` prefix, no adapter name), which sglang's loader
reads.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from rlvr.agents.sglang.server_info import ServerInfo

PEFT_PREFIX = "base_model.model."
ADAPTER_NAME = "default"
"""peft's name for the one adapter the learner trains (dropped from the saved keys)."""

_FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
          "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}
"""sglang's fused layers (``srt/lora/utils.get_normalized_target_modules``)."""

SUPPORTED_TARGETS = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                               "down_proj", "qkv_proj", "gate_up_proj"})
"""Target modules rlvr asks a launched server to serve (a subset of sglang's
``SUPPORTED_LORA_TARGET_MODULES`` for Llama-family decoders)."""


def launch_flags(lora: Mapping[str, Any], device: str) -> list[str]:
    """``launch_server`` flags that enable serving ``lora`` (``peft.LoraConfig`` arguments).

    On CPU the LoRA backend is ``torch_native`` (sglang's default, ``csgmv``, is a Triton
    kernel).
    """
    flags = ["--enable-lora", "--max-lora-rank", str(int(lora["r"])),
             "--lora-target-modules", *list(lora["target_modules"])]
    if device == "cpu":
        flags += ["--lora-backend", "torch_native"]
    return flags


CPU_REFUSAL = (
    "sglang 0.5.23 cannot serve LoRA on CPU: at start its LoRA manager wraps each target layer "
    "(srt/lora/lora_manager.py:1154 init_lora_modules), and every LoRA layer pins host memory "
    "(srt/lora/layers.py:475, ColumnParallelLinearWithLoRA.__init__: torch.tensor(offsets, "
    "device='cpu', pin_memory=True)), which raises 'pin_memory=True requires a CUDA or other "
    "accelerator backend'"
)
"""Measured: ``launch_server --device cpu --enable-lora --lora-backend torch_native`` dies there."""


def launchable(lora: Mapping[str, Any], device: str) -> str | None:
    """Why a server launched on ``device`` cannot serve ``lora`` (None: it can)."""
    if device == "cpu":
        return CPU_REFUSAL
    odd = sorted(set(lora["target_modules"]) - SUPPORTED_TARGETS)
    if odd:
        return (f"target modules {odd} are not among sglang's LoRA layers "
                f"{sorted(SUPPORTED_TARGETS)}")
    return None


def _normalized(names: Iterable[str]) -> set[str]:
    return {_FUSED.get(n.rsplit(".", 1)[-1], n.rsplit(".", 1)[-1]) for n in names}


def serving_refusal(info: ServerInfo, lora: Mapping[str, Any]) -> str | None:
    """Why a server cannot serve ``lora`` (None: it can).

    Args:
        info: the server's checked ``/server_info``.
        lora: the adapter as ``peft.LoraConfig`` arguments (``r``, ``target_modules``).
    """
    if not info.lora_enabled:
        return "it runs without --enable-lora"
    if info.max_lora_rank is None or info.max_lora_rank < int(lora["r"]):
        return f"its --max-lora-rank is {info.max_lora_rank}, below the adapter's rank {lora['r']}"
    served = set(info.lora_target_modules)
    if not served:
        return "it reports no --lora-target-modules"
    if served & {"all", "all-linear"}:
        return None
    missing = sorted(_normalized(lora["target_modules"]) - _normalized(served))
    if missing:
        return f"its --lora-target-modules {sorted(served)} lack {missing}"
    return None


def peft_key(name: str) -> str:
    """A learner state-dict name as peft's adapter file stores it."""
    return PEFT_PREFIX + name.replace(f".{ADAPTER_NAME}.", ".")


def adapter_config(lora: Mapping[str, Any], base_model: str) -> dict[str, Any]:
    """``adapter_config.json`` for ``lora`` (the fields peft and sglang read)."""
    return {
        "peft_type": "LORA",
        "task_type": lora.get("task_type", "CAUSAL_LM"),
        "base_model_name_or_path": base_model,
        "r": int(lora["r"]),
        "lora_alpha": lora["lora_alpha"],
        "lora_dropout": float(lora.get("lora_dropout", 0.0)),
        "target_modules": sorted(lora["target_modules"]),
        "bias": lora.get("bias", "none"),
        "fan_in_fan_out": False,
        "use_dora": False,
        "use_rslora": False,
        "modules_to_save": None,
        "inference_mode": True,
    }


def write_peft_adapter(
    tensors: Iterable[tuple[str, torch.Tensor]],
    lora: Mapping[str, Any],
    base_model: str,
    out_dir: str | Path,
    *,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write ``(name, tensor)`` adapter pairs as a peft adapter directory.

    Args:
        tensors: the adapter's entries (``...lora_A.default.weight`` / ``...lora_B...``).
        lora: the adapter as ``peft.LoraConfig`` arguments.
        base_model: recorded as ``base_model_name_or_path``.
        out_dir: the directory (replaced when it exists).
        dtype: cast the tensors to this (the server's dtype); None keeps theirs.

    Raises:
        ValueError: ``tensors`` holds no adapter entry.
    """
    from safetensors.torch import save_file

    state = {}
    for name, tensor in tensors:
        t = tensor.detach().to("cpu")
        state[peft_key(name)] = (t.to(dtype) if dtype is not None else t).contiguous()
    if not state:
        raise ValueError("no LoRA adapter tensors to write (expected ...lora_A/lora_B... names)")
    target = Path(out_dir)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    save_file(state, str(target / "adapter_model.safetensors"), metadata={"format": "pt"})
    (target / "adapter_config.json").write_text(
        json.dumps(adapter_config(lora, base_model), indent=2))
    return target
