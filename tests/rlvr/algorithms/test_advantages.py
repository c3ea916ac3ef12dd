from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import masks

from rlvr.algorithms import advantages as adv
from rlvr.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    compute_advantages,
    compute_gae,
    compute_grpo,
    compute_reinforce_pp,
    compute_reinforce_pp_baseline,
    compute_rloo,
    estimator_needs_critic,
    get_estimator,
    register_estimator,
    unregister_estimator,
)
from rlvr.errors import ConfigError, DuplicateNameError, ShapeError, UnknownNameError

T = torch.tensor
ATOL = 1e-5


# ----------------------------------------------------------------------------- naive references
# Loop-by-loop transcriptions of docs/algorithms.md (verl 0.9.1 semantics), float32.
def ref_whiten(x, m):
    n = m.sum()
    mean = (x * m).sum() / (n + 1e-8)
    var = (((x - mean) ** 2) * m).sum() / (n + 1e-8) * n / (n - 1)
    return (x - mean) * torch.rsqrt(var + 1e-8)


def ref_gae_raw(r, v, m, gamma, lam):
    b, n = r.shape
    out = torch.zeros_like(r)
    for i in range(b):
        nextvalue, gae = 0.0, 0.0
        for t in reversed(range(n)):
            delta = r[i, t] + gamma * nextvalue - v[i, t]
            g = delta + gamma * lam * gae
            if m[i, t]:
                nextvalue, gae = v[i, t], g
            out[i, t] = gae
    return out


def ref_groups(scores, ids):
    groups = defaultdict(list)
    for i, g in enumerate(ids):
        groups[g].append(scores[i])
    return groups


def ref_grpo(r, m, ids, norm_by_std=True, eps=1e-6):
    s = r.sum(-1)
    groups = ref_groups(s, ids)
    out = torch.zeros_like(s)
    for i, g in enumerate(ids):
        xs = torch.stack(groups[g])
        mean, std = (T(0.0), T(1.0)) if len(xs) == 1 else (xs.mean(), xs.std())
        out[i] = (s[i] - mean) / (std + eps) if norm_by_std else s[i] - mean
    return out[:, None] * m


def ref_rloo(r, m, ids):
    s = r.sum(-1)
    groups = ref_groups(s, ids)
    out = torch.zeros_like(s)
    for i, g in enumerate(ids):
        n = len(groups[g])
        out[i] = (
            s[i] if n == 1 else s[i] * n / (n - 1) - torch.stack(groups[g]).mean() * n / (n - 1)
        )
    return out[:, None] * m


def ref_reinforce_pp_returns(r, m, gamma):
    b, n = r.shape
    out = torch.zeros_like(r)
    for i in range(b):
        running = 0.0
        for t in reversed(range(n)):
            if m[i, t]:
                running = r[i, t] + gamma * running
            out[i, t] = running * m[i, t]
    return out


# ----------------------------------------------------------------------------- strategies
@st.composite
def batches(draw, max_b=6, max_r=6):
    b = draw(st.integers(2, max_b))
    n = draw(st.integers(1, max_r))
    floats = st.floats(-2, 2, width=32, allow_subnormal=False)
    r = T(draw(st.lists(st.lists(floats, min_size=n, max_size=n), min_size=b, max_size=b)))
    v = T(draw(st.lists(st.lists(floats, min_size=n, max_size=n), min_size=b, max_size=b)))
    m = draw(masks(b, n))
    ids = draw(st.lists(st.integers(0, 2), min_size=b, max_size=b))
    return r, v, m, ids


# ----------------------------------------------------------------------------- GAE
def test_gae_four_token_known_answer():
    r = T([[0.0, 0.0, 0.0, 1.0]])
    v = torch.zeros(1, 4)
    a, ret = compute_gae(AdvantageInputs(r, torch.ones(1, 4), values=v, gamma=1.0, lam=0.95))
    assert torch.allclose(ret - v, T([[0.857375, 0.9025, 0.95, 1.0]]), atol=ATOL)
    assert torch.allclose(a, ref_whiten(ret - v, torch.ones(1, 4)), atol=ATOL)


