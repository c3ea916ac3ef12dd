"""W&B with the real wandb package, offline: the run files read back with wandb's own records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tracking_helpers import require, train
from wandb_records import complete_records, config, history, run_record, summary


def _offline_runs(root: Path) -> list[Path]:
    return sorted(root.glob("wandb/offline-run-*/run-*.wandb"))


@pytest.mark.slow
def test_offline_run_has_config_metrics_episodes_summary_and_resume_continues_it(
        tmp_path, monkeypatch):
    require("wandb")
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "wb-run"
    first = train(out, "trainer.loggers=[jsonl,wandb]")
    assert first.failed_loggers == {}
    run_id = (out / "wandb_run_id").read_text().strip()
    [path] = _offline_runs(out)  # offline: nothing configured, so nothing leaves the machine
    recs = complete_records(path)
    run = run_record(recs)
    assert (run.run_id, run.display_name, run.project) == (run_id, "wb-run", "rlvr")
    cfg = config(recs)
    assert cfg["trainer"]["steps"] == 2 and cfg["trainer"]["loggers"] == ["jsonl", "wandb"]
    assert cfg["rollout"]["group_size"] == 2
    rows = history(recs)
    assert [r["_step"] for r in rows if "reward/mean" in r] == [1, 2]
    assert [r["_step"] for r in rows if "eval/accuracy" in r] == [0, 1, 2]
    tables = [r for r in rows if r.get("eval/episodes/_type") == "table-file"]
    assert [r["_step"] for r in tables] == [0, 1, 2]
    table = json.loads((path.parent / "files" / tables[0]["eval/episodes/path"]).read_text())
    assert {"prompt", "response", "reward", "passed", "verdict"} <= set(table["columns"])
    assert len(table["data"]) == 2 and {r[table["columns"].index("verdict")]
                                        for r in table["data"]} <= {"correct", "wrong_answer",
                                                                    "no_answer", "None"}
    assert summary(recs)["eval/accuracy"] == first.final_accuracy

    # resume: the same W&B run id continues, from the step after the checkpoint; WANDB_DIR moves
    # the files, WANDB_MODE is W&B's own (offline here)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    second = train(out, "trainer.loggers=[jsonl,wandb]", "trainer.steps=3",
                   "trainer.resume=true")
    assert second.failed_loggers == {} and second.first_step == 3
    assert len(_offline_runs(out)) == 1
    [resumed] = _offline_runs(tmp_path / "wandb-dir")
    recs = complete_records(resumed)
    assert run_record(recs).run_id == run_id
    assert [r["_step"] for r in history(recs) if "reward/mean" in r] == [3]
    assert summary(recs)["eval/accuracy"] == second.final_accuracy
