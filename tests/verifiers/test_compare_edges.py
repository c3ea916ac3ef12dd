"""``rlvr.verifiers.math.compare`` at its edges: relations both ways round, structures, the set cap.

The comparison runs on parsed answers with the fast scalar callback (no sympy worker), and, to
pin the True/False/None rules, with a callback that decides by name. Each test asserts the value
the module's rules give; together they fail on every small change of the module
(``bash dev.sh mutate verifiers/math/compare.py``).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from rlvr.verifiers.math import is_equivalent
from rlvr.verifiers.math.compare import MAX_UNORDERED_ITEMS, answers_equal
from rlvr.verifiers.math.numeric import scalar_equal
from rlvr.verifiers.math.parse import parse_answer
from rlvr.verifiers.math.tree import Expr, Node, SetOf


def equal(pred: str, gold: str, **percent: bool) -> bool | None:
    return answers_equal(parse_answer(pred), parse_answer(gold), scalar_equal, **percent)


def by_name(undecided: frozenset[tuple[str, str]] = frozenset()):
    """A scalar callback: symbols are equal when their names are; listed pairs are undecided."""

    def scalar(a: Node, b: Node) -> bool | None:
        if a[0] == "sym" and b[0] == "sym" and (a[1], b[1]) in undecided:
            return None
        return a == b

    return scalar


def names(*items: str) -> SetOf:
    return SetOf(tuple(Expr(("sym", n)) for n in items), braces=True)


# ----------------------------------------------------------------------------- relations
def test_greater_than_equals_less_than_read_backwards():
    assert equal("x > 3", "3 < x") is True  # both parse as the interval (3, oo)
    assert equal("x > y", "y < x") is True
    assert equal("x >= y", "y <= x") is True
    assert equal("x >= y", "y < x") is False
    assert equal("x > 1 < y", "y < 1 < x") is False  # a mixed chain is never turned round


def test_equations_equal_up_to_an_exact_constant_factor():
    assert equal("2y = 4x + 6", "y = 2x + 3") is True
    # proportional at the first sample point, but not everywhere: the factor is exact
    assert equal(r"2y = 4x + 6 + \frac{x^2}{10^{12}}", "y = 2x + 3") is False
    # the factor is exact: a difference of a few 1e-7 relative at the larger sample points
    # (none beyond 2, so no far point looks) is not proportional
    assert equal(r"2y = 2x + 10^{-12} x^4", "y = x") is False


def test_relations_compare_ops_then_sides_then_swapped_sides():
    scalar = by_name()
    rel = parse_answer
    assert answers_equal(rel("x = y"), rel("y = x"), scalar) is True  # swapped sides
    assert answers_equal(rel("x = y"), rel("x = z"), scalar) is False
    assert answers_equal(rel("x < y"), rel("y < x"), scalar) is False  # only '=' swaps
    assert answers_equal(rel("x < y"), rel("x = y"), scalar) is False
    undecided = by_name(frozenset({("x", "z")}))
    assert answers_equal(rel("x = y"), rel("z = y"), undecided) is None
    assert answers_equal(rel("x < y"), rel("z < y"), undecided) is None


def test_an_equation_stands_for_its_value_only_in_its_documented_forms():
    assert equal("2", "x = 2") is True
    assert equal("12 + 7 = 19", "19") is True
    assert equal("1 = 2 = 19", "19") is False
    assert equal("2", "1 + 1 = 2") is False  # a gold equation is only ever x = value
    assert equal("2", "2 = x") is False
    assert equal("y", "x = y") is False
    assert equal("x < 3 < y", "3") is False  # only '=' chains state a value
    assert equal("x = 3 < y", "3") is False


# ----------------------------------------------------------------------------- ratios, percents
def test_a_ratio_equals_a_fraction_either_way_round():
    assert equal("3:4", r"\frac{3}{4}") is True
    assert equal(r"\frac{3}{4}", "3:4") is True
    assert equal("0.75", "3:4") is False
    assert equal("3:4", r"\frac{4}{3}") is False and equal("3:4", "(3, 4)") is False
    assert equal("10:30", r"\frac{10}{30}") is False and equal(r"\frac12", "1:2:3") is False
    assert equal("6:8", "3:4") is True
    assert equal("1:2:3", "1:2") is False
    assert equal("1:2", "1:3") is False and equal("2:4:6", "1:2:3") is True
    assert equal("1:3", "10:30") is False and equal("10:30", "1:3") is False  # a clock: terms
    assert equal("0:4", "0:8") is False  # a zero first term fixes no proportion
    assert equal("10:30", "10:30") is True and equal("20:60", "10:30") is False  # clock times


def test_a_first_term_written_as_a_decimal_zero_fixes_no_proportion():
    # 0.0\pi is zero: 0.0\pi:0.0\pi is no ratio at all, not 3:4 (it once was, as no exact 0
    # equals a term written with a decimal point)
    assert is_equivalent(r"0.0\pi:0.0\pi", "3:4") is False
    assert is_equivalent("3:4", r"0.0\pi:0.0\pi") is False
    assert is_equivalent(r"0.0\pi:1", "0:5") is False
    # nonzero decimal terms still fix the proportion, however small
    assert is_equivalent(r"1.5\pi:3\pi", "1:2") is True
    assert is_equivalent("0.000001:1", "1:1000000") is True


def test_a_percent_gold_answer_also_matches_the_fraction_of_one_hundred():
    assert equal("0.5", "50", gold_percent=True) is True
    assert equal("50", "50", gold_percent=True) is True
    assert equal("0.5", "50") is False  # no percent sign, no second reading
    assert equal("0.5", "50", pred_percent=True, gold_percent=True) is False
    assert equal("0.25", "50", gold_percent=True) is False
    # the 100 divided by is exact: a near miss is not rounding
    assert equal(r"\frac{1}{3}", r"\frac{33333333}{1000000}", gold_percent=True) is False
    pred, gold = Expr(("sym", "p")), Expr(("sym", "g"))
    undecided = by_name(frozenset({("p", "g")}))
    assert answers_equal(pred, gold, undecided, gold_percent=True) is None
    assert answers_equal(pred, gold, by_name(), gold_percent=True) is False


# ----------------------------------------------------------------------------- structures
def test_tuples_lists_and_sets():
    assert equal("(2, 1)", r"\{1, 2\}") is True  # a tuple matches a set
    assert equal("[2, 1]", r"\{1, 2\}") is False
    assert equal("(1, 2]", r"\{1, 2\}") is False
    assert equal("3", r"\{1, 2\}") is False
    assert equal("1, 2", "(1, 2)") is True  # a bare list matches a tuple in order
    assert equal("2, 1", "(1, 2)") is False
    assert equal("1, 2", "[1, 2]") is False
    assert equal("1, 2, 3", "(1, 2)") is False
    assert equal("3", "(1, 2)") is False
    assert equal("(1, 2, 3)", "[1, 2, 3]") is False
    assert equal("(1, 2, 3)", "(1, 2, 3)") is True


def test_vectors_against_tuples_and_sets():
    row = r"\begin{pmatrix}1 & 2\end{pmatrix}"
    column = r"\begin{pmatrix}1 \\ 2\end{pmatrix}"
    square = r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}"
    assert equal(row, "(1, 2)") is True
    assert equal(column, "(1, 2)") is True
    assert equal(row, "(2, 1)") is False
    assert equal(square, "(1, 2, 3, 4)") is False
    assert equal("(1, 2)", row) is True
    assert equal("1, 2", column) is True
    assert equal(r"\{1, 2\}", row) is False  # a braced set is never a vector
    assert equal("3", square) is False
    assert equal(row, column) is False
    assert equal(square, square) is True


def test_set_items_match_one_to_one():
    assert equal(r"\{1, \frac{2}{2}\}", r"\{1, 2\}") is False  # both items are 1
    assert equal(r"\{2, 1\}", r"\{1, 2\}") is True
    # p0 fits g0 and g1, p1 only g0: the matching must move p0 to g1
    scalar = by_name()
    fits = {("p0", "g0"), ("p0", "g1"), ("p1", "g0")}

    def table(a: Node, b: Node) -> bool | None:
        return (a[1], b[1]) in fits if a[0] == b[0] == "sym" else scalar(a, b)

    assert answers_equal(names("p0", "p1"), names("g0", "g1"), table) is True
    assert answers_equal(names("p1", "p0"), names("g0", "g1"), table) is True


def test_set_matching_is_undecided_only_when_an_undecided_pair_could_complete_it():
    undecided = by_name(frozenset({("z", "y")}))
    assert answers_equal(names("x", "z"), names("x", "y"), undecided) is None
    assert answers_equal(names("w", "z"), names("x", "y"), undecided) is False
    assert answers_equal(names("x", "y"), names("y", "x"), undecided) is True


def test_sets_above_the_cap_compare_sorted():
    """Above MAX_UNORDERED_ITEMS items, sets of numbers are sorted by value (no matching)."""
    assert MAX_UNORDERED_ITEMS == 64
    for size, permuted_equal in ((MAX_UNORDERED_ITEMS, True), (MAX_UNORDERED_ITEMS + 1, True)):
        gold = SetOf(tuple(Expr(("num", Fraction(i), False)) for i in range(size)), braces=True)
        pred = SetOf(tuple(reversed(gold.items)), braces=True)
        assert answers_equal(gold, gold, scalar_equal) is True
        assert answers_equal(pred, gold, scalar_equal) is permuted_equal


@pytest.mark.parametrize("gold", [r"\{1, 2\}", "(1, 2)", "3", r"\begin{pmatrix}1\end{pmatrix}"])
def test_a_different_structure_is_never_equal(gold):
    assert equal("x < y", gold) is False
