"""The second labelled set (answers as models write them) and the verify(x, x) property.

math_natural.jsonl was written (by make_math_natural.py) before rlvr.verifiers.math was changed to
read
LaTeX-only, bare-expression and complex answers, and the checker was not tuned against it since:
its accuracy is a held-out measure, reported in BENCHMARKS.md. This test pins a floor below the
measured 99.5% (two known misses: ``$z = i + i$``, whose span has no digit, and a bare ``2ab``
read as a word), so that a regression shows, without turning the set into a tuning target.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rlvr.verifiers.math import verify

DATA = Path(__file__).parent / "data"
NATURAL = [json.loads(line) for line in (DATA / "math_natural.jsonl").read_text().splitlines()]
LABELLED = [json.loads(line) for line in (DATA / "math_labelled.jsonl").read_text().splitlines()]
ACCURACY_FLOOR = 0.97


def test_the_second_set_is_large_balanced_and_new():
    assert len(NATURAL) >= 300
    assert len({r["id"] for r in NATURAL}) == len(NATURAL)
    falses = sum(not r["expected"] for r in NATURAL) / len(NATURAL)
    assert 0.33 <= falses <= 0.5  # 35 rows relabelled False by the structural rule (notes)
    categories = Counter(r["category"] for r in NATURAL)
    assert len(categories) >= 10
    assert not set(categories) & {r["category"] for r in LABELLED}


def test_verify_agrees_with_most_labels_of_the_second_set():
    agree = [verify(r["response"], r["gold"]).passed is r["expected"] for r in NATURAL]
    assert sum(agree) / len(agree) >= ACCURACY_FLOOR


def test_no_hedge_claim_or_list_row_of_the_second_set_passes():
    gamed = [r["id"] for r in NATURAL if r["category"] in ("hedge", "claim", "list_exploit")
             and not r["expected"] and verify(r["response"], r["gold"]).passed]
    assert gamed == []


@pytest.mark.parametrize(
    "gold", sorted({r["gold"] for r in NATURAL} | {r["gold"] for r in LABELLED}))
def test_a_response_that_is_the_gold_answer_passes(gold):
    verdict = verify(gold, gold)
    assert verdict.passed, verdict
