import gymnasium
import pytest

import envs
from envs import EnvCheckError, ListSource, VerifierEnv, check_env
from verifiers import Verdict


@pytest.mark.parametrize("env_id", envs.list_envs(namespace="rlvr"))
def test_every_registered_env_passes(env_id):
    check_env(gymnasium.make(env_id))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 3, "format_reward": 0.1},
        {"answer_format": "plain", "max_attempts": 2},
        {"answer_format": "auto", "source": "word_problems"},
    ],
)
def test_math_variants_pass(kwargs):
    check_env(envs.make("rlvr/Math-v0", **kwargs))


def test_tool_and_code_variants_pass():
    check_env(envs.make("rlvr/ToolUse-v0", max_tool_calls=1))
    check_env(envs.make("rlvr/Code-v0", max_attempts=2, format_reward=0.2))


def _verdict(response, task):
    return Verdict(0.0, False, "wrong_answer")


class NoGuard(VerifierEnv):
    def __init__(self):
        super().__init__(ListSource([{"question": "q"}]), _verdict)

    def step(self, action):
        if self._done:  # silently accepts steps after the end
            return [], 0.0, True, False, {}
        return super().step(action)


class Random(VerifierEnv):
    def __init__(self):
        super().__init__(ListSource([{"question": "q"}]), _verdict)
        self.calls = 0

    def _step(self, action, task):
        self.calls += 1
        result = super()._step(action, task)
        result.reward = 0.5 if self.calls % 2 else 0.0
        return result


class OutOfRange(VerifierEnv):
    def __init__(self):
        super().__init__(ListSource([{"question": "q"}]), _verdict)

    def _step(self, action, task):
        result = super()._step(action, task)
        result.reward = 2.0
        return result


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        (NoGuard(), "after the episode ended must raise"),
        (Random(), "same seed"),
        (OutOfRange(), r"reward 2\.0 outside reward_range"),
    ],
)
def test_broken_envs_are_caught(env, needle):
    with pytest.raises(EnvCheckError, match=needle):
        check_env(env)
