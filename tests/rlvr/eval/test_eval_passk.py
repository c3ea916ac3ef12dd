from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.errors import ConfigError
from rlvr.eval.episodes import normalize_answer
from rlvr.eval.passk import maj_at_k, majority_answer, mean_at_k, pass_at_k, pass_at_k_curve


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Fraction of the k-subsets of n samples (c of them passing) that hold a passing one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(any(samples[i] for i in subset) for subset in subsets)
    return Fraction(hits, len(subsets))


def test_known_values_n5_c2() -> None:
    expected = [0.4, 0.7, 0.9, 1.0, 1.0]
    for k, value in enumerate(expected, start=1):
        assert pass_at_k(5, 2, k) == pytest.approx(value, abs=1e-12)
        assert float(brute_force_pass_at_k(5, 2, k)) == pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("n", range(1, 9))
def test_matches_brute_force_combinatorics(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(brute_force_pass_at_k(n, c, k)))


@given(st.integers(1, 400), st.data())
def test_matches_exact_binomials_for_large_n(n: int, data: st.DataObject) -> None:
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-9)


def test_stable_where_binomials_overflow_floats() -> None:
    # C(2000, 1000) ~ 1e600 overflows float64; the product form stays finite and correct.
    value = pass_at_k(2000, 1, 1000)
    assert value == pytest.approx(0.5)
    assert 0.0 <= pass_at_k(2000, 3, 1) <= 1.0


def test_edges_and_errors() -> None:
    assert pass_at_k(3, 0, 3) == 0.0
    assert pass_at_k(3, 3, 1) == 1.0
    with pytest.raises(ConfigError, match=r"k must be in \[1, n=3\]; got 4"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ConfigError, match=r"c \(passing samples\) must be in \[0, n=3\]"):
        pass_at_k(3, 5, 1)
    with pytest.raises(ConfigError, match=r"n \(samples per task\) must be >= 1"):
        pass_at_k(0, 0, 1)


def test_curve_averages_tasks() -> None:
    curve = pass_at_k_curve([(5, 2), (5, 0)], 5)
    assert curve[1] == pytest.approx(0.2)
    assert curve[2] == pytest.approx(0.35)
    assert curve[5] == pytest.approx(0.5)
    assert pass_at_k_curve([], 3) == {}
    with pytest.raises(ConfigError, match="max_k=6 exceeds the fewest samples of a task"):
        pass_at_k_curve([(5, 2)], 6)


def test_mean_at_k() -> None:
    assert mean_at_k([[1.0, 0.0, 0.5], [0.0, 0.0, 0.0]]) == pytest.approx(0.25)
    assert mean_at_k([]) == 0.0
    with pytest.raises(ConfigError, match=r"scores\[1\] is empty"):
        mean_at_k([[1.0], []])


def test_majority_answer_ties_go_to_first_seen() -> None:
    assert majority_answer(["3", "4", "4", "3"]) == 0
    assert majority_answer(["3", "4", "4"]) == 1
    assert majority_answer([None, "7", None]) == 1
    assert majority_answer([None, None]) is None


def test_maj_at_k() -> None:
    tasks = [
        # majority "4" is right although only 2 of 5 samples passed
        (["4", "4", "5", None, "6"], [True, True, False, False, False]),
        # majority "5" is wrong although one sample passed
        (["5", "5", "4"], [False, False, True]),
        # nobody answered
        ([None, None], [False, False]),
    ]
    assert maj_at_k(tasks) == pytest.approx(1 / 3)
    assert maj_at_k([]) == 0.0
    with pytest.raises(ConfigError, match=r"tasks\[0\]: 2 answers but 1 passed flags"):
        maj_at_k([(["1", "2"], [True])])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (" 42 ", "42"),
        ("4.0", "4"),
        ("1,000", "1000"),
        ("$12$.", "12"),
        ("\\boxed{7}", "7"),
        ("Paris", "paris"),
        ("", None),
        (None, None),
        ("0.5", "0.5"),
    ],
)
def test_normalize_answer(raw: object, expected: str | None) -> None:
    assert normalize_answer(raw) == expected
