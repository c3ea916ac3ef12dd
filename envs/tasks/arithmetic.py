"""Offline arithmetic tasks ("12+7=" -> "19") with difficulty knobs and disjoint splits.

This is the task of the CPU quickstart, where a model of a few million parameters learns it, so
prompts are short and answers are plain integers. An expression belongs to the test split when a
stable hash of its text falls below ``test_fraction``, so train and test never share an
expression, whatever the seed or the number of tasks.
"""

from __future__ import annotations

import functools
import random
from fractions import Fraction

from rlvr.envs.calculator import evaluate
from rlvr.envs.errors import TaskSourceError
from rlvr.envs.tasks.base import Task, check_index, check_split, stable_fraction

OPERATORS = "+-*/"


class ArithmeticSource:
    """Seeded integer arithmetic problems.

    Args:
        split: ``"train"`` or ``"test"``.
        n_tasks: how many distinct problems to generate.
        n_operands: operands per expression (2 = ``"a+b"``); at least 2.
        min_digits: fewest digits per operand (at least 1).
        max_digits: most digits per operand.
        operators: the operators to draw from, a subset of ``"+-*/"``. Division only appears
            where the whole expression has an integer value.
        seed: the generator seed (the split assignment does not depend on it).
        test_fraction: share of all expressions that belong to the test split.
        allow_negative: whether answers may be negative.
        template: the question text; ``{expression}`` is replaced by e.g. ``12+7``.

    Each task is ``{"task_id": "arith:12+7", "question": "12+7=", "answer": "19"}``.
    """

    def __init__(
        self,
        split: str = "train",
        *,
        n_tasks: int = 1000,
        n_operands: int = 2,
        min_digits: int = 1,
        max_digits: int = 2,
        operators: str = "+-",
        seed: int = 0,
        test_fraction: float = 0.1,
        allow_negative: bool = True,
        template: str = "{expression}=",
    ) -> None:
        self.split = check_split(split)
        _validate(n_tasks, n_operands, min_digits, max_digits, operators, test_fraction, template)
        self.n_operands = n_operands
        self.digits = (min_digits, max_digits)
        self.operators = operators
        self.seed = seed
        self.test_fraction = test_fraction
        self.allow_negative = allow_negative
        self.template = template
        self._problems = generate(
            self.split,
            n_tasks,
            n_operands,
            self.digits,
            operators,
            seed,
            test_fraction,
            allow_negative,
        )

    def __len__(self) -> int:
        return len(self._problems)

    def __getitem__(self, index: int) -> Task:
        expression, answer = self._problems[check_index(self, index)]
        return {
            "task_id": f"arith:{expression}",
            "question": self.template.format(expression=expression),
            "answer": str(answer),
        }

    def __repr__(self) -> str:
        return (
            f"ArithmeticSource(split={self.split!r}, n={len(self)}, operands={self.n_operands}, "
            f"digits={self.digits}, operators={self.operators!r}, seed={self.seed})"
        )

    def in_test_split(self, expression: str) -> bool:
        """Whether ``expression`` (e.g. ``"12+7"``) belongs to the test split."""
        return in_test_split(expression, self.test_fraction)


def in_test_split(expression: str, test_fraction: float) -> bool:
    """Whether ``expression`` belongs to the test split (a stable hash below the fraction)."""
    return stable_fraction(f"arith:{expression}") < test_fraction


@functools.lru_cache(maxsize=32)
def generate(
    split: str,
    n_tasks: int,
    n_operands: int,
    digits: tuple[int, int],
    operators: str,
    seed: int,
    test_fraction: float,
    allow_negative: bool,
) -> tuple[tuple[str, int], ...]:
    """The ``(expression, answer)`` pairs of one configuration, memoised per process.

    Deterministic in its arguments, so the rollout code can build a fresh env per episode
    cheaply; ``generate.cache_clear()`` empties the memo.
    """
    rng = random.Random(f"arithmetic:{seed}:{split}")
    want_test = split == "test"
    seen: set[str] = set()
    problems: list[tuple[str, int]] = []
    attempts = 0
    max_attempts = 200 * n_tasks + 10_000
    while len(problems) < n_tasks and attempts < max_attempts:
        attempts += 1
        expression = _draw(rng, n_operands, digits, operators)
        if expression in seen or in_test_split(expression, test_fraction) != want_test:
            continue
        seen.add(expression)
        value = evaluate(expression)
        if not isinstance(value, Fraction) or value.denominator != 1:
            continue
        if value < 0 and not allow_negative:
            continue
        problems.append((expression, value.numerator))
    if len(problems) < n_tasks:
        raise TaskSourceError(
            f"ArithmeticSource: only {len(problems)} distinct {split} problems exist for "
            f"n_operands={n_operands}, digits={digits}, operators={operators!r}; lower "
            f"n_tasks (asked {n_tasks}) or raise the difficulty"
        )
    return tuple(problems)


def _draw(rng: random.Random, n_operands: int, digits: tuple[int, int], operators: str) -> str:
    parts: list[str] = []
    for position in range(n_operands):
        count = rng.randint(*digits)
        low = 0 if count == 1 else 10 ** (count - 1)
        parts.append(str(rng.randint(low, 10**count - 1)))
        if position < n_operands - 1:
            parts.append(rng.choice(operators))
    return "".join(parts)


def _validate(
    n_tasks: int,
    n_operands: int,
    min_digits: int,
    max_digits: int,
    operators: str,
    test_fraction: float,
    template: str,
) -> None:
    if n_tasks < 1:
        raise TaskSourceError(f"n_tasks must be >= 1, got {n_tasks}")
    if n_operands < 2:
        raise TaskSourceError(f"n_operands must be >= 2, got {n_operands}")
    if not 1 <= min_digits <= max_digits <= 18:
        raise TaskSourceError(
            f"need 1 <= min_digits <= max_digits <= 18, got min_digits={min_digits}, "
            f"max_digits={max_digits}"
        )
    if not operators or any(op not in OPERATORS for op in operators):
        raise TaskSourceError(
            f"operators must be a non-empty subset of {OPERATORS!r}, got {operators!r}"
        )
    if not 0.0 < test_fraction < 1.0:
        raise TaskSourceError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if "{expression}" not in template:
        raise TaskSourceError(f"template must contain '{{expression}}', got {template!r}")
