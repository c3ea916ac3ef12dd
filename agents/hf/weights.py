"""The transformers engine's weights: reading a HF checkpoint, copying pairs into the module."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from os import PathLike
from pathlib import Path

import torch
from torch import nn

from rlvr.agents.errors import WeightUpdateError


def load_weights(model: nn.Module, items: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy ``items`` into ``model``'s tensors (the caller holds the engine's lock, no grad).

    Raises:
        WeightUpdateError: an unknown name (close names are suggested) or a shape mismatch.
    """
    targets = model.state_dict(keep_vars=True)
    for name, tensor in items:
        if name not in targets:
            close = difflib.get_close_matches(name, list(targets), n=3)
            raise WeightUpdateError(
                f"update_weights: unknown parameter {name!r}"
                + (f"; did you mean {close}?" if close else "")
            )
        target = targets[name]
        if tuple(target.shape) != tuple(tensor.shape):
            raise WeightUpdateError(
                f"update_weights: {name!r} has shape {tuple(tensor.shape)}; the model "
                f"expects {tuple(target.shape)}"
            )
        target.data.copy_(tensor.to(device=target.device, dtype=target.dtype))


def read_checkpoint(path: str | PathLike[str]) -> Iterable[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs of a HF checkpoint directory (safetensors or ``.bin``)."""
    root = Path(path)
    if not root.is_dir():
        raise WeightUpdateError(f"update_weights: {str(root)!r} is not a directory")
    from safetensors.torch import load_file

    index = root / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [item for f in files for item in load_file(root / f).items()]
    if (root / "model.safetensors").exists():
        return list(load_file(root / "model.safetensors").items())
    if (root / "pytorch_model.bin").exists():
        return list(torch.load(root / "pytorch_model.bin", weights_only=True).items())
    raise WeightUpdateError(
        f"update_weights: no model.safetensors, model.safetensors.index.json or pytorch_model.bin "
        f"in {str(root)!r}"
    )
