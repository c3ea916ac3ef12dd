"""Seeded sampling draws (counter-based) and inverse-CDF sampling from them."""

from __future__ import annotations

import math
import random

import pytest
import torch

from rlvr.agents.engine import SamplingParams
from rlvr.agents.hf.sampling import (
    _GOLDEN,
    _MASK64,
    _MIX1,
    _MIX2,
    _STEP,
    sample_rows,
    seeded_uniform,
)


def splitmix_uniform(seed: int, step: int) -> float:
    """``seeded_uniform`` at one ``(seed, step)`` in plain unsigned Python arithmetic."""
    z = (seed * _GOLDEN + (step + 1) * _STEP) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    z ^= z >> 31
    return (z >> 11) / (1 << 53)


def test_seeded_uniform_is_the_splitmix64_hash_bit_for_bit():
    """Wrapping int64 tensor arithmetic gives the plain-Python unsigned values, for seeds up to
    2**64 - 1 (turn seeds use 63 bits)."""
    seeds = [0, 1, 7, 2**31 + 5, 2**62 + 3, 2**63 - 1, 2**64 - 1]
    steps = [0, 1, 2, 5, 1000, 3, 9]
    got = seeded_uniform(torch.tensor([s - (1 << 64) if s >> 63 else s for s in seeds]),
                         torch.tensor(steps))
    assert got.dtype == torch.float64
    # to the bit on any CPU: integer arithmetic, then a 53-bit integer over 2**53 (both exact)
    assert got.tolist() == [splitmix_uniform(seed, step) for seed, step in zip(seeds, steps)]
    assert 0 <= got.min() and got.max() < 1


def test_seeded_draws_are_uniform_and_independent_across_seeds_and_steps():
    seeds = torch.arange(64).repeat_interleave(1000)
    steps = torch.arange(1000).repeat(64)
    u = seeded_uniform(seeds, steps)
    assert abs(u.mean().item() - 0.5) < 0.005  # 64k draws: sd of the mean 0.0011
    assert abs(u.var().item() - 1 / 12) < 0.002
    counts = torch.histc(u, bins=20, min=0, max=1)
    chi2 = ((counts - u.numel() / 20) ** 2 / (u.numel() / 20)).sum().item()
    assert chi2 < 45  # 19 dof: p ~ 0.001
    lag = torch.corrcoef(torch.stack([u[:-1], u[1:]]))[0, 1].item()
    assert abs(lag) < 0.02  # neighbouring steps of a seed
    by_seed = u.view(64, 1000)
    assert abs(torch.corrcoef(torch.stack([by_seed[:-1].flatten(),
                                           by_seed[1:].flatten()]))[0, 1].item()) < 0.02


def test_seeded_rows_sample_from_the_distribution():
    """4,000 seeds over one 5-token distribution: the counts pass a chi-square test."""
    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03])
    logits = probs.log().expand(4000, 5)
    params = [SamplingParams(temperature=1.0, seed=s) for s in range(4000)]
    tokens, logprobs = sample_rows(logits, params, [0] * 4000)
    counts = torch.bincount(torch.tensor(tokens), minlength=5).double()
    chi2 = ((counts - 4000 * probs) ** 2 / (4000 * probs)).sum().item()
    assert chi2 < 18.5  # 4 dof: p ~ 0.001
    assert logprobs[0] == pytest.approx(math.log(probs[tokens[0]]), abs=1e-5)


def test_a_seeded_rows_token_depends_on_its_seed_and_step_only():
    torch.manual_seed(0)
    logits = torch.randn(4, 50) * 2
    seeded = [SamplingParams(temperature=1.0, seed=s) for s in (1, 2, 3, 4)]
    alone = [sample_rows(logits[i:i + 1], [seeded[i]], [i])[0][0] for i in range(4)]
    batched, _ = sample_rows(logits, seeded, [0, 1, 2, 3])
    assert batched == alone
    mixed, _ = sample_rows(logits, [seeded[0], SamplingParams(temperature=1.0), seeded[2],
                                    SamplingParams(temperature=0.0)], [0, 1, 2, 3])
    assert (mixed[0], mixed[2]) == (alone[0], alone[2])
    assert mixed[3] == int(logits[3].argmax())  # greedy
    later = [sample_rows(logits[:1], [seeded[0]], [step])[0][0] for step in range(40)]
    assert len(set(later)) > 5  # another token index, other noise