def test_gae_multi_turn_mask_carries_through():
    r = T([[0.0, 0.0, 0.0, 1.0]])
    v = T([[0.5, 0.2, 0.3, 0.4]])
    m = T([[1.0, 0.0, 0.0, 1.0]])
    a, ret = compute_gae(AdvantageInputs(r, m, values=v, gamma=1.0, lam=0.95))
    assert torch.allclose(ret - v, T([[0.47, 0.6, 0.6, 0.6]]), atol=ATOL)
    assert torch.allclose(ret, T([[0.97, 0.8, 0.9, 1.0]]), atol=ATOL)
    # whitened over the two valid tokens only: 0.47 and 0.6 -> -1/sqrt(2), +1/sqrt(2)
    assert torch.allclose(a[0, [0, 3]], T([-0.70710677, 0.70710677]), atol=ATOL)


def test_gae_single_valid_token_gives_zero_advantages_but_returns():
    r = T([[1.0, 0.0]])
    v = T([[0.25, 0.0]])
    a, ret = compute_gae(AdvantageInputs(r, T([[1.0, 0.0]]), values=v))
    assert torch.equal(a, torch.zeros(1, 2))
    assert ret[0, 0].item() == pytest.approx(1.0)


@settings(max_examples=40, deadline=None)
@given(batches(), st.floats(0.5, 1.0), st.floats(0.0, 1.0))
def test_gae_matches_naive_reference(batch, gamma, lam):
    r, v, m, _ = batch
    a, ret = compute_gae(AdvantageInputs(r, m, values=v, gamma=gamma, lam=lam))
    raw = ref_gae_raw(r, v, m, gamma, lam)
    assert torch.allclose(ret, raw + v, atol=ATOL)
    if m.sum() >= 2:
        assert torch.allclose(a, ref_whiten(raw, m), atol=1e-4)
    # values and rewards on masked tokens are ignored at valid tokens
    noise = torch.where(m == 0, torch.randn_like(r) * 5, torch.zeros_like(r))
    a2, _ = compute_gae(AdvantageInputs(r + noise, m, values=v + noise, gamma=gamma, lam=lam))
    assert torch.allclose(a2 * m, a * m, atol=1e-4)


def test_gae_rejects_bad_parameters():
    x = torch.zeros(1, 2)
    with pytest.raises(ConfigError, match=r"lam must be in \[0, 1\]; got 1.5"):
        compute_gae(AdvantageInputs(x, x, values=x, gamma=1.0, lam=1.5))
    with pytest.raises(
        ShapeError, match=r"values has shape \(1, 3\); expected \(1, 2\) like token_level_rewards"
    ):
        compute_gae(AdvantageInputs(x, x, values=torch.zeros(1, 3)))


