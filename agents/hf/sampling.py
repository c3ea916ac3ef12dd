"""Per-row token sampling with the engine's logprob convention (see ``rlvr.agents.engine``).

Each row of a batch carries its own ``SamplingParams``. A row samples by inverse CDF: one
uniform ``u`` per row picks the first token whose cumulative probability (summed in float64)
exceeds ``u`` times the row's kept mass. top-k/top-p only zero out probabilities outside the
kept set (not renormalised: scaling ``u`` by the kept mass does that), and the reported logprob
is ``log_softmax(logits / T)`` at the sampled token over the full vocabulary.

A seeded row's ``u`` is a pure function of (its seed, its token index): counter-based, like
SGLang's seeded sampling, so the token a row draws never depends on the other rows (a seeded
request samples the same tokens whatever it is batched with) and a whole batch's draws are a
handful of vectorised integer ops on ``B`` numbers. Unseeded rows draw ``u`` from torch's global
RNG. One uniform per row instead of one per vocabulary entry (an exponential race) made a
128-row sampling step of the quickstart ~2x cheaper on CPU (BENCHMARKS.md, "Where a rollout's
time goes").

Seeded uniform: ``u = (top 53 bits of h) / 2**53`` with ``h`` the splitmix64 finaliser (Steele,
Lea & Flood 2014) of ``seed * G + (token_index + 1) * C``, in wrapping 64-bit integer arithmetic
(the same bits on every device).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from rlvr.agents.engine import SamplingParams
from rlvr.trajectory import logprob_temperature

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_STEP = 0xD1B54A32D192ED03
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _signed(x: int) -> int:
    """The int64 with the bits of the unsigned 64-bit ``x``."""
    x &= _MASK64
    return x - (1 << 64) if x >> 63 else x


def _xor_shift_right_(z: torch.Tensor, bits: int, tmp: torch.Tensor) -> None:
    """``z ^= z >>> bits`` in place (a logical, unsigned, right shift of int64 ``z``)."""
    torch.bitwise_right_shift(z, bits, out=tmp)
    tmp &= (1 << (64 - bits)) - 1
    z ^= tmp


def seeded_uniform(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Uniform draws in [0, 1), ``(B,)`` float64: draw ``b`` from ``(seeds[b], steps[b])``.

    Args:
        seeds: ``(B,)`` int64 seeds (the bits of any seed mod ``2**64``).
        steps: ``(B,)`` int64 token indices (0 for a request's first sampled token).
    """
    z = seeds * _signed(_GOLDEN) + (steps + 1) * _signed(_STEP)
    tmp = torch.empty_like(z)
    _xor_shift_right_(z, 30, tmp)
    z *= _signed(_MIX1)
    _xor_shift_right_(z, 27, tmp)
    z *= _signed(_MIX2)
    _xor_shift_right_(z, 31, tmp)
    z >>= 11  # the top 53 bits (the sign-extended ones are masked off)
    z &= (1 << 53) - 1
    return z.to(torch.float64) * (1.0 / (1 << 53))


