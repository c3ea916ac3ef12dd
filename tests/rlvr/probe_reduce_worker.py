"""A gloo rank for test_version_probe (its own light module: spawned ranks import only this)."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from rlvr.training.version_probe import VersionProbe, reduce_probe_metrics
from rlvr.trajectory import Trajectory


def reduce_worker(rank: int, port: int, inputs: list[dict[str, float]], out: Any) -> None:
    """Reduce this rank's probe metrics; then record the learner's scores where only rank 0 has
    a probe (the forwards must pair up: each rank counts its own and the ranks compare)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        reduced = reduce_probe_metrics(inputs[rank], torch.device("cpu"))
        probe = VersionProbe(pad_id=0)
        if rank == 0:
            probe.choose([Trajectory([1, 2], [3, 4], [1, 1], [0.0, 0.0], [0.0, 0.0])])
        forwards = []

        def score_rows(batch):  # stands in for the FSDP forward: a collective per call
            forwards.append(batch.response_mask.shape[1])
            dist.barrier()
            return torch.zeros(batch.response_mask.shape)

        probe.record_learner(1, score_rows)
        out[rank] = (reduced, forwards, sorted(probe._learner))
    finally:
        dist.destroy_process_group()
