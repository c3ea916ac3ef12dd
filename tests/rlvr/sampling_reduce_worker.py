"""A gloo rank for test_sampling_metrics (its own light module: spawned ranks import only this)."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from rlvr.training.stream import reduce_sampling_metrics


def reduce_worker(rank: int, port: int, inputs: list[dict[str, float]], out: Any) -> None:
    """Reduce this rank's dynamic-sampling metrics and hand back what it logs."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        out[rank] = reduce_sampling_metrics(inputs[rank], torch.device("cpu"))
    finally:
        dist.destroy_process_group()
