r"""Structural comparison of two parsed answers (the gold answer decides the semantics).

- scalars: the ``scalar`` callback (pure-Python fast path, or sympy in the worker); a gold
  answer with a percent sign, 50%, matches 50 and 0.5; a predicted ``k%`` is read one way only,
  as k (the sign is a unit, as in "what percent...? 50%"), never also as k/100 (which would
  make ``k%`` a hedge between two answers);
- ratios ``a:b``: proportional terms; a clock time ``10:30`` only the same terms; a two-term
  ratio also equals a fraction written as one (``\frac34`` for ``3:4``), never a plain number;
- ``(a, b)`` / ``[a, b)``: brackets must match (an infinite end ignores its bracket), items in
  order: so ``[0,1)`` is not ``[0,1]`` and the tuple ``(1,2)`` is not ``(2,1)``; a bare list
  ``1, 2`` matches the tuple ``(1, 2)`` in order;
- ``\{a, b\}`` and bare lists ``a, b``: unordered, duplicates ignored; a tuple ``(a, b)`` also
  matches, an interval with a square bracket (``(1, 2]``) never does;
- unions of intervals: unordered;
- matrices: same shape, entry by entry; a column or row vector also matches a tuple;
- equations: the same sides, swapped sides, or ``lhs - rhs`` the same up to a nonzero constant
  factor (``2y = 4x + 6`` is ``y = 2x + 3``);
- ``x = 3`` compared with a non-equation stands for 3 (either side); a predicted equation chain
  such as ``12 + 7 = 19`` or ``a + b = 19`` stands for 19 when every side without variables
  equals the gold answer (so ``1 = 2 = 19`` is not 19);

Each comparison answers True, False or None (undecided by the scalar callback); None wins over
False only where a True there could still make the whole answer equal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

from rlvr.verifiers.math.numeric import (
    exact_value,
    free_symbols,
    infinity_sign,
    proportionality,
)
from rlvr.verifiers.math.tree import (
    Answer,
    Bracketed,
    Expr,
    Matrix,
    Node,
    Ratio,
    Relation,
    SetOf,
    UnionOf,
)

__all__ = ["ScalarEqual", "answers_equal"]

ScalarEqual = Callable[[Node, Node], "bool | None"]
MAX_UNORDERED_ITEMS = 64
_HUNDRED: Node = ("num", Fraction(100), False)


def answers_equal(
    pred: Answer,
    gold: Answer,
    scalar: ScalarEqual,
    *,
    pred_percent: bool = False,
    gold_percent: bool = False,
) -> bool | None:
    """Whether ``pred`` states the same answer as ``gold`` (see the module docstring)."""
    if isinstance(gold, Expr) and isinstance(pred, Expr) and gold_percent and not pred_percent:
        candidates = [(pred.node, gold.node), (pred.node, ("div", gold.node, _HUNDRED))]
        return _any([scalar(p, g) for p, g in candidates])
    return _equal(pred, gold, scalar)


def _equal(pred: Answer, gold: Answer, scalar: ScalarEqual) -> bool | None:
    pred = _unwrap_singleton(pred)
    gold = _unwrap_singleton(gold)
    if isinstance(gold, Relation) and isinstance(pred, Relation):
        return _relations_equal(pred, gold, scalar)
    if isinstance(pred, Relation) and not isinstance(gold, Relation):
        values = _chain_values(pred, computed=True)
        if values:
            return _all([_equal(Expr(value), gold, scalar) for value in values])
    if isinstance(gold, Relation) and not isinstance(pred, Relation):
        values = _chain_values(gold, computed=False)
        if values:
            return _equal(pred, Expr(values[0]), scalar)
    if isinstance(gold, Ratio) or isinstance(pred, Ratio):
        return _ratio_equal(pred, gold, scalar)
    if isinstance(gold, Expr):
        return scalar(pred.node, gold.node) if isinstance(pred, Expr) else False
    if isinstance(gold, Relation):
        return _relations_equal(pred, gold, scalar) if isinstance(pred, Relation) else False
    if isinstance(gold, Bracketed):
        return _bracketed_equal(pred, gold, scalar)
    if isinstance(gold, SetOf):
        if isinstance(pred, (SetOf, UnionOf)) or (
            isinstance(pred, Bracketed) and (pred.open, pred.close) == ("(", ")")
        ):
            return _unordered(_items(pred), gold.items, scalar)
        return False
    if isinstance(gold, UnionOf):
        return _unordered(_items(pred), gold.parts, scalar)
    if isinstance(gold, Matrix):
        return _matrix_equal(pred, gold, scalar)
    return False


def _chain_values(relation: Relation, *, computed: bool) -> tuple[Node, ...]:
    """The values an equation chain states.

    With ``computed`` (a response's ``12 + 7 = 19``): its sides without variables, when it has
    any. Otherwise (and always for a gold answer): the value of ``x = value``.
    """
    if not relation.ops or any(op != "=" for op in relation.ops):
        return ()
    constant = tuple(side for side in relation.sides if not free_symbols(side))
    if computed and constant:
        return constant
    lhs, rhs = relation.sides[0], relation.sides[-1]
    if len(relation.sides) == 2 and lhs[0] == "sym" and rhs[0] != "sym":
        return (rhs,)
    return ()


def _unwrap_singleton(answer: Answer) -> Answer:
    """A one-element set/list/union stands for its element."""
    while isinstance(answer, (SetOf, UnionOf)):
        items = _items(answer)
        if len(items) != 1:
            break
        answer = items[0]
    return answer


def _items(answer: Answer) -> tuple[Answer, ...]:
    if isinstance(answer, SetOf):
        return answer.items
    if isinstance(answer, UnionOf):
        return answer.parts
    if isinstance(answer, Bracketed):
        return answer.items
    return (answer,)


def _bracketed_equal(pred: Answer, gold: Bracketed, scalar: ScalarEqual) -> bool | None:
    if isinstance(pred, SetOf) and not pred.braces:
        return gold.open == "(" and _ordered(pred.items, gold.items, scalar)
    if isinstance(pred, Matrix):
        return _ordered(_vector(pred), gold.items, scalar)
    if not isinstance(pred, Bracketed) or len(pred.items) != len(gold.items):
        return False
    if len(gold.items) == 2:
        low, high = gold.items
        if pred.open != gold.open and not _is_infinite(low):
            return False
        if pred.close != gold.close and not _is_infinite(high):
            return False
    elif (pred.open, pred.close) != (gold.open, gold.close):
        return False
    return _ordered(pred.items, gold.items, scalar)


def _is_infinite(answer: Answer) -> bool:
    return isinstance(answer, Expr) and infinity_sign(answer.node) != 0


def _vector(matrix: Matrix) -> tuple[Answer, ...]:
    if len(matrix.rows) == 1:
        return tuple(Expr(cell) for cell in matrix.rows[0])
    if all(len(row) == 1 for row in matrix.rows):
        return tuple(Expr(row[0]) for row in matrix.rows)
    return ()


def _matrix_equal(pred: Answer, gold: Matrix, scalar: ScalarEqual) -> bool | None:
    if isinstance(pred, Matrix):
        if [len(r) for r in pred.rows] != [len(r) for r in gold.rows]:
            return False
        pairs = [
            scalar(p, g)
            for p_row, g_row in zip(pred.rows, gold.rows)
            for p, g in zip(p_row, g_row)
        ]
        return _all(pairs)
    vector = _vector(gold)
    if vector and isinstance(pred, (Bracketed, SetOf)) and not getattr(pred, "braces", False):
        return _ordered(_items(pred), vector, scalar)
    return False


def _relations_equal(pred: Relation, gold: Relation, scalar: ScalarEqual) -> bool | None:
    pred_ops, pred_sides = _as_less_than(pred)
    gold_ops, gold_sides = _as_less_than(gold)
    if pred_ops != gold_ops:
        return False
    same = _all([scalar(p, g) for p, g in zip(pred_sides, gold_sides)])
    if gold_ops != ("=",) or same is True:
        return same
    swapped = _all([scalar(pred_sides[0], gold_sides[1]), scalar(pred_sides[1], gold_sides[0])])
    pred_difference: Node = ("add", (pred_sides[0], ("neg", pred_sides[1])))
    gold_difference: Node = ("add", (gold_sides[0], ("neg", gold_sides[1])))
    factor = proportionality(pred_difference, gold_difference)
    if factor is None:
        return _any([same, swapped])
    scaled: Node = ("mul", (("num", factor, False), gold_difference))
    return _any([same, swapped, scalar(pred_difference, scaled)])


def _ratio_equal(pred: Answer, gold: Answer, scalar: ScalarEqual) -> bool | None:
    r"""Ratios have proportional terms (``6:8`` is ``3:4``; a time ``10:30``, the same terms).

    A two-term ratio also equals a fraction written as one (``\frac34``), never a plain number
    (``34``, ``0.75``).
    """
    if isinstance(pred, Ratio) and isinstance(gold, Ratio):
        if len(pred.terms) != len(gold.terms):
            return False
        if pred.clock or gold.clock:
            return _all([scalar(p, g) for p, g in zip(pred.terms, gold.terms)])
        first_p, first_g = pred.terms[0], gold.terms[0]
        return _all([
            scalar(("mul", (p, first_g)), ("mul", (g, first_p)))
            for p, g in zip(pred.terms[1:], gold.terms[1:])
        ] + [_nonzero(first_p, scalar), _nonzero(first_g, scalar)])
    ratio, other = (pred, gold) if isinstance(pred, Ratio) else (gold, pred)
    if not isinstance(ratio, Ratio) or ratio.clock or len(ratio.terms) != 2:
        return False
    if not isinstance(other, Expr) or other.node[0] != "div":
        return False
    return scalar(other.node, ("div", ratio.terms[0], ratio.terms[1]))


def _nonzero(node: Node, scalar: ScalarEqual) -> bool | None:
    # The zero is marked approximate: an exact 0 equals only what is exactly 0, so a term
    # written with a decimal point (0.0\pi) would never be 0 and 0.0\pi:0.0\pi would be 3:4.
    zero = scalar(node, ("num", Fraction(0), True))
    return None if zero is None else not zero


def _as_less_than(relation: Relation) -> tuple[tuple[str, ...], tuple[Node, ...]]:
    """Write ``a > b`` as ``b < a`` so that both directions compare equal."""
    if relation.ops and all(op in (">", ">=") for op in relation.ops):
        flipped = tuple("<" + op[1:] for op in reversed(relation.ops))
        return flipped, tuple(reversed(relation.sides))
    return relation.ops, relation.sides


def _ordered(
    pred: Sequence[Answer], gold: Sequence[Answer], scalar: ScalarEqual
) -> bool | None:
    if len(pred) != len(gold) or not gold:
        return False
    return _all([_equal(p, g, scalar) for p, g in zip(pred, gold)])


def _sorted_exact(items: Sequence[Answer]) -> tuple[Answer, ...]:
    """The items sorted by exact value when every one is a rational number; else as given."""
    values = [exact_value(i.node) if isinstance(i, Expr) else None for i in items]
    if any(v is None for v in values):
        return tuple(items)
    order = sorted(range(len(items)), key=lambda k: values[k])  # type: ignore[arg-type,return-value]
    return tuple(items[k] for k in order)


def _unordered(
    pred: Sequence[Answer], gold: Sequence[Answer], scalar: ScalarEqual
) -> bool | None:
    """Whether the items match one to one in some order (duplicates ignored)."""
    pred, gold = tuple(dict.fromkeys(pred)), tuple(dict.fromkeys(gold))
    if len(pred) != len(gold):
        return False
    if len(gold) > MAX_UNORDERED_ITEMS:  # too many to match pairwise: sort exact values
        return _ordered(_sorted_exact(pred), _sorted_exact(gold), scalar)
    table = [[_equal(p, g, scalar) for g in gold] for p in pred]
    if _has_perfect_matching(table, lambda r: r is True):
        return True
    if _has_perfect_matching(table, lambda r: r is not False):
        return None
    return False


def _has_perfect_matching(
    table: list[list[bool | None]], usable: Callable[[bool | None], bool]
) -> bool:
    """Kuhn's augmenting-path bipartite matching on a square table."""
    size = len(table)
    match_of_gold = [-1] * size

    def augment(row: int, seen: list[bool]) -> bool:
        for col in range(size):
            if usable(table[row][col]) and not seen[col]:
                seen[col] = True
                if match_of_gold[col] < 0 or augment(match_of_gold[col], seen):
                    match_of_gold[col] = row
                    return True
        return False

    return all(augment(row, [False] * size) for row in range(size))


def _all(results: Sequence[bool | None]) -> bool | None:
    if any(r is False for r in results):
        return False
    return None if any(r is None for r in results) else True


def _any(results: Sequence[bool | None]) -> bool | None:
    if any(r is True for r in results):
        return True
    return None if any(r is None for r in results) else False