def restrict_top_k_top_p(logprobs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to ``-inf``) the tokens outside the top-k / nucleus set of one row.

    Args:
        logprobs: ``(V,)`` log-probabilities of one row (temperature already applied).
        top_k: keep the ``top_k`` most likely tokens (``-1``: all).
        top_p: keep the smallest set of most likely tokens whose mass reaches ``top_p``
            (always at least one token).

    Returns:
        ``(V,)``: ``logprobs`` where kept, ``-inf`` elsewhere (NOT renormalised).
    """
    out = logprobs
    if 0 < top_k < logprobs.shape[-1]:
        kth = torch.topk(logprobs, top_k).values[-1]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        sorted_lp, order = torch.sort(out, descending=True)
        mass_before = torch.cumsum(sorted_lp.exp(), dim=-1) - sorted_lp.exp()
        drop_sorted = mass_before >= top_p
        drop_sorted[0] = False
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


class RowPlan(NamedTuple):
    """A row's ``SamplingParams`` as ``sample_planned`` reads them.

    An engine makes one per request (``row_plan``) instead of re-reading the params at every
    decode step.
    """

    temperature: float
    """The temperature (1.0 for a greedy row)."""
    greedy: bool
    restricted: bool
    """Whether top-k or top-p restricts the row (never for a greedy row)."""
    top_k: int
    top_p: float
    seed: int | None
    """The seed as a signed 64-bit int (None: the global RNG)."""


def row_plan(p: SamplingParams) -> RowPlan:
    """``p`` as ``sample_planned`` reads it."""
    seed = None if p.seed is None else _signed(int(p.seed))
    temperature = logprob_temperature(p.temperature)
    if not p.greedy:
        return RowPlan(temperature, False, p.top_k > 0 or p.top_p < 1.0, p.top_k, p.top_p, seed)
    return RowPlan(temperature, True, False, p.top_k, p.top_p, seed)


def sample_rows(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    steps: Sequence[int],
) -> tuple[list[int], list[float]]:
    """Sample one token per row and report its logprob.

    Args:
        logits: ``(B, V)`` next-token logits (any float dtype; computed in float32).
        params: ``B`` sampling params, one per row (``seed`` None: the global RNG).
        steps: ``B`` token indices: how many tokens each row's request has sampled before.

    Returns:
        ``(tokens, logprobs)``, each of length ``B``: the sampled ids and
        ``log_softmax(logits / T)`` at them (``T = 1`` for greedy rows).
    """
    return sample_planned(logits, [row_plan(p) for p in params], steps)


def sample_planned(
    logits: torch.Tensor,
    plans: Sequence[RowPlan],
    steps: Sequence[int],
    rows: torch.Tensor | None = None,
) -> tuple[list[int], list[float]]:
    """``sample_rows`` with each row's ``row_plan`` given (an engine keeps it per request).

    A decode step then reads its rows' params in a few list passes instead of one Python
    branch per row (~100 us per 128-row step on CPU).

    Args:
        logits: ``(S, V)`` next-token logits.
        plans: one per batch row.
        steps: one per batch row.
        rows: ``(B,)`` int64: batch row ``b`` samples from ``logits[rows[b]]`` (a prefill's
            requests that share a prompt share its logits); None: row ``b`` from ``logits[b]``.
            Exactly ``sample_planned(logits.index_select(0, rows), plans, steps)``, with the
            softmax and the cumulative sums computed once per distinct row when every row uses
            one temperature and none is restricted (else the rows are expanded first).
    """
    logits = logits.float()
    temps, greedy_flags, restricted_flags, _, _, row_seeds = zip(*plans)
    uniform_t = min(temps) == max(temps)
    if rows is not None and (not uniform_t or any(restricted_flags)):
        logits, rows = logits.index_select(0, rows), None
    greedy = [i for i, g in enumerate(greedy_flags) if g]
    restricted = [i for i, r in enumerate(restricted_flags) if r]
    seeded = [i for i, s in enumerate(row_seeds) if s is not None]
    seeds = [row_seeds[i] for i in seeded]
    if uniform_t:
        scaled = logits if temps[0] == 1.0 else logits / temps[0]
    else:
        scaled = logits / torch.tensor(temps, dtype=logits.dtype, device=logits.device)[:, None]
    logp = torch.log_softmax(scaled, dim=-1)
    if len(greedy) == len(plans):
        tokens = logits.argmax(dim=-1)
        if rows is not None:
            tokens = tokens.index_select(0, rows)
    else:
        probs = logp.exp()
        for i in restricted:
            probs[i] = restrict_top_k_top_p(logp[i], plans[i].top_k, plans[i].top_p).exp()
        u = _uniforms(len(plans), steps, seeded, seeds, logits.device)
        cdf = probs.cumsum(dim=-1, dtype=torch.float64)
        if rows is not None:
            cdf = cdf.index_select(0, rows)
        tokens = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
        tokens.clamp_(max=logits.shape[-1] - 1)  # u * mass == mass: a 2**-53 rounding event
        if greedy:
            tokens[greedy] = logits[greedy if rows is None else rows[greedy]].argmax(dim=-1)
    chosen = logp.gather(1, tokens[:, None])[:, 0] if rows is None else logp[rows, tokens]
    return tokens.tolist(), chosen.tolist()


def _uniforms(rows: int, steps: Sequence[int], seeded: list[int], seeds: list[int],
              device: torch.device) -> torch.Tensor:
    """Each row's uniform, ``(rows,)`` float64.

    Seeded rows' come from their seed and step, the others' from the global RNG.
    """

    def hashed() -> torch.Tensor:
        return seeded_uniform(torch.tensor(seeds, dtype=torch.int64, device=device),
                              torch.tensor([steps[i] for i in seeded], dtype=torch.int64,
                                           device=device))
    if len(seeded) == rows:
        return hashed()
    u = torch.rand(rows, dtype=torch.float64, device=device)
    if seeded:
        u[seeded] = hashed()
    return u
