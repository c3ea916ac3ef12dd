"""Run by ``torchrun --nproc_per_node=2`` from test_rng_checkpoint.py (not a test itself).

Each rank seeds its RNGs differently, saves a checkpoint of the trainer state, draws numbers,
scrambles its RNGs, loads the checkpoint and draws again; it writes both draws as JSON.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from rlvr.algorithms.kl import FixedKLController
from rlvr.learner import Checkpointer
from rlvr.training.state import TrainerState

sys.path.insert(0, str(Path(__file__).parent))
from worker_exit import end_worker  # noqa: E402


def draw() -> list[float]:
    return [random.random(), float(np.random.rand()), float(torch.rand(1))]


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    random.seed(100 + rank)
    np.random.seed(200 + rank)
    torch.manual_seed(300 + rank)
    state = TrainerState(FixedKLController(0.1))
    checkpointer = Checkpointer({"trainer": state})
    checkpointer.save(out / "step_1")
    after_save = draw()
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    checkpointer.load(out / "step_1")
    after_load = draw()
    (out / f"rank{rank}.json").write_text(json.dumps(
        {"after_save": after_save, "after_load": after_load, "restored": state.rng_restored}))
    end_worker()  # no interpreter teardown: it could abort rank 0 (see worker_exit)


if __name__ == "__main__":
    main()
