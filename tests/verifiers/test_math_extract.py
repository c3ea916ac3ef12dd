"""Answer extraction: priority order, nesting, fallback switch, hostile sizes."""

from __future__ import annotations

import time

import pytest

from rlvr.verifiers.math import extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (r"\boxed{\left\{ 1, 2 \right\}}", r"\left\{ 1, 2 \right\}"),
        (r"\boxed{a^{b^{c}}} and later \boxed{\sqrt{\frac{1}{4}}}", None),  # two answers
        (r"\boxed{6} and a later \fbox{7}", None),
        (r"\boxed{7} and again \fbox{ 7 }", "7"),  # the same answer twice is one answer
        (r"the result is \boxed 5", "5"),
        (r"\boxed{3} then a cut-off \boxed{\frac{1}{", "3"),
        (r"\boxed{4}, then an empty \boxed{}", "4"),
        ("48/2 = 24\n#### 72\n", "72"),
        ("Reasoning.\nThe final answer is $x = 3$. Done.", "x = 3"),
        ("The answer is: 12 apples. Next sentence.", "12 apples"),
        ("**Answer:** 9", "9"),
        ("Answer: (B)", "(B)"),
        ("we get 3, then 4.5 and finally -2", "-2"),
        ("costs 1,250 dollars.", "1,250"),
        ("a ratio of 3/4.", "3/4"),
    ],
)
def test_extracts_the_final_answer(text, expected):
    assert extract_answer(text) == expected


def test_boxed_wins_over_answer_phrases_and_numbers():
    assert extract_answer(r"Answer: 5. Also \boxed{6}. Then 7.") == "6"
    assert extract_answer(r"<think>\boxed{5}</think> The answer is 6.") == "6"
    assert extract_answer(r"<think>\boxed{5} and the reply was cut off") is None
    assert extract_answer("The answer is 5.\n#### 6") == "6"


def test_last_number_fallback_is_on_by_default_and_can_be_switched_off():
    text = "So there are 17 apples."
    assert extract_answer(text) == "17"
    assert extract_answer(text, last_number_fallback=False) is None
    assert extract_answer("no digits here") is None
    assert extract_answer("") is None


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{" * 150_000,
        "9" * 1_000_000,
        "(" * 1_000_000,
        "answer is " * 100_000,
        "\\boxed{" + "1" * 1_000_000 + "}",
    ],
    ids=["unclosed-boxes", "digits", "parens", "answer-phrases", "huge-box"],
)
def test_megabyte_responses_are_scanned_quickly(text):
    start = time.perf_counter()
    extract_answer(text)
    assert time.perf_counter() - start < 1.0
