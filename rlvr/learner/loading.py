"""Build a sharded model reading its weights once: on rank 0, broadcast into every rank's shard.

With one rank the model is loaded and sharded as it is. With several, rank 0 loads the full
model on the CPU (one copy in host memory); the other ranks build the same module on the meta
device (no memory), every rank shards it with FSDP2, the meta ranks allocate only their shards
(``to_empty``), and rank 0's tensors are scattered one at a time into each rank's shard
(``distribute_tensor(..., src_data_rank=0)``; only the shard is kept). Buffers (e.g. rotary
frequencies, which are not in the state dict) are broadcast from rank 0 too. So the host memory
of loading is one full copy on rank 0 plus one shard per rank, instead of a full fp32 copy on
every rank.

``build_sharded`` is the one place every learner model (actor, critic, reference) is built:
``prepare`` (freezing, activation checkpointing, or anything else to do to the plain module
before sharding) runs on every rank's module, full or meta.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from rlvr.learner.parallel import DistInfo

__all__ = ["build_sharded", "empty_causal_lm"]


def empty_causal_lm(path: str | Path, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The causal LM of an HF directory's ``config.json`` on the meta device (no weights read).

    Built with ``from_config(config, dtype=dtype)``, as ``from_pretrained(..., dtype=dtype)``
    builds rank 0's model, so every buffer has the dtype rank 0's has: the rotary ``inv_freq``
    stays float32 in a bf16 model. (``model.to(dtype)`` would cast those buffers too, and the
    broadcast of buffers from rank 0 would then mix float32 and bf16 across ranks: gloo aborts,
    NCCL hangs or sends garbage.)
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(path))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def build_sharded(
    load_full: Callable[[torch.device], nn.Module],
    build_empty: Callable[[], nn.Module],
    shard: Callable[[nn.Module], nn.Module],
    info: DistInfo,
) -> nn.Module:
    """The FSDP2-sharded model, its weights read on rank 0 only.

    Args:
        load_full: loads the full model with its weights onto the given device (rank 0 only,
            or the single rank).
        build_empty: the same module on the meta device (every other rank).
        shard: prepares and ``fully_shard``s a module (full or meta), returning it.
        info: rank, world size and device.

    Returns:
        The sharded module; on every rank its shards hold rank 0's weights.
    """
    if info.world_size == 1:
        return shard(load_full(info.device))
    if info.rank == 0:
        module = load_full(torch.device("cpu"))
        full = {k: v.detach() for k, v in module.state_dict().items()}  # the full tensors
    else:
        module = build_empty()
        full = {}
    module = shard(module)  # FSDP2 moves rank 0's shards to the device; meta stays meta
    if info.rank != 0:
        module.to_empty(device=info.device)
    with torch.no_grad():
        for name, local in module.state_dict().items():
            _scatter_from_rank0(full.pop(name, None), local, info)
        # Buffers outside the state dict (non-persistent, e.g. rotary frequencies).
        for buf in module.buffers():
            held = buf.to(info.device)
            dist.broadcast(held, src=0)
            if held.data_ptr() != buf.data_ptr():
                buf.copy_(held)
    del full
    return module


def _scatter_from_rank0(full: torch.Tensor | None, local: torch.Tensor, info: DistInfo) -> None:
    """Fill ``local`` (a DTensor shard or a replicated tensor) from rank 0's ``full`` tensor.

    One full-size tensor exists at a time on each rank (the one being sent), and only its
    shard stays. (``set_model_state_dict(..., StateDictOptions(full_state_dict=True,
    broadcast_from_rank0=True))`` is not used: in torch 2.13 its ``_distribute_tensors`` keeps
    each received full tensor referenced, as a view, until the whole dict is loaded.)
    """
    shape = local.shape  # the global shape, for a DTensor too
    if full is None:
        full = torch.empty(shape, dtype=local.dtype, device=info.device)
    else:
        full = full.to(device=info.device, dtype=local.dtype)
    if isinstance(local, DTensor):
        shard = distribute_tensor(full, local.device_mesh, local.placements, src_data_rank=0)
        local.to_local().copy_(shard.to_local())
    else:
        dist.broadcast(full, src=0)
        local.copy_(full)
