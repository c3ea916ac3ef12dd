"""``rlvr.algorithms.advantages`` at its edges: visible eps, boundaries, error rows, group ids.

Each test asserts a value the documented formula gives; together they fail on every small
change of the module (``bash dev.sh mutate rlvr/algorithms/advantages.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    compute_gae,
    compute_grpo,
    compute_reinforce_pp,
    compute_reinforce_pp_baseline,
    compute_rloo,
    group_index,
)
from rlvr.errors import ConfigError

T = torch.tensor
F64 = torch.float64


def test_grpo_eps_is_added_to_the_std():
    # group p: scores 1, 0 (std sqrt(0.5)); group "solo" of one: mean 0, std 1
    r = T([[1.0], [0.0], [2.0]], dtype=F64)
    m = torch.ones(3, 1, dtype=F64)
    a, _ = compute_grpo(AdvantageInputs(r, m, group_ids=["p", "p", "solo"], eps=0.5))
    s = 0.5 / (math.sqrt(0.5) + 0.5)
    torch.testing.assert_close(a[:, 0], T([s, -s, 2.0 / 1.5], dtype=F64))
    # the default eps, 1e-6, exactly (float64 in, float64 out)
    a, _ = compute_grpo(AdvantageInputs(r, m, group_ids=["p", "p", "solo"]))
    s = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(a[:, 0], T([s, -s, 2.0 / (1.0 + 1e-6)], dtype=F64),
                               rtol=1e-14, atol=0)


def test_error_rows_leave_their_group_and_get_zero():
    # group g: valid scores 1 and 0, an error row scored 9; group h: only an error row
    r = T([[1.0], [0.0], [9.0], [4.0]], dtype=F64)
    m = torch.ones(4, 1, dtype=F64)
    valid = T([True, True, False, False])
    ids = ["g", "g", "g", "h"]
    a, _ = compute_grpo(AdvantageInputs(r, m, group_ids=ids, valid=valid))
    s = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(a[:, 0], T([s, -s, 0.0, 0.0], dtype=F64))
    a, _ = compute_rloo(AdvantageInputs(r, m, group_ids=ids, valid=valid))
    torch.testing.assert_close(a[:, 0], T([1.0, -1.0, 0.0, 0.0], dtype=F64))
    a, _ = compute_grpo(AdvantageInputs(r, m, group_ids=ids, valid=valid, norm_by_std=False))
    torch.testing.assert_close(a[:, 0], T([0.5, -0.5, 0.0, 0.0], dtype=F64))


def test_masked_tokens_of_outcome_estimators_are_zero():
    r = T([[0.0, 1.0], [0.0, 0.0]])
    m = T([[1.0, 0.0], [1.0, 1.0]])  # the reward sits on a masked position: still summed
    a, _ = compute_grpo(AdvantageInputs(r, m, group_ids=[0, 0], norm_by_std=False))
    torch.testing.assert_close(a, T([[0.5, 0.0], [-0.5, -0.5]]))


def test_rloo_group_of_one_keeps_its_score_and_group_of_two_is_the_difference():
    r = T([[3.0], [1.0], [-2.0]])
    a, _ = compute_rloo(AdvantageInputs(r, torch.ones(3, 1), group_ids=[0, 0, 1]))
    torch.testing.assert_close(a[:, 0], T([2.0, -2.0, -2.0]))


def test_group_index_accepts_tensors_and_arrays_in_first_seen_order():
    codes, n = group_index(T([5, 3, 5, 9]), 4)
    assert codes.tolist() == [0, 1, 0, 2] and n == 3
    codes, n = group_index(np.array([["b"], ["a"]]), 2)
    assert codes.tolist() == [0, 1] and n == 2


def test_gamma_and_lam_bounds_are_inclusive():
    x = T([[1.0, 0.0, 2.0]])
    m = torch.ones(1, 3)
    v = T([[0.5, 0.25, 1.0]])
    # gamma 0: each return is its own reward
    _, ret = compute_reinforce_pp(AdvantageInputs(x, m, gamma=0.0))
    torch.testing.assert_close(ret, x)
    # lam 0: the advantage is the one-step TD error r + gamma * v' - v
    _, ret = compute_gae(AdvantageInputs(x, m, values=v, gamma=1.0, lam=0.0))
    torch.testing.assert_close(ret - v, T([[1.0 + 0.25 - 0.5, 0.0 + 1.0 - 0.25, 2.0 - 1.0]]))
    for bad in ({"gamma": -0.1}, {"lam": 1.5}):
        with pytest.raises(ConfigError, match=f"{next(iter(bad))} must be in \\[0, 1\\]"):
            AdvantageInputs(x, m, **bad)


def test_gae_discounts_with_gamma_and_lambda():
    r = T([[0.0, 1.0]], dtype=F64)
    v = T([[0.5, 0.2]], dtype=F64)
    m = torch.ones(1, 2, dtype=F64)
    _, ret = compute_gae(AdvantageInputs(r, m, values=v, gamma=0.9, lam=0.5))
    last = 1.0 - 0.2
    first = (0.0 + 0.9 * 0.2 - 0.5) + 0.9 * 0.5 * last
    torch.testing.assert_close(ret - v, T([[first, last]], dtype=F64))


def test_whitening_needs_exactly_two_valid_tokens():
    # two valid tokens: returns 1 and 0 whiten to +-sqrt(0.5) / sqrt(0.5 + 1e-8) ~ +-0.7071
    r = T([[1.0], [0.0]], dtype=F64)
    m = torch.ones(2, 1, dtype=F64)
    a, ret = compute_reinforce_pp(AdvantageInputs(r, m))
    torch.testing.assert_close(ret, r)
    assert a[0, 0].item() == pytest.approx(math.sqrt(0.5), rel=1e-6)
    a, _ = compute_reinforce_pp_baseline(AdvantageInputs(r, m, group_ids=[0, 1]))
    assert a[:, 0].tolist() == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)], rel=1e-6)
    a, _ = compute_gae(AdvantageInputs(r, m, values=torch.zeros_like(r)))
    assert a[:, 0].tolist() == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)], rel=1e-6)


def test_reinforce_pp_baseline_group_of_one_uses_mean_zero():
    # groups: {0: 3, 1}, {1: 5}: advantages 1, -1, 5 before whitening over 3 tokens
    r = T([[3.0], [1.0], [5.0]], dtype=F64)
    a, _ = compute_reinforce_pp_baseline(
        AdvantageInputs(r, torch.ones(3, 1, dtype=F64), group_ids=[0, 0, 1])
    )
    raw = T([1.0, -1.0, 5.0], dtype=F64)
    want = (raw - raw.mean()) / torch.sqrt(raw.var() + 1e-8)
    torch.testing.assert_close(a[:, 0], want, rtol=1e-6, atol=1e-6)


def test_group_stats_of_empty_and_single_groups():
    from rlvr.algorithms.advantages import _group_stats

    scores = T([4.0, 1.0, 3.0, 7.0], dtype=F64)
    valid = T([True, True, True, False])
    size, mean, std = _group_stats(scores, ["a", "b", "b", "c"], valid)
    assert size.tolist() == [1.0, 2.0, 2.0, 0.0]
    assert mean.tolist() == [4.0, 2.0, 2.0, 0.0]  # a group of one: its score; none: 0
    # sqrt(2) is rounded: torch's vectorised sqrt and Python's may differ in the last bit (they
    # do on an AVX-512 Intel Xeon), so within a few ulps; the zeros are exact
    torch.testing.assert_close(std, T([0.0, math.sqrt(2.0), math.sqrt(2.0), 0.0], dtype=F64),
                               rtol=1e-15, atol=0)


def test_an_error_rows_own_score_is_never_read():
    # an env-error row may carry any score, even nan: its advantage is exactly 0
    r = T([[1.0], [0.0], [float("nan")]], dtype=F64)
    m = torch.ones(3, 1, dtype=F64)
    valid = T([True, True, False])
    for estimator in (compute_grpo, compute_rloo):
        a, _ = estimator(AdvantageInputs(r, m, group_ids=[0, 0, 0], valid=valid))
        assert a[2, 0].item() == 0.0
        assert not torch.isnan(a).any()


def test_estimator_defaults_need_neither_critic_nor_groups():
    from rlvr.algorithms.advantages import Estimator

    e = Estimator("x", compute_grpo)
    assert (e.needs_critic, e.needs_groups, e.paper) == (False, False, "")
