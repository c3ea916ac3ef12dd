r"""Math answer verification: extract the final answer, compare it with the gold answer.

    >>> from rlvr.verifiers.math import verify
    >>> verify("... so the answer is $\boxed{\frac{1}{2}}$.", "0.5").passed
    True

Public API:

- ``extract_answer(text, *, last_number_fallback=True) -> str | None``; ``find_boxed(text)`` and
  ``find_numbers(text)`` give where the boxed answer / the last number (list) sits
  (``AnswerSpan``), for envs that reward one answer format
- ``gold_answer(gold) -> str``: the final answer of a gold solution (``\boxed{}``, ``####``)
- ``is_equivalent(pred, gold, *, timeout_s=5.0) -> bool``
- ``verify(response, gold, *, timeout_s=5.0, last_number_fallback=True) -> Verdict``
- ``verify_answer(answer, gold, *, timeout_s=5.0) -> Verdict``: ``verify`` for an answer already
  extracted (an env that reads the last box); the same guards apply
- ``grade(pred, gold, *, timeout_s=5.0) -> Grade`` (``is_equivalent`` with the reason)
- ``warm_up()`` starts a sympy worker ahead of time; ``shutdown()`` kills the workers.

Most pairs are decided in pure Python (exact rationals, then complex-float evaluation);
the rest go to sympy in worker processes killed at the deadline. See ``grader.py``.
"""

from __future__ import annotations

from rlvr.verifiers.math.extract import AnswerSpan, extract_answer, find_boxed, find_numbers
from rlvr.verifiers.math.grader import (
    DEFAULT_TIMEOUT_S,
    Grade,
    gold_answer,
    grade,
    is_equivalent,
    verify,
    verify_answer,
    word_answer,
)
from rlvr.verifiers.math.numeric import REL_TOL_APPROX
from rlvr.verifiers.math.worker import WorkerPool, default_pool, shutdown_default_pool

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "REL_TOL_APPROX",
    "AnswerSpan",
    "Grade",
    "WorkerPool",
    "extract_answer",
    "find_boxed",
    "find_numbers",
    "gold_answer",
    "grade",
    "is_equivalent",
    "shutdown",
    "verify",
    "verify_answer",
    "warm_up",
    "word_answer",
]


def warm_up(timeout_s: float = 60.0) -> None:
    """Start a sympy worker now, so that the first hard case does not pay its start-up."""
    default_pool().warm_up(timeout_s)


def shutdown() -> None:
    """Kill the sympy workers (they restart on demand; also done at interpreter exit)."""
    shutdown_default_pool()
