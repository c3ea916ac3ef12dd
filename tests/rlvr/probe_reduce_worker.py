"""A gloo rank for test_version_probe (its own light module: spawned ranks import only this)."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from rlvr.training.version_probe import reduce_probe_metrics


def reduce_worker(rank: int, port: int, inputs: list[dict[str, float]], out: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        out[rank] = reduce_probe_metrics(inputs[rank], torch.device("cpu"))
    finally:
        dist.destroy_process_group()
