"""``verify``, ``verify_answer`` and ``is_equivalent``: the public entry points of the verifier.

A pair of answers goes through, in order, stopping at the first decision:

0. two plain integers (``INTEGER``, e.g. "171" and "-07"): compared as integers, the decision
   the steps below come to for them, ~10x sooner (most arithmetic tasks' answers);
1. size guard (``MAX_ANSWER_CHARS``) and normalisation (``normalize.py``);
2. identical normalised strings -> equal;
3. multiple choice: when the gold answer is a letter A-J, the prediction must name that letter
   (a hedge such as "(C) or (D)" names none);
4. words (``word_answer``: ``Monday``, ``No``) compare as words, and a gold answer that does not
   parse compares as its text, signs and separators included ("3:4" is not "34");
5. parse both (cached) and compare structurally with the pure-Python scalar test
   (``compare.py`` + ``numeric.py``, close calls confirmed by ``precise.py``): settles nearly
   every pair in well under a millisecond;
6. otherwise sympy in a worker process under a hard wall-clock limit (``worker.py``).

``verify`` and ``verify_answer`` (the reward paths) first refuse arithmetic left undone against a
plain-number gold (``unevaluated.py``); ``is_equivalent``/``grade`` are mathematical equality.

The public functions send the whole decision (extraction included) to a worker process
(``worker.py``) that is killed at the deadline ("timeout"); ``IN_WORKER`` marks that process.

Reasons: "correct", "wrong_answer", "no_answer" (nothing extracted), "ambiguous" (several different
answers, or a hedge), "unevaluated" (the question restated: ``unevaluated.py``), "parse_error" (the
prediction is not a readable answer, a unit or word the gold does not have, or is too large to
evaluate), "timeout" (the limit was hit, or the worker's memory limit). Nothing a model writes
makes these functions raise: an unexpected error inside is a "parse_error" (a catch-all at each
entry point).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any

from rlvr.verifiers.errors import AnswerParseError, InvalidArgumentError, VerifierTimeout
from rlvr.verifiers.math.choice import choice_hedge, choice_letter
from rlvr.verifiers.math.compare import answers_equal
from rlvr.verifiers.math.extract import ANSWER_FORMATS, extract, extract_answer, find_boxed
from rlvr.verifiers.math.normalize import MAX_ANSWER_CHARS, NormalizedAnswer, normalize_answer
from rlvr.verifiers.math.numeric import check_size, scalar_equal
from rlvr.verifiers.math.parse import parse_answer
from rlvr.verifiers.math.tree import Answer, Bracketed, Matrix, SetOf, UnionOf
from rlvr.verifiers.math.unevaluated import (
    is_plain_number,
    restates_arithmetic,
    restates_question,
)
from rlvr.verifiers.math.worker import default_pool
from rlvr.verifiers.verdict import Verdict

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Grade",
    "gold_answer",
    "grade",
    "is_equivalent",
    "verify",
    "verify_answer",
    "word_answer",
]

DEFAULT_TIMEOUT_S = 5.0
"""Default wall-clock limit of one check, in seconds."""

MAX_RESPONSE_CHARS = 500_000
"""Responses (and answers) longer than this are refused unread ("parse_error")."""

IN_WORKER = False
"""True inside a worker process (``worker_main.serve``): decisions run here, not in a worker."""


INTEGER = re.compile(r"-?[0-9]{1,30}")
"""A plain decimal integer as ``grade``'s first step reads it (ASCII digits, no sign but "-",
no spaces; at most 30 digits, where it was checked against the full path)."""


@dataclass(frozen=True)
class Grade:
    """The outcome of comparing two answer strings.

    Attributes:
        equal: whether they state the same answer.
        reason: "correct", "wrong_answer", "parse_error" or "timeout".
        method: what decided: "string", "choice", "fast", "sympy" or "guard".
        message: why a parse error or timeout happened ("" otherwise).
    """

    equal: bool
    reason: str
    method: str
    message: str = ""


@dataclass(frozen=True)
class _Prepared:
    normalized: NormalizedAnswer
    answer: Answer | None
    error: str


@functools.lru_cache(maxsize=4096)
def _prepare(text: str) -> _Prepared:
    """Normalise and parse once per distinct string (gold answers repeat across a group)."""
    normalized = normalize_answer(text)
    try:
        return _Prepared(normalized, parse_answer(normalized.text), "")
    except AnswerParseError as err:
        return _Prepared(normalized, None, str(err))
    except RecursionError:
        return _Prepared(normalized, None, "answer nested too deeply")


def _canonical(text: str) -> str:
    return "".join(text.split())


_WORDS = re.compile(r"[A-Za-z]+(?:[ '-][A-Za-z]+)*")
_WORD_SHAPE = re.compile(r"[A-Za-z]{3}|[A-Z][a-z]")


def word_answer(text: str) -> str | None:
    """The words of an answer that is words (``Monday``, ``No``, ``east``), lower-cased, or None.

    Letters only, with a run of three letters or a capitalised pair; shorter lower-case runs
    (``xy``) stay products of variables.
    """
    if not _WORDS.fullmatch(text) or not _WORD_SHAPE.search(text):
        return None
    return " ".join(text.lower().split())


def grade(pred: str, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Grade:
    r"""Compare a predicted answer with the gold answer (both already extracted).

    Args:
        pred: the model's answer, e.g. ``"\frac{1}{2}"``.
        gold: the reference answer (a whole solution with ``\boxed{}``/``####`` is reduced to its
            final answer first).
        timeout_s: hard wall-clock limit for the sympy stage.

    Returns:
        A ``Grade``; never raises for any ``pred`` string.

    Raises:
        InvalidArgumentError: when an argument has the wrong type or ``timeout_s <= 0``.
    """
    _check_arguments(pred, gold, timeout_s)
    try:
        reduced = gold_answer(gold)
        if INTEGER.fullmatch(pred) and INTEGER.fullmatch(reduced):
            return _integer_grade(pred, reduced)
    except Exception as err:  # noqa: BLE001 - the contract: a model's answer never raises
        return Grade(False, "parse_error", "guard", f"unreadable answer ({type(err).__name__})")
    if len(pred) > MAX_RESPONSE_CHARS:
        return Grade(False, "parse_error", "guard", _too_long(pred))
    if IN_WORKER:
        return _grade_here(pred, gold, timeout_s)
    try:
        result = _remote("grade", {"pred": pred, "gold": gold, "timeout_s": timeout_s}, timeout_s)
    except VerifierTimeout as err:
        return Grade(False, "timeout", "deadline", str(err))
    return Grade(**result)


def _grade_here(pred: str, gold: str, timeout_s: float) -> Grade:
    """``grade`` in this process (the worker's side)."""
    try:
        gold = gold_answer(gold)
        if INTEGER.fullmatch(pred) and INTEGER.fullmatch(gold):
            return _integer_grade(pred, gold)
        return _full_grade(pred, gold, timeout_s)
    except Exception as err:  # noqa: BLE001 - the contract: a model's answer never raises
        return Grade(False, "parse_error", "guard", f"unreadable answer ({type(err).__name__})")


def _too_long(text: str) -> str:
    return f"{len(text)} characters; at most {MAX_RESPONSE_CHARS} are read"


def _remote(op: str, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run one decision in a worker process, killed at the deadline.

    Raises:
        VerifierTimeout: the deadline passed, or the worker died (memory limit).
    """
    response = default_pool().request({"op": op, **payload}, timeout_s)
    if not response.get("ok"):
        if response.get("error") == "timeout":
            raise VerifierTimeout(str(response.get("message", "worker limit")))
        raise AnswerParseError(str(response.get("message", "worker error")))
    result: dict[str, Any] = response["result"]
    return result


def decide_here(op: str, request: dict[str, Any]) -> dict[str, Any]:
    """The worker's side of ``verify``/``verify_answer``/``grade``: the decision as a dict."""
    timeout_s = float(request["timeout_s"])
    if op == "grade":
        return dataclasses.asdict(_grade_here(request["pred"], request["gold"], timeout_s))
    if op == "verify":
        verdict = _verify_here(
            request["response"], request["gold"], timeout_s, bool(request["fallback"]),
            str(request.get("format", "auto")),
        )
    else:
        verdict = _verify_answer_here(request["answer"], request["gold"], timeout_s)
    return {
        "score": verdict.score,
        "passed": verdict.passed,
        "reason": verdict.reason,
        "details": dict(verdict.details),
    }


def sympy_compare_here(payload: dict[str, Any]) -> dict[str, Any]:
    """The sympy stage in this process (the worker's side; its deadline is the whole request)."""
    try:
        from rlvr.verifiers.math.sympy_backend import compare_texts

        equal = compare_texts(
            payload["pred"], payload["gold"], payload["pred_percent"], payload["gold_percent"]
        )
    except Exception as err:  # noqa: BLE001 - any sympy failure is a verdict, not a crash
        return failure_response(err)
    return {"ok": True, "equal": equal}


def failure_response(err: Exception) -> dict[str, Any]:
    """The worker's answer for an exception of the sympy stage or a request: a verdict.

    A parse error (``AnswerParseError``, or any other exception) reads as "parse_error"; running
    out of memory or stack reads as "timeout", as the deadline would.
    """
    if isinstance(err, AnswerParseError):
        return {"ok": False, "error": "parse_error", "message": str(err)}
    if isinstance(err, (MemoryError, RecursionError)):
        return {"ok": False, "error": "timeout", "message": type(err).__name__}
    return {"ok": False, "error": "parse_error", "message": f"{type(err).__name__}: {err}"}


def clear_cache() -> None:
    """Forget parsed answers (here, and in idle workers when called outside one)."""
    _prepare.cache_clear()
    if not IN_WORKER:
        default_pool().broadcast_idle({"op": "clear_cache"}, 5.0)


def _integer_grade(pred: str, gold: str) -> Grade:
    """``grade`` of two ``INTEGER`` strings (identical strings decide as "string")."""
    if pred == gold:
        return Grade(True, "correct", "string")
    equal = int(pred) == int(gold)
    return Grade(equal, "correct" if equal else "wrong_answer", "fast")


def _full_grade(pred: str, gold: str, timeout_s: float) -> Grade:
    """``grade`` from step 1 on (``gold`` already reduced to its answer)."""
    try:
        pred_prepared = _prepare(pred)
    except AnswerParseError as err:
        return Grade(False, "parse_error", "guard", str(err))
    gold_prepared = _prepare(gold)
    pred_norm, gold_norm = pred_prepared.normalized, gold_prepared.normalized
    gold_letter = choice_letter(gold_norm.text)
    if gold_letter is not None:
        if choice_hedge(pred_norm.text):
            return Grade(False, "ambiguous", "choice", "the answer names two choices")
        equal = choice_letter(pred_norm.text, lenient=True) == gold_letter
        return Grade(equal, "correct" if equal else "wrong_answer", "choice")
    foreign = [u for u in pred_norm.units if u not in gold_norm.units and u != "modulus"]
    if foreign:
        message = f"{foreign[0]!r} beside the value, which the gold answer does not have"
        return Grade(False, "parse_error", "guard", message)
    if _canonical(pred_norm.text) == _canonical(gold_norm.text) != "":
        return Grade(True, "correct", "string")
    gold_words = word_answer(gold_norm.text)
    if gold_prepared.answer is None or gold_words is not None:
        if gold_words is not None:  # words compare as words, never as products of letters
            equal = word_answer(pred_norm.text) == gold_words
        else:  # signs and separators count: "3:4" is not "34"
            equal = _canonical(pred_norm.text).lower() == _canonical(gold_norm.text).lower()
        return Grade(equal, "correct" if equal else "wrong_answer", "string")
    if pred_prepared.answer is None:
        return Grade(False, "parse_error", "fast", pred_prepared.error)
    word = _stray_word(pred_norm.text, gold_norm.text)
    if word:
        return Grade(False, "parse_error", "guard", f"the word {word!r} is not part of an answer")
    if _several(pred_prepared.answer) and not _collection(gold_prepared.answer):
        return _one_of_several(pred_prepared, gold_prepared, timeout_s)
    return _compare(pred_prepared, gold_prepared, timeout_s)


_ENVIRONMENT = re.compile(r"\\(?:begin|end|operatorname|mathbb)\s*\{[^{}]*\}(?:\s*\{[^{}]*\})?")
_STRAY_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_FUNCTION_WORDS = frozenset(
    "sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log exp gcd lcm max min sqrt "
    "mod".split()
)


def _stray_word(pred: str, gold: str) -> str:
    """A run of three or more letters in ``pred`` that is neither a function nor in ``gold``."""
    for match in _STRAY_WORD.finditer(_ENVIRONMENT.sub(" ", pred)):
        word = match.group(0)
        if word.lower() not in _FUNCTION_WORDS and word not in gold:
            return word
    return ""


def _several(answer: Answer | None) -> bool:
    r"""Whether an answer is several items side by side (a bare list, "or", ``\pm``)."""
    return isinstance(answer, SetOf) and not answer.braces and len(answer.items) > 1


def _collection(answer: Answer | None) -> bool:
    """Whether a (gold) answer holds several items: a list, set, tuple, interval, union, matrix."""
    if isinstance(answer, SetOf):
        return len(answer.items) != 1
    return isinstance(answer, (Bracketed, UnionOf, Matrix))


def _one_of_several(pred: _Prepared, gold: _Prepared, timeout_s: float) -> Grade:
    """Several answers against one: the same value written twice is one answer, else a hedge."""
    assert isinstance(pred.answer, SetOf)  # noqa: S101 - checked by the caller
    for item in pred.answer.items:
        single = _Prepared(pred.normalized, item, "")
        result = _compare(single, gold, timeout_s)
        if not result.equal:
            if result.reason in ("timeout", "parse_error"):
                return result
            return Grade(False, "ambiguous", result.method, "several different answers")
    return Grade(True, "correct", "fast")


def _compare(pred: _Prepared, gold: _Prepared, timeout_s: float) -> Grade:
    if pred.answer is None or gold.answer is None:  # pragma: no cover - checked by the caller
        return Grade(False, "parse_error", "fast")
    try:
        fast = answers_equal(
            pred.answer,
            gold.answer,
            scalar_equal,
            pred_percent=pred.normalized.percent,
            gold_percent=gold.normalized.percent,
        )
    except RecursionError:
        return Grade(False, "parse_error", "fast", "answer nested too deeply")
    if fast is not None:
        return Grade(fast, "correct" if fast else "wrong_answer", "fast")
    try:
        for prepared in (pred, gold):
            _check_answer_size(prepared.answer)
    except AnswerParseError as err:
        return Grade(False, "parse_error", "guard", str(err))
    payload = {
        "op": "compare",
        "pred": pred.normalized.text,
        "gold": gold.normalized.text,
        "pred_percent": pred.normalized.percent,
        "gold_percent": gold.normalized.percent,
    }
    try:
        response = sympy_compare_here(payload) if IN_WORKER else default_pool().request(
            payload, timeout_s
        )
    except VerifierTimeout as err:
        return Grade(False, "timeout", "sympy", str(err))
    if not response.get("ok"):
        reason = str(response.get("error", "parse_error"))
        return Grade(False, reason, "sympy", str(response.get("message", "")))
    equal = bool(response.get("equal"))
    return Grade(equal, "correct" if equal else "wrong_answer", "sympy")


def _check_answer_size(answer: Answer | None) -> None:
    """Apply ``check_size`` to every expression of an answer (before sympy sees it)."""
    stack: list[object] = [answer]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple) and item and isinstance(item[0], str):
            check_size(item)
        elif isinstance(item, tuple):
            stack.extend(item)
        elif dataclasses.is_dataclass(item):
            stack.extend(vars(item).values())


def _check_arguments(pred: object, gold: object, timeout_s: float) -> None:
    if not isinstance(pred, str):
        raise InvalidArgumentError(f"pred/response must be a str, got {type(pred).__name__}")
    if not isinstance(gold, str):
        raise InvalidArgumentError(f"gold must be a str, got {type(gold).__name__}")
    if not timeout_s > 0:
        raise InvalidArgumentError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")


def gold_answer(gold: str) -> str:
    r"""The final answer of a gold string that is a whole solution (``\boxed{}``, ``####``).

    Else the gold itself; stripped either way. The one reading of a gold: the grader compares
    with it and a scripted teacher (``envs``) writes it.
    """
    if "\\boxed" in gold or "\\fbox" in gold or "####" in gold:
        boxed = find_boxed(gold)  # a gold solution's last box (list) is its answer
        if boxed is not None:
            return boxed.answer.strip()
        return (extract_answer(gold, last_number_fallback=False) or gold).strip()
    return gold.strip()


def _is_written_as_gold(response: str, gold: str) -> bool:
    r"""Whether the whole response is the gold answer as written (e.g. ``	ext{Monday}``)."""
    if len(response) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    written = _canonical(normalize_answer(response).text)
    return written != "" and written == _canonical(_prepare(gold).normalized.text)


_BASED_NUMERAL = re.compile(r"\d\s*_\s*\{?\s*\d")


def _unevaluated(answer: str, gold: str) -> Grade | None:
    """The "unevaluated" grade when ``answer`` restates the question (``unevaluated.py``).

    None when it does not, or when the gold answer is not one constant expression.
    """
    try:
        gold = gold_answer(gold)
        if INTEGER.fullmatch(answer) or len(answer) > MAX_ANSWER_CHARS:
            return None
        gold_prepared, answer_prepared = _prepare(gold), _prepare(answer)
        gold_parsed, answer_parsed = gold_prepared.answer, answer_prepared.answer
        if gold_parsed is None or answer_parsed is None:
            return None
        based = _BASED_NUMERAL.search(answer_prepared.normalized.text)
        if based and not _BASED_NUMERAL.search(gold_prepared.normalized.text):
            return Grade(False, "unevaluated", "guard", "a numeral in another base")
        if restates_question(answer_parsed, gold_parsed) or (
            is_plain_number(gold_parsed) and restates_arithmetic(answer_parsed)
        ):
            return Grade(False, "unevaluated", "guard", "left unevaluated")
    except Exception:  # noqa: BLE001 - grade() reports what cannot be read
        return None
    return None


def is_equivalent(pred: str, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether the answer ``pred`` is mathematically the same as ``gold``.

    Both are answers, not whole responses (use ``verify`` for those). A timeout or an unreadable
    ``pred`` counts as not equivalent.
    """
    return grade(pred, gold, timeout_s=timeout_s).equal


def verify(
    response: str,
    gold: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    last_number_fallback: bool = True,
    answer_format: str = "auto",
) -> Verdict:
    r"""Score a model response against the gold answer.

    Args:
        response: the full model output; the answer is found by ``extract_answer`` (a response
            that is the gold answer as written, e.g. ``\text{Monday}``, is that answer).
        gold: the reference answer; a gold string that itself contains ``\boxed{}`` or ``####``
            (a full reference solution) has its answer extracted first.
        timeout_s: hard wall-clock limit of the sympy stage, in seconds (default 5).
        last_number_fallback: passed to ``extract_answer`` for the response (default True).
        answer_format: where the answer is read: "auto" (the whole extraction chain), "boxed"
            (boxes only) or "plain" (the last number only), as ``extract``.

    Returns:
        ``Verdict(score=1.0 or 0.0, passed, reason, details)`` with reason "correct",
        "wrong_answer", "no_answer", "unevaluated" (arithmetic left undone against a
        plain-number gold, ``rlvr.verifiers.math.unevaluated``), "parse_error" or "timeout";
        ``details`` has ``extracted`` (the answer found, or None), ``gold`` (the gold answer
        compared against), ``method`` (what decided) and, for errors, ``message``.
        Never raises because of the response's content.

    Raises:
        InvalidArgumentError: when an argument has the wrong type or ``timeout_s <= 0``.
    """
    _check_arguments(response, gold, timeout_s)
    if answer_format not in ANSWER_FORMATS:
        raise InvalidArgumentError(
            f"answer_format must be one of {list(ANSWER_FORMATS)}, got {answer_format!r}"
        )
    if IN_WORKER:
        return _verify_here(response, gold, timeout_s, last_number_fallback, answer_format)
    if len(response) > MAX_RESPONSE_CHARS:
        return _refused(gold, None, "parse_error", "guard", _too_long(response))
    payload = {"response": response, "gold": gold, "timeout_s": timeout_s,
               "fallback": last_number_fallback, "format": answer_format}
    return _remote_verdict("verify", payload, gold, None)


def _refused(gold: str, extracted: str | None, reason: str, method: str, message: str) -> Verdict:
    try:
        reduced = gold_answer(gold)
    except Exception:  # noqa: BLE001 - details only
        reduced = gold
    details: dict[str, object] = {"extracted": extracted, "gold": reduced, "method": method}
    if message:
        details["message"] = message
    return Verdict(0.0, False, reason, details)


def _remote_verdict(
    op: str, payload: dict[str, Any], gold: str, extracted: str | None
) -> Verdict:
    try:
        result = _remote(op, payload, float(payload["timeout_s"]))
    except VerifierTimeout as err:
        return _refused(gold, extracted, "timeout", "deadline", str(err))
    except AnswerParseError as err:
        return _refused(gold, extracted, "parse_error", "guard", str(err))
    return Verdict(result["score"], result["passed"], result["reason"], result["details"])


def _verify_here(
    response: str,
    gold: str,
    timeout_s: float,
    last_number_fallback: bool,
    answer_format: str = "auto",
) -> Verdict:
    """``verify`` in this process (the worker's side)."""
    try:
        gold = gold_answer(gold)
        if answer_format == "auto" and _is_written_as_gold(response, gold):
            extracted: str | None = response.strip()
        else:
            found = extract(
                response, last_number_fallback=last_number_fallback, answer_format=answer_format
            )
            if found.reason in ("ambiguous", "unreadable"):
                message = ("several different answers, or a hedge beside the answer"
                           if found.reason == "ambiguous" else
                           "the last number is part of an expression")
                details = {"extracted": None, "gold": gold, "method": "extract",
                           "message": message}
                reason = "ambiguous" if found.reason == "ambiguous" else "parse_error"
                return Verdict(0.0, False, reason, details)
            extracted = found.answer
    except Exception as err:  # noqa: BLE001 - the contract: a response never raises
        message = f"unreadable response ({type(err).__name__})"
        details = {"extracted": None, "gold": gold, "method": "guard", "message": message}
        return Verdict(0.0, False, "parse_error", details)
    return _verify_answer_here(extracted, gold, timeout_s)


def verify_answer(
    answer: str | None, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Verdict:
    """Score an answer already extracted from a response: ``verify`` without the extraction.

    For envs that take the answer their own way (``find_boxed``, ``find_numbers``); the same
    guards apply, including the one against restated arithmetic.

    Args:
        answer: the extracted answer, or None when the response had none ("no_answer").
        gold: the reference answer (a whole solution is reduced to its final answer).
        timeout_s: hard wall-clock limit of the sympy stage, in seconds.

    Returns:
        The ``Verdict`` that ``verify`` would give for a response with this answer.
    """
    if answer is not None and not isinstance(answer, str):
        raise InvalidArgumentError(f"answer must be a str or None, got {type(answer).__name__}")
    _check_arguments("", gold, timeout_s)
    if answer is None:
        return _refused(gold, None, "no_answer", "extract", "")
    if INTEGER.fullmatch(answer) and INTEGER.fullmatch(gold.strip()):
        return _verify_answer_here(answer, gold, timeout_s)  # two integers: nothing can stall
    if IN_WORKER:
        return _verify_answer_here(answer, gold, timeout_s)
    if len(answer) > MAX_RESPONSE_CHARS:
        return _refused(gold, None, "parse_error", "guard", _too_long(answer))
    payload = {"answer": answer, "gold": gold, "timeout_s": timeout_s}
    return _remote_verdict("verify_answer", payload, gold, answer)


def _verify_answer_here(answer: str | None, gold: str, timeout_s: float) -> Verdict:
    """``verify_answer`` in this process (the worker's side)."""
    details: dict[str, object] = {"extracted": answer, "gold": gold_answer(gold)}
    if answer is None:
        return Verdict(0.0, False, "no_answer", {**details, "method": "extract"})
    result = _unevaluated(answer, gold) or _grade_here(answer, gold, timeout_s)
    details["method"] = result.method
    if result.message:
        details["message"] = result.message
    return Verdict(1.0 if result.equal else 0.0, result.equal, result.reason, details)
