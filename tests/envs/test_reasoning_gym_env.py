"""rlvr/ReasoningGym-v0 on the real reasoning-gym package: splits, its scorer, failing closed."""

from __future__ import annotations

import pytest

pytest.importorskip("reasoning_gym")

from rlvr import envs  # noqa: E402
from rlvr.envs import EnvArgumentError, check_env, load_suite  # noqa: E402
from rlvr.envs.check import PASS  # noqa: E402

KWARGS = {"dataset": "basic_arithmetic", "size": 300,
          "dataset_kwargs": {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}}


def _questions(env):
    source = env.unwrapped.source
    return [source[i]["question"] for i in range(len(source))]


def test_seeded_splits_are_disjoint_and_reproducible():
    train = envs.make("rlvr/ReasoningGym-v0", **KWARGS)
    test = envs.make("rlvr/ReasoningGym-v0", split="test", **KWARGS)
    assert 0 < test.unwrapped.num_tasks < train.unwrapped.num_tasks
    assert train.unwrapped.num_tasks + test.unwrapped.num_tasks == 300
    assert not set(_questions(train)) & set(_questions(test))
    again = envs.make("rlvr/ReasoningGym-v0", split="test", **KWARGS)
    assert _questions(again) == _questions(test)
    # reasoning-gym draws entry i of seed s from Random(s + i), so seeds 0 and 1 share most
    # entries; the split follows the question's text, so no seed's train split meets a test split
    other = envs.make("rlvr/ReasoningGym-v0", split="test", **{**KWARGS, "seed": 1})
    assert not set(_questions(train)) & set(_questions(other))
    messages, info = test.reset(seed=3)
    assert "<answer>" in messages[0]["content"] and messages[1]["role"] == "user"
    assert info["task_id"].startswith("basic_arithmetic/") and "answer" not in info


def test_the_datasets_own_scorer_grades_the_tagged_answer():
    env = envs.make("rlvr/ReasoningGym-v0", **KWARGS)
    env.reset(seed=0)
    gold = env.unwrapped.task["answer"]
    wrong = str(int(gold) + 1)

    def play(text):
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(text)
        assert terminated
        return reward, info["verdict"]

    reward, verdict = play(f"Thinking... <answer>{gold}</answer>")
    assert (reward, verdict.passed, verdict.reason) == (1.0, True, "correct")
    reward, verdict = play(f"<answer>{wrong}</answer>")
    assert (reward, verdict.reason) == (0.0, "wrong_answer")
    reward, verdict = play(gold)
    assert (reward, verdict.reason) == (0.0, "no_answer")
    reward, verdict = play(f"<answer>{wrong}</answer> <answer>{gold}</answer>")
    assert (reward, verdict.reason) == (0.0, "several_answers")


@pytest.mark.parametrize("broken", [
    ZeroDivisionError("boom"), 2.0, float("nan"), "high"])
def test_a_failing_scorer_scores_zero_with_a_reason(broken):
    env = envs.make("rlvr/ReasoningGym-v0", **KWARGS)
    dataset = env.unwrapped.rg_source.dataset

    def scorer(answer, entry):
        if isinstance(broken, Exception):
            raise broken
        return broken

    dataset.score_answer = scorer  # fault injection into the third-party scorer
    env.reset(seed=0)
    gold = env.unwrapped.task["answer"]
    _, reward, terminated, _, info = env.step(f"<answer>{gold}</answer>")
    assert (reward, terminated, info["verdict"].reason) == (0.0, True, "scorer_error")
    assert info["verdict"].details["error"]


def test_bad_arguments_name_the_problem():
    with pytest.raises(EnvArgumentError, match="unknown reasoning-gym dataset 'basic_arithmetc'"
                                               ".*did you mean basic_arithmetic"):
        envs.make("rlvr/ReasoningGym-v0", dataset="basic_arithmetc")
    with pytest.raises(EnvArgumentError, match="rejected dataset_kwargs"):
        envs.make("rlvr/ReasoningGym-v0", dataset="basic_arithmetic",
                  dataset_kwargs={"no_such_field": 1})
    with pytest.raises(EnvArgumentError, match="test_fraction"):
        envs.make("rlvr/ReasoningGym-v0", dataset="gcd", test_fraction=1.0)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["chain_sum", "word_sorting"])
def test_datasets_pass_the_deep_check(dataset):
    report = check_env(envs.make("rlvr/ReasoningGym-v0", dataset=dataset, size=200), deep=True)
    probes = [r for r in report.results if r.topic == "probes"]
    assert probes[0].status == PASS, report.table()  # the reference calibrates: probes ran
    assert report.passed, report.table()


def test_the_suite_builds_held_out_entries_of_several_datasets():
    suite = load_suite("reasoning_gym_small")
    names = [entry.name for entry in suite.entries]
    assert len(set(names)) == len(names) >= 5
    for entry in suite.entries:
        assert entry.split == "test"
        env = entry.make()
        indices = entry.task_indices(env)
        assert len(indices) == entry.n_tasks
        env.reset(options={"task_index": indices[0]})
