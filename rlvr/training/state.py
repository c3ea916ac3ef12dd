"""The trainer's own state: counters, RNG and KL controller; periodic checkpoints; stage timing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlvr.algorithms.kl import KLController
from rlvr.distributed import barrier, rank_and_world
from rlvr.learner import Checkpointer, CheckpointError, complete_checkpoints, prune_checkpoints
from rlvr.training.rng import gather_rng_states, restore_rng_states


class TrainerState:
    """The trainer's own checkpointed state: counters, the KL controller and RNG states.

    Sampling and shuffles are seeded from ``(seed, step, ...)``; ``tasks_drawn`` is the position
    in the task stream (epochs without replacement, ``rlvr.training.tasks``). RNG states
    (python, numpy, torch, CUDA) are saved for every rank, keyed by rank, and each rank gets its
    own back (``rlvr.training.rng``), for user code that draws from global RNGs.
    ``state_dict`` is collective (DCP calls it on every rank).
    """

    def __init__(self, kl_controller: KLController) -> None:
        self.step = 0
        self.episodes = 0
        self.tasks_drawn = 0  # the task stream position (rlvr.training.tasks): tasks played
        self.kl_controller = kl_controller
        self.rng_restored = False  # whether the last load gave this rank its own RNG states

    def state_dict(self) -> dict[str, Any]:
        """Counters, controller and every rank's RNG states (picklable values for DCP)."""
        return {"step": self.step, "episodes": self.episodes, "tasks_drawn": self.tasks_drawn,
                "rng": gather_rng_states(),
                "kl": self.kl_controller.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``."""
        self.step = int(state["step"])
        self.episodes = int(state["episodes"])
        self.tasks_drawn = int(state["tasks_drawn"])
        self.kl_controller.load_state_dict(state["kl"])
        self.rng_restored = restore_rng_states(state["rng"])



class Checkpoints:
    """Periodic DCP checkpoints under ``output_dir/checkpoints/step_NNNNNN`` and resume.

    Args:
        checkpointer: saves/loads the actor, critic and trainer state.
        root: the checkpoints directory.
        every: save every this many steps (0 = never).
        keep: how many most recent checkpoints to keep.
    """

    def __init__(self, checkpointer: Checkpointer, root: Path, every: int, keep: int) -> None:
        self.checkpointer = checkpointer
        self.root = root
        self.every = every
        self.keep = keep

    def maybe_resume(self, enabled: bool, log: Any = print) -> Path | None:
        """Load the latest intact checkpoint when ``enabled`` and one exists; return it.

        A damaged checkpoint (``CheckpointError``: a file changed or truncated since it was
        saved) is renamed ``.<name>.damaged`` (kept for inspection, never loaded or pruned)
        and the previous one is tried, with a warning through ``log``.

        Raises:
            CheckpointError: every checkpoint is damaged (names the newest).
        """
        damaged: list[CheckpointError] = []
        for path in complete_checkpoints(self.root) if enabled else []:
            try:
                self.checkpointer.load(path)
            except CheckpointError as err:
                damaged.append(err)
                barrier()  # every rank has checked it before it moves
                if rank_and_world()[0] == 0:
                    path.rename(path.with_name(f".{path.name}.damaged"))
                barrier()
                log(f"[rlvr] WARNING: {err}; it is set aside as {path.parent}/.{path.name}"
                    ".damaged, trying the previous checkpoint")
                continue
            if damaged:
                log(f"[rlvr] WARNING: resumed from the previous intact checkpoint {path}, not "
                    f"from the damaged {damaged[0].path.name}")
            return path
        if damaged:
            raise CheckpointError(damaged[0].path, [
                *damaged[0].problems, "no earlier intact checkpoint to resume from; start over "
                "with trainer.overwrite=true"])
        return None

    def maybe_save(self, step: int) -> Path | None:
        """Save when ``step`` is due (collective); prune all but the newest ``keep``."""
        if not self.every or step % self.every:
            return None
        path = self.checkpointer.save(self.root / f"step_{step:06d}")
        prune_checkpoints(self.root, self.keep)
        return path



class StageTimer:
    """Accumulates wall-clock seconds per stage: ``with timer("rollout"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        """Time the ``with`` block as ``stage``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        """``time/<stage>`` and ``time/step`` in seconds."""
        out = {f"time/{k}": v for k, v in self.seconds.items()}
        out["time/step"] = sum(self.seconds.values())
        return out

