"""A one-turn arithmetic environment written with Prime Intellect's verifiers 0.4.

``rlvr/Verifiers-v0`` plays it with ``environment="verifiers_arith"`` (this module on
``PYTHONPATH``); docs/environments.md has the commands.
"""

import random
from collections.abc import Iterator

import verifiers.v1 as vf


class ArithData(vf.TaskData):
    """A task's wire data: the prompt (``"12+7="``) and the sum."""

    answer: int


class ArithConfig(vf.TasksetConfig):
    """The taskset's config (``environment_kwargs`` in rlvr)."""

    size: int = 1000
    seed: int = 0
    max_term: int = 20


class ArithTask(vf.Task[ArithData]):
    """Scored by its own reward and metric hooks on the trace."""

    @vf.reward
    async def correct(self, task: ArithData, trace: vf.Trace) -> float:
        """1 when the reply is exactly the sum (a hedge or a list of numbers is wrong)."""
        return float(trace.last_reply.strip() == str(task.answer))

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        """The reply's length (recorded, not rewarded)."""
        return float(len(trace.last_reply))


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    """``size`` two-term additions with terms in [1, ``max_term``], drawn from ``seed``."""

    def load(self) -> Iterator[ArithTask]:
        """Yield the tasks."""
        rng = random.Random(self.config.seed)
        for i in range(self.config.size):
            a, b = rng.randint(1, self.config.max_term), rng.randint(1, self.config.max_term)
            data = ArithData(id=f"add-{i}", prompt=f"{a}+{b}=", answer=a + b)
            yield ArithTask(data, self.config.task)


__all__ = ["ArithTaskset"]
