r"""rlvr/Math-v0: math questions graded by ``rlvr.verifiers.math``, single-turn or with retries.

Answer formats (``answer_format``):

- ``"boxed"``: the answer is the content of the last ``\boxed{...}``; none -> ``no_answer``.
- ``"plain"``: the answer is the last number in the response (the CPU quickstart's tiny model
  answers ``"19"`` after ``"12+7="``); none -> ``no_answer``.
- ``"auto"``: ``rlvr.verifiers.math.verify`` with its own extraction chain (``\boxed{}``, ``####``,
  "The answer is", "Answer:", math spans, a bare expression, last number).

In every format, answers side by side (``\boxed{3} \boxed{4}``, "3 or 4") are one list, which
never equals a single gold answer (``rlvr.verifiers.math.find_boxed`` / ``find_numbers``), and the
extracted answer is graded by ``rlvr.verifiers.math.verify_answer`` (``score_response``): the
question's arithmetic copied back (``\boxed{733*94}``) scores 0 with reason "unevaluated".

Gold answers that are whole solutions (a ``\boxed{}`` or a GSM8K ``#### 42`` inside) are reduced
to their final answer with ``rlvr.verifiers.math.extract_answer`` first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from rlvr.envs.errors import EnvArgumentError
from rlvr.envs.tasks import SourceSpec, Task
from rlvr.envs.verifier_env import AttemptArgs, VerifierEnv
from rlvr.verifiers import Verdict
from rlvr.verifiers.math import (
    extract_answer,
    find_boxed,
    find_numbers,
    gold_answer,
    verify,
)

ANSWER_FORMATS = ("boxed", "plain", "auto")

FORMAT_DEFAULT = "<format default>"
"""Sentinel for ``system_prompt``: use the answer format's default system message."""

DEFAULT_SYSTEM_PROMPTS: dict[str, str | None] = {
    "boxed": "Solve the problem step by step. Put the final answer in \\boxed{}.",
    "plain": None,
    "auto": "Solve the problem. End your response with 'Answer: <final answer>'.",
}

DEFAULT_MATH_FEEDBACK = "Your answer {answer} is not correct. Please try again."


class MathEnv(VerifierEnv):
    r"""Math questions with a gold answer, graded by ``rlvr.verifiers.math``.

    Args:
        split: ``"train"`` or ``"test"`` (or a dataset split).
        source: task source or spec; default the offline arithmetic generator. Tasks need
            ``question`` and ``answer``.
        source_kwargs: arguments for the source (e.g. ``{"n_tasks": 500, "max_digits": 3}``
            for arithmetic, ``{"columns": {"question": "problem", "answer": "solution"}}`` for
            a dataset).
        answer_format: one of :data:`ANSWER_FORMATS`.
        system_prompt: the system message; default depends on ``answer_format`` (none for
            ``"plain"``); None for no system message.
        prompt_template: the user message, formatted with the task's fields.
        feedback_template: the retry message; ``{answer}`` is what was extracted (or "missing")
            and ``{reason}`` the verdict's reason.
        **attempts: :class:`~rlvr.envs.verifier_env.VerifierEnv`'s ``max_attempts`` (answers
            allowed; after a wrong one the model sees ``feedback_template``), ``attempt_decay``,
            ``attempt_rewards`` and ``format_reward`` (the reward span over the answer when it
            has the requested form: the ``\boxed{...}``, the last number, or the extracted
            answer).

    Step reward: 1.0 times the attempt weight when correct on the final turn, else 0.0.
    ``terminated`` is True when the answer is right or the last attempt was graded.
    """

    def __init__(
        self,
        split: str = "train",
        *,
        source: SourceSpec = "arithmetic",
        source_kwargs: Mapping[str, Any] | None = None,
        answer_format: str = "boxed",
        system_prompt: str | None = FORMAT_DEFAULT,
        prompt_template: str = "{question}",
        feedback_template: str = DEFAULT_MATH_FEEDBACK,
        **attempts: Unpack[AttemptArgs],
    ) -> None:
        if answer_format not in ANSWER_FORMATS:
            raise EnvArgumentError(
                f"answer_format must be one of {list(ANSWER_FORMATS)}, got {answer_format!r}"
            )
        self.answer_format = answer_format
        self.feedback_template = feedback_template
        if system_prompt == FORMAT_DEFAULT:
            system_prompt = DEFAULT_SYSTEM_PROMPTS[answer_format]
        super().__init__(
            source,
            self._verify,
            split=split,
            source_kwargs=source_kwargs,
            system_prompt=system_prompt,
            prompt_template=prompt_template,
            feedback=self._feedback,
            answer_span=self._answer_span,
            required_fields=("question", "answer"),
            **attempts,
        )

    def _verify(self, response: str, task: Task) -> Verdict:
        return score_response(response, str(task["answer"]), self.answer_format)

    def _answer_span(self, response: str) -> tuple[int, int] | None:
        if self.answer_format == "boxed":
            found = last_boxed(response)
        elif self.answer_format == "plain":
            found = last_number(response)
        else:
            extracted = extract_answer(response)
            start = response.rfind(extracted) if extracted else -1
            return (start, start + len(extracted)) if extracted and start >= 0 else None
        return (found[0], found[1]) if found else None

    def _feedback(self, verdict: Verdict, task: Task) -> str:
        answer = verdict.details.get("extracted") or verdict.details.get("answer") or "missing"
        return self.feedback_template.format(answer=answer, reason=verdict.reason)

    def _gold(self, task: Task) -> str:
        """The final answer inside the task's gold solution (what reports show)."""
        return gold_answer(str(task["answer"]))


def score_response(response: str, gold: str, answer_format: str) -> Verdict:
    r"""The verdict of one response in an answer format: the env's reward, on every path.

    The answer is taken in the format's way (the last ``\boxed{}``, the last number, or
    ``verify``'s extraction chain) and then graded by the same ``verify_answer``, so every
    format applies the same guards: answers side by side are a list, arithmetic copied from the
    question scores 0 ("unevaluated"), and no response raises.

    Returns:
        The ``Verdict``; ``details["format"]`` is the answer format.
    """
    gold = gold_answer(gold)
    verdict = verify(response, gold, answer_format=answer_format)
    return Verdict(verdict.score, verdict.passed, verdict.reason,
                   {**verdict.details, "format": answer_format})


def last_boxed(text: str) -> tuple[int, int, str] | None:
    r"""Find the last ``\boxed{...}`` (nested braces allowed), as ``verifiers.math.find_boxed``.

    Boxes side by side (``\boxed{3} or \boxed{4}``) are one answer, their contents joined by
    ", " (a list, which never equals a single gold answer).

    Returns:
        ``(start, end, content)`` with ``text[start:end]`` the box(es), or None.
    """
    found = find_boxed(text)
    return (found.start, found.end, found.answer) if found else None


def last_number(text: str) -> tuple[int, int, str] | None:
    """Find the last number (``-12``, ``1,234``, ``3.5``, ``7/2``), as ``find_numbers``.

    Numbers side by side ("3 or 4", "1, 2, 3") are one answer, joined by ", ".

    Returns:
        ``(start, end, number)`` or None when the text has no number.
    """
    found = find_numbers(text)
    return (found.start, found.end, found.answer) if found else None
