"""TransformersEngine: a batched, KV-cached rollout engine over any HF causal LM (CPU or one GPU).

Its parts: ``rlvr.agents.hf.bridge`` hands requests from asyncio callers to one worker thread and
completions back (the event loop is never blocked); ``rlvr.agents.hf.scheduler`` is the
continuous-batching decode the worker runs (requests issued together are prefilled together,
later ones admitted into the running batch, finished rows leave at once);
``rlvr.agents.hf.weights`` reads checkpoints and copies weights into the module. The worker loop
here ties them together, and swaps weights between two decode steps.

Finished completions are handed back after each step, except in a batch's last
``rlvr.agents.hf.scheduler.HOLD_STEPS`` steps (no running row can take more): they are held
until the batch drains and handed back together. Their callers' Python (decoding, env calls,
trajectories) would otherwise run during those last forwards, and every forward op then waits
for the GIL; a one-turn rollout's episodes all end in such a tail, a long generation's early
finishers are not held.

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
import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import torch
from torch import nn

from rlvr.agents.engine import (
    INFLIGHT_MODES,
    Completion,
    InflightMode,
    SamplingParams,
    WeightsSource,
    check_score_request,
)
from rlvr.agents.errors import EngineClosedError, EngineError, RequestError
from rlvr.agents.hf.bridge import LoopBridge
from rlvr.agents.hf.forwards import LeanForward, ModuleForward
from rlvr.agents.hf.intra_op import use_intra_op_threads
from rlvr.agents.hf.lean_decoder import lean_unsupported
from rlvr.agents.hf.malloc_tuning import tune_malloc
from rlvr.agents.hf.sampling import row_plan
from rlvr.agents.hf.scheduler import Batch, DecodeScheduler, Request, in_tail
from rlvr.agents.hf.weights import load_weights, read_checkpoint

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _InflightUpdate:
    """New weights for the worker to load between two decode steps."""

    weights: Iterable[tuple[str, torch.Tensor]]
    version: int
    mode: InflightMode
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


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
        self._scheduler = DecodeScheduler(
            LeanForward(self.model) if self.lean else ModuleForward(self.model), self.device,
            tokenizer)
        self._bridge = LoopBridge(self._ensure_worker)
        self._cond = self._bridge.cond
        self._model_lock = threading.RLock()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._saved_training: bool | None = None
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
        req = Request(
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
        return await self._bridge.submit(req)

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
        items = read_checkpoint(weights) if isinstance(weights, str | PathLike) else weights
        with self._model_lock, torch.no_grad():
            load_weights(self.model, items)

    @property
    def steps(self) -> int:
        """Decode forward passes run so far (prefills excluded); useful in tests and benches."""
        return self._scheduler.steps

    @property
    def weight_version(self) -> int:
        """The version of the weights tokens are sampled with now (``VersionedEngine``)."""
        return self._scheduler.weight_version

    def set_weight_version(self, version: int) -> None:
        """Declare the version of the weights loaded (tokens sampled from now on carry it)."""
        with self._model_lock:
            self._scheduler.weight_version = int(version)
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
        items = read_checkpoint(weights) if isinstance(weights, str | PathLike) else \
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
            for req in [*self._bridge.pending, *self._bridge.staged]:
                self._scheduler.finish(req, "abort")
            self._bridge.pending.clear()
            self._bridge.staged.clear()
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

    def _deliver(self) -> None:
        """Hand the finished requests back to their callers (``LoopBridge.deliver``)."""
        self._bridge.deliver(self._scheduler.take_done(), self._versioned)

    def _ensure_worker(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._worker, name="TransformersEngine", daemon=True
            )
            self._thread.start()

    # ------------------------------------------------------------------ worker thread
    def _worker(self) -> None:
        if self.threads is not None and not use_intra_op_threads(self.threads):
            logger.info("TransformersEngine: threads=%d ignored (torch's parallel backend is "
                        "not OpenMP: one thread count for the whole process)", self.threads)
        batch: Batch | None = None
        while True:
            with self._cond:
                while not self._bridge.pending and batch is None and not self._closed and \
                        self._update is None:
                    self._cond.wait()
                if self._closed:
                    break
                update, self._update = self._update, None
            if update is not None:  # between two decode steps
                batch = self._apply_update(update, batch)
            with self._cond:
                room = self.max_batch_size - (len(batch.rows) if batch else 0)
                pending = self._bridge.pending
                admit = [pending.popleft() for _ in range(min(room, len(pending)))]
            try:
                with self._model_lock, torch.no_grad(), self._eval_mode():
                    if admit:
                        batch = self._scheduler.merge(batch, self._scheduler.prefill(admit))
                    if batch is not None:
                        batch = self._scheduler.decode_step(batch)
            except Exception as exc:  # a failed forward fails its rows, never the engine
                logger.exception("TransformersEngine: forward pass failed")
                err = EngineError(f"TransformersEngine forward pass failed: {exc}")
                err.__cause__ = exc
                for req in (batch.rows if batch else []) + admit:
                    if req.finish_reason is None:
                        self._bridge.fail(req, err)
                batch = None
            if batch is None:
                self._restore_mode()
                self._deliver()  # after the mode is restored: callers may train right away
            elif self._scheduler.done and not in_tail(batch):
                self._deliver()
        for req in batch.rows if batch else []:
            self._scheduler.finish(req, "abort")
        self._restore_mode()
        self._deliver()

    def _apply_update(self, update: _InflightUpdate, batch: Batch | None) -> Batch | None:
        """Load an in-flight update; with "abort", requeue the running rows from scratch."""
        try:
            with self._model_lock, torch.no_grad():
                load_weights(self.model, update.weights)
                self._scheduler.weight_version = update.version
                self._versioned = True
            if update.mode == "abort" and batch is not None:
                rows = [r for r in batch.rows if r.finish_reason is None and not r.future.done()]
                for req in rows:
                    req.token_ids, req.logprobs, req.versions = [], [], []
                    req.regenerated += 1
                self._regenerated += len(rows)
                with self._cond:
                    self._bridge.pending.extendleft(reversed(rows))
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
        if self._saved_training is None and isinstance(self._scheduler.fwd, ModuleForward):
            self._saved_training = self.model.training
            self.model.eval()
        yield

    def _restore_mode(self) -> None:
        if self._saved_training is not None:
            self.model.train(self._saved_training)
            self._saved_training = None
