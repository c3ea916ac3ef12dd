"""The collectives the trainer, learner and metrics use, in one place.

Every helper works without a process group (one process: rank 0 of 1, a no-op or a copy), so
callers never branch on ``dist.is_initialized()``. Each is a collective when there are several
ranks: every rank must call it, in the same order. Setting the process group up is
``rlvr.learner.parallel.init_distributed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist


def rank_and_world() -> tuple[int, int]:
    """This process's ``(rank, world_size)``; ``(0, 1)`` without a process group."""
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    """Wait for every rank."""
    if rank_and_world()[1] > 1:
        dist.barrier()


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """``values`` summed over all ranks, as a new tensor (a copy with one rank)."""
    out = values.clone()
    if rank_and_world()[1] > 1:
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def all_reduce_max(values: torch.Tensor) -> torch.Tensor:
    """The element-wise maximum of ``values`` over all ranks, as a new tensor."""
    out = values.clone()
    if rank_and_world()[1] > 1:
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return out


def all_reduce_sums(values: Sequence[float], device: torch.device) -> list[float]:
    """Element-wise float64 sums of ``values`` over all ranks (``device`` hosts the reduce)."""
    return all_reduce_sum(torch.tensor(list(values), dtype=torch.float64, device=device)).tolist()


def gather_objects(items: list[Any]) -> list[Any]:
    """All ranks' lists of picklable objects, concatenated in rank order."""
    world = rank_and_world()[1]
    if world == 1:
        return items
    out: list[Any] = [None] * world
    dist.all_gather_object(out, items)
    return [x for part in out for x in part]


def gather_rows(t: torch.Tensor) -> torch.Tensor:
    """All ranks' ``(B, R_rank)`` tensors stacked row-wise, right-padded with 0 to the widest R."""
    world = rank_and_world()[1]
    if world == 1:
        return t
    widths = [torch.zeros(1, dtype=torch.long, device=t.device) for _ in range(world)]
    dist.all_gather(widths, torch.tensor([t.shape[1]], device=t.device))
    width = int(max(w.item() for w in widths))
    padded = torch.nn.functional.pad(t, (0, width - t.shape[1]))
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat(parts, dim=0)


__all__ = [
    "all_reduce_max",
    "all_reduce_sum",
    "all_reduce_sums",
    "barrier",
    "gather_objects",
    "gather_rows",
    "rank_and_world",
]
