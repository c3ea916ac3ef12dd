r"""Unevaluated arithmetic: an answer that restates the question instead of answering it.

Since the verifier reads expressions, ``733*94`` "equals" 68902 and a policy could earn full
reward by copying an arithmetic prompt back. When the gold answer is a plain number (``68902``,
``-3.5``, ``12.5\%``), a predicted answer that still holds arithmetic on numbers is the
computation, not its result, and fails with reason ``"unevaluated"``.

The rule is decided on the parsed expression, so no spelling gets past it (``(733)(94)``,
``{347}\times{58}``, ``347 \cdot\! 58``, Unicode operators, ``1554/42``, ``\frac{1554}{42}``,
``-(5-12)``, ``2 \text{ times } 3``): an answer restates arithmetic when a sum, difference,
product or quotient in it has operands that are all numbers (no variables, no constants) and an
exact rational value, or when a sum or product has two or more such operands
(``\sqrt{2} + 3 + 4``). Written results are not affected:

- a number, with its sign (``-19``, ``3.5``) or as a mixed number (``2\frac{1}{2}``);
- a fraction of two integers in lowest terms (``\frac{7}{2}``, ``-1/2``; ``\frac{74}{2}`` is not);
- scientific notation (``1.5 \times 10^{3}``, ``10^{-2}``);
- closed forms: powers, roots, factorials and binomials (``2^{10}``, ``\sqrt{16}``, ``5!``,
  ``\binom{5}{2}``), irrational values (``\sqrt{2}``, ``2\pi``) and complex numbers ``3 + 4i``;
- an equation chain whose last side is a written result (``12 + 7 = 19``; ``x = 12 + 7``,
  ``733 \times 94 = x`` and ``19 = 12 + 7`` are not).

A gold answer that is not a plain number (``2 + 3``, ``\frac{2}{6}``, ``x + 1``) turns the rule
off.
"""

from __future__ import annotations

from fractions import Fraction

from rlvr.verifiers.math.numeric import exact_value, free_symbols
from rlvr.verifiers.math.parse import Answer, Expr, Node, Relation, SetOf, UnionOf

__all__ = ["is_plain_number", "restates_arithmetic"]

_OPERATIONS = frozenset({"add", "mul", "div"})
r"""The four operations of arithmetic (``-`` is an ``add``); powers, roots, factorials and
binomials are closed forms that answers are commonly left in (``2^{10}``, ``\sqrt{2}``)."""
_TEN: Node = ("num", Fraction(10), False)


def is_plain_number(answer: Answer) -> bool:
    """Whether a (gold) answer is one number literal, possibly negative."""
    if not isinstance(answer, Expr):
        return False
    node = answer.node
    while node[0] == "neg":
        node = node[1]
    return node[0] == "num"


def restates_arithmetic(answer: Answer) -> bool:
    """Whether a predicted answer leaves arithmetic undone (see the module docstring)."""
    while isinstance(answer, (SetOf, UnionOf)):
        items = answer.items if isinstance(answer, SetOf) else answer.parts
        if len(items) != 1:
            return False
        answer = items[0]
    if isinstance(answer, Relation):
        if not answer.ops or any(op != "=" for op in answer.ops):
            return False
        constant = [side for side in answer.sides if not free_symbols(side)]
        if not constant:
            return False
        last = answer.sides[-1]  # "12 + 7 = 19" states 19; "19 = 12 + 7" and "x = 12 + 7" not
        return all(_restated(side) for side in constant) or (
            last is constant[-1] and _restated(last)
        )
    return isinstance(answer, Expr) and _restated(answer.node)


def _restated(node: Node) -> bool:
    if _written_result(node):
        return False
    kind = node[0]
    if kind in _OPERATIONS and _numbers_only(node) and exact_value(node) is not None:
        return True
    children = _children(node)
    if kind in ("add", "mul"):
        exact = [child for child in children if _numbers_only(child)]
        if len(exact) >= 2 and all(exact_value(child) is not None for child in exact):
            return True
    return any(_restated(child) for child in children)


def _written_result(node: Node) -> bool:
    """A number, a lowest-terms fraction of integers, or scientific notation."""
    if node[0] == "neg":
        return _written_result(node[1])
    if node[0] == "num":
        return True
    if node[0] == "div":
        top, bottom = _integer(node[1]), _integer(node[2])
        if top is None or bottom is None or bottom in (0, 1, -1):
            return False
        return Fraction(top, bottom).denominator == abs(bottom)
    if node[0] == "pow":
        return node[1] == _TEN and _integer(node[2]) is not None
    if node[0] == "mul" and len(node[1]) == 2:
        mantissa, power = node[1]
        return _literal(mantissa) and power[0] == "pow" and _written_result(power)
    return False


def _literal(node: Node) -> bool:
    while node[0] == "neg":
        node = node[1]
    return node[0] == "num"


def _integer(node: Node) -> int | None:
    sign = 1
    while node[0] == "neg":
        sign, node = -sign, node[1]
    if node[0] == "num" and not node[2] and node[1].denominator == 1:
        return sign * node[1].numerator
    return None


def _numbers_only(node: Node) -> bool:
    """No symbols and no constants (``pi``, ``e``, ``i``): only number literals."""
    stack = [node]
    while stack:
        item = stack.pop()
        if item[0] in ("sym", "const"):
            return False
        stack.extend(_children(item))
    return True


def _children(node: Node) -> tuple[Node, ...]:
    kind = node[0]
    if kind in ("add", "mul"):
        return tuple(node[1])
    if kind in ("neg", "fact"):
        return (node[1],)
    if kind in ("div", "pow"):
        return (node[1], node[2])
    if kind == "fn":
        return tuple(node[2])
    return ()
