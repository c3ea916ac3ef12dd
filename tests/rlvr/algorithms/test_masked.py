"""Masked statistics (``rlvr.algorithms.masked``)."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.masked import masked_mean, masked_var, masked_whiten
from rlvr.errors import InsufficientDataError

T = torch.tensor
ATOL = 1e-5


def test_masked_stats_known_values():
    x = T([[1.0, 2.0, 3.0, 100.0]])
    m = T([[1.0, 1.0, 1.0, 0.0]])
    assert masked_mean(x, m).item() == pytest.approx(2.0)
    assert masked_var(x, m).item() == pytest.approx(1.0)  # unbiased: ((1+0+1)/3) * 3/2
    assert masked_var(x, m, unbiased=False).item() == pytest.approx(2 / 3)
    assert torch.allclose(masked_whiten(x, m)[0, :3], T([-1.0, 0.0, 1.0]), atol=ATOL)
    assert torch.allclose(
        masked_whiten(x, m, shift_mean=False)[0, :3], T([1.0, 2.0, 3.0]), atol=ATOL
    )
    assert masked_mean(x, m, dim=-1).shape == (1,)
    # masked positions holding inf never leak into the mean
    assert masked_mean(T([1.0, float("inf")]), T([1.0, 0.0])).item() == pytest.approx(1.0)
    assert masked_mean(x, torch.zeros_like(m)).item() == 0.0


@pytest.mark.parametrize("n_valid", [0, 1])
def test_masked_var_needs_two_tokens(n_valid):
    m = T([[1.0] * n_valid + [0.0] * (3 - n_valid)])
    with pytest.raises(
        InsufficientDataError, match=f"at least 2 unmasked elements; sum\\(mask\\) is {n_valid}"
    ):
        masked_var(torch.ones(1, 3), m)
