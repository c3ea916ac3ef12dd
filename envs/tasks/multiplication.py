"""Multiplication problems too hard to do "in the weights" of a tiny model, easy with a calculator.

The tool quickstart (``configs/tool_quickstart.yaml``) asks a model of a few million parameters
for products such as ``347*58``: a 3-digit by 2-digit product takes carries across four or five
digits, which such a model does not learn in minutes, while copying the two numbers into a
calculator call and the result into the answer is well within its reach. An expression belongs
to the test split when a stable hash of its text falls below ``test_fraction``, so train and test
never share a problem, whatever the seed or the number of tasks.
"""

from __future__ import annotations

import functools
import random

from rlvr.envs.errors import TaskSourceError
from rlvr.envs.tasks.base import Task, check_index, check_split, stable_fraction


class MultiplicationSource:
    """Seeded products of two numbers with fixed digit counts (``347*58``).

    Args:
        split: ``"train"`` or ``"test"``.
        n_tasks: how many distinct problems to generate.
        digits: digits of each factor, e.g. ``(3, 2)`` for a 3-digit times a 2-digit number
            (the leading digit is never 0); at least two factors.
        seed: the generator seed (the split assignment does not depend on it).
        test_fraction: share of all expressions that belong to the test split.
        template: the question text; ``{expression}`` is replaced by e.g. ``347*58``.

    Each task is ``{"task_id": "mul:347*58", "question": "347*58", "expression": "347*58",
    "answer": "20126"}``.
    """

    def __init__(
        self,
        split: str = "train",
        *,
        n_tasks: int = 1000,
        digits: tuple[int, ...] | list[int] = (3, 2),
        seed: int = 0,
        test_fraction: float = 0.1,
        template: str = "{expression}",
    ) -> None:
        self.split = check_split(split)
        self.digits = _check_digits(digits)
        if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or n_tasks < 1:
            raise TaskSourceError(f"n_tasks must be an int >= 1, got {n_tasks!r}")
        if not 0.0 < test_fraction < 1.0:
            raise TaskSourceError(f"test_fraction must be in (0, 1), got {test_fraction}")
        if "{expression}" not in template:
            raise TaskSourceError(f"template must contain '{{expression}}', got {template!r}")
        self.seed = seed
        self.test_fraction = test_fraction
        self.template = template
        self._problems = generate(self.split, n_tasks, self.digits, seed, test_fraction)

    def __len__(self) -> int:
        return len(self._problems)

    def __getitem__(self, index: int) -> Task:
        expression, answer = self._problems[check_index(self, index)]
        return {
            "task_id": f"mul:{expression}",
            "question": self.template.format(expression=expression),
            "expression": expression,
            "answer": str(answer),
        }

    def __repr__(self) -> str:
        return (
            f"MultiplicationSource(split={self.split!r}, n={len(self)}, digits={self.digits}, "
            f"seed={self.seed})"
        )


def in_test_split(expression: str, test_fraction: float) -> bool:
    """Whether ``expression`` (e.g. ``"347*58"``) belongs to the test split."""
    return stable_fraction(f"mul:{expression}") < test_fraction


@functools.lru_cache(maxsize=16)
def generate(
    split: str, n_tasks: int, digits: tuple[int, ...], seed: int, test_fraction: float
) -> tuple[tuple[str, int], ...]:
    """The ``(expression, product)`` pairs of one configuration, memoised per process.

    Raises:
        TaskSourceError: fewer than ``n_tasks`` distinct problems exist for the split.
    """
    rng = random.Random(f"multiplication:{seed}:{split}")
    want_test = split == "test"
    total = 1
    for count in digits:
        total *= 9 * 10 ** (count - 1)
    seen: set[str] = set()
    problems: list[tuple[str, int]] = []
    attempts = 0
    while len(problems) < n_tasks and attempts < 50 * n_tasks + 10_000 and len(seen) < total:
        attempts += 1
        factors = [rng.randint(10 ** (count - 1), 10**count - 1) for count in digits]
        expression = "*".join(map(str, factors))
        if expression in seen:
            continue
        seen.add(expression)
        if in_test_split(expression, test_fraction) != want_test:
            continue
        product = 1
        for factor in factors:
            product *= factor
        problems.append((expression, product))
    if len(problems) < n_tasks:
        raise TaskSourceError(
            f"MultiplicationSource: only {len(problems)} distinct {split} problems found for "
            f"digits={digits}; lower n_tasks (asked {n_tasks}) or use more digits"
        )
    return tuple(problems)


def _check_digits(digits: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    if isinstance(digits, str) or not isinstance(digits, tuple | list) or len(digits) < 2:
        raise TaskSourceError(f"digits must be a list of >= 2 digit counts, got {digits!r}")
    for count in digits:
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 9:
            raise TaskSourceError(f"each entry of digits must be an int in 1..9, got {digits!r}")
    return tuple(digits)
