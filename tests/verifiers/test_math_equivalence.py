"""rlvr.verifiers.math equivalence rules, verdict contract and argument errors."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rlvr.verifiers import Verdict
from rlvr.verifiers.errors import InvalidArgumentError
from rlvr.verifiers.math import REL_TOL_APPROX, grade, is_equivalent, verify, warm_up


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        (r"\frac{1}{2}", "0.5", True),
        ("0.5", r"\frac{1}{2}", True),
        ("[0,1)", "[0,1]", False),
        ("(1,2)", "(2,1)", False),
        ("1/3", "0.33", False),
        ("2", "2.01", False),
        (r"\{2, 1\}", r"\{1, 2\}", True),
        (r"(-\infty, 2] \cup (3, \infty)", r"(3, \infty) \cup (-\infty, 2]", True),
        (r"x \in [1, 2)", "[1, 2)", True),
        (r"1 < x < 2", "(1, 2)", True),
        (r"\frac{d}{1}", "d", True),
        (r"x = \pm 3", "3, -3", True),
        (r"\$1{,}200", "1200", True),
        (r"10^{3}\,\text{m}", "1000", False),  # a unit the gold answer does not have
        (r"10^{3}\,\text{m}", r"1000 \text{ meters}", True),
        ("3.5 hours", "3.5", False),
        ("3.5 hours", r"3.5 \text{ h}", True),
        (r"2 \text{ million}", "2", False),  # a magnitude word is read, never dropped
        (r"2 \text{ million}", "2000000", True),
        (r"\lfloor 3.7 \rfloor", "3", True),
        (r"\lceil 3.2 \rceil", "3", False),
        (r"|-4|", "4", True),
        (r"\gcd(12, 18)", "6", True),
        (r"\operatorname{lcm}(4, 6)", "12", True),
        (r"\sin^{-1}(1)", r"\frac{\pi}{2}", True),
        (r"\log_{10} 1000", "3", True),
        (r"2^{-1}", "0.5", True),
        (r"\sqrt[3]{-27}", "-3", True),
        (r"i^2", "-1", True),
        (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", "(1, 2)", True),
        ("y = 2x + 1", "y - 2x = 1", True),
        ("y = 2x + 1", "y - 2x = 2", False),
        ("x > 3", r"x \le 3", False),
        ("Monday", r"\text{Monday}", True),
        ("monday", "Tuesday", False),
    ],
)
def test_equivalence_rules(pred, gold, expected):
    assert is_equivalent(pred, gold) is expected


def test_sympy_decides_what_floats_cannot():
    warm_up()
    result = grade("e^{1000}", "(e^{500})^2")
    assert (result.equal, result.method) == (True, "sympy")
    # the deadline is not what this checks: 60 s, as sympy needed over 5 s at load 10 on 2 cores
    result = grade("(x+1)^{300} - e^{e^{e^{x+9}}}", "(x+2)^{300} - e^{e^{e^{x+9}}}", timeout_s=60)
    assert (result.equal, result.reason) == (False, "wrong_answer")


def test_a_rational_base_to_a_variable_power_reaches_sympy():
    # the size guard once took 2^{x}'s exponent for a constant and failed on the variable
    # (graded "unreadable answer (KeyError)"); 17 variables are more than the fast path samples,
    # and sympy's sampling once failed on them too (IndexError: the points have 16 coordinates)
    warm_up()
    many = " + ".join(f"a_{{{k}}}" for k in range(17))
    result = grade("2^{x} + " + many, many + " + 2^{x}")
    assert (result.equal, result.method) == (True, "sympy")
    result = grade("2^{x} + " + many, many + " + 3^{x}")
    assert (result.equal, result.reason) == (False, "wrong_answer")


def test_verdict_reasons_and_details():
    right = verify(r"so \boxed{42}", "42")
    assert isinstance(right, Verdict)
    assert (right.score, right.passed, right.reason) == (1.0, True, "correct")
    assert right.details["extracted"] == "42" and right.details["gold"] == "42"
    wrong = verify(r"\boxed{41}", "42")
    assert (wrong.score, wrong.passed, wrong.reason) == (0.0, False, "wrong_answer")
    none = verify("I cannot solve this.", "42")
    assert (none.reason, none.details["extracted"]) == ("no_answer", None)
    unreadable = verify(r"\boxed{\foo{3}}", "42")
    assert unreadable.reason == "parse_error" and "foo" in unreadable.details["message"]
    strict = verify("It is 42 apples", "42", last_number_fallback=False)
    assert strict.reason == "no_answer"


def test_gold_solutions_are_reduced_to_their_final_answer():
    assert verify("Answer: 7", "3 + 4 = 7\n#### 7").passed
    assert verify("Answer: 7", r"Adding, we get $\boxed{7}$.").passed
    assert is_equivalent("7", r"we get \boxed{7}")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: verify(None, "1"), "pred/response must be a str, got NoneType"),
        (lambda: verify("1", 1), "gold must be a str, got int"),
        (lambda: verify("1", "1", timeout_s=0), "timeout_s must be > 0 seconds, got 0"),
        (lambda: is_equivalent("1", "1", timeout_s=-1.0), "timeout_s must be > 0"),
    ],
)
def test_programmer_errors_raise_typed_errors(call, message):
    with pytest.raises(InvalidArgumentError, match=message):
        call()


def test_invalid_argument_error_is_a_value_error():
    with pytest.raises(ValueError, match="gold must be a str"):
        grade("1", b"1")  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.integers(-10**6, 10**6), st.integers(1, 999))
def test_fractions_match_their_terminating_or_exact_forms(numerator, denominator):
    fraction = rf"\frac{{{numerator}}}{{{denominator}}}"
    assert is_equivalent(f"{numerator}/{denominator}", fraction)
    assert is_equivalent(f"{numerator * 3}/{denominator * 3}", fraction)
    assert not is_equivalent(f"{numerator + 1}/{denominator}", fraction)
    value = numerator / denominator
    assert is_equivalent(f"{value:.12g}", fraction)  # 12 digits: within the 1e-6 tolerance
    rounded = f"{value:.2f}"
    error = abs(Fraction(rounded) - Fraction(numerator, denominator))
    assume(abs(error - Fraction(REL_TOL_APPROX) * abs(Fraction(numerator, denominator))) > 1e-12)
    within = error <= Fraction(REL_TOL_APPROX) * abs(Fraction(numerator, denominator))
    assert is_equivalent(rounded, fraction) is within


@settings(max_examples=60, deadline=None)
@given(st.integers(-10**9, 10**9), st.integers(-10**9, 10**9))
def test_integers_with_separators(a, b):
    formatted = f"{a:,}"
    assert is_equivalent(formatted, str(a))
    assert is_equivalent(formatted, str(b)) is (a == b)


_digits = st.text("0123456789", min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_digits, _digits.map("-".__add__)),
       st.one_of(_digits, _digits.map("-".__add__), st.integers(-10**6, 10**6).map(str)))
def test_the_integer_shortcut_decides_as_the_full_grader(pred, gold):
    """Leading zeros, "-0", 30-digit values: step 0 gives the full path's Grade, method too."""
    from rlvr.verifiers.math.grader import INTEGER, _full_grade, _integer_grade

    assert INTEGER.fullmatch(pred) and INTEGER.fullmatch(gold)
    assert _integer_grade(pred, gold) == _full_grade(pred, gold, 5.0)
    assert grade(pred, gold) == _integer_grade(pred, gold)


def test_what_is_not_a_plain_integer_takes_the_full_path():
    from rlvr.verifiers.math.grader import INTEGER

    for text in (" 7", "+7", "7.0", "1,000", "\u0667", "1" * 31, "--1", ""):  # \u0667: Arabic 7
        assert not INTEGER.fullmatch(text)
    assert grade("1,000", "1000").equal and grade("7.0", "7").equal
