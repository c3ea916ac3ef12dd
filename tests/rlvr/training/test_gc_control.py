"""When the training loop lets the cyclic garbage collector run (``rlvr.training.gc_control``)."""

import gc
import weakref
from pathlib import Path

import pytest
from trainer_helpers import QUIET, SMALL_MODEL

from rlvr.config import load_config
from rlvr.trainer import train
from rlvr.training.gc_control import collections_paused, frozen_setup
from rlvr.training.stream import EpisodeStream

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


class Node:
    pass


def test_training_loop_freezes_the_setup_heap_after_collecting_its_garbage():
    kept, cyclic = Node(), Node()
    cyclic.self = cyclic  # garbage only a collection frees
    dead = weakref.ref(cyclic)
    del cyclic
    with frozen_setup():
        assert dead() is None  # collected before the freeze: no garbage is kept forever
        assert gc.get_freeze_count() > 0
        assert all(o is not kept for o in gc.get_objects())  # frozen: out of every collection
    assert gc.get_freeze_count() == 0 and any(o is kept for o in gc.get_objects())


def test_collections_paused_defers_cycles_to_the_next_collection_and_restores_the_collector():
    assert gc.isenabled()
    with collections_paused():
        assert not gc.isenabled()
        cyclic = Node()
        cyclic.self = cyclic
        dead = weakref.ref(cyclic)
        del cyclic
        for _ in range(5000):  # far past the young-generation threshold: still nothing collected
            Node()
        assert dead() is not None
        with collections_paused():  # nested: the outer pause is kept
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.collect()
    assert dead() is None  # the deferred cycle went with the next collection


def test_collections_paused_restores_the_collector_after_an_error_and_keeps_it_off_if_it_was():
    with pytest.raises(RuntimeError), collections_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with collections_paused():
            pass
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()


def test_the_trainer_pauses_collections_during_the_rollout_only(tmp_path, monkeypatch):
    seen = []
    collect = EpisodeStream.collect

    def spy(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return collect(self, *args, **kwargs)

    monkeypatch.setattr(EpisodeStream, "collect", spy)
    config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", "trainer.steps=2",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "eval.tasks=4", "eval.every=0"])
    train(config, log=lambda *_: None)
    assert seen == [False, False]
    assert gc.isenabled()
