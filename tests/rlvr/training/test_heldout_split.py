"""A held-out set is never the training set: one task file is split, or the run is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.envs.errors import TaskSourceError
from rlvr.envs.tasks import DatasetSource
from rlvr.errors import ConfigError
from rlvr.training.heldout import check_heldout


def _write_tasks(path: Path, n: int) -> Path:
    rows = [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(tmp_path: Path, kwargs: dict, eval_kwargs: dict | None = None):
    body = {"env": {"id": "rlvr/Math-v0", "kwargs": kwargs},
            "trainer": {"output_dir": str(tmp_path / "run")}}
    if eval_kwargs is not None:
        body["env"]["eval_kwargs"] = eval_kwargs
    path = tmp_path / "cfg.yaml"
    path.write_text(json.dumps(body))
    return load_config(path, [])


@pytest.mark.parametrize("eval_kwargs", [None, {}, {"split": "test"}])
def test_one_file_without_a_split_is_refused_as_held_out(tmp_path, eval_kwargs):
    tasks = _write_tasks(tmp_path / "tasks.jsonl", 40)
    config = _config(tmp_path, {"answer_format": "plain", "source": str(tasks)}, eval_kwargs)
    with pytest.raises(ConfigError, match=r"env\.eval_kwargs: the held-out tasks .* are its "
                       r"training tasks .*source_kwargs\.holdout=0\.1.*split_column"):
        check_heldout(config)


def test_holdout_splits_one_file_into_disjoint_seeded_parts(tmp_path):
    tasks = _write_tasks(tmp_path / "tasks.jsonl", 40)
    train = DatasetSource(tasks, split="train", holdout=0.1)
    test = DatasetSource(tasks, split="test", holdout=0.1)
    questions = [{train[i]["question"] for i in range(len(train))},
                 {test[i]["question"] for i in range(len(test))}]
    assert (len(train), len(test)) == (36, 4)
    assert not questions[0] & questions[1]
    assert len(questions[0] | questions[1]) == 40
    again = DatasetSource(tasks, split="test", holdout=0.1)
    assert [again[i]["question"] for i in range(4)] == [test[i]["question"] for i in range(4)]
    other = DatasetSource(tasks, split="test", holdout=0.1, holdout_seed=1)
    assert {other[i]["question"] for i in range(4)} != questions[1]
    assert "split 'test' = 4 of 40 rows (holdout=0.1, holdout_seed=0" in test.describe()


def test_holdout_is_accepted_and_its_size_is_named(tmp_path):
    tasks = _write_tasks(tmp_path / "tasks.jsonl", 40)
    config = _config(tmp_path, {"answer_format": "plain", "source": str(tasks),
                                "source_kwargs": {"holdout": 0.1}})
    line = check_heldout(config)
    assert line is not None and "split 'test' = 4 of 40 rows" in line


def test_a_split_column_or_a_test_file_is_accepted(tmp_path):
    rows = [{"question": f"{i}+1=", "answer": str(i + 1), "part": "test" if i < 5 else "train"}
            for i in range(20)]
    both = tmp_path / "both.jsonl"
    both.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = _config(tmp_path, {"answer_format": "plain", "source": str(both),
                                "source_kwargs": {"split_column": "part"}})
    assert "split 'test' = 5 of 5 rows" in (check_heldout(config) or "")
    test_file = _write_tasks(tmp_path / "test.jsonl", 6)
    config = _config(tmp_path, {"answer_format": "plain", "source": str(both)},
                     {"source": str(test_file)})
    assert "split 'test' = 6 of 6 rows" in (check_heldout(config) or "")


@pytest.mark.parametrize("kwargs, match", [
    ({"holdout": 1.0}, "between 0 and 1"),
    ({"holdout": 0.1, "split_column": "part"}, "already has its"),
])
def test_bad_holdout_is_refused(tmp_path, kwargs, match):
    rows = [{"question": "q", "answer": "a", "part": "train"}] * 4
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TaskSourceError, match=match):
        DatasetSource(path, **kwargs)