def _chi2(tokens: list[int], probs: torch.Tensor) -> float:
    counts = torch.bincount(torch.tensor(tokens), minlength=len(probs)).double()
    expected = len(tokens) * probs.double()
    kept = expected > 0
    assert counts[~kept].sum() == 0  # a token outside the kept set was sampled
    return (((counts - expected)[kept]) ** 2 / expected[kept]).sum().item()


def test_top_k_top_p_and_temperatures_sample_their_renormalised_distributions():
    """One batch mixing temperatures (so each row scales by its own), top-k and top-p rows and
    unseeded rows: each row's tokens follow its own kept, renormalised distribution."""
    probs = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05])
    n = 3000
    kinds = [SamplingParams(temperature=1.0, top_k=2),                  # {0, 1}
             SamplingParams(temperature=1.0, top_p=0.8),                # {0, 1, 2}: 0.85 >= 0.8
             SamplingParams(temperature=2.0),                           # p ** 0.5, renormalised
             SamplingParams(temperature=0.5, top_k=3)]                  # p ** 2 over {0, 1, 2}
    expected = [torch.tensor([0.4, 0.3, 0, 0, 0]), torch.tensor([0.4, 0.3, 0.15, 0, 0]),
                probs.sqrt(), torch.cat([probs[:3] ** 2, torch.zeros(2)])]
    params = [kinds[i % 4].replace(seed=None if i % 3 == 0 else i) for i in range(4 * n)]
    tokens, logprobs = sample_rows(probs.log().expand(4 * n, 5), params, [0] * (4 * n))
    for k, want in enumerate(expected):
        assert _chi2(tokens[k::4], want / want.sum()) < 18.5  # <= 4 dof: p ~ 0.001
    full = torch.log_softmax(probs.log() / 2.0, -1)  # logprobs: the full vocabulary, at T
    assert logprobs[2] == pytest.approx(full[tokens[2]].item(), abs=1e-5)


def test_an_all_greedy_batch_takes_the_argmax():
    logits = torch.randn(6, 30)
    tokens, logprobs = sample_rows(logits, [SamplingParams(temperature=0.0)] * 6, [0] * 6)
    assert tokens == logits.argmax(-1).tolist()
    assert logprobs == pytest.approx(torch.log_softmax(logits, -1).max(-1).values.tolist())


def test_rows_that_share_logits_sample_exactly_as_if_each_had_its_own_copy():
    """``sample_planned(..., rows)`` (a prefill's shared prompts) == sampling the expanded rows.

    Random batches mixing seeded, unseeded, greedy and top-k/top-p rows, one or several
    temperatures, as a prefill sends them (several requests per distinct prompt).
    """
    from rlvr.agents.hf.sampling import row_plan, sample_planned

    rng = random.Random(0)
    for trial in range(200):
        distinct = rng.randint(1, 5)
        batch = rng.randint(1, 12)
        logits = torch.randn(distinct, 7, generator=torch.Generator().manual_seed(trial)) * 3
        rows = torch.tensor([rng.randrange(distinct) for _ in range(batch)])
        one_temperature = rng.random() < 0.6
        temperature = rng.choice([0.0, 0.7, 1.0, 1.3])
        plans, steps = [], []
        for _ in range(batch):
            kind = rng.random()
            params = SamplingParams(
                temperature=temperature if one_temperature else rng.choice([0.0, 0.7, 1.0]),
                seed=rng.randrange(1 << 40) if kind < 0.6 else None,
                top_k=3 if kind > 0.9 else -1, top_p=0.8 if 0.85 < kind <= 0.9 else 1.0)
            plans.append(row_plan(params))
            steps.append(rng.randrange(6))
        torch.manual_seed(trial)
        shared = sample_planned(logits, plans, steps, rows)
        torch.manual_seed(trial)
        expanded = sample_planned(logits.index_select(0, rows), plans, steps)
        assert shared == expanded, trial
