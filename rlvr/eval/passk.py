"""Sample-based accuracy estimators: unbiased pass@k, mean@k and maj@k.

``pass@k`` follows Chen et al. 2021, "Evaluating Large Language Models Trained on Code"
(https://arxiv.org/abs/2107.03374), eq. 1: with ``n`` samples of which ``c`` pass,

    pass@k = 1 - C(n - c, k) / C(n, k)

is the probability that at least one of ``k`` samples drawn without replacement from the ``n``
passes; averaged over tasks it is an unbiased estimate of pass@k. It is computed as the running
product ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``, which never forms a binomial coefficient and
so stays exact in floating point for any ``n``.

``mean@k`` is the mean score of the ``k`` samples (partial credit counts). ``maj@k`` (majority
vote, a.k.a. self-consistency) takes the most frequent normalised final answer among the samples
and counts the task as solved when a sample with that answer passed. Deviations: ties between
equally frequent answers go to the answer seen first (sample order); samples without an
extracted answer do not vote, and a task where no sample has one scores 0.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from rlvr.errors import ConfigError

__all__ = ["majority_answer", "maj_at_k", "mean_at_k", "pass_at_k", "pass_at_k_curve"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task (Chen et al. 2021, eq. 1).

    Args:
        n: samples drawn for the task (>= 1).
        c: samples that passed (0 <= c <= n).
        k: the budget (1 <= k <= n).

    Returns:
        ``1 - C(n - c, k) / C(n, k)`` in [0, 1]; exactly 1.0 when ``n - c < k``.

    Raises:
        ConfigError: ``n``, ``c`` or ``k`` out of range (the message names it).
    """
    if n < 1:
        raise ConfigError(f"n (samples per task) must be >= 1; got {n}")
    if not 0 <= c <= n:
        raise ConfigError(f"c (passing samples) must be in [0, n={n}]; got {c}")
    if not 1 <= k <= n:
        raise ConfigError(f"k must be in [1, n={n}]; got {k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_curve(counts: Sequence[tuple[int, int]], max_k: int) -> dict[int, float]:
    """pass@1..max_k averaged over tasks.

    Args:
        counts: one ``(n, c)`` per task (samples, passing samples).
        max_k: the largest k; must not exceed the smallest ``n``.

    Returns:
        ``{k: mean over tasks of pass_at_k(n, c, k)}`` for ``k = 1..max_k`` (empty when there
        are no tasks).

    Raises:
        ConfigError: ``max_k`` < 1 or larger than some task's ``n``.
    """
    if max_k < 1:
        raise ConfigError(f"max_k must be >= 1; got {max_k}")
    if not counts:
        return {}
    smallest = min(n for n, _ in counts)
    if max_k > smallest:
        raise ConfigError(f"max_k={max_k} exceeds the fewest samples of a task ({smallest})")
    return {
        k: math.fsum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
        for k in range(1, max_k + 1)
    }


def mean_at_k(scores: Sequence[Sequence[float]]) -> float:
    """Mean score over each task's samples, averaged over tasks.

    Args:
        scores: one list of per-sample scores per task (each non-empty).

    Returns:
        ``mean_tasks(mean_samples(score))``; 0.0 when there are no tasks.

    Raises:
        ConfigError: a task has no samples.
    """
    if not scores:
        return 0.0
    per_task = []
    for index, task in enumerate(scores):
        if len(task) == 0:
            raise ConfigError(f"scores[{index}] is empty; every task needs at least one sample")
        per_task.append(math.fsum(task) / len(task))
    return math.fsum(per_task) / len(per_task)


def majority_answer(answers: Sequence[str | None]) -> int | None:
    """The index of the first sample carrying the most frequent answer.

    Args:
        answers: normalised final answers, one per sample; None = no answer extracted.

    Returns:
        The index of the first sample whose answer has the highest count (ties go to the answer
        seen first), or None when no sample has an answer.
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    for index, answer in enumerate(answers):
        if answer is not None and counts[answer] == best:
            return index
    return None  # unreachable: some answer has the best count


def maj_at_k(tasks: Sequence[tuple[Sequence[str | None], Sequence[bool]]]) -> float:
    """Majority-vote accuracy averaged over tasks.

    Args:
        tasks: one ``(answers, passed)`` per task: the normalised answers of its samples (None
            where none was extracted) and whether each sample passed, aligned.

    Returns:
        The fraction of tasks whose majority answer belongs to a passing sample (a task passes
        when any sample with the majority answer passed); 0.0 when there are no tasks.

    Raises:
        ConfigError: ``answers`` and ``passed`` of a task differ in length.
    """
    if not tasks:
        return 0.0
    solved = 0
    for index, (answers, passed) in enumerate(tasks):
        if len(answers) != len(passed):
            raise ConfigError(
                f"tasks[{index}]: {len(answers)} answers but {len(passed)} passed flags; "
                "need one of each per sample"
            )
        winner = majority_answer(answers)
        if winner is None:
            continue
        chosen = answers[winner]
        solved += any(p for a, p in zip(answers, passed) if a == chosen)
    return solved / len(tasks)
