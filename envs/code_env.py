"""rlvr/Code-v0: write a Python program, get it run against tests in the code sandbox.

The model answers with a fenced code block; the last ```` ```python ```` (or ```` ```py ````)
block is the program. No block -> a ``no_answer`` verdict without running anything. With
``max_attempts > 1`` the output of the failing tests is shown as feedback for another try.

``step`` runs the sandbox synchronously; the env keeps no global state, so the agent can (and
should) call ``step`` from a worker thread to keep its event loop free.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Unpack

from rlvr.envs.errors import EnvArgumentError, TaskSourceError
from rlvr.envs.tasks import SourceSpec, Task
from rlvr.envs.verifier_env import AttemptArgs, VerifierEnv
from rlvr.verifiers import Verdict
from rlvr.verifiers.code import AssertTests, CallTests, StdioTests, run_tests

REWARD_MODES = ("fraction", "all_pass")

DEFAULT_CODE_SYSTEM_PROMPT = (
    "You are an expert Python programmer. Answer with a complete program or function in a "
    "single ```python code block."
)

_BLOCK = re.compile(r"```(?:python3|python|py)[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


class CodeEnv(VerifierEnv):
    """Programming tasks checked by unit tests in a sandbox.

    Args:
        split: ``"train"`` or ``"test"``.
        source: task source or spec; default the bundled code tasks (``"code"``); also
            ``"humaneval"`` or a dataset with ``prompt`` and ``tests`` fields (``tests`` as
            described in :mod:`rlvr.envs.tasks.code`, possibly a JSON string).
        source_kwargs: arguments for the source.
        system_prompt: the system message, or None.
        prompt_template: the user message, formatted with the task's fields.
        reward: ``"fraction"`` (share of tests passed) or ``"all_pass"`` (1 only if all pass).
        timeout_s: wall-clock limit per program run.
        memory_mb: memory limit per program run.
        max_feedback_chars: cap on the feedback message.
        **attempts: :class:`~rlvr.envs.verifier_env.VerifierEnv`'s ``max_attempts`` (programs
            allowed; after a failing one the model sees the failing tests), ``attempt_decay``,
            ``attempt_rewards`` and ``format_reward`` (the reward span over the code block when
            there is one).

    Step reward: on the final turn, the attempt weight times the pass fraction (or 1/0 for
    ``all_pass``); 0 on earlier turns. ``terminated`` when all tests pass or the last attempt ran.
    """

    def __init__(
        self,
        split: str = "train",
        *,
        source: SourceSpec = "code",
        source_kwargs: Mapping[str, Any] | None = None,
        system_prompt: str | None = DEFAULT_CODE_SYSTEM_PROMPT,
        prompt_template: str = "{prompt}",
        reward: str = "fraction",
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        max_feedback_chars: int = 2000,
        **attempts: Unpack[AttemptArgs],
    ) -> None:
        if reward not in REWARD_MODES:
            raise EnvArgumentError(f"reward must be one of {list(REWARD_MODES)}, got {reward!r}")
        if timeout_s <= 0 or memory_mb <= 0:
            raise EnvArgumentError(
                f"timeout_s and memory_mb must be > 0, got timeout_s={timeout_s}, "
                f"memory_mb={memory_mb}"
            )
        self.reward_mode = reward
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.max_feedback_chars = max_feedback_chars
        super().__init__(
            source,
            self._verify,
            split=split,
            source_kwargs=source_kwargs,
            system_prompt=system_prompt,
            prompt_template=prompt_template,
            feedback=self._feedback,
            answer_span=code_block_span,
            required_fields=("prompt", "tests"),
            json_fields=("tests",),
            **attempts,
        )

    def _verify(self, response: str, task: Task) -> Verdict:
        program = extract_program(response)
        if program is None:
            return Verdict(0.0, False, "no_answer", {"error": "no ```python code block found"})
        tests = build_tests(task["tests"], task_id=str(task["task_id"]))
        prefix = str(task.get("program_prefix") or "")
        return run_tests(
            prefix + program, tests, timeout_s=self.timeout_s, memory_mb=self.memory_mb
        )

    def _score(self, verdict: Verdict) -> float:
        if self.reward_mode == "all_pass":
            return 1.0 if verdict.passed else 0.0
        return float(verdict.score)

    def _feedback(self, verdict: Verdict, task: Task) -> str:
        return failing_tests_feedback(verdict, self.max_feedback_chars)


def extract_program(response: str) -> str | None:
    """The body of the last ```` ```python ```` block in ``response``, or None."""
    found = None
    for match in _BLOCK.finditer(response):
        found = match
    return found.group(1) if found else None


def code_block_span(response: str) -> tuple[int, int] | None:
    """``(start, end)`` of the last fenced python block (fences included), or None."""
    found = None
    for match in _BLOCK.finditer(response):
        found = match
    return (found.start(), found.end()) if found else None


def build_tests(spec: Mapping[str, Any], *, task_id: str = "?") -> Any:
    """Build a ``rlvr.verifiers.code`` test object from a task's JSON-able ``tests`` dict.

    Args:
        spec: ``{"kind": "call", "function", "cases": [[args, expected], ...]}``,
            ``{"kind": "stdio", "cases": [[stdin, stdout], ...]}`` or
            ``{"kind": "assert", "test_code", "entry_point"}`` (optional ``"helpers"``: trusted
            source the tests may use, see ``AssertTests.helpers``).
        task_id: named in errors.

    Raises:
        TaskSourceError: for a malformed spec.
    """
    if not isinstance(spec, Mapping):
        raise TaskSourceError(f"task {task_id}: 'tests' must be a dict, got {type(spec).__name__}")
    kind = spec.get("kind")
    try:
        if kind == "call":
            cases = tuple((tuple(args), expected) for args, expected in spec["cases"])
            return CallTests(function=str(spec["function"]), cases=cases)
        if kind == "stdio":
            return StdioTests(cases=tuple((str(i), str(o)) for i, o in spec["cases"]))
        if kind == "assert":
            return AssertTests(
                test_code=str(spec["test_code"]), entry_point=str(spec["entry_point"]),
                helpers=str(spec.get("helpers", "")),
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise TaskSourceError(f"task {task_id}: malformed {kind!r} tests: {exc!r}") from exc
    raise TaskSourceError(
        f"task {task_id}: tests 'kind' must be one of ['call', 'stdio', 'assert'], got {kind!r}"
    )


def failing_tests_feedback(verdict: Verdict, max_chars: int = 2000) -> str:
    """Describe a failed run for the model: the verdict's reason and the failing tests."""
    lines = [f"Your program did not pass the tests ({verdict.reason.replace('_', ' ')})."]
    tests = verdict.details.get("tests") or []
    failing = [t for t in tests if not (isinstance(t, Mapping) and t.get("status") == "passed")]
    if tests:
        lines.append(f"{len(tests) - len(failing)} of {len(tests)} tests passed. Failing:")
    for test in failing[:5]:
        lines.append(f"- {_describe(test)}")
    error = verdict.details.get("error") or verdict.details.get("stderr")
    if error and not failing:
        lines.append(str(error).strip())
    lines.append("Fix the program and answer with the whole corrected ```python block.")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def _describe(test: Any) -> str:
    if not isinstance(test, Mapping):
        return str(test)[:300]
    parts = []
    for key in ("name", "status", "message"):
        if test.get(key) not in (None, ""):
            parts.append(str(test[key]).strip()[:300])
    return ": ".join(parts) or str(dict(test))[:300]
