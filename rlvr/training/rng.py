"""Every rank's RNG states, for checkpoints: python, numpy, torch CPU and (when present) CUDA.

``gather_rng_states()`` collects the states of all ranks into one blob keyed by rank, so a DCP
checkpoint (where a non-tensor value is written once, not per rank) still holds each rank's own;
``restore_rng_states(blob)`` gives each rank back its own entry. A rank missing from the blob (the
run resumed with more ranks than it saved with) keeps its current, seeded state and is reported
in the return value.

The trainer draws tasks, sampling seeds and shuffles from ``(seed, step, ...)``, not from these
generators; they are saved so that user code (envs, reward functions) that draws from the global
RNGs continues as it would have.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import numpy as np
import torch

from rlvr.distributed import gather_objects, rank_and_world


def rng_state() -> dict[str, Any]:
    """This process's RNG states: ``python``, ``numpy``, ``torch`` and ``cuda`` (or None).

    ``cuda`` is ``{"device": index, "state": ByteTensor}`` for the current CUDA device when
    CUDA is available and initialised, else None.
    """
    cuda = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        device = torch.cuda.current_device()
        cuda = {"device": device, "state": torch.cuda.get_rng_state(device)}
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(), "cuda": cuda}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore ``rng_state()`` (the CUDA state only where CUDA is available)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(cuda["state"], cuda["device"])


def gather_rng_states() -> bytes:
    """Every rank's ``rng_state()`` as a pickled ``{rank: state}`` (collective; same on all)."""
    return pickle.dumps(dict(enumerate(gather_objects([rng_state()]))))


def restore_rng_states(blob: bytes) -> bool:
    """Set this rank's RNGs from a ``gather_rng_states()`` blob.

    Returns:
        True if the blob held this rank's states; False if not (nothing is changed).
    """
    states = pickle.loads(blob)
    rank, _ = rank_and_world()
    if "python" in states:  # a checkpoint from before states were keyed by rank
        states = {0: states}
    if rank not in states:
        return False
    set_rng_state(states[rank])
    return True


__all__ = ["gather_rng_states", "restore_rng_states", "rng_state", "set_rng_state"]
