"""The transformers engine's continuous-batching decode: prefill, decode steps, admission, exit.

``DecodeScheduler`` runs on the engine's worker thread (``rlvr.agents.hf.engine``); everything
here happens between two forwards, holding the engine's model lock:

* Requests handed over together are prefilled together (``prefill``), each distinct prompt once
  (the samples of a GRPO group share their prompt: its KV cache is copied to each of them).
  Requests that arrive while a batch is decoding are ADMITTED INTO THE RUNNING BATCH at the next
  decode step (``merge``; up to the engine's ``max_batch_size`` rows): they are prefilled on
  their own (left-padded, with attention mask and position ids), then their KV cache is merged
  into the running one (the shorter side is left-padded), so a multi-turn episode whose env
  answered early does not wait for stragglers.
* A row that finishes (stop token, stop string, ``max_new_tokens``, context limit, or its caller
  cancelled) leaves the batch at once (``compact``): its KV rows are dropped and columns that
  became padding for every remaining row are trimmed, so no padding is ever decoded for
  finished rows.
* A seeded request's sampling noise is a function of its seed and token index only
  (``rlvr.agents.hf.sampling``): the same seed gives the same tokens whatever else is in the batch.
* Every sampled token records ``weight_version``, the version held when it was sampled.
* Finished requests collect in ``done`` until the engine hands them back; a batch whose every
  row ends within ``HOLD_STEPS`` steps is in its tail (``in_tail``), where the engine holds them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.agents.engine import Completion, FinishReason, SamplingParams
from rlvr.agents.hf.forwards import ROOM, LeanForward, ModuleForward, left_pad
from rlvr.agents.hf.sampling import RowPlan, sample_planned

HOLD_STEPS = 8
"""Finished completions are held while every running row is within this many tokens of its
``max_new`` (see ``rlvr.agents.hf.engine``); the most a completion waits, in decode steps."""


@dataclass(eq=False)
class Request:
    """One queued or running generation (owned by the worker thread once queued)."""

    prompt_ids: list[int]
    sampling: SamplingParams
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Completion]
    stop_ids: frozenset[int]
    max_new: int
    plan: RowPlan
    """``sampling`` as the sampler reads it (``rlvr.agents.hf.sampling.row_plan``), made once."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    """The weight version each token was sampled under."""
    regenerated: int = 0
    finish_reason: FinishReason | None = None



@dataclass
class Batch:
    """The running decode batch: rows, their KV cache and their attention mask.

    Attributes:
        rows: the requests, one per batch row.
        cache: the rows' keys/values, left-padded, ``L`` columns: a ``KVBuffer`` (the lean
            forward) or a transformers ``DynamicCache`` (the module's own forward).
        attention_mask: ``(B, L)`` int64, 1 on real cached tokens, 0 on left padding.
    """

    rows: list[Request]
    cache: Any
    attention_mask: torch.Tensor



class DecodeScheduler:
    """The running batch's steps over one forward (the worker thread's, under the model lock).

    Args:
        fwd: the forward (``LeanForward`` or ``ModuleForward``).
        device: where the batch's tensors live.
        tokenizer: decodes completions for stop strings (None: no stop strings).
    """

    def __init__(self, fwd: ModuleForward | LeanForward, device: torch.device,
                 tokenizer: Any) -> None:
        self.fwd = fwd
        self.device = device
        self.tokenizer = tokenizer
        self.steps = 0
        """Decode forward passes run so far (prefills excluded)."""
        self.weight_version = 0
        """The version every token sampled now records."""
        self.done: list[Request] = []
        """Finished requests not handed back yet."""

    def finish(self, req: Request, reason: FinishReason) -> None:
        """Mark ``req`` done; it is handed back with the next delivery."""
        req.finish_reason = reason
        self.done.append(req)

    def take_done(self) -> list[Request]:
        """The finished requests, handed over (``done`` starts afresh)."""
        done, self.done = self.done, []
        return done

    def prefill(self, reqs: list[Request]) -> Batch:
        """Run the left-padded prompts of ``reqs`` and sample their first tokens.

        Each distinct prompt is run once (a GRPO group sends the same prompt ``group_size``
        times); its KV cache rows and last logits are then copied to every request that sent it.
        """
        slot: dict[tuple[int, ...], int] = {}
        rows = [slot.setdefault(tuple(r.prompt_ids), len(slot)) for r in reqs]
        prompts = [list(p) for p in slot]
        width = max(len(p) for p in prompts)
        pad = 0
        ids = torch.tensor(
            [[pad] * (width - len(p)) + p for p in prompts], dtype=torch.long, device=self.device
        )
        mask = torch.tensor(
            [[0] * (width - len(p)) + [1] * len(p) for p in prompts],
            dtype=torch.long,
            device=self.device,
        )
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # Columns for the tokens the rows will feed back (a lean buffer grows past this if need be).
        room = min(max(r.max_new for r in reqs), ROOM)
        cache, logits = self.fwd.prefill(ids, mask, positions, room)
        index = None
        if len(prompts) < len(reqs):
            index = torch.tensor(rows, device=self.device)
            cache = self.fwd.select(cache, index, 0)
            mask = mask.index_select(0, index)
        batch = Batch(rows=list(reqs), cache=cache, attention_mask=mask)
        self.append_sampled(batch, logits, index)  # each prompt's softmax once
        return batch

    def decode_step(self, batch: Batch) -> Batch | None:
        """Drop finished rows, then feed every row its last token and sample the next."""
        compact = self.compact(batch)
        if compact is None:
            return None
        batch = compact
        # Flat lists then a view: torch.tensor of nested one-element lists costs ~3x more.
        last = torch.tensor([r.token_ids[-1] for r in batch.rows], device=self.device).view(-1, 1)
        positions = torch.tensor(
            [len(r.prompt_ids) + len(r.token_ids) - 1 for r in batch.rows], device=self.device
        ).view(-1, 1)
        mask = torch.cat([batch.attention_mask, torch.ones_like(last)], dim=1)
        logits = self.fwd.decode(batch.cache, last, positions, mask)
        self.steps += 1
        batch = Batch(rows=batch.rows, cache=batch.cache, attention_mask=mask)
        self.append_sampled(batch, logits)
        return self.compact(batch)

    def append_sampled(self, batch: Batch, logits: torch.Tensor,
                        source: torch.Tensor | None = None) -> None:
        """Sample one token per row, append it, and finish rows that are done.

        ``source``: row ``b`` samples from ``logits[source[b]]`` (None: from ``logits[b]``).
        """
        rows = batch.rows
        tokens, logprobs = sample_planned(
            logits, [r.plan for r in rows], [len(r.token_ids) for r in rows], source)
        done = self.done  # (``finish`` inlined: this loop runs per row and decode step)
        version = self.weight_version
        for req, tok, lp in zip(rows, tokens, logprobs):
            ids = req.token_ids
            ids.append(tok)
            req.logprobs.append(lp)
            req.versions.append(version)
            if tok in req.stop_ids or (req.sampling.stop and self.hit_stop_string(req)):
                req.finish_reason = "stop"
                done.append(req)
            elif len(ids) >= req.max_new:
                req.finish_reason = "length"
                done.append(req)

    def hit_stop_string(self, req: Request) -> bool:
        """Whether ``req``'s decoded completion contains one of its (non-empty) stop strings."""
        text = self.tokenizer.decode(req.token_ids, skip_special_tokens=False)
        return any(s in text for s in req.sampling.stop)

    def compact(self, batch: Batch) -> Batch | None:
        """Remove finished (or cancelled) rows and trim all-padding columns; None if empty."""
        for req in batch.rows:
            if req.finish_reason is None and req.future.done():  # the caller cancelled
                req.finish_reason = "abort"
        keep = [i for i, r in enumerate(batch.rows) if r.finish_reason is None]
        if not keep:
            return None
        if len(keep) == len(batch.rows):
            return batch
        idx = torch.tensor(keep, device=self.device)
        mask = batch.attention_mask.index_select(0, idx)
        start = int((mask.sum(0) > 0).nonzero()[0, 0])
        cache = self.fwd.select(batch.cache, idx, start)
        return Batch([batch.rows[i] for i in keep], cache, mask[:, start:])

    def merge(self, running: Batch | None, new: Batch) -> Batch | None:
        """Join newly prefilled rows to the running batch (left-padding the shorter cache)."""
        new_c = self.compact(new)
        if running is None or new_c is None:
            return running if new_c is None else new_c
        width = max(running.attention_mask.shape[1], new_c.attention_mask.shape[1])
        room = min(max(r.max_new - len(r.token_ids) for r in running.rows + new_c.rows), ROOM)
        cache = self.fwd.merge(running.cache, new_c.cache, width, room)
        mask = torch.cat(
            [left_pad(running.attention_mask, width, 1), left_pad(new_c.attention_mask, width, 1)]
        )
        return Batch(running.rows + new_c.rows, cache, mask)


def in_tail(batch: Batch) -> bool:
    """Whether every row of ``batch`` ends within ``HOLD_STEPS`` decode steps at the most."""
    return all(r.max_new - len(r.token_ids) <= HOLD_STEPS for r in batch.rows)
