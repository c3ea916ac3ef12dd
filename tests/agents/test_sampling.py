"""Seeded sampling noise (counter-based) and the exponential race over it."""

from __future__ import annotations

import math

import pytest
import torch

from agents.engine import SamplingParams
from agents.sampling import _GOLDEN, _MASK64, _MIX1, _MIX2, _STEP, sample_rows, seeded_uniform


def splitmix_uniform(seed: int, step: int, token: int) -> float:
    """``seeded_uniform`` at one ``(seed, step, token)`` in plain unsigned Python arithmetic."""
    z = (seed * _GOLDEN + (step + 1) * _STEP + token) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    z ^= z >> 31
    return float(((z >> 40) + 0.5) / (1 << 24))


def test_seeded_uniform_is_the_splitmix64_hash_bit_for_bit():
    """Wrapping int64 tensor arithmetic gives the plain-Python unsigned values, for seeds up to
    2**64 - 1 (turn seeds use 63 bits)."""
    seeds = [0, 1, 7, 2**31 + 5, 2**62 + 3, 2**63 - 1]
    steps = [0, 1, 2, 5, 1000, 3]
    got = seeded_uniform(torch.tensor(seeds), torch.tensor(steps), 37)
    for row, (seed, step) in enumerate(zip(seeds, steps)):
        for tok in (0, 1, 17, 36):
            assert got[row, tok].item() == pytest.approx(splitmix_uniform(seed, step, tok),
                                                         rel=0, abs=1e-7)
    assert 0 < got.min() and got.max() < 1


def test_seeded_noise_is_uniform_and_independent_across_seeds_steps_and_ids():
    u = seeded_uniform(torch.arange(64), torch.zeros(64, dtype=torch.int64), 1000).double()
    assert abs(u.mean().item() - 0.5) < 0.005  # 64k draws: sd of the mean 0.0011
    assert abs(u.var().item() - 1 / 12) < 0.002
    counts = torch.histc(u, bins=20, min=0, max=1)
    chi2 = ((counts - u.numel() / 20) ** 2 / (u.numel() / 20)).sum().item()
    assert chi2 < 45  # 19 dof: p ~ 0.001
    flat = u.flatten()
    lag = torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1].item()
    assert abs(lag) < 0.02  # neighbouring ids
    again = seeded_uniform(torch.arange(64), torch.ones(64, dtype=torch.int64), 1000).double()
    assert abs(torch.corrcoef(torch.stack([flat, again.flatten()]))[0, 1].item()) < 0.02


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