# ----------------------------------------------------------------------------- GRPO / RLOO
def test_grpo_known_groups():
    r = T([[0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.5], [0.0, 2.0]])
    m = T([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    a, ret = compute_grpo(AdvantageInputs(r, m, group_ids=["p", "p", "q", "q", "solo"]))
    # group p: scores 1, 0 -> mean 0.5, std sqrt(0.5); q: 1, 0.5 -> mean 0.75, std sqrt(0.125)
    s = 0.5 / (0.5**0.5 + 1e-6)
    sq = 0.25 / (0.125**0.5 + 1e-6)
    expected = T([[s, s], [-s, -s], [sq, sq], [-sq, 0.0], [2.0 / (1 + 1e-6)] * 2])
    assert torch.allclose(a, expected, atol=ATOL) and torch.equal(a, ret)
    groups = ["p", "p", "q", "q", "solo"]
    dr, _ = compute_grpo(AdvantageInputs(r, m, group_ids=groups, norm_by_std=False))
    assert torch.allclose(dr[:, 0], T([0.5, -0.5, 0.25, -0.25, 2.0]), atol=ATOL)


def test_grpo_equal_rewards_give_exact_zero():
    r = torch.full((4, 3), 0.1)
    a, _ = compute_grpo(AdvantageInputs(r, torch.ones(4, 3), group_ids=[7, 7, 7, 7]))
    assert torch.equal(a, torch.zeros(4, 3))


def test_rloo_known_groups():
    r = T([[1.0], [0.0], [0.0], [5.0]])
    groups = np.array(["a", "a", "a", "b"])
    a, ret = compute_rloo(AdvantageInputs(r, torch.ones(4, 1), group_ids=groups))
    # each sample minus the mean of the others; a size-1 group keeps its score
    assert torch.allclose(a[:, 0], T([1.0, -0.5, -0.5, 5.0]), atol=ATOL)
    assert torch.equal(a, ret)


@settings(max_examples=40, deadline=None)
@given(batches(), st.booleans())
def test_group_estimators_match_naive_reference(batch, norm_by_std):
    r, _, m, ids = batch
    a, _ = compute_grpo(AdvantageInputs(r, m, group_ids=ids, norm_by_std=norm_by_std))
    assert torch.allclose(a, ref_grpo(r, m, ids, norm_by_std), atol=1e-4, rtol=1e-4)
    a, _ = compute_rloo(AdvantageInputs(r, m, group_ids=torch.tensor(ids)))
    assert torch.allclose(a, ref_rloo(r, m, ids), atol=ATOL)


@settings(max_examples=30, deadline=None)
@given(batches(), st.randoms(use_true_random=False))
def test_grpo_invariant_to_row_permutation(batch, rnd):
    r, _, m, ids = batch
    perm = list(range(len(ids)))
    rnd.shuffle(perm)
    a, _ = compute_grpo(AdvantageInputs(r, m, group_ids=ids))
    b, _ = compute_grpo(AdvantageInputs(r[perm], m[perm], group_ids=[ids[i] for i in perm]))
    assert torch.allclose(b, a[perm], atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.floats(-3, 3, width=32))
def test_equal_rewards_in_group_give_zero(group_size, n, reward):
    r = torch.zeros(group_size, n)
    r[:, -1] = reward
    for name in ("grpo", "drgrpo", "rloo", "reinforce_pp_baseline"):
        a, _ = compute_advantages(
            name, AdvantageInputs(r, torch.ones(group_size, n), group_ids=[0] * group_size)
        )
        if name == "rloo" and group_size == 1:
            assert torch.allclose(a, r.sum(-1, keepdim=True).expand(1, n))
        elif name in ("grpo",) and group_size == 1:
            assert torch.allclose(a, torch.full_like(a, reward / (1 + 1e-6)), atol=ATOL)
        elif name == "drgrpo" and group_size == 1:
            assert torch.allclose(a, torch.full_like(a, reward), atol=ATOL)
        elif name == "reinforce_pp_baseline" and group_size == 1:
            continue  # baseline 0 for a lone sample, then whitened: not a group property
        else:
            assert torch.equal(a, torch.zeros_like(a)), name


def test_group_ids_length_checked():
    with pytest.raises(ShapeError, match=r"group_ids has 1 entries; expected one per row \(2\)"):
        compute_grpo(AdvantageInputs(torch.zeros(2, 1), torch.ones(2, 1), group_ids=["a"]))


# ----------------------------------------------------------------------------- REINFORCE++
def test_reinforce_pp_known_answer():
    r = T([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    m = T([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    a, ret = compute_reinforce_pp(AdvantageInputs(r, m, gamma=0.5))
    # row 0: the masked token carries G through undiscounted: G = 1, -, 1 * 0.5 = 0.5
    assert torch.allclose(ret, T([[0.5, 0.0, 1.0], [1.0, 2.0, 0.0]]), atol=ATOL)
    assert torch.allclose(a, ref_whiten(ret, m) * m, atol=ATOL)
    assert torch.equal(a * (1 - m), torch.zeros_like(a))


@settings(max_examples=30, deadline=None)
@given(batches(), st.floats(0.0, 1.0))
def test_reinforce_pp_matches_naive_reference(batch, gamma):
    r, _, m, _ = batch
    a, ret = compute_reinforce_pp(AdvantageInputs(r, m, gamma=gamma))
    expected = ref_reinforce_pp_returns(r, m, gamma)
    assert torch.allclose(ret, expected, atol=ATOL)
    if m.sum() >= 2:
        assert torch.allclose(a, ref_whiten(expected, m) * m, atol=1e-4)


def test_reinforce_pp_baseline_known_answer():
    r = T([[0.0, 1.0], [0.0, 0.0], [0.0, 3.0]])
    m = T([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    a, ret = compute_reinforce_pp_baseline(AdvantageInputs(r, m, group_ids=["x", "x", "y"]))
    centred = T([[0.5, 0.5], [-0.5, -0.5], [3.0, 0.0]])  # lone "y": baseline 0
    assert torch.allclose(a, ref_whiten(centred, m) * m, atol=ATOL) and torch.equal(a, ret)


# ----------------------------------------------------------------------------- registry
def test_registry_names_and_flags():
    assert set(ADVANTAGE_ESTIMATORS) >= {
        "gae",
        "grpo",
        "drgrpo",
        "rloo",
        "reinforce_pp",
        "reinforce_pp_baseline",
    }
    assert estimator_needs_critic("gae") and not estimator_needs_critic("grpo")
    assert get_estimator("rloo").needs_groups and not get_estimator("reinforce_pp").needs_groups
    assert all(e.paper.startswith("https://arxiv.org/abs/") for e in ADVANTAGE_ESTIMATORS.values())


def test_registry_dispatch_matches_public_functions():
    r = T([[0.0, 1.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.5]])
    v = T([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]])
    m = T([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    x = AdvantageInputs(r, m, values=v, group_ids=[0, 0, 1, 1], gamma=0.9, lam=0.8)
    cases = {
        "gae": compute_gae(x),
        "grpo": compute_grpo(x),
        "drgrpo": compute_grpo(replace(x, norm_by_std=False)),
        "rloo": compute_rloo(x),
        "reinforce_pp": compute_reinforce_pp(x),
        "reinforce_pp_baseline": compute_reinforce_pp_baseline(x),
    }
    for name, (a, ret) in cases.items():
        got_a, got_ret = compute_advantages(name, x)
        assert torch.equal(got_a, a) and torch.equal(got_ret, ret), name
        assert not got_a.requires_grad


def test_registry_missing_inputs_raise():
    x = torch.zeros(2, 2)
    with pytest.raises(
        ConfigError, match=r"advantage estimator 'gae' needs values \(from a critic\); got None"
    ):
        compute_advantages("gae", AdvantageInputs(x, x))
    with pytest.raises(ConfigError, match=r"advantage estimator 'rloo' needs group_ids; got None"):
        compute_advantages("rloo", AdvantageInputs(x, x))


def test_unknown_estimator_suggests_close_names():
    with pytest.raises(
        UnknownNameError,
        match=r"unknown advantage estimator 'grop'; known: .*drgrpo.*gae.*Did you mean 'grpo'",
    ):
        compute_advantages("grop", AdvantageInputs(torch.zeros(1, 1), torch.ones(1, 1)))


def test_register_twice_raises_and_unregister_restores():
    before = dict(ADVANTAGE_ESTIMATORS)

    @register_estimator("constant_one", needs_groups=False)
    def constant_one(x):
        return x.mask.clone(), x.mask.clone()

    try:
        x = AdvantageInputs(torch.zeros(1, 2), T([[1.0, 0.0]]))
        a, _ = compute_advantages("constant_one", x)
        assert a.tolist() == [[1.0, 0.0]]
        with pytest.raises(
            DuplicateNameError, match=r"advantage estimator 'constant_one' is already registered"
        ):
            register_estimator("constant_one")(constant_one)
        with pytest.raises(DuplicateNameError, match="'grpo' is already registered"):
            register_estimator("grpo")(constant_one)
    finally:
        unregister_estimator("constant_one")
    assert ADVANTAGE_ESTIMATORS == before
    assert adv.get_estimator("grpo").fn is before["grpo"].fn
