"""Per-row token sampling with the engine's logprob convention (see ``agents.engine``).

Each row of a batch carries its own ``SamplingParams``. A seeded row's noise is a pure function
of (its seed, its token index, the vocabulary id): counter-based, like SGLang's seeded sampling,
so the noise a row draws never depends on the other rows (a seeded request samples the same
tokens whatever it is batched with) and a whole batch's noise is a handful of vectorised integer
ops instead of one generator call per row. Unseeded rows share torch's global RNG.

Sampling uses the exponential race: ``argmax_i p_i / E_i`` with ``E_i ~ Exp(1)`` i.i.d. is a
sample from ``p`` (the trick SGLang and vLLM use too); top-k/top-p only zero out ``p`` outside the
kept set, and the reported logprob is ``log_softmax(logits / T)`` at the sampled token over the
full vocabulary.

Seeded noise: ``E = -log(u)`` with ``u = (top 24 bits of h + 0.5) / 2**24`` and ``h`` the
splitmix64 finaliser (Steele, Lea & Flood 2014) of ``seed * G + (token_index + 1) * C + id``, in
wrapping 64-bit integer arithmetic (the same bits on every device).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agents.engine import SamplingParams

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


def seeded_uniform(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """Uniform noise in (0, 1), ``(B, vocab)`` float32: row ``b`` from ``(seeds[b], steps[b])``.

    Args:
        seeds: ``(B,)`` int64 seeds (the bits of any seed mod ``2**64``).
        steps: ``(B,)`` int64 token indices (0 for a request's first sampled token).
        vocab: the row width.
    """
    ids = torch.arange(vocab, dtype=torch.int64, device=seeds.device)
    z = (seeds * _signed(_GOLDEN) + (steps + 1) * _signed(_STEP))[:, None] + ids
    # The finaliser in place: fresh (B, vocab) int64 buffers per op cost a quarter of the hash.
    tmp = torch.empty_like(z)
    _xor_shift_right_(z, 30, tmp)
    z *= _signed(_MIX1)
    _xor_shift_right_(z, 27, tmp)
    z *= _signed(_MIX2)
    _xor_shift_right_(z, 31, tmp)
    z >>= 40  # the top 24 bits (the sign-extended ones are masked off)
    z &= (1 << 24) - 1
    u = z.to(torch.float32)
    u += 0.5
    u *= 1.0 / (1 << 24)
    return u


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
    logits = logits.float()
    temps = torch.tensor(
        [p.temperature if p.temperature > 0 else 1.0 for p in params],
        dtype=logits.dtype,
        device=logits.device,
    )
    logp = torch.log_softmax(logits / temps[:, None], dim=-1)
    probs = logp.exp()
    for i, p in enumerate(params):
        if not p.greedy and (p.top_k > 0 or p.top_p < 1.0):
            probs[i] = restrict_top_k_top_p(logp[i], p.top_k, p.top_p).exp()
    seeded = [i for i, p in enumerate(params) if p.seed is not None]
    if seeded:
        seeds = torch.tensor([_signed(int(params[i].seed or 0)) for i in seeded], dtype=torch.int64,
                             device=logits.device)
        at = torch.tensor([steps[i] for i in seeded], dtype=torch.int64, device=logits.device)
        hashed = -torch.log(seeded_uniform(seeds, at, logits.shape[-1]))
    if len(seeded) == len(params):
        noise = hashed
    else:
        noise = torch.empty_like(probs).exponential_()  # unseeded rows share the global RNG
        if seeded:
            noise[seeded] = hashed
    scores = probs / noise
    greedy = [i for i, p in enumerate(params) if p.greedy]
    if greedy:
        scores[greedy] = logits[greedy]
    tokens = scores.argmax(dim=-1)
    chosen = logp.gather(1, tokens[:, None])[:, 0]
    return tokens.tolist(), chosen.tolist()
