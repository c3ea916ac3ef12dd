"""Checkpoints keep every rank's own RNG states (python, numpy, torch, CUDA) and give them back."""

from __future__ import annotations

import json
import os
import pickle
import random
import sys
from pathlib import Path

import numpy as np
import torch

from rlvr.training import rng
from rlvr.training.rng import gather_rng_states, restore_rng_states, rng_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def draw() -> list[float]:
    return [random.random(), float(np.random.rand()), float(torch.rand(1))]


def test_state_holds_numpy_and_cuda_slots_and_round_trips():
    state = rng_state()
    assert set(state) == {"python", "numpy", "torch", "cuda"}
    if not torch.cuda.is_available():
        assert state["cuda"] is None
    blob = gather_rng_states()
    first = draw()
    np.random.seed(1)
    torch.manual_seed(1)
    assert restore_rng_states(blob)
    assert draw() == first


def test_each_rank_gets_its_own_entry(monkeypatch):
    """Rank keys simulated in one process: rank 1 restores rank 1's states, not rank 0's."""
    states = {}
    for r in (0, 1):
        random.seed(10 + r)
        np.random.seed(20 + r)
        torch.manual_seed(30 + r)
        states[r] = rng_state()
    blob = pickle.dumps(states)
    expected = {}
    for r in (0, 1):
        rng.set_rng_state(states[r])
        expected[r] = draw()
    assert expected[0] != expected[1]
    for r in (1, 0):
        monkeypatch.setattr(rng, "rank_and_world", lambda r=r: (r, 2))
        torch.manual_seed(99)
        assert restore_rng_states(blob)
        assert draw() == expected[r]
    monkeypatch.setattr(rng, "rank_and_world", lambda: (2, 3))  # resumed with more ranks than saved
    torch.manual_seed(99)
    before = torch.get_rng_state()
    assert not restore_rng_states(blob)
    assert torch.equal(torch.get_rng_state(), before)


def test_two_gloo_ranks_each_resume_their_own_rng(tmp_path, run_process_group):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run_process_group(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(HERE / "rng_two_rank_worker.py"), str(tmp_path)],
        cwd=REPO, env=env, timeout=300, check=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["restored"]
        assert r["after_load"] == r["after_save"]  # python, numpy and torch all restored
    assert ranks[0]["after_save"] != ranks[1]["after_save"]  # each its own, not rank 0's
