"""Loss aggregation modes, whole and in parts (``rlvr.algorithms.aggregate``)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import masks

from rlvr.algorithms.aggregate import AGG_MODES, aggregate, normaliser, part_mode, part_weights
from rlvr.errors import ConfigError, ShapeError, UnknownNameError

T = torch.tensor
ATOL = 1e-5


LOSS = T([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0], [7.0, 7.0, 7.0, 7.0]])
MASK = T([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 16 / 4),
        ("token-sum", 16.0),
        ("seq-mean-token-sum", (6 + 10) / 2),  # the empty row does not count
        ("seq-mean-token-mean", (2 + 10) / 2),
        ("seq-mean-token-sum-norm", (6 + 10) / 2 / 4),  # default constant: response_len
    ],
)
def test_aggregate_known_values(mode, expected):
    assert aggregate(LOSS, MASK, mode).item() == pytest.approx(expected, abs=ATOL)


def test_aggregate_norm_constant():
    got = aggregate(LOSS, MASK, "seq-mean-token-sum-norm", norm_constant=16)
    assert got.item() == pytest.approx(8 / 16)
    with pytest.raises(ConfigError, match="norm_constant must be > 0; got 0"):
        aggregate(LOSS, MASK, "seq-mean-token-sum-norm", norm_constant=0)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_aggregate_all_zero_mask_is_zero_not_nan(mode):
    loss = torch.full((2, 3), float("nan"), requires_grad=True)
    out = aggregate(loss, torch.zeros(2, 3), mode)
    assert out.item() == 0.0
    out.backward()
    assert torch.equal(loss.grad, torch.zeros(2, 3))


def test_aggregate_errors():
    with pytest.raises(
        UnknownNameError,
        match=r"unknown loss aggregation mode 'token_mean'.*Did you mean 'token-mean'",
    ):
        aggregate(LOSS, MASK, "token_mean")
    with pytest.raises(
        ShapeError, match=r"mask has shape \(3, 2\); expected \(3, 4\) like loss_mat"
    ):
        aggregate(LOSS, torch.ones(3, 2))


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(AGG_MODES), st.integers(1, 3))
def test_weighted_parts_give_the_whole(data, mode, n_parts):
    """Split rows into parts: each aggregated with part_mode, weighted by part_weights."""
    b, n = data.draw(st.integers(n_parts, 6)), data.draw(st.integers(1, 5))
    m = data.draw(masks(b, n))
    loss = T(data.draw(st.lists(st.lists(st.floats(-3, 3, width=32), min_size=n, max_size=n),
                                min_size=b, max_size=b)))
    cuts = sorted(data.draw(st.sets(st.integers(1, b - 1), max_size=n_parts - 1))) if b > 1 else []
    bounds = list(zip([0, *cuts], [*cuts, b]))
    parts = [normaliser(m[s:e], mode) for s, e in bounds]
    weights = part_weights(mode, parts, normaliser(m, mode), norm_constant=7.0)
    got = sum(w * float(aggregate(loss[s:e], m[s:e], part_mode(mode)))
              for w, (s, e) in zip(weights, bounds))
    whole = float(aggregate(loss, m, mode, norm_constant=7.0))
    assert got == pytest.approx(whole, rel=1e-5, abs=1e-5)


def test_part_weights_known_values_and_errors():
    m = T([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    assert normaliser(m, "token-mean") == 3.0
    assert normaliser(m, "seq-mean-token-mean") == 2.0  # the empty row does not count
    assert normaliser(m, "token-sum") == 1.0
    assert part_mode("seq-mean-token-sum-norm") == "seq-mean-token-sum"
    assert part_weights("token-sum", [1.0, 1.0], 2.0) == [1.0, 1.0]
    assert part_weights("token-mean", [1.0, 3.0], 4.0) == [0.25, 0.75]
    assert part_weights("token-mean", [0.0], 0.0) == [0.0]
    assert part_weights("seq-mean-token-sum-norm", [1.0, 1.0], 2.0, norm_constant=4) == [
        0.125, 0.125]
    with pytest.raises(ConfigError, match="norm_constant must be > 0 for seq-mean-token-sum-norm"):
        part_weights("seq-mean-token-sum-norm", [1.0], 1.0)
    with pytest.raises(UnknownNameError, match="unknown loss aggregation mode 'mean'"):
        normaliser(m, "mean")
