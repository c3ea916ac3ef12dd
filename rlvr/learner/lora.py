"""LoRA adapters on the policy, through ``peft``: train the adapter, keep the base frozen.

``apply_lora`` injects peft's LoRA layers into a causal LM in place
(``peft.inject_adapter_in_model``: the module keeps its class, so every forward path of the
learner and the engines is unchanged)
and freezes every parameter but the adapters'. It runs on the plain module before sharding, on
every rank (full or meta), so FSDP2 shards adapter and base alike and the optimizer, built over
``requires_grad`` parameters, holds the adapter only.

The reference policy of a LoRA run is the same module with its adapters switched off
(``adapters_disabled``): no second copy of the model, one extra forward for KL.

``adapter_state`` gives the adapter tensors alone (what a sync sends); ``save_adapter`` writes
them in peft's format (``adapter_config.json`` + ``adapter_model.safetensors``), which
``peft.PeftModel.from_pretrained`` and SGLang's ``--lora-paths`` / ``/load_lora_adapter`` load.

Paper: Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models",
https://arxiv.org/abs/2106.09685. rlvr sets every dropout to 0 in RL (``rlvr.learner.dropout``),
LoRA's included, so there is no dropout setting.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlvr.config_checks import bounded, check_fields
from rlvr.errors import ConfigError

ADAPTER_NAME = "default"
"""peft's adapter name for the one adapter rlvr trains."""

PEFT_PREFIX = "base_model.model."
"""The key prefix peft's ``PeftModel.save_pretrained`` writes (and its loaders expect)."""

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(kw_only=True)
class LoraConfig:
    """A LoRA adapter on the policy (``actor.lora``).

    Attributes:
        rank: the adapter's rank r (>= 1).
        alpha: the scale numerator: the adapter's output is multiplied by ``alpha / rank``.
        target_modules: names of the linear layers that get an adapter (matched against the
            last part of module names, as peft does); default every attention and MLP
            projection of Llama-family decoders.
        export_merged: the export also writes the merged model as a plain HF directory
            (``<output_dir>/export_merged``) beside the adapter (``<output_dir>/export``).
    """

    rank: int = bounded(8, ge=1)
    alpha: float = bounded(16.0, gt=0)
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    export_merged: bool = False

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.target_modules or not all(
            isinstance(name, str) and name for name in self.target_modules
        ):
            raise ConfigError("target_modules must be a non-empty list of module names",
                              key="target_modules")

    def peft_kwargs(self) -> dict[str, Any]:
        """The ``peft.LoraConfig`` arguments (plain data: an engine injects the same layers)."""
        return {"r": self.rank, "lora_alpha": self.alpha, "lora_dropout": 0.0,
                "target_modules": list(self.target_modules), "bias": "none",
                "task_type": "CAUSAL_LM"}

    def peft_config(self) -> Any:
        """The equivalent ``peft.LoraConfig``."""
        return _peft().LoraConfig(**self.peft_kwargs())


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:  # pragma: no cover - peft comes with the `lora` extra
        raise ConfigError("actor.lora needs the 'peft' package: pip install 'rlvr[lora]'",
                          key="lora") from exc
    return peft


def apply_lora(module: nn.Module, config: LoraConfig) -> nn.Module:
    """Inject LoRA adapters into ``module`` in place; freeze everything else.

    Raises:
        ConfigError: no module matches ``target_modules`` (the message lists linear layer names).
    """
    peft = _peft()
    names = {name.rsplit(".", 1)[-1] for name, sub in module.named_modules()
             if isinstance(sub, nn.Linear)}
    if not names & set(config.target_modules):
        raise ConfigError(
            f"target_modules {config.target_modules} match no linear layer of "
            f"{type(module).__name__}; its linear layers are {sorted(names)}",
            key="target_modules",
        )
    peft.inject_adapter_in_model(config.peft_config(), module, adapter_name=ADAPTER_NAME)
    for name, param in module.named_parameters():
        param.requires_grad_(is_adapter_name(name))
    return module


def is_adapter_name(name: str) -> bool:
    """Whether a parameter or state-dict name belongs to a LoRA adapter."""
    return ".lora_A." in name or ".lora_B." in name


def has_adapters(module: nn.Module) -> bool:
    """Whether ``module`` holds injected LoRA layers."""
    return any(_is_lora_layer(sub) for sub in module.modules())


def _is_lora_layer(sub: nn.Module) -> bool:
    return hasattr(sub, "lora_A") and hasattr(sub, "enable_adapters")


