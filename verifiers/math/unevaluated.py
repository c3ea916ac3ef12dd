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

from rlvr.verifiers.math.numeric import exact_value, free_symbols, has_approx
from rlvr.verifiers.math.tree import Answer, Expr, Node, Relation, SetOf, UnionOf, children, walk

__all__ = ["is_plain_number", "operation_count", "restates_arithmetic", "restates_question"]

_OPERATIONS = frozenset({"add", "mul", "div"})
r"""The four operations of arithmetic (``-`` is an ``add``); powers, roots, factorials and
binomials are closed forms that answers are commonly left in (``2^{10}``, ``\sqrt{2}``)."""
_TEN: Node = ("num", Fraction(10), False)


def is_plain_number(answer: Answer) -> bool:
    """Whether a (gold) answer is one number literal, possibly negative."""
    return isinstance(answer, Expr) and _literal(answer.node)


def _one_item(answer: Answer) -> Answer | None:
    """The answer inside one-item sets and unions (``{x = 3}``); None when they hold more."""
    while isinstance(answer, (SetOf, UnionOf)):
        items = answer.items if isinstance(answer, SetOf) else answer.parts
        if len(items) != 1:
            return None
        answer = items[0]
    return answer


def _equations(relation: Relation) -> bool:
    """Whether ``relation`` is a chain of ``=`` (an equation chain, not an inequality)."""
    return bool(relation.ops) and all(op == "=" for op in relation.ops)


def restates_arithmetic(answer: Answer) -> bool:
    """Whether a predicted answer leaves arithmetic undone (see the module docstring)."""
    one = _one_item(answer)
    if isinstance(one, Relation):
        if not _equations(one):
            return False
        constant = [side for side in one.sides if not free_symbols(side)]
        if not constant:
            return False
        last = one.sides[-1]  # "12 + 7 = 19" states 19; "19 = 12 + 7" and "x = 12 + 7" not
        return all(_restated(side) for side in constant) or (
            last is constant[-1] and _restated(last)
        )
    return isinstance(one, Expr) and _restated(one.node)


def _restated(node: Node) -> bool:
    if _written_result(node):
        return False
    kind = node[0]
    if kind in _OPERATIONS and _numbers_only(node) and exact_value(node) is not None:
        return True
    parts = children(node)
    if kind in ("add", "mul"):
        exact = [child for child in parts if _numbers_only(child)]
        if len(exact) >= 2 and all(exact_value(child) is not None for child in exact):
            return True
    return any(_restated(child) for child in parts)


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
    return not any(item[0] in ("sym", "const") for item in walk(node))


def operation_count(node: Node) -> int:
    r"""How much is left to evaluate in ``node``: operations, function applications, constants.

    Written results count 0: a number literal, a lowest-terms fraction of integers, scientific
    notation, a variable, ``i`` and infinity. Each further sum term, product factor (rational
    coefficients are free: ``\frac{1}{2}\pi``), quotient of two numbers (``\frac{26}{2}``),
    power, function application and factorial counts 1, and each distinct constant (``\pi``,
    ``e``) 1, so ``\frac{1}{\sqrt{3}}`` and ``\frac{\sqrt{3}}{3}`` count alike, as do ``e \cdot e``
    and ``e^2``.
    """
    constants: set[str] = set()
    return _operations(node, constants) + len(constants)


def _operations(node: Node, constants: set[str]) -> int:
    if _written_result(node):
        return 0
    kind = node[0]
    if kind == "sym":
        return 0
    if kind == "const":
        if node[1] not in ("i", "oo"):
            constants.add(node[1])
        return 0
    if kind == "neg":
        return _operations(node[1], constants)
    if kind == "add":
        return len(node[1]) - 1 + sum(_operations(term, constants) for term in node[1])
    if kind == "mul":
        factors = _flat_factors(node)
        others = [f for f in factors if not _written_result(f)]
        literals = [f for f in factors if _written_result(f)]
        atoms = all(f[0] in ("sym", "const") for f in others)  # "1i", "1x": a coefficient
        ones = not atoms and any(exact_value(f) in (1, -1) for f in literals)  # "(2\sqrt{3})1"
        inner = sum(_operations(f, constants) for f in others)
        return max(0, len(others) - 1) + (len(literals) > 1 or ones) + inner
    if kind == "pow" and _integer(node[2]) == -1:  # a reciprocal, as a quotient would be
        return _operations(node[1], constants)
    if kind == "div":
        numbers = _literal(node[1]) and _literal(node[2])
        inner = _operations(node[1], constants) + _operations(node[2], constants)
        return int(numbers) + inner
    return 1 + sum(_operations(child, constants) for child in children(node))


def _flat_factors(node: Node) -> list[Node]:
    """The factors of a product, through nested products and signs."""
    factors: list[Node] = []
    stack = [node]
    while stack:
        item = stack.pop()
        while item[0] == "neg":
            item = item[1]
        if item[0] == "mul":
            stack.extend(item[1])
        else:
            factors.append(item)
    return factors


def restates_question(answer: Answer, gold: Answer) -> bool:
    r"""Whether ``answer`` has more left to evaluate than the gold answer's canonical form.

    The one structural rule against restated questions (``\gcd(1729, 1768)``, ``\sqrt{16}``,
    ``e^{\ln 5}``, ``\frac{26}{2}`` for 13): it applies when the gold answer is one constant
    expression (no variables); the gold counts as written (a gold written ``2 + 3`` allows as
    much; a decimal gold allows one step, the exact value it rounds: ``\pi`` for 3.14159265).
    An equation chain is judged by its last side (``12 + 7 = 19`` states 19).
    """
    gold_node = _single_node(gold)
    node = _single_node(answer)
    if gold_node is None or node is None or free_symbols(gold_node):
        return False
    budget = operation_count(gold_node)
    if has_approx(gold_node) and not has_approx(node):  # a decimal gold stands for its exact
        budget = max(budget, 1)  # value: \pi for 3.14159265 (but not 2.5^{1} for 2.5)
    return operation_count(node) > budget


def _single_node(answer: Answer) -> Node | None:
    one = _one_item(answer)
    if isinstance(one, Relation):
        return one.sides[-1] if _equations(one) else None
    return one.node if isinstance(one, Expr) else None
