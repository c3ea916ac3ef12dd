"""Opening the next step's episodes during the update changes no number of the run (the engine's
rounding aside: ``trainer_helpers.ENGINE_ROUNDING``)."""

from __future__ import annotations

from pathlib import Path

from trainer_helpers import QUIET, SMALL_MODEL, assert_same_run

from rlvr.config import load_config
from rlvr.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _run(tmp_path: Path, open_ahead: bool) -> tuple[list[dict[str, float]], Trainer]:
    config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path / str(open_ahead)}",
        "trainer.steps=4", "eval.every=0", "trainer.checkpoint_every=0",
        "rollout.prompts_per_step=4", "rollout.group_size=4",
        f"rollout.open_ahead={str(open_ahead).lower()}",
    ])
    trainer = Trainer(config, log=lambda *_: None)
    taken = []
    collect = trainer.stream.collect

    def recording(step, position=0):
        taken.append(trainer.stream._ahead is not None and trainer.stream._ahead[:2] == (
            step, position))
        return collect(step, position)

    trainer.stream.collect = recording
    history = trainer.train().history
    assert taken == ([False, True, True, True] if open_ahead else [False] * 4)
    return history, trainer


def test_open_ahead_plays_the_same_run(tmp_path):
    plain, _ = _run(tmp_path, open_ahead=False)
    ahead, trainer = _run(tmp_path, open_ahead=True)
    assert trainer.runner._ahead.unused == []  # every opening was played
    assert_same_run(plain, ahead)
