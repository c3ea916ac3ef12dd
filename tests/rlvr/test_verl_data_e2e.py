"""End to end: files in verl's layout train and evaluate with no column mapping."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "envs"))
from trainer_helpers import QUIET, SMALL_MODEL  # noqa: E402
from verl_files import verl_row, write_parquet  # noqa: E402

from rlvr.cli import eval_main  # noqa: E402
from rlvr.config import load_config  # noqa: E402
from rlvr.eval.episodes import read_episodes  # noqa: E402
from rlvr.trainer import train  # noqa: E402

SYSTEM = "Answer with the number only."


def arithmetic_rows(split: str, n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        a, b = i % 7 + 1, i % 5 + 2
        row = verl_row(i, f"{a}+{b}=", str(a + b), system=SYSTEM, source="local/arith")
        row["extra_info"]["split"] = split
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def verl_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("verl_data")
    train_file = write_parquet(folder / "train.parquet", arithmetic_rows("train", 16))
    test_file = write_parquet(folder / "test.parquet", arithmetic_rows("test", 4))
    return train_file, test_file


def test_rlvr_train_runs_on_a_verl_file(verl_files, tmp_path):
    train_file, test_file = verl_files
    config_path = tmp_path / "verl.yaml"
    config_path.write_text(f"""
env:
  id: rlvr/Math-v0
  kwargs: {{answer_format: plain, source: {json.dumps(str(train_file))}}}
  eval_kwargs: {{source: {json.dumps(str(test_file))}}}
sft: {{enabled: false}}
rollout:
  prompts_per_step: 2
  group_size: 2
  runner: {{max_turns: 1, max_tokens_per_turn: 4, max_response_tokens: 4}}
eval: {{every: 0, tasks: 4, max_new_tokens: 4}}
trainer: {{steps: 2, output_dir: {json.dumps(str(tmp_path / "run"))}}}
""")
    config = load_config(config_path, SMALL_MODEL + QUIET)
    result = train(config, log=lambda *_: None)
    assert len(result.history) == 2
    assert all(m["rollout/error_episodes"] == 0 for m in result.history)


def test_rlvr_eval_runs_on_a_verl_file(verl_files, tiny_model_path, tmp_path, capsys):
    _, test_file = verl_files
    suite = tmp_path / "verl_suite.yaml"
    suite.write_text(f"""
name: verl_suite
entries:
  - env: rlvr/Math-v0
    name: arith
    split: test
    n_tasks: 4
    kwargs: {{answer_format: plain, source: {json.dumps(str(test_file))}}}
""")
    out = tmp_path / "eval"
    code = eval_main(["--model", str(tiny_model_path), "--suite", str(suite), "--out", str(out),
                      "--max-new-tokens", "4", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    records = read_episodes(out / "episodes.jsonl")
    assert len(records) == 4
    for record in records:
        assert record["messages"][0] == {"role": "system", "content": SYSTEM}
        assert record["task_metadata"]["data_source"] == "local/arith"
        assert record["task_metadata"]["extra_info"]["split"] == "test"
