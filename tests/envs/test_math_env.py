import pytest

from rlvr import envs
from rlvr.envs import EnvArgumentError, EpisodeOverError, ListSource, MathEnv, ResetNeededError
from rlvr.envs.math_env import gold_answer, last_boxed, last_number
from rlvr.verifiers import Verdict

TASKS = [
    {"task_id": "t0", "question": "What is 12+7?", "answer": "19"},
    {"task_id": "t1", "question": "What is 6*7?", "answer": "42"},
    {"task_id": "t2", "question": "Tom has 3 and gets 4.", "answer": "Add them.\n#### 7"},
]


def _env(**kwargs):
    return MathEnv(source=ListSource(TASKS), **kwargs)


def test_plain_format_single_turn_quickstart_style():
    env = MathEnv(split="test", answer_format="plain", source_kwargs={"n_tasks": 20})
    messages, info = env.reset(seed=0)
    assert messages == [{"role": "user", "content": messages[0]["content"]}]
    question = messages[0]["content"]
    assert question.endswith("=") and info["task_id"] == f"arith:{question[:-1]}"
    answer = str(eval(question[:-1]))  # noqa: S307 - generated arithmetic
    new, reward, terminated, truncated, info = env.step(answer)
    assert (new, reward, terminated, truncated) == ([], 1.0, True, False)
    assert info["verdict"].passed and info["verdict"].reason == "correct"
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(str(int(answer) + 1))
    assert reward == 0.0 and terminated and info["verdict"].reason == "wrong_answer"
    env.reset(seed=0)
    _, reward, _, _, info = env.step("no idea")
    assert reward == 0.0 and info["verdict"].reason == "no_answer"


def test_boxed_format_and_system_prompt():
    env = _env(answer_format="boxed")
    messages, _ = env.reset(options={"task_index": 1})
    assert messages[0]["role"] == "system" and "\\boxed{}" in messages[0]["content"]
    assert messages[1] == {"role": "user", "content": "What is 6*7?"}
    _, reward, _, _, info = env.step("6*7 is 42 but I write \\boxed{41}")
    assert reward == 0.0 and info["verdict"].details["extracted"] == "41"
    env.reset(options={"task_index": 1})
    assert env.step("\\boxed{ 42 }")[1] == 1.0
    env.reset(options={"task_index": 1})
    assert env.step("42")[4]["verdict"].reason == "no_answer"


