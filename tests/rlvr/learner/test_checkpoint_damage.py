"""A damaged checkpoint (a flipped bit, a truncated file) is named, never loaded silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from rlvr.learner import Checkpointer, CheckpointError, latest_checkpoint
from rlvr.learner.checkpoint import COMPLETE_MARKER
from rlvr.training.state import Checkpoints


class Weights:
    """A real ``Stateful``: one tensor, as a model's parameters would be."""

    def __init__(self, value: float) -> None:
        self.w = torch.full((256,), value)

    def state_dict(self) -> dict[str, Any]:
        return {"w": self.w}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.w.copy_(state["w"])


def _largest_file(folder: Path) -> Path:
    return max((p for p in folder.iterdir() if p.name != COMPLETE_MARKER),
               key=lambda p: p.stat().st_size)


def _flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _save_two(root: Path) -> Weights:
    weights = Weights(1.0)
    ckpt = Checkpointer({"actor": weights})
    ckpt.save(root / "step_000001")
    weights.w.fill_(2.0)
    ckpt.save(root / "step_000002")
    return weights


def test_the_marker_lists_every_file_with_its_checksum(tmp_path):
    _save_two(tmp_path)
    listed = json.loads((tmp_path / "step_000002" / COMPLETE_MARKER).read_text())["files"]
    on_disk = {p.name for p in (tmp_path / "step_000002").iterdir()} - {COMPLETE_MARKER}
    assert set(listed) == on_disk and all(len(sha) == 64 for _, sha in listed.values())


@pytest.mark.parametrize("damage, match", [
    (_flip_a_bit, r"changed \(SHA-256 mismatch\)"),
    (lambda p: p.write_bytes(p.read_bytes()[:-40]), r"truncated or grown \(\d+ of \d+ bytes\)"),
    (lambda p: p.unlink(), "missing"),
])
def test_a_damaged_checkpoint_is_refused_naming_the_file(tmp_path, damage, match):
    _save_two(tmp_path)
    bad = _largest_file(tmp_path / "step_000002")
    damage(bad)
    target = Weights(0.0)
    with pytest.raises(CheckpointError, match=rf"checkpoint .*step_000002 is damaged: "
                       rf"{bad}: {match}") as caught:
        Checkpointer({"actor": target}).load(tmp_path / "step_000002")
    assert "\n" not in str(caught.value)  # one line
    assert torch.all(target.w == 0.0)  # nothing was loaded


def test_resume_falls_back_to_the_previous_intact_checkpoint_with_a_warning(tmp_path):
    _save_two(tmp_path)
    _flip_a_bit(_largest_file(tmp_path / "step_000002"))
    target = Weights(0.0)
    lines: list[str] = []
    resumed = Checkpoints(Checkpointer({"actor": target}), tmp_path, 1, 2).maybe_resume(
        True, lines.append)
    assert resumed == tmp_path / "step_000001"
    assert torch.all(target.w == 1.0)
    assert "WARNING: checkpoint" in lines[0] and "step_000002 is damaged" in lines[0]
    assert "previous intact checkpoint" in lines[1]
    assert (tmp_path / ".step_000002.damaged").is_dir()  # kept for a look, never loaded again
    assert latest_checkpoint(tmp_path) == tmp_path / "step_000001"


def test_resume_with_every_checkpoint_damaged_stops_naming_it(tmp_path):
    _save_two(tmp_path)
    for name in ("step_000001", "step_000002"):
        _flip_a_bit(_largest_file(tmp_path / name))
    checkpoints = Checkpoints(Checkpointer({"actor": Weights(0.0)}), tmp_path, 1, 2)
    with pytest.raises(CheckpointError, match=r"step_000002 is damaged: .*no earlier intact"):
        checkpoints.maybe_resume(True, lambda _line: None)


def test_a_checkpoint_from_before_checksums_still_loads(tmp_path):
    _save_two(tmp_path)
    (tmp_path / "step_000002" / COMPLETE_MARKER).write_text("ok\n")
    target = Weights(0.0)
    Checkpointer({"actor": target}).load(tmp_path / "step_000002")
    assert torch.all(target.w == 2.0)
