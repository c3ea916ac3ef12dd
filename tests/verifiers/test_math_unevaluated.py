"""Arithmetic left undone never earns credit against a plain-number gold (copying the prompt)."""

from __future__ import annotations

import pytest

from rlvr.verifiers.math import verify


@pytest.mark.parametrize("response, gold", [
    ("733*94", "68902"),                    # the CompactToolUse prompt copied back
    ("12+7", "19"),                         # the quickstart's prompt copied back
    ("$733 \\times 94$", "68902"),
    ("\\boxed{733 \\cdot 94}", "68902"),
    ("19 = 12 + 7", "19"),
    ("100 - 1", "99"),
    ("(733)(94)", "68902"),                 # brackets around the operands
    ("{347}\\times{58}", "20126"),
    ("347 \\cdot\\! 58", "20126"),          # a spacing macro
    ("347 \u22c5 58", "20126"),              # Unicode dot operator
    ("400 \u2212 1", "399"),                 # Unicode minus
    ("1554/42", "37"),                      # a division question restated
    ("\\frac{1554}{42}", "37"),
    ("x = 56 + 38", "94"),
    ("2^{10}", "1024"),                     # one structural rule: more operations than the gold
    ("\\gcd(1729, 1768)", "13"),            # a function of numbers
    ("\\sqrt{2} \\cdot \\sqrt{8}", "4"),       # irrational operands, rational result
    ("e^{\\ln 5}", "5"),                     # constants that evaluate to integers
    ("\\pi - \\pi + 3", "3"),
    ("\\lfloor 13.5 \\rfloor", "13"),
    ("1101_2", "13"),                       # a base numeral
    ("\\sin 60^\\circ", "\\frac{\\sqrt{3}}{2}"),  # a function of a number, irrational gold
    ("\\sqrt{3} + \\sqrt{3}", "2\\sqrt{3}"),
    ("\\frac{2}{6}", "\\frac{1}{3}"),          # a fraction gold
])
def test_unevaluated_arithmetic_fails(response, gold):
    verdict = verify(response, gold)
    assert not verdict.passed
    assert verdict.reason == "unevaluated"


@pytest.mark.parametrize("response, gold", [
    ("12 + 7 = 19", "19"),                  # the result is the last side
    ("1/2", "0.5"),                         # a fraction is a number
    ("3 \\times 10^{5}", "300000"),         # scientific notation
    ("2^{10}", "2^{10}"),                   # as much left to evaluate as the gold
    ("\\frac{7}{2}", "3.5"),                 # lowest terms
    ("-\\frac{1}{2}", "-0.5"),
    ("3+4i", "3+4i"),                       # complex numbers
    ("\\boxed{2+3}", "2+3"),                # the gold is itself an expression
    ("68902", "68902"),
])
def test_results_and_non_arithmetic_forms_still_pass(response, gold):
    assert verify(response, gold).passed


def test_long_answers_are_checked_quickly():
    import time

    from rlvr.verifiers.math import verify_answer

    t0 = time.perf_counter()
    assert not verify_answer("9" * 1_000_000, "68902").passed
    assert verify_answer("+".join(["1"] * 1200), "1200").reason == "unevaluated"
    assert verify_answer("(" * 40 + "7" + ")" * 40, "7").passed
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("text", [r"|12 + 7 = 19|", r"\sqrt{(3 + 4 = 7)}", r"f(2 + 3 = 5)"])
def test_every_walk_goes_into_a_relation_nested_in_an_expression(text: str) -> None:
    from rlvr.verifiers.math.numeric import free_symbols
    from rlvr.verifiers.math.parse import parse_answer
    from rlvr.verifiers.math.tree import children
    from rlvr.verifiers.math.unevaluated import operation_count, restates_arithmetic

    answer = parse_answer(text)
    relation = next(n for n in children(answer.node) if n[0] == "rel")
    assert children(relation) == relation[2]  # a relation's sides are its children
    assert restates_arithmetic(answer)  # the arithmetic inside the relation is seen
    assert operation_count(answer.node) == 3  # the function or product, the relation, the sum
    assert not free_symbols(relation)
    assert free_symbols(parse_answer(r"|x = 3|").node) == {"x"}


def test_walk_visits_every_node_once_without_recursion() -> None:
    from rlvr.verifiers.math.parse import parse_answer
    from rlvr.verifiers.math.tree import walk

    node = parse_answer(r"|x + 2 = 19| \cdot \sqrt{y}").node
    kinds = sorted(item[0] for item in walk(node))
    assert kinds == ["add", "fn", "fn", "mul", "num", "num", "rel", "sym", "sym"]
    assert next(walk(node)) is node
    deep = parse_answer("-" * 45 + "x").node  # a chain of 45 signs
    assert sum(1 for _ in walk(deep)) == 46
