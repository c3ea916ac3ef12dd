"""Data prepared for verl: its parquet layout read with no mapping, nested columns, message prompts.

The files are written with ``datasets`` from the row schema verl's preprocessing scripts
produce (``examples/data_preprocess/gsm8k.py``: ``data_source``, ``prompt`` as chat messages,
``ability``, ``reward_model: {style, ground_truth}``, ``extra_info``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlvr.envs.code_env import CodeEnv
from rlvr.envs.errors import EnvArgumentError, TaskSourceError
from rlvr.envs.math_env import MathEnv
from rlvr.envs.tasks import DatasetSource
from rlvr.envs.tasks.verl_layout import code_tests

sys.path.insert(0, str(Path(__file__).parent))
from verl_files import verl_row, write_parquet  # noqa: E402

SYSTEM = "You are a careful math tutor."


@pytest.fixture
def gsm8k_file(tmp_path: Path) -> Path:
    instruction = 'Let\'s think step by step and output the final answer after "####".'
    rows = [
        verl_row(0, f"Tom has 3 apples and buys 4. How many? {instruction}", "7", system=SYSTEM),
        verl_row(1, f"What is 6 times 12? {instruction}", "72"),
    ]
    return write_parquet(tmp_path / "train.parquet", rows)


def test_a_verl_math_file_needs_no_mapping(gsm8k_file):
    env = MathEnv(source=str(gsm8k_file), answer_format="auto")
    messages, info = env.reset(options={"task_index": 0})
    assert messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": messages[1]["content"]},
    ]
    assert messages[1]["content"].startswith("Tom has 3 apples")
    assert info["task_metadata"]["data_source"] == "openai/gsm8k"
    assert info["task_metadata"]["ability"] == "math"
    assert info["task_metadata"]["extra_info"]["index"] == 0
    _, reward, terminated, _, step_info = env.step("3 + 4 = 7.\n#### 7")
    assert (reward, terminated, step_info["verdict"].reason) == (1.0, True, "correct")
    env.reset(options={"task_index": 0})
    assert env.step("#### 8")[1] == 0.0


def test_messages_are_used_as_they_are_without_the_env_system_prompt(gsm8k_file):
    env = MathEnv(source=str(gsm8k_file), answer_format="boxed")  # has a default system prompt
    messages, _ = env.reset(options={"task_index": 1})
    assert [m["role"] for m in messages] == ["user"]
    assert "6 times 12" in messages[0]["content"]


def test_nested_columns_are_addressable_by_dotted_path(gsm8k_file):
    env = MathEnv(
        source=str(gsm8k_file), answer_format="plain", system_prompt=None,
        source_kwargs={"columns": {"question": "extra_info.question",
                                   "answer": "reward_model.ground_truth"}},
    )
    messages, _ = env.reset(options={"task_index": 1})
    assert messages == [{"role": "user", "content": messages[0]["content"]}]
    assert messages[0]["content"].startswith("What is 6 times 12?")
    assert env.step("72")[1] == 1.0


def test_a_missing_nested_key_names_file_row_and_path(tmp_path):
    rows = [verl_row(0, "q", "1")]
    rows[0]["reward_model"] = {"style": "rule", "ground_truth": None}
    path = write_parquet(tmp_path / "broken.parquet", rows)
    source = DatasetSource(path, columns={"question": "extra_info.question",
                                          "answer": "reward_model.ground_truth"},
                           required=("question", "answer"))
    with pytest.raises(TaskSourceError, match=r"broken.parquet: row 0: field 'answer' "
                                              r"\(column 'reward_model.ground_truth'\)"):
        source[0]


def test_a_message_list_mapped_to_a_text_field_is_used_as_messages(gsm8k_file):
    env = MathEnv(
        source=str(gsm8k_file), answer_format="auto",
        source_kwargs={"columns": {"question": "prompt", "answer": "reward_model.ground_truth"}},
    )
    messages, _ = env.reset(options={"task_index": 0})
    assert messages[0] == {"role": "system", "content": SYSTEM}
    assert all(isinstance(m["content"], str) and "'role'" not in m["content"] for m in messages)


def test_a_message_list_is_never_stringified_into_a_template(gsm8k_file):
    env = MathEnv(
        source=str(gsm8k_file), answer_format="auto", prompt_template="Question: {question}",
        source_kwargs={"columns": {"question": "prompt", "answer": "reward_model.ground_truth"}},
    )
    with pytest.raises(EnvArgumentError, match="list of chat messages.*'\\{question\\}'"):
        env.reset(options={"task_index": 0})


def test_a_non_text_value_in_a_text_field_names_file_row_and_column(tmp_path):
    rows = [{"q": {"text": "What is 2+2?"}, "a": "4"}, {"q": {"text": "1+1"}, "a": "2"}]
    path = write_parquet(tmp_path / "odd.parquet", rows)
    env = MathEnv(source=str(path), source_kwargs={"columns": {"question": "q", "answer": "a"}})
    with pytest.raises(TaskSourceError,
                       match=r"odd.parquet: row 1: field 'question' \(column 'q'\) holds a dict"):
        env.reset(options={"task_index": 1})


def test_a_malformed_message_names_its_row(tmp_path):
    rows = [verl_row(0, "q", "1")]
    rows[0]["prompt"] = [{"role": "narrator", "content": "hi"}]
    path = write_parquet(tmp_path / "roles.parquet", rows)
    env = MathEnv(source=str(path))
    with pytest.raises(TaskSourceError, match=r"roles.parquet: row 0: .*message 0 .*'narrator'"):
        env.reset(options={"task_index": 0})


# ---------------------------------------------------------------- code sets


SQUARE = "def square(x):\n    return x * x\n"
ECHO_SUM = "a, b = map(int, input().split())\nprint(a + b)\n"


def fenced(program: str) -> str:
    return f"```python\n{program}```"


def test_code_ground_truths_in_the_common_layouts():
    stdio = json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})
    assert code_tests(stdio) == {"kind": "stdio", "cases": [["1 2\n", "3\n"], ["3 4\n", "7\n"]]}
    apps_call = {"inputs": [[2], [3]], "outputs": [[4], [9]], "fn_name": "square"}
    assert code_tests(apps_call) == {"kind": "call", "function": "square",
                                     "cases": [[[2], 4], [[3], 9]]}
    unwrapped = {"inputs": [[[1, 2]]], "outputs": [[2, 1]], "fn_name": "rev"}
    assert code_tests(unwrapped)["cases"] == [[[[1, 2]], [2, 1]]]
    lines = {"inputs": [["1 2", ""]], "outputs": [["3"]]}
    assert code_tests(lines)["cases"] == [["1 2\n", "3"]]
    humaneval = {"test": "def check(candidate):\n    assert candidate(2) == 4\n",
                 "entry_point": "square"}
    assert code_tests(humaneval)["kind"] == "assert"
    assert code_tests("42") is None and code_tests("not json {") is None
    assert code_tests(["assert f(1) == 2"]) is None


@pytest.mark.parametrize("truth, program, wrong", [
    (json.dumps({"inputs": ["1 2\n", "10 -3\n"], "outputs": ["3\n", "7\n"]}), ECHO_SUM,
     "print(0)\n"),
    (json.dumps({"inputs": [[2], [5]], "outputs": [[4], [25]], "fn_name": "square"}), SQUARE,
     "def square(x):\n    return 2 * x\n"),
])
def test_a_verl_code_file_trains_the_code_env(tmp_path, truth, program, wrong):
    rows = [verl_row(0, "Solve the problem.", truth, ability="code", source="codecontests")]
    path = write_parquet(tmp_path / "code.parquet", rows)
    env = CodeEnv(source=str(path))
    messages, info = env.reset(options={"task_index": 0})
    assert messages == [{"role": "user", "content": "Solve the problem."}]
    assert info["task_metadata"]["ability"] == "code"
    assert env.step(fenced(program))[1] == 1.0
    env.reset(options={"task_index": 0})
    assert env.step(fenced(wrong))[1] < 1.0


def test_an_unsupported_code_ground_truth_names_the_row(tmp_path):
    rows = [verl_row(0, "Solve.", "assert f(1) == 2", ability="code")]
    path = write_parquet(tmp_path / "asserts.parquet", rows)
    env = CodeEnv(source=str(path))
    with pytest.raises(TaskSourceError, match=r"asserts.parquet: row 0: field 'tests' "
                                              r"\(verl layout, from column "
                                              r"'reward_model.ground_truth'\)"):
        env.reset(options={"task_index": 0})


def test_an_hf_chat_dataset_with_message_prompts(tmp_path):
    path = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": "2+2="}], "solution": "4"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = MathEnv(source=str(path), answer_format="plain",
                  source_kwargs={"columns": {"question": "messages", "answer": "solution"}})
    messages, _ = env.reset(options={"task_index": 0})
    assert messages == rows[0]["messages"]
    assert env.step("4")[1] == 1.0


def test_generator_kwargs_given_to_a_file_source_are_named(gsm8k_file):
    with pytest.raises(TaskSourceError, match="bad source_kwargs.*n_tasks"):
        MathEnv(source=str(gsm8k_file), source_kwargs={"n_tasks": 50})
