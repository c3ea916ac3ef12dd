"""The run's config.yaml: written atomically, trusted by a resume only when it is intact, and
rewritten by a resume only once its checkpoint has loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from tmpfs import fill, small_tmpfs
from trainer_helpers import QUIET, SMALL_MODEL

from rlvr.config import TrainConfig, load_config
from rlvr.config.loader import dump_config
from rlvr.errors import ConfigError
from rlvr.learner import CheckpointError
from rlvr.trainer import train
from rlvr.training.run_dir import compare_for_resume

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _config(tmp_path: Path, *extra: str) -> TrainConfig:
    return load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", "trainer.steps=2",
        "trainer.threads=1", "rollout.prompts_per_step=2", "rollout.group_size=2",
        "eval.tasks=2", "eval.every=0", "trainer.checkpoint_every=1", *extra])


def test_a_truncated_config_yaml_does_not_disable_the_resume_check(tmp_path):
    recorded = tmp_path / "config.yaml"
    dump_config(_config(tmp_path), recorded)
    lines = recorded.read_text().splitlines(keepends=True)
    recorded.write_text("".join(lines[: len(lines) // 3]))  # the tail of the file is lost
    changed = _config(tmp_path, "actor.optim.lr=0.5", "trainer.resume=true")
    with pytest.raises(ConfigError, match=r"config.yaml lacks \d+ key\(s\) .*truncated or was "
                                          r"edited"):
        compare_for_resume(changed, recorded, [])


def test_a_hand_edited_config_yaml_is_not_trusted(tmp_path):
    recorded = tmp_path / "config.yaml"
    dump_config(_config(tmp_path), recorded)
    text = recorded.read_text()
    recorded.write_text(text.replace("  lr: ", "  lr: 0.5 #", 1))
    with pytest.raises(ConfigError, match=r"changed after the run wrote it .*checksum"):
        compare_for_resume(_config(tmp_path, "actor.optim.lr=0.5"), recorded, [])
    recorded.write_text("trainer: [unclosed\n")
    with pytest.raises(ConfigError, match=r"config.yaml is not valid YAML"):
        compare_for_resume(_config(tmp_path), recorded, [])


def test_an_intact_config_yaml_resumes(tmp_path):
    recorded = tmp_path / "config.yaml"
    dump_config(_config(tmp_path), recorded)
    notices: list[str] = []
    compare_for_resume(_config(tmp_path, "trainer.steps=5"), recorded, notices)
    assert "trainer.steps: 2 -> 5" in notices[0]


def test_config_yaml_on_a_full_disk_keeps_the_previous_file_whole(tmp_path):
    with small_tmpfs(tmp_path / "disk", 64) as disk:
        recorded = disk / "config.yaml"
        dump_config(_config(tmp_path), recorded)
        before = recorded.read_bytes()
        fill(disk)
        with pytest.raises(OSError, match="No space left on device"):
            dump_config(_config(tmp_path, "trainer.steps=9"), recorded)
        assert recorded.read_bytes() == before
        assert sorted(p.name for p in disk.iterdir()) == ["config.yaml", "filler"]


@pytest.mark.slow
def test_a_resume_that_fails_loading_its_checkpoint_leaves_config_yaml_alone(tmp_path):
    train(_config(tmp_path), log=lambda *_: None)
    recorded = (tmp_path / "config.yaml").read_bytes()
    for step in sorted((tmp_path / "checkpoints").iterdir()):
        shard = max(step.glob("*.distcp"), key=lambda p: p.stat().st_size)
        shard.write_bytes(shard.read_bytes()[:-16])  # truncated
    with pytest.raises(CheckpointError, match=r"step_000002 is damaged: .*__0_0.distcp: "
                                              r"truncated .*no earlier intact checkpoint"):
        train(_config(tmp_path, "trainer.steps=4", "trainer.resume=true"), log=lambda *_: None)
    assert (tmp_path / "config.yaml").read_bytes() == recorded
