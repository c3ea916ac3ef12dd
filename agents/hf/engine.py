"""TransformersEngine: a batched, KV-cached rollout engine over any HF causal LM (CPU or one GPU).

Scheduling (continuous batching, in one worker thread):

* ``await generate(...)`` queues a request and returns when its completion is ready; the event
  loop is never blocked (the forward passes run in the worker thread), so env steps and other
  coroutines keep running.
* Requests queued in the same event-loop iteration are prefilled together, each distinct prompt
  once (the samples of a GRPO group share their prompt: its KV cache is copied to each of them).
  Requests that arrive while a batch is decoding are ADMITTED INTO THE RUNNING BATCH at the next
  decode step (up to ``max_batch_size`` rows): they are prefilled on their own (left-padded, with
  attention mask and position ids), then their KV cache is merged into the running one (the
  shorter side is left-padded), so a multi-turn episode whose env answered early does not wait
  for stragglers.
* A row that finishes (stop token, stop string, ``max_new_tokens``, context limit, or its caller
  cancelled) leaves the batch at once: its KV rows are dropped and columns that became padding for
  every remaining row are trimmed, so no padding is ever decoded for finished rows.
* A seeded request's sampling noise is a function of its seed and token index only
  (``rlvr.agents.hf.sampling``): the same seed gives the same tokens whatever else is in the batch.
* Finished completions are handed back after each step, except in a batch's last
  ``HOLD_STEPS`` steps (no running row can take more): they are held until the batch drains
  and handed back together. Their callers' Python (decoding, env calls, trajectories) would
  otherwise run during those last forwards, and every forward op then waits for the GIL; a
  one-turn rollout's episodes all end in such a tail, a long generation's early finishers are
  not held.

Versions and in-flight weight updates (``rlvr.agents.engine.VersionedEngine``): every sampled token
records ``weight_version``, the version the engine held when it sampled it
(``Completion.versions``, reported once a version was declared with ``set_weight_version`` or an
in-flight update: an engine nobody versions reports None, as before).
``update_weights_in_flight`` hands new weights to the worker, which swaps them between two
decode steps, on the engine's own copy of the weights: "continue" keeps
the running rows and their KV cache (computed by the old weights) and samples their next tokens
with the new ones; "abort" drops the running rows' partial generations and prefills them again
from their prompts under the new weights (``Completion.regenerated``).

Sharing the actor: pass the actor's ``nn.Module`` itself. Generation runs under
``torch.no_grad()``; the module's own forward runs in eval mode (the module's previous
train/eval mode is restored whenever the engine goes idle), the lean forward has no dropout and
leaves the mode alone. ``update_weights`` is then unnecessary (same tensors), but still works.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlvr.agents.engine import (
    INFLIGHT_MODES,
    Completion,
    FinishReason,
    InflightMode,
    SamplingParams,
    WeightsSource,
    check_score_request,
)
from rlvr.agents.errors import EngineClosedError, EngineError, RequestError, WeightUpdateError
from rlvr.agents.hf.forwards import ROOM, LeanForward, ModuleForward, left_pad
from rlvr.agents.hf.intra_op import use_intra_op_threads
from rlvr.agents.hf.lean_decoder import lean_unsupported
from rlvr.agents.hf.malloc_tuning import tune_malloc
from rlvr.agents.hf.sampling import RowPlan, row_plan, sample_planned

logger = logging.getLogger(__name__)

HOLD_STEPS = 8
"""Finished completions are held while every running row is within this many tokens of its
``max_new`` (see the module docstring); the most a completion waits, in decode steps."""


@dataclass(eq=False)
class _Request:
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


@dataclass(eq=False)
class _InflightUpdate:
    """New weights for the worker to load between two decode steps."""

    weights: Iterable[tuple[str, torch.Tensor]]
    version: int
    mode: InflightMode
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass
class _Batch:
    """The running decode batch: rows, their KV cache and their attention mask.

    Attributes:
        rows: the requests, one per batch row.
        cache: the rows' keys/values, left-padded, ``L`` columns: a ``KVBuffer`` (the lean
            forward) or a transformers ``DynamicCache`` (the module's own forward).
        attention_mask: ``(B, L)`` int64, 1 on real cached tokens, 0 on left padding.
    """

    rows: list[_Request]
    cache: Any
    attention_mask: torch.Tensor


class TransformersEngine:
    """A continuous-batching rollout engine over a transformers causal LM.

    Args:
        model: a HF model directory (loaded with ``AutoModelForCausalLM``) or an existing
            ``nn.Module`` (e.g. the actor being trained, shared in-process).
        tokenizer: the tokenizer; loaded from ``model`` when it is a path. Needed for stop
            strings and to find the eos ids.
        device: where to run; default: the module's device, or "cpu" for a path.
        dtype: the dtype to load a path with (default float32); ignored for a module.
        max_batch_size: the most rows decoded together (``>= 1``).
        lean: run ``rlvr.agents.hf.lean_decoder``'s forward when the model allows it (Qwen2, Llama,
            Mistral; see ``lean_unsupported``): the same logits, less Python and no KV-cache
            concatenation per step. False: always the module's own forward. ``self.lean`` says
            which runs.
        threads: intra-op threads of the forwards, set on the worker thread alone
            (``rlvr.agents.hf.intra_op.use_intra_op_threads``; the caller's threads keep their
            count);
            None keeps the process's.
    """

    def __init__(
        self,
        model: str | PathLike[str] | nn.Module,
        tokenizer: Any = None,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        max_batch_size: int = 32,
        lean: bool = True,
        threads: int | None = None,
    ) -> None:
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or (
            max_batch_size < 1
        ):
            raise RequestError(f"max_batch_size must be an int >= 1; got {max_batch_size!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise RequestError(f"threads must be None or an int >= 1; got {threads!r}")
        self.threads = threads
        self.model: Any
        if isinstance(model, nn.Module):
            self.model = model
            self.device = torch.device(device) if device else next(model.parameters()).device
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.device = torch.device(device or "cpu")
            loaded: Any = AutoModelForCausalLM.from_pretrained(model, dtype=dtype or torch.float32)
            self.model = loaded.to(self.device)
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(model)
        self.tokenizer = tokenizer
        if self.device.type == "cpu":
            tune_malloc()  # its buffers would be mapped and faulted afresh every step
        self.max_batch_size = max_batch_size
        self.eos_token_ids = self._find_eos_ids()
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 1 << 30))
        self.vocab_size = int(self.model.get_input_embeddings().weight.shape[0])
        why_not = lean_unsupported(self.model) if lean else "lean=False"
        self.lean = why_not is None
        """Whether forwards run ``rlvr.agents.hf.lean_decoder`` (else the module's own forward)."""
        if why_not is not None and lean:
            logger.info("TransformersEngine: the module's own forward (%s)", why_not)
        self._fwd: ModuleForward | LeanForward = (
            LeanForward(self.model) if self.lean else ModuleForward(self.model)
        )
        self._cond = threading.Condition()
        self._pending: deque[_Request] = deque()
        self._staged: list[_Request] = []
        self._releasing: set[asyncio.AbstractEventLoop] = set()  # loops with a release queued
        self._model_lock = threading.RLock()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._saved_training: bool | None = None
        self._done: list[_Request] = []
        self.steps = 0
        """Decode forward passes run so far (prefills excluded); useful in tests and benches."""
        self._weight_version = 0
        self._versioned = False  # a version was declared: completions report versions
        self._regenerated = 0
        self._update: _InflightUpdate | None = None

    def _find_eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for src in (
            getattr(self.tokenizer, "eos_token_id", None),
            getattr(getattr(self.model, "generation_config", None), "eos_token_id", None),
            getattr(self.model.config, "eos_token_id", None),
        ):
            if isinstance(src, int):
                ids.add(src)
            elif isinstance(src, list | tuple):
                ids.update(int(x) for x in src)
        return frozenset(ids)

    # ------------------------------------------------------------------ public API
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Generate one completion (see ``rlvr.agents.engine.Engine.generate``).

        Raises:
            RequestError: an empty prompt, a non-int id or an id outside the vocabulary, or stop
                strings without a tokenizer.
            EngineClosedError: the engine was closed.
            EngineError: the forward pass failed (the original error is chained).
        """
        self._check_request(prompt_ids, sampling)
        if self._closed:
            raise EngineClosedError("TransformersEngine.generate called after close()")
        loop = asyncio.get_running_loop()
        room = self.max_context - len(prompt_ids)
        req = _Request(
            prompt_ids=list(prompt_ids),
            sampling=sampling,
            loop=loop,
            future=loop.create_future(),
            stop_ids=self.eos_token_ids | frozenset(sampling.stop_token_ids),
            max_new=min(sampling.max_new_tokens, room),
            plan=row_plan(sampling),
        )
        if req.max_new <= 0:
            return Completion([], [], "length")
        with self._cond:
            self._staged.append(req)
            self._ensure_worker()
            first = loop not in self._releasing
            self._releasing.add(loop)
        # Hand the request to the worker only after every coroutine ready in this loop iteration
        # has staged its own, so requests issued together are prefilled together (one release
        # per loop iteration hands them all over).
        if first:
            loop.call_soon(self._release_staged, loop)
        return await req.future

    def score(self, token_ids: list[int], start: int) -> dict[str, list[float]]:
        """Logprobs of ``token_ids[start:]`` under the weights held now (``ScoringEngine``).

        One forward of the module (between decode steps, never during one), float32
        ``log_softmax(logits)``. The one replica is named ``"transformers"``.

        Raises:
            RequestError: a malformed request (``check_score_request``) or an id outside the
                vocabulary.
            EngineClosedError: the engine was closed.
        """
        check_score_request(token_ids, start)
        if max(token_ids) >= self.vocab_size:
            raise RequestError(f"token id {max(token_ids)} is outside the vocabulary "
                               f"({self.vocab_size})")
        if self._closed:
            raise EngineClosedError("TransformersEngine.score called after close()")
        ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        with self._model_lock, torch.no_grad():
            training = self.model.training
            self.model.eval()
            try:
                logits = self.model(input_ids=ids).logits[0, start - 1:-1].float()
            finally:
                self.model.train(training)
        logp = torch.log_softmax(logits, dim=-1)
        picked = logp.gather(1, ids[0, start:, None])[:, 0]
        return {"transformers": picked.cpu().tolist()}

    def update_weights(self, weights: WeightsSource) -> None:
        """Copy new weights into the module (between decode steps, never during one).

        Args:
            weights: ``(name, tensor)`` pairs named like ``model.state_dict()``, or a HF
                checkpoint directory (safetensors, sharded or not, or ``pytorch_model.bin``).

        Raises:
            WeightUpdateError: an unknown name (close names are suggested) or a shape mismatch.
            EngineClosedError: the engine was closed.
        """
        if self._closed:
            raise EngineClosedError("TransformersEngine.update_weights called after close()")
        items = _read_checkpoint(weights) if isinstance(weights, str | PathLike) else weights
        with self._model_lock, torch.no_grad():
            self._load(items)

    @property
    def weight_version(self) -> int:
        """The version of the weights tokens are sampled with now (``VersionedEngine``)."""
        return self._weight_version

    def set_weight_version(self, version: int) -> None:
        """Declare the version of the weights loaded (tokens sampled from now on carry it)."""
        with self._model_lock:
            self._weight_version = int(version)
            self._versioned = True

    @property
    def regenerated(self) -> int:
        """Rows dropped and generated again by "abort" in-flight updates so far."""
        return self._regenerated

    def update_weights_in_flight(self, weights: WeightsSource, version: int,
                                 mode: InflightMode) -> None:
        """Swap in ``version``'s weights between two decode steps (module docstring).

        Blocks until the worker has loaded them (one decode step at the most when a batch runs;
        at once when the engine is idle).

        Raises:
            RequestError: an unknown ``mode``.
            WeightUpdateError: as ``update_weights`` (the rows go on, on what was loaded).
            EngineClosedError: the engine was closed (before or during the wait).
        """
        if mode not in INFLIGHT_MODES:
            raise RequestError(f"mode must be one of {', '.join(INFLIGHT_MODES)}; got {mode!r}")
        if self._closed:
            raise EngineClosedError("TransformersEngine.update_weights_in_flight called after "
                                    "close()")
        items = _read_checkpoint(weights) if isinstance(weights, str | PathLike) else \
            list(weights)
        job = _InflightUpdate(items, int(version), mode)
        with self._cond:
            if self._update is not None:  # pragma: no cover - one caller at a time
                raise EngineError("an in-flight weight update is already waiting")
            self._update = job
            self._ensure_worker()
            self._cond.notify_all()
        while not job.done.wait(0.5):
            if self._closed:
                raise EngineClosedError("the engine closed during an in-flight weight update")
        if job.error is not None:
            raise job.error

    def _load(self, items: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy ``items`` into the module's tensors (holding ``_model_lock``, no grad)."""
        targets = self.model.state_dict(keep_vars=True)
        for name, tensor in items:
            if name not in targets:
                close = difflib.get_close_matches(name, list(targets), n=3)
                raise WeightUpdateError(
                    f"update_weights: unknown parameter {name!r}"
                    + (f"; did you mean {close}?" if close else "")
                )
            target = targets[name]
            if tuple(target.shape) != tuple(tensor.shape):
                raise WeightUpdateError(
                    f"update_weights: {name!r} has shape {tuple(tensor.shape)}; the model "
                    f"expects {tuple(target.shape)}"
                )
            target.data.copy_(tensor.to(device=target.device, dtype=target.dtype))

    def release_memory(self) -> None:
        """No-op: the transformers engine holds no memory between batches."""

    def resume_memory(self, tags: Sequence[str] | None = None) -> None:
        """No-op (see ``release_memory``)."""

    def close(self) -> None:
        """Stop the worker; queued and running requests finish with reason "abort"."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)
        with self._cond:
            if self._update is not None:
                self._update.error = EngineClosedError("the engine closed before the update")
                self._update.done.set()
                self._update = None
            for req in [*self._pending, *self._staged]:
                self._finish(req, "abort")
            self._pending.clear()
            self._staged.clear()
            self._deliver()

    def __enter__(self) -> TransformersEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ request plumbing
    def _check_request(self, prompt_ids: list[int], sampling: SamplingParams) -> None:
        if not isinstance(sampling, SamplingParams):
            raise RequestError(f"sampling must be a SamplingParams; got {type(sampling).__name__}")
        if len(prompt_ids) == 0:
            raise RequestError("prompt_ids is empty; a completion needs at least one token")
        if not (all(type(tok) is int for tok in prompt_ids)  # noqa: E721 (bools are not ids)
                and 0 <= min(prompt_ids) and max(prompt_ids) < self.vocab_size):
            for i, tok in enumerate(prompt_ids):  # name the first bad id
                if isinstance(tok, bool) or not isinstance(tok, int) or \
                        not 0 <= tok < self.vocab_size:
                    raise RequestError(
                        f"prompt_ids[{i}] = {tok!r}; ids must be ints in [0, {self.vocab_size})"
                    )
        if sampling.stop and self.tokenizer is None:
            raise RequestError("SamplingParams.stop needs a tokenizer; pass tokenizer=...")

    def _release_staged(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._cond:
            self._releasing.discard(loop)
            self._pending.extend(self._staged)
            self._staged.clear()
            self._cond.notify_all()

    def _ensure_worker(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._worker, name="TransformersEngine", daemon=True
            )
            self._thread.start()

    def _finish(self, req: _Request, reason: FinishReason) -> None:
        """Mark ``req`` done; its future is resolved by ``_deliver`` after the step."""
        req.finish_reason = reason
        self._done.append(req)

    def _deliver(self) -> None:
        """Resolve the futures of finished requests on their own event loops (thread-safe).

        One callback per event loop resolves all of its requests (one wake-up of that loop, not
        one per request).
        """
        done, self._done = self._done, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Completion],
                                                             Completion]]] = {}
        for req in done:  # a finished request's lists are never appended to again
            completion = Completion(req.token_ids, req.logprobs, req.finish_reason or "abort",
                                    versions=req.versions if self._versioned else None,
                                    regenerated=req.regenerated)
            by_loop.setdefault(req.loop, []).append((req.future, completion))
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the caller's loop is already closed
                loop.call_soon_threadsafe(_resolve_all, items)

    def _fail(self, req: _Request, exc: BaseException) -> None:
        def reject() -> None:
            if not req.future.done():
                req.future.set_exception(exc)

        with contextlib.suppress(RuntimeError):
            req.loop.call_soon_threadsafe(reject)

    # ------------------------------------------------------------------ worker thread
    def _worker(self) -> None:
        if self.threads is not None and not use_intra_op_threads(self.threads):
            logger.info("TransformersEngine: threads=%d ignored (torch's parallel backend is "
                        "not OpenMP: one thread count for the whole process)", self.threads)
        batch: _Batch | None = None
        while True:
            with self._cond:
                while not self._pending and batch is None and not self._closed and \
                        self._update is None:
                    self._cond.wait()
                if self._closed:
                    break
                update, self._update = self._update, None
            if update is not None:  # between two decode steps
                batch = self._apply_update(update, batch)
            with self._cond:
                room = self.max_batch_size - (len(batch.rows) if batch else 0)
                admit = [self._pending.popleft() for _ in range(min(room, len(self._pending)))]
            try:
                with self._model_lock, torch.no_grad(), self._eval_mode():
                    if admit:
                        batch = self._merge(batch, self._prefill(admit))
                    if batch is not None:
                        batch = self._decode_step(batch)
            except Exception as exc:  # a failed forward fails its rows, never the engine
                logger.exception("TransformersEngine: forward pass failed")
                err = EngineError(f"TransformersEngine forward pass failed: {exc}")
                err.__cause__ = exc
                for req in (batch.rows if batch else []) + admit:
                    if req.finish_reason is None:
                        self._fail(req, err)
                batch = None
            if batch is None:
                self._restore_mode()
                self._deliver()  # after the mode is restored: callers may train right away
            elif self._done and not _in_tail(batch):
                self._deliver()
        for req in batch.rows if batch else []:
            self._finish(req, "abort")
        self._restore_mode()
        self._deliver()

    def _apply_update(self, update: _InflightUpdate, batch: _Batch | None) -> _Batch | None:
        """Load an in-flight update; with "abort", requeue the running rows from scratch."""
        try:
            with self._model_lock, torch.no_grad():
                self._load(update.weights)
                self._weight_version = update.version
                self._versioned = True
            if update.mode == "abort" and batch is not None:
                rows = [r for r in batch.rows if r.finish_reason is None and not r.future.done()]
                for req in rows:
                    req.token_ids, req.logprobs, req.versions = [], [], []
                    req.regenerated += 1
                self._regenerated += len(rows)
                with self._cond:
                    self._pending.extendleft(reversed(rows))
                batch = None  # its KV cache holds the dropped tokens
        except BaseException as exc:  # handed to the caller, the rows go on
            update.error = exc
        finally:
            update.done.set()
        return batch

    @contextlib.contextmanager
    def _eval_mode(self) -> Iterator[None]:
        """Put the module in eval mode for this step (the caller's mode is restored when idle).

        Only for the module's own forward: the lean forward has no dropout and reads no mode,
        so it leaves the module alone (``eval()`` and ``train()`` walk every submodule: ~0.3 ms
        per batch on the quickstart's model).
        """
        if self._saved_training is None and isinstance(self._fwd, ModuleForward):
            self._saved_training = self.model.training
            self.model.eval()
        yield

    def _restore_mode(self) -> None:
        if self._saved_training is not None:
            self.model.train(self._saved_training)
            self._saved_training = None

    def _prefill(self, reqs: list[_Request]) -> _Batch:
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
        cache, logits = self._fwd.prefill(ids, mask, positions, room)
        index = None
        if len(prompts) < len(reqs):
            index = torch.tensor(rows, device=self.device)
            cache = self._fwd.select(cache, index, 0)
            mask = mask.index_select(0, index)
        batch = _Batch(rows=list(reqs), cache=cache, attention_mask=mask)
        self._append_sampled(batch, logits, index)  # each prompt's softmax once
        return batch

    def _decode_step(self, batch: _Batch) -> _Batch | None:
        """Drop finished rows, then feed every row its last token and sample the next."""
        compact = self._compact(batch)
        if compact is None:
            return None
        batch = compact
        # Flat lists then a view: torch.tensor of nested one-element lists costs ~3x more.
        last = torch.tensor([r.token_ids[-1] for r in batch.rows], device=self.device).view(-1, 1)
        positions = torch.tensor(
            [len(r.prompt_ids) + len(r.token_ids) - 1 for r in batch.rows], device=self.device
        ).view(-1, 1)
        mask = torch.cat([batch.attention_mask, torch.ones_like(last)], dim=1)
        logits = self._fwd.decode(batch.cache, last, positions, mask)
        self.steps += 1
        batch = _Batch(rows=batch.rows, cache=batch.cache, attention_mask=mask)
        self._append_sampled(batch, logits)
        return self._compact(batch)

    def _append_sampled(self, batch: _Batch, logits: torch.Tensor,
                        source: torch.Tensor | None = None) -> None:
        """Sample one token per row, append it, and finish rows that are done.

        ``source``: row ``b`` samples from ``logits[source[b]]`` (None: from ``logits[b]``).
        """
        rows = batch.rows
        tokens, logprobs = sample_planned(
            logits, [r.plan for r in rows], [len(r.token_ids) for r in rows], source)
        done = self._done  # (``_finish`` inlined: this loop runs per row and decode step)
        version = self._weight_version
        for req, tok, lp in zip(rows, tokens, logprobs):
            ids = req.token_ids
            ids.append(tok)
            req.logprobs.append(lp)
            req.versions.append(version)
            if tok in req.stop_ids or (req.sampling.stop and self._hit_stop_string(req)):
                req.finish_reason = "stop"
                done.append(req)
            elif len(ids) >= req.max_new:
                req.finish_reason = "length"
                done.append(req)

    def _hit_stop_string(self, req: _Request) -> bool:
        """Whether ``req``'s decoded completion contains one of its (non-empty) stop strings."""
        text = self.tokenizer.decode(req.token_ids, skip_special_tokens=False)
        return any(s in text for s in req.sampling.stop)

    def _compact(self, batch: _Batch) -> _Batch | None:
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
        cache = self._fwd.select(batch.cache, idx, start)
        return _Batch([batch.rows[i] for i in keep], cache, mask[:, start:])

    def _merge(self, running: _Batch | None, new: _Batch) -> _Batch | None:
        """Join newly prefilled rows to the running batch (left-padding the shorter cache)."""
        new_c = self._compact(new)
        if running is None or new_c is None:
            return running if new_c is None else new_c
        width = max(running.attention_mask.shape[1], new_c.attention_mask.shape[1])
        room = min(max(r.max_new - len(r.token_ids) for r in running.rows + new_c.rows), ROOM)
        cache = self._fwd.merge(running.cache, new_c.cache, width, room)
        mask = torch.cat(
            [left_pad(running.attention_mask, width, 1), left_pad(new_c.attention_mask, width, 1)]
        )
        return _Batch(running.rows + new_c.rows, cache, mask)


def _in_tail(batch: _Batch) -> bool:
    """Whether every row of ``batch`` ends within ``HOLD_STEPS`` decode steps at the most."""
    return all(r.max_new - len(r.token_ids) <= HOLD_STEPS for r in batch.rows)


def _resolve_all(items: list[tuple[asyncio.Future[Completion], Completion]]) -> None:
    """Set each future's result unless it is done already (e.g. cancelled by its caller)."""
    for fut, completion in items:
        if not fut.done():
            fut.set_result(completion)


def _read_checkpoint(path: str | PathLike[str]) -> Iterable[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs of a HF checkpoint directory (safetensors or ``.bin``)."""
    root = Path(path)
    if not root.is_dir():
        raise WeightUpdateError(f"update_weights: {str(root)!r} is not a directory")
    from safetensors.torch import load_file

    index = root / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [item for f in files for item in load_file(root / f).items()]
    if (root / "model.safetensors").exists():
        return list(load_file(root / "model.safetensors").items())
    if (root / "pytorch_model.bin").exists():
        return list(torch.load(root / "pytorch_model.bin", weights_only=True).items())
    raise WeightUpdateError(
        f"update_weights: no model.safetensors, model.safetensors.index.json or pytorch_model.bin "
        f"in {str(root)!r}"
    )
