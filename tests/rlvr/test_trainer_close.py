"""A run that dies mid-step still closes what it holds (real engine, threads and writers)."""

import threading
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainer_helpers import SMALL_MODEL  # noqa: E402 (shared trainer-test overrides)

from rlvr.config import load_config
from rlvr.metrics import read_jsonl
from rlvr.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _live_threads(prefix: str, before: set[threading.Thread]) -> list[str]:
    """Threads named ``prefix...`` started since ``before`` that are still alive after 10 s.

    Other tests' threads may still run; the env pool shuts down without waiting, so its idle
    threads exit soon after ``close()``, not during it.
    """
    mine = [t for t in set(threading.enumerate()) - before if t.name.startswith(prefix)]
    for t in mine:
        t.join(timeout=10)
    return [t.name for t in mine if t.is_alive()]


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_a_run_that_raises_in_a_step_is_still_closed(tmp_path, error):
    config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", "trainer.steps=4",
        "trainer.progress=false", "trainer.plot=false", "trainer.export_at_end=false",
        "trainer.tensorboard=true", "trainer.threads=1", "rollout.prompts_per_step=2",
        "rollout.group_size=2", "eval.tasks=2", "eval.every=0",
    ])
    threads_before, started_before = torch.get_num_threads(), set(threading.enumerate())
    trainer = Trainer(config, log=lambda *_: None)
    update, calls = trainer.update, []

    def failing_update(batch):
        calls.append(1)
        if len(calls) == 2:
            raise error("injected in step 2")
        return update(batch)

    trainer.update = failing_update
    with pytest.raises(error, match="injected in step 2"):
        trainer.train()

    assert trainer.closed
    assert not _live_threads("TransformersEngine", started_before), "engine thread still runs"
    assert not _live_threads("env", started_before), "the runner's env threads still run"
    assert torch.get_num_threads() == threads_before
    assert trainer.logger.closed
    steps = [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl") if "reward/mean" in r]
    assert steps == [1]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()  # only what the closed writer flushed to disk
    assert [e.step for e in events.Scalars("reward/mean")] == [1]
    trainer.close()  # idempotent



@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_a_run_that_fails_while_being_built_closes_its_engine(tmp_path, monkeypatch, error):
    """A failure after the engine is built (a tracker that cannot start, a held-out suite that
    cannot load, a checkpoint that cannot resume) closes the engine and what else was built, so
    a launched server or an engine thread never outlives the failed construction, and releases
    the run folder's lock."""
    import rlvr.trainer as trainer_module

    config_overrides = SMALL_MODEL + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", "trainer.steps=2",
        "trainer.progress=false", "trainer.plot=false", "trainer.threads=1",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "eval.tasks=2", "eval.every=0",
    ]
    config = load_config(CONFIGS / "quickstart.yaml", config_overrides)
    threads_before = torch.get_num_threads()
    engines: list = []
    build_engine = trainer_module.Trainer._build_engine

    def recorded(self, own_weights):
        built = build_engine(self, own_weights)
        engines.append(built.engine)
        return built

    def failing_logger(*args, **kwargs):
        raise error("injected: the trackers cannot start")

    monkeypatch.setattr(trainer_module.Trainer, "_build_engine", recorded)
    monkeypatch.setattr(trainer_module, "MetricsLogger", failing_logger)
    with pytest.raises(error, match="injected"):
        Trainer(config, log=lambda *_: None)
    assert len(engines) == 1 and engines[0]._closed, "the engine was left open"
    assert torch.get_num_threads() == threads_before
    monkeypatch.undo()
    again = load_config(CONFIGS / "quickstart.yaml", [*config_overrides, "trainer.overwrite=true"])
    Trainer(again, log=lambda *_: None).close()  # the run folder's lock was released
