"""``rlvr.verifiers.code.specs`` at its edges: values_equal's numbers, containers and tolerances.

Each test asserts the value the documented rule gives, without a sandbox; together they fail on
every small change of the module (``bash dev.sh mutate verifiers/code/specs.py``).
"""

from __future__ import annotations

import pytest

from rlvr.verifiers.code import AssertTests, CallTests, values_equal
from rlvr.verifiers.errors import InvalidArgumentError

NAN = float("nan")
INF = float("inf")


# ----------------------------------------------------------------------------- spec validation
def test_assert_tests_accepts_set_up_around_check():
    spec = AssertTests("import math\ndef check(candidate):\n    assert candidate(1) == 1\n", "f")
    assert spec.entry_point == "f"


def test_assert_tests_needs_a_function_named_check():
    with pytest.raises(InvalidArgumentError, match="must define check"):
        AssertTests("def helper(candidate):\n    assert candidate(1) == 1\n", "f")


def test_assert_tests_refuses_an_in_place_test():
    code = "def check(candidate):\n    xs = [3, 1]\n    candidate(xs)\n    assert xs == [1, 3]\n"
    with pytest.raises(InvalidArgumentError, match="tests an in-place change"):
        AssertTests(code, "f")


def test_call_tests_args_and_expected_must_be_plain_data():
    with pytest.raises(InvalidArgumentError, match=r"CallTests.cases\[0\] is not plain data"):
        CallTests("f", [((object(),), 1)])
    with pytest.raises(InvalidArgumentError, match=r"CallTests.cases\[1\] is not plain data"):
        CallTests("f", [((1,), 1), ((2,), object())])


# ----------------------------------------------------------------------------- values_equal
def test_bools_equal_only_the_same_bool():
    assert values_equal(True, True) and values_equal(False, False)
    assert not values_equal(True, False)
    assert not values_equal(1, True) and not values_equal(True, 1.0)


def test_an_int_expected_value_is_exact():
    assert values_equal(2.0, 2)  # a float holding exactly the int
    assert not values_equal(2.5, 2)
    assert not values_equal(INF, 10**400) and not values_equal(NAN, 0)
    assert not values_equal(10**400, 1.0)  # beyond float range: near no finite float


def test_numbers_never_equal_non_numbers():
    assert not values_equal(1, "1")
    assert not values_equal(1, [1])
    assert not values_equal(complex(1, 0), 1.0)  # a complex only equals a complex


def test_complex_compares_both_parts():
    assert values_equal(complex(1, 2), complex(1, 2 + 1e-12))
    assert not values_equal(complex(1, 2), complex(1, 3))
    assert not values_equal(complex(1, 2), complex(5, 2))


def test_sequences_need_the_same_length_and_every_item():
    assert values_equal([1, (2.0, [3])], ((1, [2.0, (3,)])))
    assert not values_equal([1], [1, 2])
    assert not values_equal([1, 2], [1])
    assert not values_equal([1, 2], [1, 3])


def test_dicts_need_the_same_keys_and_every_value():
    assert values_equal({"a": 1, "b": [2.0]}, {"b": (2.0,), "a": 1})
    assert not values_equal({"a": 1, "b": 2}, {"a": 1, "b": 3})
    assert not values_equal({"a": 1}, {"b": 1})
    assert not values_equal({"a": 1}, ["a"])


def test_other_values_compare_by_type_then_equality():
    assert values_equal("abc", "abc") and values_equal(None, None)
    assert values_equal({1, 2}, {2, 1}) and values_equal(b"x", b"x")
    assert not values_equal("abc", "abd")
    assert not values_equal({1, 2}, frozenset({1, 2}))


def test_non_finite_values_match_only_themselves():
    assert values_equal(NAN, NAN) and values_equal(INF, INF) and values_equal(-INF, -INF)
    assert not values_equal(NAN, 1.0) and not values_equal(1.0, NAN)
    assert not values_equal(INF, 1.0) and not values_equal(1.0, INF)
    assert not values_equal(INF, -INF)
    assert not values_equal(INF, 1.0, rel_tol=1e9, abs_tol=1e9)


def test_float_tolerance_is_inclusive_and_relative_to_the_larger_magnitude():
    assert values_equal(1.0, 1.0, rel_tol=0.0, abs_tol=0.0)  # |g - e| <= tol, not <
    assert values_equal(1.5, 1.0, rel_tol=0.0, abs_tol=0.5)
    assert not values_equal(1.0, 2.0) and not values_equal(2.0, 1.0)
    assert values_equal(1000.0, 1000.0001)  # rel_tol * 1000, not abs_tol, decides
    # |g - e| = 11 against rel_tol * max(|g|, |e|) = 11.1 (the smaller magnitude would give 10)
    assert values_equal(111.0, 100.0, rel_tol=0.1, abs_tol=0.0)
    assert values_equal(-111.0, -100.0, rel_tol=0.1, abs_tol=0.0)
    assert values_equal(-100.0, -111.0, rel_tol=0.1, abs_tol=0.0)
    assert not values_equal(-100.0, -112.0, rel_tol=0.1, abs_tol=0.0)
