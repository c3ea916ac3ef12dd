"""Dynamic sampling's metrics over several ranks (``rlvr.training.stream``)."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp
from sampling_reduce_worker import reduce_worker

from rlvr.training.stream import KEPT_GROUP_FRAC, REFILL_ROUNDS, reduce_sampling_metrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_rank_logs_its_own_numbers():
    metrics = {REFILL_ROUNDS: 2.0, KEPT_GROUP_FRAC: 0.25, "loss": 1.0}
    assert reduce_sampling_metrics(metrics, torch.device("cpu")) == metrics


@pytest.mark.timeout(120)
def test_two_ranks_log_the_longest_refill_and_the_mean_kept_fraction():
    """Rank 1 refilled three times while rank 0 kept every group at once: the step waited for
    three rounds and kept 5 of 8 groups; each rank used to log its own (rank 0's was kept)."""
    inputs = [{REFILL_ROUNDS: 0.0, KEPT_GROUP_FRAC: 1.0, "data/epoch": 0.5},
              {REFILL_ROUNDS: 3.0, KEPT_GROUP_FRAC: 0.25, "data/epoch": 0.5}]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(reduce_worker, args=(_free_port(), inputs, out), nprocs=2, join=True)
        results = [out[0], out[1]]
    assert results[0] == results[1] == {REFILL_ROUNDS: 3.0, KEPT_GROUP_FRAC: 0.625,
                                        "data/epoch": 0.5}
