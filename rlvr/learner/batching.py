"""Micro-batches of a (mini-)batch: by rows, or by a token budget that every rank agrees on.

With a token budget (``LearnerConfig.max_tokens_per_micro_batch``, verl's dynamic batch size)
consecutive rows join a micro-batch while its cost stays within the budget. The cost of a
micro-batch is what its forward computes: rows x padded width (the columns some row uses, as
``rlvr.learner.logprobs`` crops them) for the dense forward, the sum of the real tokens when it
is packed. Every FSDP forward and backward is a collective, so all ranks must run as many
micro-batches: they take the largest count over ranks, and a rank with fewer splits its
costliest micro-batches in two until it has as many. The update's weights
(``TrainedModel._normalisers``) make unequal micro-batches sum to the one-big-batch gradient.
"""

from __future__ import annotations

import torch

from rlvr.batch import RolloutBatch

__all__ = ["micro_batch_rows", "row_cost_parts", "select_rows"]


def row_cost_parts(batch: RolloutBatch) -> tuple[list[int], list[int]]:
    """Per row: its real prompt tokens and its real response tokens (attention mask 1)."""
    p = batch.prompt_len
    mask = batch.attention_mask.bool()
    return mask[:, :p].sum(dim=1).tolist(), mask[:, p:].sum(dim=1).tolist()


def _cost(prompt: list[int], resp: list[int], rows: range, packed: bool) -> int:
    if packed:
        return sum(prompt[i] + resp[i] for i in rows)
    return len(rows) * (max(prompt[i] for i in rows) + max(max(resp[i] for i in rows), 1))


def micro_batch_rows(
    batch: RolloutBatch,
    max_rows: int,
    max_tokens: int | None = None,
    *,
    packed: bool = False,
    count: int | None = None,
) -> list[range]:
    """Row ranges of the micro-batches of ``batch`` (consecutive, covering every row once).

    Args:
        batch: the rows to split.
        max_rows: at most this many rows per micro-batch.
        max_tokens: the token budget per micro-batch; None = by rows only.
        packed: cost = real tokens (packed forward) instead of rows x padded width.
        count: split into exactly this many micro-batches (>= the budget's own count, <= the
            number of rows): what all ranks agreed on. None = the budget's own count.

    Returns:
        ``count`` (or as many as the budget needs) non-empty consecutive ranges.
    """
    n = len(batch)
    if n == 0:
        return []
    if max_tokens is None:
        spans = [range(s, min(s + max_rows, n)) for s in range(0, n, max_rows)]
    else:
        prompt, resp = row_cost_parts(batch)
        spans, start = [], 0
        for i in range(1, n + 1):
            if i == n or i - start >= max_rows or _cost(prompt, resp, range(start, i + 1),
                                                          packed) > max_tokens:
                spans.append(range(start, i))
                start = i
    if count is not None:
        prompt, resp = row_cost_parts(batch)
        while len(spans) < min(count, n):
            # Split the costliest splittable micro-batch in two halves.
            k = max((j for j, sp in enumerate(spans) if len(sp) > 1),
                    key=lambda j: _cost(prompt, resp, spans[j], packed))
            sp = spans[k]
            mid = sp.start + len(sp) // 2
            spans[k : k + 1] = [range(sp.start, mid), range(mid, sp.stop)]
    return spans


def select_rows(batch: RolloutBatch, spans: list[range]) -> list[RolloutBatch]:
    """The micro-batches themselves (``batch.select`` of each range)."""
    return [batch.select(torch.arange(sp.start, sp.stop)) for sp in spans]
