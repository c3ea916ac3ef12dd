r"""Unevaluated arithmetic: an answer that restates the question instead of answering it.

Since ``verify`` reads a bare expression as the answer, ``733*94`` "equals" 68902 and a policy
could earn full reward by copying an arithmetic prompt back (``rlvr check-env``'s copy probe
found it on ``rlvr/CompactToolUse-v0``). When the gold answer is a number, an answer whose last
side still multiplies, adds or subtracts two number literals is the computation, not its result,
and fails with reason ``"unevaluated"``. Fractions (``1/2``, ``\frac{1}{2}``), powers,
scientific notation (``3 \times 10^{5}``), radicals, signs, complex numbers ``a + bi`` and
equations whose last side is the result (``12 + 7 = 19``) are not affected; neither is any gold
answer that is itself such an expression.
"""

from __future__ import annotations

import re

_NUMBER = r"\d++(?:\.\d++)?+"
#: a number literal, an arithmetic operator, then another number literal (optionally bracketed).
#: Matches start only where a digit run starts and never backtrack into it (possessive), so a
#: 1 MB string of digits is scanned in linear time.
_BINARY_OP = re.compile(
    rf"(?<![\d.]){_NUMBER}\s*+(?:[+\-*×·]|\\times|\\cdot)\s*+[({{]?\s*+-?{_NUMBER}(?!\s*i\b)"
)
#: ``\times 10^{k}`` / ``* 10^k``: scientific notation, not a computation left undone.
_SCIENTIFIC = re.compile(r"(?:[*×·]|\\times|\\cdot)\s*10\s*\^\s*\{?\s*-?\d+\s*\}?")
_DECIMAL_GOLD = re.compile(r"-?\d+(?:[.,]\d+)*(?:\.\d+)?")


def is_unevaluated(answer: str, gold: str) -> bool:
    """Whether ``answer`` leaves undone arithmetic that a plain-number ``gold`` asks for.

    Args:
        answer: the extracted answer (not a whole response).
        gold: the gold answer.

    Returns:
        True when ``gold`` is a plain number (``68902``, ``-3.5``, ``1,234``) and the last side
        of ``answer`` (after its last ``=``) still holds a binary ``+ - * × ·`` between two
        number literals.
    """
    if not _DECIMAL_GOLD.fullmatch(gold.strip().strip("$").strip()):
        return False
    last_side = _SCIENTIFIC.sub("", answer.rsplit("=", 1)[-1])
    return _BINARY_OP.search(last_side) is not None


__all__ = ["is_unevaluated"]