def test_auto_format_and_gsm8k_gold():
    env = _env(answer_format="auto", system_prompt=None)
    messages, _ = env.reset(options={"task_id": "t2"})
    assert [m["role"] for m in messages] == ["user"]
    assert env.step("3 + 4 = 7. Answer: 7")[1] == 1.0
    assert gold_answer("Add them.\n#### 7") == "7"
    assert gold_answer("so \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert gold_answer(" 19 ") == "19"


@pytest.mark.parametrize("gold", ["  19\n", "#### 7\n", "so \\boxed{ 3 } ", "so \\boxed{3",
                                  "12 apples\n#### ", "\\fbox{2/4}"])
def test_the_gold_answer_a_teacher_writes_is_what_the_grader_accepts(gold):
    """One reading of a gold (``rlvr.verifiers.math.gold_answer``): the scripted teacher's answer
    passes the grader even for a malformed solution, where envs' own copy took the last number
    ("3" of an unclosed box) and the grader compared with the whole gold."""
    from rlvr.verifiers.math import verify

    assert verify(gold_answer(gold), gold).passed
    assert not verify("190", gold).passed


def test_multi_turn_retries_with_decay_and_feedback():
    env = _env(answer_format="plain", max_attempts=3, attempt_decay=0.5)
    env.reset(options={"task_index": 0})
    messages, reward, terminated, truncated, info = env.step("18")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert messages == [
        {"role": "user", "content": "Your answer 18 is not correct. Please try again."}
    ]
    assert info["attempt"] == 1 and info["attempts_left"] == 2
    messages, reward, terminated, _, info = env.step("19")
    assert (messages, reward, terminated) == ([], 0.5, True) and info["attempt"] == 2
    with pytest.raises(EpisodeOverError, match="call reset"):
        env.step("19")


def test_multi_turn_runs_out_of_attempts_and_explicit_weights():
    env = _env(
        answer_format="plain",
        max_attempts=2,
        attempt_rewards=[1.0, 0.25],
        feedback_template="No ({reason}): {answer}",
    )
    env.reset(options={"task_index": 0})
    assert env.step("I think")[0][0]["content"] == "No (no_answer): missing"
    messages, reward, terminated, truncated, info = env.step("20")
    assert (messages, reward, terminated, truncated) == ([], 0.0, True, False)
    env.reset(options={"task_index": 0})
    env.step("1")
    assert env.step("19")[1] == 0.25


def test_format_reward_is_a_span_over_the_answer():
    env = _env(answer_format="boxed", format_reward=0.1)
    env.reset(options={"task_index": 1})
    action = "Thinking... so \\boxed{41}."
    _, reward, _, _, info = env.step(action)
    assert reward == 0.0
    ((start, end, value),) = info["reward_spans"]
    assert action[start:end] == "\\boxed{41}" and value == 0.1
    env.reset(options={"task_index": 1})
    assert env.step("41")[4]["reward_spans"] == []
    plain = _env(answer_format="plain", format_reward=0.2)
    plain.reset(options={"task_index": 0})
    action = "12+7=19"
    ((start, end, _),) = plain.step(action)[4]["reward_spans"]
    assert action[start:end] == "19"


def test_helpers():
    assert last_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{x^{2}}")[2] == "x^{2}"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_number("12+7=19")[2] == "19"
    assert last_number("it is -3.5 or 1,234")[2] == "-3.5, 1234"  # a hedge reads as a list
    assert last_number("none") is None


def test_seed_determinism_and_options():
    env = MathEnv(source_kwargs={"n_tasks": 50})
    first = env.reset(seed=11)
    assert env.reset(seed=11) == first
    assert {env.reset(seed=s)[1]["task_id"] for s in range(10)} != {first[1]["task_id"]}
    assert env.num_tasks == 50
    with pytest.raises(EnvArgumentError, match=r"unknown reset option\(s\) \['index'\]"):
        env.reset(options={"index": 1})
    with pytest.raises(EnvArgumentError, match="out of range: the source has 50 tasks"):
        env.reset(options={"task_index": 50})
    with pytest.raises(EnvArgumentError, match="is not in"):
        env.reset(options={"task_id": "nope"})


def test_errors_for_misuse():
    env = _env()
    with pytest.raises(ResetNeededError, match="before reset"):
        env.step("1")
    env.reset(seed=0)
    with pytest.raises(EnvArgumentError, match="action must be a str"):
        env.step(42)
    with pytest.raises(EnvArgumentError, match=r"answer_format must be one of \['boxed'"):
        _env(answer_format="latex")
    with pytest.raises(EnvArgumentError, match="max_attempts must be an int >= 1"):
        _env(max_attempts=0)
    with pytest.raises(EnvArgumentError, match="attempt_rewards must list max_attempts=2"):
        _env(max_attempts=2, attempt_rewards=[1.0])
    with pytest.raises(EnvArgumentError, match=r"attempt_decay must be in \(0, 1\]"):
        _env(attempt_decay=1.5)
    with pytest.raises(EnvArgumentError, match=r"prompt_template .* uses 'problem'"):
        _env(prompt_template="{problem}").reset(seed=0)


def test_spaces():
    env = _env()
    messages, _ = env.reset(seed=0)
    assert env.observation_space.contains(messages)
    assert env.action_space.contains("any text, even ünïcode and \n newlines")
    assert not env.observation_space.contains([{"role": "robot", "content": "x"}])


def test_verifier_env_with_a_custom_verifier():
    def exact(response, task):
        ok = response.strip() == task["answer"]
        return Verdict(float(ok), ok, "correct" if ok else "wrong_answer")

    env = envs.VerifierEnv(TASKS[:2], exact, prompt_template="Q: {question}")
    assert env.reset(options={"task_index": 0})[0] == [
        {"role": "user", "content": "Q: What is 12+7?"}
    ]
    assert env.step(" 19 ")[1] == 1.0


def test_the_gold_answer_comes_only_with_the_step_that_ends_the_episode():
    from rlvr.envs.math_env import MathEnv

    env = MathEnv(source=[{"question": "What is 6*7?", "answer": "Six sevens. #### 42"}],
                  answer_format="plain", max_attempts=2)
    env.reset(seed=0)
    _, _, terminated, _, info = env.step("41")
    assert not terminated and "gold" not in info  # the model is still playing
    _, _, terminated, _, info = env.step("40")
    assert terminated and info["gold"] == "42"
