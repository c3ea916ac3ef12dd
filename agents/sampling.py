"""Per-row token sampling with the engine's logprob convention (see ``agents.engine``).

Each row of a batch carries its own ``SamplingParams`` and, when seeded, its own
``torch.Generator``: the noise a row draws never depends on the other rows, so a seeded request
samples the same tokens whatever it is batched with.

Sampling uses the exponential race: ``argmax_i p_i / E_i`` with ``E_i ~ Exp(1)`` i.i.d. is a
sample from ``p`` (the trick SGLang and vLLM use too); top-k/top-p only zero out ``p`` outside the
kept set, and the reported logprob is ``log_softmax(logits / T)`` at the sampled token over the
full vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agents.engine import SamplingParams


def row_generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    """A generator seeded with ``seed`` on ``device``, or None for unseeded sampling."""
    if seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


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
    generators: Sequence[torch.Generator | None],
) -> tuple[list[int], list[float]]:
    """Sample one token per row and report its logprob.

    Args:
        logits: ``(B, V)`` next-token logits (any float dtype; computed in float32).
        params: ``B`` sampling params, one per row.
        generators: ``B`` generators (None = the global RNG).

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
    noise = torch.empty_like(probs)
    if any(gen is None for gen in generators):
        noise.exponential_()  # rows without a generator share the global RNG
    for i, gen in enumerate(generators):
        if gen is not None:  # each seeded row draws from its own generator only
            noise[i].exponential_(generator=gen)
    scores = probs / noise
    greedy = [i for i, p in enumerate(params) if p.greedy]
    if greedy:
        scores[greedy] = logits[greedy]
    tokens = scores.argmax(dim=-1)
    chosen = logp.gather(1, tokens[:, None])[:, 0]
    return tokens.tolist(), chosen.tolist()
