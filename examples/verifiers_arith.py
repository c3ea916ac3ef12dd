"""A one-turn arithmetic environment written with Prime Intellect's verifiers 0.4.

``rlvr/Verifiers-v0`` plays it with ``environment="verifiers_arith"`` (this module on
``PYTHONPATH``); docs/environments.md has the commands.
"""

import random
from collections.abc import Iterator

import verifiers.v1 as vf


class ArithData(vf.TaskData):
    answer: int


class ArithConfig(vf.TasksetConfig):
    size: int = 1000
    seed: int = 0
    max_term: int = 20


class ArithTask(vf.Task[ArithData]):
    @vf.reward
    async def correct(self, task: ArithData, trace: vf.Trace) -> float:
        """1 when the reply is exactly the sum (a hedge or a list of numbers is wrong)."""
        return float(trace.last_reply.strip() == str(task.answer))

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    def load(self) -> Iterator[ArithTask]:
        rng = random.Random(self.config.seed)
        for i in range(self.config.size):
            a, b = rng.randint(1, self.config.max_term), rng.randint(1, self.config.max_term)
            data = ArithData(id=f"add-{i}", prompt=f"{a}+{b}=", answer=a + b)
            yield ArithTask(data, self.config.task)


__all__ = ["ArithTaskset"]
