"""A multi-turn arithmetic environment written with Prime Intellect's verifiers 0.4.

The env (``RetryEnv``) is the user: it takes the model's reply to the task's prompt and, while
the reply's answer is not the sum, says so and asks again, up to ``tries`` replies. The task's
reward reads the final reply's answer as rlvr/Math-v0's ``plain`` format does (the last number;
a hedge such as "19 or 18" is wrong), with rlvr's math verifier: a verifiers reward hook may
call any Python. Its metric counts the model's turns. ``rlvr/VerifiersHarness-v0`` plays
it with verifiers' ``null`` harness through rlvr's gateway (this module on ``PYTHONPATH``);
docs/environments.md has the commands.
"""

import random
from collections.abc import Iterator

import verifiers.v1 as vf

from rlvr.envs.math_env import score_response

RETRY = "That is not the sum. Reply with only the number."


def is_sum(reply: str, answer: int) -> bool:
    """Whether the reply's answer is the sum, read as rlvr/Math-v0's ``plain`` format reads it.

    The last number is the answer (``"The sum of 12 and 7 is 19."`` -> 19), and answers side
    by side (``"19 or 18"``, ``"18, 19"``) are one list that never equals the sum.
    """
    return score_response(reply, str(answer), "plain").passed


class RetryData(vf.TaskData):
    """A task's wire data: the prompt (``"12+7="``) and the sum."""

    answer: int


class RetryConfig(vf.TasksetConfig):
    """The taskset's config (``environment_kwargs`` in rlvr)."""

    size: int = 1000
    seed: int = 0
    max_term: int = 20
    instructions: str | None = None


class RetryTask(vf.Task[RetryData]):
    """Scored by its own reward and metric hooks on the played trace."""

    @vf.reward
    async def correct(self, task: RetryData, trace: vf.Trace) -> float:
        """1 when the final reply's answer is the sum (``is_sum``)."""
        return float(is_sum(trace.last_reply, task.answer))

    @vf.metric
    async def model_turns(self, trace: vf.Trace) -> float:
        """The model's replies in the conversation (1 when the first one was right)."""
        return float(trace.num_turns)


class RetryTaskset(vf.Taskset[RetryTask, RetryConfig]):
    """``size`` two-term additions with terms in [1, ``max_term``], drawn from ``seed``.

    ``instructions`` (none by default) is each task's system prompt (verifiers' own
    ``system_prompt`` field names a file that overrides it).
    """

    def load(self) -> Iterator[RetryTask]:
        """Yield the tasks."""
        rng = random.Random(self.config.seed)
        for i in range(self.config.size):
            a, b = rng.randint(1, self.config.max_term), rng.randint(1, self.config.max_term)
            data = RetryData(id=f"add-{i}", prompt=f"{a}+{b}=", answer=a + b,
                             system_prompt=self.config.instructions)
            yield RetryTask(data, self.config.task)


class RetryEnvConfig(vf.EnvConfig):
    """The env's config: the one seat (the policy) and how many replies it gets."""

    agent: vf.AgentConfig = vf.AgentConfig()
    tries: int = 2


class RetryEnv(vf.Env[RetryEnvConfig]):
    """Asks again after a wrong reply, up to ``tries`` replies."""

    async def run(self, task: RetryTask, agents: vf.Agents) -> None:
        """Play the conversation: the task's prompt, then a retry message per wrong reply."""
        async with agents.agent.interaction(task) as chat:
            reply = await chat.turn()
            for _ in range(self.config.tries - 1):
                if reply.terminated or is_sum(reply.last_reply, task.data.answer):
                    break
                reply = await chat.turn(RETRY)


__all__ = ["RetryEnv", "RetryTaskset"]
