"""A judge as an env's verifier: its score is the reward; its failure ends the episode in error.

The runner turns an exception from ``env.step`` into ``finish_reason == "error"`` (an episode
left out of training; ``tests/agents/test_runner.py``); here the judge's failure must reach
``step`` as that exception, not as a verdict of a wrong answer.
"""

from __future__ import annotations

import pytest

from rlvr import envs
from rlvr.verifiers.judge import JudgeError, JudgeVerifier

TASKS = [{"id": "a", "question": "What is 12+7?", "answer": "19"}]


class Fixed:
    def __init__(self, score):
        self.score = score

    def score_batch(self, items):
        if self.score is None:
            raise ConnectionError("judge endpoint unreachable")
        return [self.score] * len(items)


def test_the_judges_score_is_the_reward():
    verifier = JudgeVerifier(Fixed(0.75), max_wait_s=0.0)
    env = envs.VerifierEnv(TASKS, verifier)
    env.reset(options={"task_index": 0})
    _, reward, terminated, _, info = env.step("19")
    assert reward == 0.75 and terminated
    assert info["verdict"].passed and info["verdict"].details == {"judge_score": 0.75}
    verifier.close()


def test_a_failing_judge_raises_out_of_step():
    verifier = JudgeVerifier(Fixed(None), max_wait_s=0.0)
    env = envs.VerifierEnv(TASKS, verifier)
    env.reset(options={"task_index": 0})
    with pytest.raises(JudgeError, match="ConnectionError: judge endpoint unreachable"):
        env.step("19")
    verifier.close()
