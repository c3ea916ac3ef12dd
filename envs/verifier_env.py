r"""VerifierEnv: answer, get verified, maybe retry. Give it a task source and a verifier.

The model answers; a verifier ``(response, task) -> Verdict`` grades the answer. With
``max_attempts > 1`` a failed answer gets feedback and another try. The episode's reward comes on
its last turn: the final verdict's score times the weight of that attempt (``attempt_decay**k``
for the k-th retry, or ``attempt_rewards[k]``); earlier turns get 0. An optional format reward is
a reward span over the answer (e.g. the ``\boxed{}``), paid whenever the answer has the
requested form, right or wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from rlvr.envs.errors import EnvArgumentError
from rlvr.envs.task_env import StepResult, TaskEnv
from rlvr.envs.tasks import SourceSpec, Task
from rlvr.verifiers import Verdict

Verifier = Callable[[str, Task], Verdict]
"""``verifier(response, task) -> Verdict``; must not raise on bad model output."""

Feedback = Callable[[Verdict, Task], str]
"""``feedback(verdict, task) -> str``: the user message after a failed attempt."""

AnswerSpan = Callable[[str], "tuple[int, int] | None"]
"""``answer_span(response) -> (start, end) | None``: where the formatted answer sits."""

DEFAULT_FEEDBACK = "That is not correct ({reason}). Please try again."


class AttemptArgs(TypedDict, total=False):
    """The attempt and format-reward arguments of ``VerifierEnv`` (see its Args).

    A subclass takes them as ``**attempts: Unpack[AttemptArgs]`` and passes them on unchanged;
    ``rlvr.envs.make`` reads their names from here.
    """

    max_attempts: int
    attempt_decay: float
    attempt_rewards: Sequence[float] | None
    format_reward: float


class VerifierEnv(TaskEnv):
    """A single- or multi-attempt environment graded by a verifier function.

    Args:
        source: a task source or a spec for :func:`rlvr.envs.tasks.resolve_source`.
        verifier: ``(response, task) -> Verdict``.
        split: the split to build when ``source`` is a spec.
        source_kwargs: extra arguments for the source built from a spec.
        system_prompt: the system message, or None.
        prompt_template: the user message, formatted with the task's fields.
        max_attempts: answers allowed (1 = single turn). After a failed attempt the user
            message from ``feedback`` asks for another.
        attempt_decay: reward weight of attempt k (0-based) is ``attempt_decay**k``, in (0, 1].
        attempt_rewards: explicit weights per attempt (length ``max_attempts``, each in [0, 1]);
            overrides ``attempt_decay``.
        feedback: ``(verdict, task) -> str``; default: :data:`DEFAULT_FEEDBACK` with the
            verdict's reason.
        format_reward: value of the reward span over the answer (0 = no span).
        answer_span: finds the formatted answer in a response (needed when
            ``format_reward > 0``).
        required_fields: task fields this env reads.
        json_fields: task fields a dataset may store as JSON strings.

    Rewards: each step's reward is in [0, 1]; the reward span adds ``format_reward`` at most.
    """

    def __init__(
        self,
        source: SourceSpec,
        verifier: Verifier,
        *,
        split: str = "train",
        source_kwargs: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        prompt_template: str = "{question}",
        max_attempts: int = 1,
        attempt_decay: float = 1.0,
        attempt_rewards: Sequence[float] | None = None,
        feedback: Feedback | None = None,
        format_reward: float = 0.0,
        answer_span: AnswerSpan | None = None,
        required_fields: Sequence[str] = ("question",),
        json_fields: Sequence[str] = (),
    ) -> None:
        if not callable(verifier):
            raise EnvArgumentError(f"verifier must be callable, got {type(verifier).__name__}")
        self.attempt_weights = _attempt_weights(max_attempts, attempt_decay, attempt_rewards)
        if not 0.0 <= format_reward <= 1.0:
            raise EnvArgumentError(f"format_reward must be in [0, 1], got {format_reward}")
        if format_reward > 0 and answer_span is None:
            raise EnvArgumentError("format_reward > 0 needs an answer_span function")
        super().__init__(
            source,
            split=split,
            source_kwargs=source_kwargs,
            system_prompt=system_prompt,
            prompt_template=prompt_template,
            required_fields=required_fields,
            json_fields=json_fields,
        )
        self.verifier = verifier
        self.max_attempts = max_attempts
        self.feedback = feedback or _default_feedback
        self.format_reward = float(format_reward)
        self.answer_span = answer_span
        self.reward_range = (0.0, 1.0)

    def _step(self, action: str, task: Task) -> StepResult:
        attempt = self._turn - 1
        verdict = self.verifier(action, task)
        if not isinstance(verdict, Verdict):
            raise EnvArgumentError(
                f"verifier {self.verifier!r} returned {type(verdict).__name__}, expected Verdict"
            )
        info: dict[str, Any] = {
            "verdict": verdict,
            "attempt": attempt + 1,
            "attempts_left": self.max_attempts - attempt - 1,
        }
        if self.format_reward > 0 and self.answer_span is not None:
            span = self.answer_span(action)
            info["reward_spans"] = [(span[0], span[1], self.format_reward)] if span else []
        final = verdict.passed or attempt + 1 >= self.max_attempts
        if not final:
            feedback = {"role": "user", "content": self.feedback(verdict, task)}
            return StepResult([feedback], 0.0, info=info)
        reward = self.attempt_weights[attempt] * self._score(verdict)
        gold = self._gold(task)
        if gold is not None:  # the episode is over: the reference answer is for reports only
            info["gold"] = gold
        return StepResult([], reward, terminated=True, info=info)

    def _gold(self, task: Task) -> Any:
        """The task's reference answer shown in reports (``task["answer"]``), or None."""
        return task.get("answer")

    def _score(self, verdict: Verdict) -> float:
        """The verdict's contribution to the reward (subclasses may use ``passed`` only)."""
        return float(verdict.score)


def _default_feedback(verdict: Verdict, task: Task) -> str:
    return DEFAULT_FEEDBACK.format(reason=verdict.reason.replace("_", " "))


def _attempt_weights(
    max_attempts: int, attempt_decay: float, attempt_rewards: Sequence[float] | None
) -> tuple[float, ...]:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise EnvArgumentError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
    if attempt_rewards is not None:
        weights = tuple(float(w) for w in attempt_rewards)
        if len(weights) != max_attempts or not all(0.0 <= w <= 1.0 for w in weights):
            raise EnvArgumentError(
                f"attempt_rewards must list max_attempts={max_attempts} values in [0, 1], "
                f"got {list(attempt_rewards)}"
            )
        return weights
    if not 0.0 < attempt_decay <= 1.0:
        raise EnvArgumentError(f"attempt_decay must be in (0, 1], got {attempt_decay}")
    return tuple(attempt_decay**k for k in range(max_attempts))
