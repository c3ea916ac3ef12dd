"""Run by ``torchrun --nproc_per_node=2`` from test_async_two_ranks.py (not a test itself).

``fresh``: the sync guard's numbers (``fresh_mismatch``) when rank 0's rows are all at the
learner's version and rank 1's are not. Then three asynchronous runs (``rollout.max_staleness=1``,
the tiny quickstart) in one process group, each in ``out_dir/<job>``; every rank writes
``<job>/rank<r>.json``:

- ``run``: 2 steps, a held-out evaluation and a checkpoint at step 2, in-flight updates on (a
  pusher thread beside each producer); rank 1's producer hands in one row of step 2 stamped
  with a version far too old (dropped as stale on rank 1 only).
- ``resume``: the same folder resumed from the step-2 checkpoint for one more step.
- ``fail``: rank 1's producer raises while playing step 2; each rank records what it raised.

Every ``torch.distributed`` call made outside the main thread is recorded (``off_main``): the
producer's path must make none (the default process group is the learner thread's).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

from trainer_helpers import QUIET, SMALL_MODEL  # noqa: E402
from worker_exit import end_worker  # noqa: E402

from rlvr.config import load_config  # noqa: E402
from rlvr.learner import init_distributed  # noqa: E402
from rlvr.trainer import Trainer  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
PROMPTS, GROUP = 4, 2
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor",
               "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier",
               "gather", "scatter", "reduce", "send", "recv")
off_main: list[str] = []
on_main: list[int] = [0]  # the wrappers do see the learner's collectives


def record_collectives() -> None:
    """Wrap the collectives of ``torch.distributed``: a call off the main thread is recorded."""
    for name in COLLECTIVES:
        fn = getattr(dist, name)

        def wrapped(*args, _fn=fn, _name=name, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                off_main.append(f"{_name} on {threading.current_thread().name}")
            else:
                on_main[0] += 1
            return _fn(*args, **kwargs)

        setattr(dist, name, wrapped)


def config(out: Path, *extra: str):
    return load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={out}", "eval.tasks=4",
        f"rollout.prompts_per_step={PROMPTS}", f"rollout.group_size={GROUP}",
        "rollout.max_staleness=1", "actor.tis_cap=2.0", *extra])


def play(trainer: Trainer, rank: int, *, stale_at: int = 0, fail_at: int = 0) -> list:
    """Record the (step, position) pairs the producer plays; inject a stale row or a failure."""
    played: list[list[int]] = []
    collect = trainer.stream.collect

    def recording(step, position=0):
        played.append([step, position])
        if rank == 1 and step == fail_at:
            raise RuntimeError("engine died on rank 1")
        trajs, metrics = collect(step, position)
        if rank == 1 and step == stale_at:
            trajs[0].policy_versions = [-10] * len(trajs[0].response_ids)
        return trajs, metrics

    trainer.stream.collect = recording
    return played


def record(trainer: Trainer, played: list, history: list, **extra) -> dict:
    producer = trainer.rollout.producer
    assert producer is not None
    return {"played": played, "history": history, "started": producer.started,
            "trained": producer.trained, "dropped": dict(producer.dropped),
            "accounted": producer.accounted, "off_main": list(off_main), "on_main": on_main[0],
            **extra}


def fresh_job(out: Path, rank: int) -> None:
    """Rank 0: one row at the learner's version 4; rank 1: one row at 4, one at 3."""
    import torch

    from rlvr.batch import RolloutBatch
    from rlvr.training.async_rollout import fresh_mismatch
    from rlvr.trajectory import Trajectory

    def row(version: int) -> Trajectory:
        return Trajectory(prompt_ids=[1, 2], response_ids=[5, 5], response_mask=[1, 1],
                          rollout_logprobs=[-0.5, -0.5], token_level_scores=[0.0, 0.0],
                          policy_versions=[version, version])

    batch = RolloutBatch.from_trajectories([row(4)] if rank == 0 else [row(4), row(3)], 0)
    old = [[-0.5, -0.7]] if rank == 0 else [[-0.9, -0.5], [-3.0, -3.0]]
    batch.set("old_logprobs", torch.tensor(old))
    measured = {"rollout/logprob_diff": 1.3, "rollout/kl": 0.4}  # stage B's, over all ranks
    (out / "fresh").mkdir(exist_ok=True)
    (out / "fresh" / f"rank{rank}.json").write_text(json.dumps(fresh_mismatch(batch, 4, measured)))


def main() -> None:
    out = Path(sys.argv[1])
    rank = init_distributed("cpu").rank
    record_collectives()
    fresh_job(out, rank)
    run = out / "run"
    trainer = Trainer(config(run, "trainer.steps=2", "trainer.checkpoint_every=2",
                             "eval.every=2", "rollout.inflight_update=continue"),
                      log=lambda *_: None)
    played = play(trainer, rank, stale_at=2)
    history = trainer.train().history
    (run / f"rank{rank}.json").write_text(json.dumps(record(trainer, played, history)))

    trainer = Trainer(config(run, "trainer.steps=3", "trainer.checkpoint_every=2",
                             "eval.every=0", "rollout.inflight_update=continue",
                             "trainer.resume=true"), log=lambda *_: None)
    played = play(trainer, rank)
    history = trainer.train().history
    (out / "resume").mkdir(exist_ok=True)
    (out / "resume" / f"rank{rank}.json").write_text(json.dumps(record(
        trainer, played, history, resumed_step=trainer.resumed_from is not None)))

    fail = out / "fail"
    trainer = Trainer(config(fail, "trainer.steps=3", "trainer.checkpoint_every=0",
                             "eval.every=0"), log=lambda *_: None)
    played = play(trainer, rank, fail_at=2)
    try:
        trainer.train()
        raised = None
    except Exception as err:  # noqa: BLE001  # recorded, compared by the test
        raised = f"{type(err).__name__}: {err}"
    (fail / f"rank{rank}.json").write_text(json.dumps(record(
        trainer, played, [], raised=raised, closed=trainer.closed)))
    end_worker()  # no interpreter teardown: it could abort rank 0 (see worker_exit)


if __name__ == "__main__":
    main()
