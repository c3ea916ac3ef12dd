r"""The red team's hack classes: wrong answers that must score 0 and right ones that must score 1,
scored exactly as rlvr/Math-v0 scores a response for its reward, in each answer format.

The known-answer rows are in ``data/math_hacks.jsonl`` (one class per row: restated arithmetic,
ways past the old text guard, decimal tolerance on exact golds, golds that are ratios or times,
words, percent, floating point, reading conventions, hedges, crashes, right answers that were
rejected).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.envs.math_env import score_response
from rlvr.verifiers.math import grade, verify, verify_answer, word_answer
from rlvr.verifiers.math.choice import choice_letter
from rlvr.verifiers.math.parse import parse_answer
from rlvr.verifiers.math.precise import precise_equal

DATA = Path(__file__).parent / "data" / "math_hacks.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
CLASSES = {
    "restated", "guard", "tolerance", "unparsed-gold", "words", "percent", "float",
    "conventions", "hedges", "crash", "right",
}


def test_every_class_has_wrong_and_right_rows():
    assert {row["class"] for row in ROWS} == CLASSES
    for name in CLASSES - {"restated", "guard"}:
        expected = {row["expected"] for row in ROWS if row["class"] == name}
        assert expected == {True, False}, name
    assert {row["format"] for row in ROWS} == {"boxed", "plain", "auto"}


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['id']}-{r['class']}" for r in ROWS])
def test_the_env_scores_the_row_as_labelled(row):
    verdict = score_response(row["response"], row["gold"], row["format"])
    assert verdict.passed is row["expected"], (row, verdict)
    assert verdict.score == float(row["expected"])


@pytest.mark.parametrize("answer_format", ["boxed", "plain", "auto"])
@pytest.mark.parametrize(("response", "gold"), [
    ("733*94", "68902"),
    ("12+7", "19"),
    ("(733)(94)", "68902"),
    ("1554/42", "37"),
    ("347 \u22c5 58", "20126"),
])
def test_copying_the_question_back_scores_zero_in_every_format(answer_format, response, gold):
    wrapped = f"\\boxed{{{response}}}" if answer_format == "boxed" else response
    verdict = score_response(wrapped, gold, answer_format)
    assert not verdict.passed, verdict


def test_the_guard_decides_on_the_parsed_answer():
    assert verify_answer("1554/42", "37").reason == "unevaluated"
    assert verify_answer(r"{347}\times{58}", "20126").reason == "unevaluated"
    assert verify_answer("x = 56 + 38", "94").reason == "unevaluated"
    assert verify_answer("12 + 7 = 19", "19").passed
    for written in ("37", r"\frac{7}{2}", r"1.5 \times 10^{3}", r"2\frac{1}{2}"):
        assert verify_answer(written, "37").reason != "unevaluated", written
    assert verify_answer(r"\frac{74}{2}", "37").reason == "unevaluated"
    assert verify_answer("2+3", "2+3").passed  # a gold that is itself an expression


def test_no_answer_raises_and_unreadable_ones_are_parse_errors(monkeypatch):
    for answer in (r"\operatorname{root}(8)", r"\operatorname{binom}(5)", r"\sin(1, 2)"):
        result = grade(answer, "2")
        assert (result.equal, result.reason) == (False, "parse_error"), answer
    with pytest.raises(Exception, match="unsupported function .operatorname.root."):
        parse_answer(r"\operatorname{root}(8)")
    with pytest.raises(Exception, match=r"\\sin takes one argument, got 2"):
        parse_answer(r"\sin(1, 2)")

    def broken(*args, **kwargs):
        raise IndexError("an internal bug")

    import rlvr.verifiers.math.grader as grader

    monkeypatch.setattr(grader, "IN_WORKER", True)  # decide in this process, where it is patched
    monkeypatch.setattr(grader, "_full_grade", broken)
    monkeypatch.setattr(grader, "extract", broken)
    result = grade("x^2", "1")
    assert (result.equal, result.reason) == (False, "parse_error")
    assert "IndexError" in result.message
    assert verify("So x^2.", "1").reason == "parse_error"
    assert score_response(r"\boxed{x^2}", "1", "boxed").reason == "parse_error"


def test_decimals_match_exact_golds_only_as_their_rounding():
    assert verify_answer("0.3333333", r"\frac{1}{3}").passed
    assert not verify_answer("0.3333334", r"\frac{1}{3}").passed
    assert verify_answer("1000000.0", "1000000").passed
    for rounded in ("1000001.0", "1.0e9", "999999.99", "1.234568e8"):
        assert not verify_answer(rounded, "1000000007" if "e9" in rounded else
                                 "123456789" if "e8" in rounded else "1000000").passed
    assert verify_answer("3.14159265358979", r"\pi").passed
    assert not verify_answer("3.1415930", r"\pi").passed  # pi rounds to 3.1415927


def test_precise_check_separates_tiny_differences_from_rounding_noise():
    zero, five = ("num", 0, False), ("num", 5, False)
    e_power = ("pow", ("const", "e"), ("num", -200, False))
    assert precise_equal(zero, e_power, {}) is False
    sin_pi = ("fn", "sin", (("const", "pi"),))
    assert precise_equal(zero, sin_pi, {}) is True
    big = ("pow", ("const", "e"), ("num", 100, False))
    fraction_part = ("add", (big, ("neg", ("fn", "floor", (big,))), five))
    assert precise_equal(fraction_part, five, {}) is False


def test_words_compare_as_words():
    assert word_answer("Monday") == "monday" and word_answer("No") == "no"
    assert word_answer("xy") is None and word_answer("2x") is None
    assert not verify_answer("seat", r"\text{east}").passed
    assert verify_answer(r"\text{East}", "east").passed


def test_choice_hedges_are_not_their_first_letter():
    for hedge in ("(C) or (D)", "C D", "C/D", "C, D", r"C \text{ or } D"):
        assert choice_letter(hedge, lenient=True) is None, hedge
    assert choice_letter("(B) A triangle", lenient=True) is None  # a second letter: fail closed
    assert choice_letter("(B) 42", lenient=True) == "B"
    assert choice_letter("c", lenient=True) == "C"
    assert choice_letter("c") is None  # a gold "c" is a variable, not a choice
