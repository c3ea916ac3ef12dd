"""``rlvr.algorithms.masked`` at its edges: exact formulas (float64), two tokens, shape checks.

Each test asserts the value the documented formula gives; together they fail on every small
change of the module (``bash dev.sh mutate rlvr/algorithms/masked.py``).
"""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.masked import check_same_shape, masked, masked_mean, masked_var, masked_whiten
from rlvr.errors import InsufficientDataError, ShapeError

T = torch.tensor
F64 = torch.float64
EPS = 1e-8  # verl's: sum(mask) + 1e-8, rsqrt(var + 1e-8)


def test_masked_keeps_values_under_the_mask_and_zeroes_the_rest_even_nan():
    x = T([[1.5, float("nan"), -2.0, float("inf")]])
    m = T([[1.0, 0.0, 2.0, 0.0]])  # any non-zero counts as 1
    assert torch.equal(masked(x, m), T([[1.5, 0.0, -2.0, 0.0]]))


def test_check_same_shape_returns_the_shape_and_skips_none():
    assert check_same_shape(a=torch.zeros(2, 3), b=None, c=torch.ones(2, 3)) == (2, 3)
    with pytest.raises(ShapeError, match=r"c has shape \(3, 2\); expected \(2, 3\) like a"):
        check_same_shape(a=torch.zeros(2, 3), b=None, c=torch.ones(3, 2))


def test_masked_mean_is_the_masked_sum_over_count_plus_eps():
    x = T([[1.0, 2.0, 4.0]], dtype=F64)
    m = T([[1.0, 1.0, 0.0]], dtype=F64)
    # within a few ulps, not to the bit: torch may divide by a one-element tensor as a
    # multiplication by its reciprocal (a different rounding than Python's 3.0 / ...); EPS moves
    # it by 5e-9
    assert masked_mean(x, m).item() == pytest.approx(3.0 / (2.0 + EPS), rel=1e-15, abs=0)


def test_masked_mean_over_a_dim_per_row_with_empty_rows():
    x = T([[1.0, 3.0, 100.0], [5.0, 7.0, 9.0], [float("inf"), 1.0, 2.0]], dtype=F64)
    m = T([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]], dtype=F64)
    got = masked_mean(x, m, dim=-1)
    torch.testing.assert_close(got, T([4.0 / (2 + EPS), 0.0, 3.0 / (2 + EPS)], dtype=F64),
                               rtol=1e-15, atol=0)  # rounded divisions: within a few ulps


def test_masked_var_with_exactly_two_tokens():
    x = T([1.0, 4.0, 50.0], dtype=F64)
    m = T([1.0, 1.0, 0.0], dtype=F64)
    mean = 5.0 / (2 + EPS)
    biased = ((1.0 - mean) ** 2 + (4.0 - mean) ** 2) / (2 + EPS)
    assert masked_var(x, m).item() == pytest.approx(biased * 2.0, rel=1e-12)
    with pytest.raises(InsufficientDataError, match="sum\\(mask\\) is 1"):
        masked_var(x, T([0.0, 1.0, 0.0], dtype=F64))


def test_masked_whiten_scales_by_rsqrt_of_var_plus_eps():
    x = T([1.0, 2.0, 3.0, 9.0], dtype=F64)
    m = T([1.0, 1.0, 1.0, 0.0], dtype=F64)
    mean = masked_mean(x, m)
    var = masked_var(x, m)
    want = (x - mean) / torch.sqrt(var + EPS)
    # var is ~1 here: without the eps (or with it subtracted) the result differs by ~1e-8
    torch.testing.assert_close(masked_whiten(x, m), want, rtol=1e-13, atol=0)
