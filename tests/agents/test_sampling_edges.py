"""``rlvr.agents.hf.sampling`` at its edges: the top-p and top-k boundaries, greedy logprobs, seeds.

Each test asserts the documented value; together they fail on every small change of the
module (``bash dev.sh mutate agents/hf/sampling.py``).
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.agents.engine import SamplingParams
from rlvr.agents.hf.sampling import restrict_top_k_top_p, row_plan, sample_planned, sample_rows

INF = float("-inf")
# probabilities that are exact in float32: the sorted masses are 0.5, 0.75, 0.875, 1
PROBS = torch.tensor([0.125, 0.5, 0.125, 0.25])
LOGP = PROBS.log()


def kept(top_k: int, top_p: float) -> list[bool]:
    return (restrict_top_k_top_p(LOGP, top_k, top_p) > INF).tolist()


@pytest.mark.parametrize(
    ("top_p", "want"),
    [
        (0.5, [False, True, False, False]),  # the top token's mass reaches 0.5 exactly
        (0.500001, [False, True, False, True]),
        (0.75, [False, True, False, True]),  # mass before token 3 is 0.5 < 0.75; then 0.75
        (0.1, [False, True, False, False]),  # always at least one token
        (1.0, [True, True, True, True]),
    ],
)
def test_top_p_keeps_the_smallest_set_reaching_the_mass(top_p, want):
    assert kept(-1, top_p) == want


def test_top_p_one_keeps_a_tail_whose_mass_rounds_away():
    # float32: exp(logp) of the top token rounds to 1.0, so the mass before the second token
    # already "reaches" 1.0; top_p = 1 disables the nucleus and must keep it anyway
    logp = torch.log_softmax(torch.tensor([0.0, -30.0]), -1)
    assert torch.equal(restrict_top_k_top_p(logp, -1, 1.0), logp)


def test_top_k_keeps_the_k_most_likely_and_leaves_the_rest_unchanged():
    assert kept(1, 1.0) == [False, True, False, False]
    assert kept(2, 1.0) == [False, True, False, True]
    assert kept(4, 1.0) == [True] * 4
    assert kept(-1, 1.0) == [True] * 4
    out = restrict_top_k_top_p(LOGP, 2, 1.0)
    assert out[1].item() == LOGP[1].item()  # kept values are not renormalised
    # top-k first, then top-p over what is left
    assert kept(3, 0.76) == [True, True, False, True] or kept(3, 0.76) == [
        False, True, True, True]


def test_restricted_rows_sample_only_kept_tokens_and_report_full_logprobs():
    n = 200
    params = [SamplingParams(temperature=1.0, top_p=0.5, seed=s) for s in range(n)]
    tokens, logprobs = sample_rows(LOGP.expand(n, 4), params, [0] * n)
    assert set(tokens) == {1}
    assert logprobs == pytest.approx([math.log(0.5)] * n)
    params = [SamplingParams(temperature=1.0, top_k=2, seed=s) for s in range(n)]
    tokens, _ = sample_rows(LOGP.expand(n, 4), params, [0] * n)
    assert set(tokens) == {1, 3}
    assert 0.55 < tokens.count(1) / n < 0.8  # 2/3 of the kept mass


def test_top_k_one_always_samples_the_most_likely_token():
    assert row_plan(SamplingParams(temperature=1.0, top_k=1)).restricted is True
    n = 50
    params = [SamplingParams(temperature=1.0, top_k=1, seed=s) for s in range(n)]
    tokens, _ = sample_rows(LOGP.expand(n, 4), params, [0] * n)
    assert tokens == [1] * n


def test_greedy_rows_report_the_logprob_at_temperature_one():
    logits = torch.tensor([[2.0, 0.0, 1.0], [2.0, 0.0, 1.0]])
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=3.0, seed=1)]
    tokens, logprobs = sample_rows(logits, params, [0, 0])
    assert tokens[0] == 0
    assert logprobs[0] == pytest.approx(torch.log_softmax(logits[0], -1)[0].item())
    scaled = torch.log_softmax(logits[1] / 3.0, -1)
    assert logprobs[1] == pytest.approx(scaled[tokens[1]].item())
    plan = row_plan(SamplingParams(temperature=0.0, top_k=1))
    assert (plan.temperature, plan.greedy, plan.restricted) == (1.0, True, False)
    plan = row_plan(SamplingParams(temperature=0.7, top_p=0.9, seed=2**64 - 1))
    assert (plan.temperature, plan.greedy, plan.restricted, plan.seed) == (0.7, False, True, -1)
    assert row_plan(SamplingParams(temperature=1.0)).restricted is False


def test_a_batch_at_one_temperature_other_than_one_scales_by_it():
    logits = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.0, 2.0]])
    params = [SamplingParams(temperature=2.0, seed=s) for s in (3, 4)]
    tokens, logprobs = sample_rows(logits, params, [0, 0])
    want = torch.log_softmax(logits / 2.0, -1)
    assert logprobs == pytest.approx([want[i, t].item() for i, t in enumerate(tokens)])


def test_one_temperature_rows_that_share_logits_scale_by_it():
    # every row at T = 0.5 sharing one logits row (the prefill path without expanding)
    logits = torch.tensor([[1.0, 0.0, -1.0]])
    plans = [row_plan(SamplingParams(temperature=0.5, seed=s)) for s in range(3)]
    shared = torch.zeros(3, dtype=torch.long)
    tokens, logprobs = sample_planned(logits, plans, [0, 0, 0], rows=shared)
    want = torch.log_softmax(logits[0] / 0.5, -1)
    assert logprobs == pytest.approx([want[t].item() for t in tokens])
    alone = [sample_rows(logits, [SamplingParams(temperature=0.5, seed=s)], [0])[0][0]
             for s in range(3)]
    assert tokens == alone


def test_a_seeded_row_draws_the_inverse_cdf_token_of_its_uniform():
    from rlvr.agents.hf.sampling import seeded_uniform

    u = seeded_uniform(torch.tensor([123]), torch.tensor([4])).item()
    cdf = torch.cumsum(PROBS.double(), 0)
    want = int((cdf > u).nonzero()[0])
    tokens, _ = sample_rows(LOGP[None], [SamplingParams(temperature=1.0, seed=123)], [4])
    assert tokens == [want]


def test_an_all_seeded_batch_leaves_the_global_rng_alone():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    sample_rows(LOGP.expand(2, 4), [SamplingParams(temperature=1.0, seed=s) for s in (1, 2)],
                [0, 0])
    assert torch.equal(torch.rand(3), expected)


def _splitmix64_reference(seed: int, step: int) -> float:
    """The splitmix64 finaliser with its published constants (Steele, Lea & Flood 2014)."""
    m = (1 << 64) - 1
    z = (seed * 0x9E3779B97F4A7C15 + (step + 1) * 0xD1B54A32D192ED03) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return ((z ^ (z >> 31)) >> 11) / (1 << 53)


def test_seeded_uniform_uses_the_published_splitmix64_constants():
    from rlvr.agents.hf.sampling import seeded_uniform

    pairs = [(0, 0), (1, 0), (42, 7), (2**63 + 11, 3)]
    got = seeded_uniform(torch.tensor([s - (1 << 64) if s >> 63 else s for s, _ in pairs]),
                         torch.tensor([t for _, t in pairs]))
    # to the bit on any CPU: integer arithmetic, then a 53-bit integer over 2**53 (both exact)
    assert got.tolist() == [_splitmix64_reference(s, t) for s, t in pairs]


def test_seeds_count_modulo_two_to_the_64():
    assert row_plan(SamplingParams(seed=2**64 + 5)).seed == 5
    assert row_plan(SamplingParams(seed=3 * 2**64 + 5)).seed == 5
    assert row_plan(SamplingParams(seed=2**64 - 1)).seed == -1