@contextlib.contextmanager
def adapters_disabled(module: nn.Module) -> Iterator[nn.Module]:
    """Inside the block ``module`` computes with its base weights alone (the reference policy)."""
    layers: list[Any] = [sub for sub in module.modules() if _is_lora_layer(sub)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield module
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def adapter_state(named: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """The adapter entries of a ``(name, tensor)`` stream (e.g. ``named_full_tensors()``).

    The stream must still be consumed to its end by every rank (it is collective); the others
    are dropped as they pass.
    """
    for name, tensor in named:
        if is_adapter_name(name):
            yield name, tensor


def merged_tensors(
    named: Iterator[tuple[str, torch.Tensor]], config: LoraConfig
) -> Iterator[tuple[str, torch.Tensor]]:
    """A LoRA module's ``(name, tensor)`` stream as the plain model's, adapters merged in.

    Each adapted layer's ``base_layer.weight`` becomes ``weight + (alpha / rank) * B @ A`` under
    the plain name (``...q_proj.weight``); the adapter entries are consumed. This is what a
    server that cannot serve LoRA receives, and what a merged export writes. Collective like its
    input: consume it to the end on every rank.
    """
    scale = config.alpha / config.rank
    held: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in named:
        if ".base_layer." in name:
            prefix, _, leaf = name.partition(".base_layer.")
            if leaf != "weight":  # a bias passes through under its plain name
                yield f"{prefix}.{leaf}", tensor
                continue
            part = "W"
        elif is_adapter_name(name):
            prefix = name.split(".lora_")[0]
            part = "A" if ".lora_A." in name else "B"
        else:
            yield name, tensor
            continue
        parts = held.setdefault(prefix, {})
        parts[part] = tensor
        if len(parts) == 3:
            del held[prefix]
            w, a, b = parts["W"], parts["A"], parts["B"]
            delta = (b.to(torch.float32) @ a.to(torch.float32)) * scale
            yield f"{prefix}.weight", (w.to(torch.float32) + delta).to(w.dtype)
    if held:
        raise RuntimeError(f"LoRA layers without base weight or adapter pair: {sorted(held)}")


def peft_key(name: str) -> str:
    """A state-dict name as peft's adapter files store it (prefix, no adapter name)."""
    return PEFT_PREFIX + name.replace(f".{ADAPTER_NAME}.", ".")


def save_adapter(
    tensors: dict[str, torch.Tensor], config: LoraConfig, base_model: str, out_dir: str | Path
) -> Path:
    """Write an adapter in peft's format: ``adapter_config.json`` + ``adapter_model.safetensors``.

    Args:
        tensors: the adapter's state-dict entries (names as in the module).
        config: the adapter's settings.
        base_model: recorded as ``base_model_name_or_path`` (the base an evaluation loads).
        out_dir: the directory to write (created).
    """
    from safetensors.torch import save_file

    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    save_file({peft_key(k): v.detach().to("cpu").contiguous() for k, v in tensors.items()},
              str(target / "adapter_model.safetensors"), metadata={"format": "pt"})
    peft_config = config.peft_config()
    peft_config.base_model_name_or_path = str(base_model)
    settings = peft_config.to_dict()
    settings = {k: (sorted(v) if isinstance(v, set) else v) for k, v in settings.items()}
    (target / "adapter_config.json").write_text(json.dumps(settings, indent=2, default=str))
    return target


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a peft adapter directory (it holds ``adapter_config.json``)."""
    return (Path(path) / "adapter_config.json").is_file()


def load_merged(adapter_dir: str | Path, *, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32) -> Any:
    """The base model of a peft adapter directory with the adapter merged in (for inference)."""
    from transformers import AutoModelForCausalLM

    peft = _peft()
    settings = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    base = settings.get("base_model_name_or_path")
    if not base:
        raise ConfigError(f"{adapter_dir}/adapter_config.json names no base_model_name_or_path",
                          key="model")
    model: Any = AutoModelForCausalLM.from_pretrained(str(base), dtype=dtype)
    model = model.to(device)
    merged = peft.PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    return merged


__all__ = [
    "ADAPTER_NAME",
    "DEFAULT_TARGETS",
    "LoraConfig",
    "adapter_state",
    "adapters_disabled",
    "apply_lora",
    "has_adapters",
    "is_adapter_dir",
    "is_adapter_name",
    "load_merged",
    "merged_tensors",
    "peft_key",
    "save_adapter",
]
