import pytest

from rlvr import envs
from rlvr.envs import SuiteError, load_suite


def test_builtin_suites_load_and_build():
    names = envs.list_suites()
    assert {"arith_small", "math_mix", "code_small", "tools_small"} <= set(names)
    for name in ("arith_small", "math_mix", "code_small", "tools_small"):
        suite = load_suite(name)
        assert suite.name == name and suite.entries
        for entry in suite.entries:
            env = entry.make()
            indices = entry.task_indices(env)
            assert 0 < len(indices) <= entry.n_tasks
            messages, info = env.reset(seed=0, options={"task_index": indices[-1]})
            assert messages and info["task_id"]


def test_arith_small_is_held_out_and_plain():
    (entry,) = load_suite("arith_small").entries
    assert entry.env_id == "rlvr/Math-v0" and entry.split == "test" and entry.n_tasks == 64
    env = entry.make()
    messages, _ = env.reset(options={"task_index": 0})
    assert messages == [{"role": "user", "content": messages[0]["content"]}]
    assert messages[0]["content"].endswith("=")


def test_unknown_suite_lists_available():
    with pytest.raises(
        SuiteError, match=r"unknown suite 'arith_smal'; available suites: \[.*'arith_small'"
    ):
        load_suite("arith_smal")


def test_suite_from_path_and_malformed_files(tmp_path, monkeypatch):
    good = tmp_path / "mine.yaml"
    good.write_text(
        "entries:\n  - env: rlvr/Math-v0\n    n_tasks: 3\n    split: null\n"
        "    kwargs: {answer_format: plain}\n"
    )
    suite = load_suite(good)
    assert suite.name == "mine" and suite.entries[0].split is None
    assert suite.entries[0].name == "rlvr/Math-v0"
    monkeypatch.setenv("RLVR_SUITES_PATH", str(tmp_path))
    assert "mine" in envs.list_suites() and load_suite("mine").path == good

    cases = {
        "entries: []\n": "'entries' must be a non-empty list",
        "entries:\n  - env: rlvr/Math-v0\n    n_task: 3\n": (
            r"entries\[0\]: unknown key\(s\) \['n_task'\]; accepted"
        ),
        "entries:\n  - kwargs: {}\n": r"entries\[0\]: 'env' must be an environment id",
        "entries:\n  - env: rlvr/Math-v0\n    n_tasks: 0\n": "'n_tasks' must be an int >= 1",
        "entries:\n  - env: rlvr/Math-v0\n    kwargs: [1]\n": "'kwargs' must be a mapping",
        "entries: [\n": "cannot read suite YAML",
        "- 1\n": "a suite is a mapping",
    }
    for text, needle in cases.items():
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(SuiteError, match=needle):
            load_suite(bad)
    with pytest.raises(SuiteError, match="suite file not found"):
        load_suite(tmp_path / "absent.yaml")
