"""A multi-turn arithmetic environment written with Prime Intellect's verifiers 0.4.

The env (``RetryEnv``) is the user: it takes the model's reply to the task's prompt and, while
the reply is not the sum, says so and asks again, up to ``tries`` replies. The task's reward
reads the final reply; its metric counts the model's turns. ``rlvr/VerifiersHarness-v0`` plays
it with verifiers' ``null`` harness through rlvr's gateway (this module on ``PYTHONPATH``);
docs/environments.md has the commands.
"""

import random
from collections.abc import Iterator

import verifiers.v1 as vf

RETRY = "That is not the sum. Reply with only the number."


class RetryData(vf.TaskData):
    """A task's wire data: the prompt (``"12+7="``) and the sum."""

    answer: int


class RetryConfig(vf.TasksetConfig):
    """The taskset's config (``environment_kwargs`` in rlvr)."""

    size: int = 1000
    seed: int = 0
    max_term: int = 20


class RetryTask(vf.Task[RetryData]):
    """Scored by its own reward and metric hooks on the played trace."""

    @vf.reward
    async def correct(self, task: RetryData, trace: vf.Trace) -> float:
        """1 when the final reply is exactly the sum."""
        return float(trace.last_reply.strip() == str(task.answer))

    @vf.metric
    async def model_turns(self, trace: vf.Trace) -> float:
        """The model's replies in the conversation (1 when the first one was right)."""
        return float(trace.num_turns)


class RetryTaskset(vf.Taskset[RetryTask, RetryConfig]):
    """``size`` two-term additions with terms in [1, ``max_term``], drawn from ``seed``."""

    def load(self) -> Iterator[RetryTask]:
        """Yield the tasks."""
        rng = random.Random(self.config.seed)
        for i in range(self.config.size):
            a, b = rng.randint(1, self.config.max_term), rng.randint(1, self.config.max_term)
            yield RetryTask(RetryData(id=f"add-{i}", prompt=f"{a}+{b}=", answer=a + b),
                            self.config.task)


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
                if reply.terminated or reply.last_reply == str(task.data.answer):
                    break
                reply = await chat.turn(RETRY)


__all__ = ["RetryEnv", "RetryTaskset"]
