"""A reward from a model: a verifier that asks a judge (a reward model or an LLM) for a score.

For tasks without a checker. Two judges, one protocol (``Judge.score_batch``):

- ``RewardModelJudge``: a local Hugging Face sequence-classification model (a reward model).
  One forward scores a whole batch; the score is ``sigmoid(logit)`` for a one-logit head, else
  the softmax probability of ``label``.
- ``OpenAIJudge``: an LLM behind any OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM,
  SGLang, a hosted API), through the official ``openai`` client. The batch's requests run
  concurrently; the reply must contain ``SCORE: x`` with x in [0, 1] (the prompt asks for it).

``JudgeVerifier`` makes either a verifier ``(response, task) -> Verdict`` as ``envs``'
``VerifierEnv`` calls it: episodes call it concurrently (from the runner's env threads), and it
gathers the calls that arrive within ``max_wait_s`` into one ``score_batch`` of at most
``max_batch`` items, so a reward model runs one forward per batch instead of one per episode.

A judge that fails (an HTTP error, no reply within ``timeout_s``, a reply without a score) is not
the model's fault: the call raises ``JudgeError`` instead of returning a verdict, so the env's
``step`` raises and the episode ends with reason ``error``, left out of training (never scored
as a wrong answer). Bad *model output* still gets a verdict like any other verifier.

This module imports nothing of the project beyond ``verifiers``; ``torch``/``transformers`` and
``openai`` are imported only by the judge that needs them.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rlvr.verifiers.errors import InvalidArgumentError, VerifierError
from rlvr.verifiers.verdict import Verdict

__all__ = [
    "DEFAULT_JUDGE_PROMPT",
    "Judge",
    "JudgeError",
    "JudgeItem",
    "JudgeVerifier",
    "OpenAIJudge",
    "RewardModelJudge",
    "parse_score",
]


class JudgeError(VerifierError):
    """The judge could not score (unreachable, timed out, unreadable reply, a crash).

    Raised by ``JudgeVerifier.__call__``: the episode then ends with reason ``error``.
    """


@dataclass(frozen=True)
class JudgeItem:
    """One thing to judge.

    Attributes:
        question: the task's prompt (what the model was asked).
        response: the model's answer.
        reference: a reference answer for the judge, or None.
    """

    question: str
    response: str
    reference: str | None = None


class Judge(Protocol):
    """Scores a batch of items, each in [0, 1]; raises (anything) when it cannot."""

    def score_batch(self, items: Sequence[JudgeItem]) -> list[float]:
        """One score in [0, 1] per item, in order."""
        ...


# ----------------------------------------------------------------------------- reward model
class RewardModelJudge:
    """A local HF sequence-classification model as the judge (a reward model).

    Args:
        path: a local directory loadable by ``AutoModelForSequenceClassification``.
        template: how an item becomes the classifier's text (fields ``question``,
            ``response``, ``reference``); a tokenizer with a chat template may be better
            served by rendering outside and passing ``{response}`` alone.
        label: for a head of several logits, the class whose probability is the score
            (default 1, "good"); ignored for a one-logit head (``sigmoid``).
        max_length: texts are truncated to this many tokens.
        device: ``cpu`` or ``cuda``.

    Raises:
        InvalidArgumentError: ``path`` is not a directory, or ``label`` is out of range.
    """

    def __init__(self, path: str | Path, *, template: str = "{question}\n{response}",
                 label: int = 1, max_length: int = 512, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if not Path(path).is_dir():
            raise InvalidArgumentError(f"reward model directory {path} does not exist")
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(str(path)).to(device)
        self.model.eval()
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        num_labels = int(self.model.config.num_labels)
        if num_labels > 1 and not 0 <= label < num_labels:
            raise InvalidArgumentError(f"label must be in [0, {num_labels}); got {label}")
        self.template, self.label, self.max_length = template, label, max_length
        self.device = device
        self._torch = torch
        self._lock = threading.Lock()  # one forward at a time

    def score_batch(self, items: Sequence[JudgeItem]) -> list[float]:
        """Score ``items`` in one padded forward."""
        if not items:
            return []
        texts = [self.template.format(question=i.question, response=i.response,
                                      reference=i.reference or "") for i in items]
        torch = self._torch
        with self._lock, torch.no_grad():
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                                 max_length=self.max_length).to(self.device)
            logits = self.model(**enc).logits.float()
        if logits.shape[-1] == 1:
            scores = torch.sigmoid(logits[:, 0])
        else:
            scores = torch.softmax(logits, dim=-1)[:, self.label]
        return [float(s) for s in scores]


# ----------------------------------------------------------------------------- LLM judge
DEFAULT_JUDGE_PROMPT = (
    "You grade answers. Question:\n{question}\n\nAnswer to grade:\n{response}\n\n"
    "{reference_block}"
    "How good is the answer? Reply with one line 'SCORE: x' where x is a number from 0 "
    "(wrong or useless) to 1 (fully correct)."
)
_SCORE = re.compile(r"SCORE\s*[:=]\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", re.IGNORECASE)


def parse_score(reply: str) -> float:
    """The last ``SCORE: x`` in a judge's reply, x in [0, 1].

    Raises:
        JudgeError: no score, or one outside [0, 1].
    """
    found = _SCORE.findall(reply or "")
    if not found:
        raise JudgeError(f"the judge's reply has no 'SCORE: x': {reply[:200]!r}")
    value = float(found[-1])
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise JudgeError(f"the judge's score {value} is outside [0, 1]")
    return value


class OpenAIJudge:
    """An LLM judge behind an OpenAI-compatible chat-completions endpoint.

    Args:
        base_url: e.g. ``http://localhost:30000/v1``.
        model: the model name the server expects.
        api_key: sent as the bearer token (local servers ignore it).
        prompt: the user message, formatted with ``question``, ``response``, ``reference`` and
            ``reference_block`` (the reference answer under a heading, or empty).
        timeout_s: per-request timeout (the client does not retry).
        max_concurrency: requests in flight at once within a batch.
        max_tokens: the reply's budget.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str = "EMPTY",
                 prompt: str = DEFAULT_JUDGE_PROMPT, timeout_s: float = 30.0,
                 max_concurrency: int = 8, max_tokens: int = 32) -> None:
        from openai import OpenAI

        if timeout_s <= 0 or max_concurrency < 1:
            raise InvalidArgumentError(
                f"timeout_s must be > 0 and max_concurrency >= 1; got {timeout_s}, "
                f"{max_concurrency}")
        self.client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s,
                             max_retries=0)
        self.model, self.prompt, self.max_tokens = model, prompt, max_tokens
        self.pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="judge-http")

    def _one(self, item: JudgeItem) -> float:
        block = f"Reference answer:\n{item.reference}\n\n" if item.reference else ""
        content = self.prompt.format(question=item.question, response=item.response,
                                     reference=item.reference or "", reference_block=block)
        reply = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": content}],
            temperature=0.0, max_tokens=self.max_tokens)
        return parse_score(reply.choices[0].message.content or "")

    def score_batch(self, items: Sequence[JudgeItem]) -> list[float]:
        """Score ``items`` with concurrent requests; the first failure raises."""
        return list(self.pool.map(self._one, items))

    def close(self) -> None:
        """Stop the request threads and close the HTTP client."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


# ----------------------------------------------------------------------------- the verifier
class JudgeVerifier:
    """``(response, task) -> Verdict`` from a judge, batching concurrent calls.

    Args:
        judge: a ``Judge`` (``RewardModelJudge``, ``OpenAIJudge`` or your own).
        question_field: the task field holding the question (``question``).
        reference_field: a task field holding a reference answer for the judge, or None.
        threshold: ``passed`` is ``score >= threshold``.
        max_batch: the most items in one ``score_batch``.
        max_wait_s: how long the first call of a batch waits for others to join it.
        timeout_s: how long a call waits for its score before it raises ``JudgeError``.

    The verdict: ``score`` the judge's score, ``passed`` at the threshold, ``reason``
    ``correct`` or ``wrong_answer``, ``details`` ``{"judge_score": score}``.
    """

    def __init__(self, judge: Judge, *, question_field: str = "question",
                 reference_field: str | None = None, threshold: float = 0.5,
                 max_batch: int = 32, max_wait_s: float = 0.01, timeout_s: float = 60.0) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise InvalidArgumentError(f"threshold must be in [0, 1]; got {threshold}")
        if max_batch < 1 or max_wait_s < 0 or timeout_s <= 0:
            raise InvalidArgumentError(
                f"max_batch must be >= 1, max_wait_s >= 0 and timeout_s > 0; got {max_batch}, "
                f"{max_wait_s}, {timeout_s}")
        self.judge = judge
        self.question_field, self.reference_field = question_field, reference_field
        self.threshold, self.max_batch = threshold, max_batch
        self.max_wait_s, self.timeout_s = max_wait_s, timeout_s
        self._cond = threading.Condition()
        self._queue: list[tuple[JudgeItem, Future[float]]] = []
        self._closed = False
        self._worker = threading.Thread(target=self._serve, name="judge-batcher", daemon=True)
        self._worker.start()
        self.batches = 0  # score_batch calls so far (for tests and logs)

    def __call__(self, response: str, task: Mapping[str, Any]) -> Verdict:
        """Judge one response; blocks until its batch is scored.

        Raises:
            JudgeError: the judge failed or did not answer within ``timeout_s``.
            InvalidArgumentError: the task lacks ``question_field`` (a config mistake).
        """
        if self.question_field not in task:
            raise InvalidArgumentError(
                f"the task has no {self.question_field!r} field for the judge; it has "
                f"{sorted(task)}")
        reference = task.get(self.reference_field) if self.reference_field else None
        item = JudgeItem(str(task[self.question_field]), response,
                         None if reference is None else str(reference))
        future: Future[float] = Future()
        with self._cond:
            if self._closed:
                raise JudgeError("the judge verifier is closed")
            self._queue.append((item, future))
            self._cond.notify_all()
        try:
            score = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            future.cancel()
            raise JudgeError(f"the judge did not answer within {self.timeout_s:g} s") from None
        except JudgeError:
            raise
        except Exception as exc:  # the judge's own failure (HTTP, CUDA, ...), not the model's
            raise JudgeError(f"the judge failed: {type(exc).__name__}: {exc}") from exc
        if not (math.isfinite(score) and 0.0 <= score <= 1.0):
            raise JudgeError(f"the judge returned {score!r}, not a score in [0, 1]")
        passed = score >= self.threshold
        return Verdict(score=score, passed=passed, reason="correct" if passed else "wrong_answer",
                       details={"judge_score": score})

    def _take_batch(self) -> list[tuple[JudgeItem, Future[float]]] | None:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed and not self._queue:
                return None
            deadline = time.monotonic() + self.max_wait_s
            while len(self._queue) < self.max_batch and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
            return batch

    def _serve(self) -> None:
        while (batch := self._take_batch()) is not None:
            live = [(item, f) for item, f in batch if f.set_running_or_notify_cancel()]
            if not live:
                continue
            try:
                scores = self.judge.score_batch([item for item, _ in live])
                if len(scores) != len(live):
                    raise JudgeError(f"the judge returned {len(scores)} scores for "
                                     f"{len(live)} items")
            except Exception as exc:  # every waiting call gets the failure
                for _, f in live:
                    f.set_exception(exc)
                continue
            finally:
                self.batches += 1
            for (_, f), score in zip(live, scores, strict=True):
                f.set_result(float(score))

    def close(self) -> None:
        """Stop the batching thread (pending calls are still answered); idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._worker.join(timeout=5)
