"""Asynchronous RL (rollout.max_staleness >= 1) end to end on the tiny model: a real short run."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import QUIET, SMALL_MODEL

from rlvr.config import load_config
from rlvr.errors import ConfigError, WeightSyncError
from rlvr.trainer import Trainer
from rlvr.training.rollout_source import SyncRollout

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STEPS, PROMPTS, GROUP = 4, 4, 4


def _config(tmp_path: Path, *extra: str):
    return load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", f"trainer.steps={STEPS}",
        "eval.every=2", "eval.tasks=8", "trainer.checkpoint_every=0",
        f"rollout.prompts_per_step={PROMPTS}", f"rollout.group_size={GROUP}", *extra,
    ])


def test_k1_trains_every_step_once_on_its_own_engine_copy(tmp_path):
    trainer = Trainer(_config(tmp_path, "rollout.max_staleness=1", "actor.tis_cap=2.0"),
                      log=lambda *_: None)
    assert trainer.engine.model is not trainer.actor.module  # its own copy of the weights
    collected: list[int] = []
    collect = trainer.stream.collect

    def recording(step, position=0):
        collected.append(step)
        return collect(step, position)

    trainer.stream.collect = recording
    history = trainer.train().history
    producer = trainer.rollout.producer
    assert producer is not None
    assert collected == [1, 2, 3, 4]  # each step played once, in order
    assert producer.trained == STEPS * PROMPTS * GROUP and producer.accounted
    assert dict(producer.dropped) == {"stale": 0, "untrained": 0}
    ages = [m["async/staleness_max"] for m in history]
    assert ages[0] == 0.0 and all(0.0 <= a <= 1.0 for a in ages)
    for m in history:
        assert 0.0 <= m["async/engine_idle_frac"] <= 1.0
        assert 0.0 <= m["async/learner_idle_frac"] <= 1.0
    # step 1 was played by the weights the learner started from: the sync guard checked it
    assert history[0]["rollout/logprob_diff"] < 1e-3
    for m in history:  # decoupled PPO: the behaviour weights acted
        assert "actor/tis_weight_mean" in m and "async/logprob_diff" in m
        assert ("rollout/logprob_diff" in m) == (m["async/staleness_max"] == 0.0)
    assert "eval/accuracy" in history[1] and "eval/accuracy" in history[3]
    # the probe proved the versions the engine loaded (rlvr.training.version_probe)
    proven = [m for m in history if "sync/probe_logprob_diff" in m]
    assert proven and history[-1]["sync/probe_checks"] >= 2
    for m in proven:
        assert m["sync/probe_logprob_diff"] < 1e-5 and 1 <= m["sync/probe_version"] < STEPS


def test_a_weight_load_that_did_not_land_stops_the_run(tmp_path):
    """The engine claims version v but kept the first weights: rows it plays are one version
    behind the learner, so only the probe can see it (fresh_mismatch checks none of them)."""
    trainer = Trainer(_config(tmp_path, "rollout.max_staleness=1", "actor.tis_cap=2.0",
                              "actor.optim.lr=3e-3", "actor.entropy_coef=1.0", "eval.every=0"),
                      log=lambda *_: None)  # the entropy bonus moves the weights at reward 0
    trainer.engine.update_weights = lambda weights: None  # every later load is lost
    with pytest.raises(WeightSyncError, match=r"claims to hold the weights of version \d+.*"
                                              r"sync/probe_logprob_diff"):
        trainer.train()


def test_async_needs_a_tis_cap(tmp_path):
    with pytest.raises(ConfigError, match="actor.tis_cap"):
        _config(tmp_path, "rollout.max_staleness=1")


def test_async_takes_the_sglang_engine(tmp_path):
    """The server holds its own weights (trained against it in test_sglang_real.py)."""
    config = _config(tmp_path, "rollout.max_staleness=1", "actor.tis_cap=2.0",
                     "rollout.engine=sglang", "rollout.inflight_update=continue")
    assert config.rollout.engine == "sglang" and config.rollout.max_staleness == 1


def test_k0_keeps_the_synchronous_loop(tmp_path):
    trainer = Trainer(_config(tmp_path, "trainer.steps=1", "eval.every=0"), log=lambda *_: None)
    try:
        assert trainer.shares_weights and trainer.engine.model is trainer.actor.module
    finally:
        trainer.close()
    assert isinstance(trainer.rollout, SyncRollout)


def test_resume_plays_on_from_the_checkpoint_without_replaying(tmp_path):
    """A resumed async run starts its producer at the step after the checkpoint, its task
    position and weights version; the steps before are never played or trained again."""
    first = Trainer(_config(tmp_path, "rollout.max_staleness=1", "actor.tis_cap=2.0",
                            "trainer.steps=2", "trainer.checkpoint_every=1", "eval.every=0"),
                    log=lambda *_: None)
    first.train()
    resumed = Trainer(_config(tmp_path, "rollout.max_staleness=1", "actor.tis_cap=2.0",
                              "trainer.resume=true", "eval.every=0"), log=lambda *_: None)
    assert resumed.state.step == 2
    played: list[tuple[int, int]] = []
    collect = resumed.stream.collect

    def recording(step, position=0):
        played.append((step, position))
        return collect(step, position)

    resumed.stream.collect = recording
    history = resumed.train().history
    assert played == [(3, 2 * PROMPTS), (4, 3 * PROMPTS)]
    assert len(history) == 2 and resumed.rollout.producer is not None
    assert resumed.rollout.producer.accounted
    assert resumed.rollout.producer.trained == 2 * PROMPTS * GROUP
    # the engine started from the checkpoint's weights: step 3 was generated at version 2
    assert history[0]["async/staleness_max"] == 0.0 and history[0]["rollout/logprob_diff"] < 1e-3


@pytest.mark.parametrize("mode", ["continue", "abort"])
def test_inflight_updates_train_every_episode_once(tmp_path, mode):
    """With rollout.inflight_update the learner's new weights go into the engine while the
    producer's episodes are mid-generation (the engine is slowed so that they are): rows mix
    versions, none is staler than k, each step is played once and every episode trained."""
    import time

    trainer = Trainer(_config(tmp_path, "rollout.max_staleness=1", "actor.tis_cap=2.0",
                              f"rollout.inflight_update={mode}", "eval.every=0"),
                      log=lambda *_: None)

    def hold(mod, args):  # while the learner trains and has not published: they land mid-flight
        producer = trainer.rollout.producer
        if producer is not None and producer.trained and \
                producer.weights.version <= producer.engine_version:
            time.sleep(0.08)

    slow = trainer.engine.model.get_input_embeddings().register_forward_pre_hook(hold)
    collected: list[int] = []
    collect = trainer.stream.collect

    def recording(step, position=0):
        collected.append(step)
        return collect(step, position)

    trainer.stream.collect = recording
    try:
        history = trainer.train().history
    finally:
        slow.remove()
    producer = trainer.rollout.producer
    assert producer is not None and producer.inflight == mode
    assert collected == [1, 2, 3, 4]
    assert producer.trained == STEPS * PROMPTS * GROUP and producer.accounted
    assert dict(producer.dropped) == {"stale": 0, "untrained": 0}
    assert all(m["async/staleness_max"] <= 1.0 for m in history)
    last = history[-1]
    assert last["async/inflight_updates"] >= 1, [m["async/inflight_updates"] for m in history]
    assert all(0.0 <= m["async/stale_token_frac"] <= 1.0 for m in history)
    if mode == "continue":  # a row that lived through a swap mixes versions
        assert sum(m["async/mixed_version_rows"] for m in history) >= 1
    else:  # a row running at the swap was generated again, under one version
        assert last["async/regenerated"] >= 1
        assert all(m["async/mixed_version_rows"] == 0 for m in history)


@pytest.mark.slow
def test_sigkill_during_async_training_resumes_without_training_anything_twice(tmp_path):
    """A run with in-flight updates killed (SIGKILL) once step 3 is logged, its producer ahead:
    the resumed run restarts from the last complete checkpoint (every 2 steps; 2, or 4 on a fast
    machine where step 4 finished before the kill landed), plays each later step once from its
    task position, trains every episode it starts, and the metrics hold each step once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from rlvr.config.loader import dump_config
    from rlvr.metrics import read_jsonl

    steps = 8  # more than the kill can overrun
    base = ["rollout.max_staleness=1", "actor.tis_cap=2.0", "rollout.inflight_update=continue",
            "trainer.checkpoint_every=2", "eval.every=0", f"trainer.steps={steps}"]
    cfg_path = tmp_path / "config.yaml"
    dump_config(_config(tmp_path / "run", *base), cfg_path)
    out = tmp_path / "run"

    def logged() -> list[float]:
        path = out / "metrics.jsonl"
        return [r["step"] for r in read_jsonl(path) if "reward/mean" in r] if path.exists() \
            else []

    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "train", str(cfg_path)],
                            cwd=CONFIGS.parent, env=dict(os.environ, OMP_NUM_THREADS="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    try:
        while max(logged(), default=0) < 3:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the run never reached step 3"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = sorted(int(c.parent.name.removeprefix("step_"))
                  for c in (out / "checkpoints").glob("step_*/COMPLETE"))
    assert done and done[-1] % 2 == 0 and 2 <= done[-1] < steps, done
    start = done[-1]
    resumed = Trainer(load_config(cfg_path, ["trainer.resume=true"]), log=lambda *_: None)
    assert resumed.state.step == start
    played: list[tuple[int, int]] = []
    collect = resumed.stream.collect

    def recording(step, position=0):
        played.append((step, position))
        return collect(step, position)

    resumed.stream.collect = recording
    resumed.train()
    producer = resumed.rollout.producer
    assert producer is not None and producer.accounted
    assert played == [(s, (s - 1) * PROMPTS) for s in range(start + 1, steps + 1)]
    assert producer.trained == (steps - start) * PROMPTS * GROUP
    assert dict(producer.dropped) == {"stale": 0, "untrained": 0}
    assert logged() == list(range(1, steps + 1))  # the killed run's later steps were replaced
