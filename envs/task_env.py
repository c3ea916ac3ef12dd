"""TaskEnv: the episode bookkeeping shared by every built-in environment.

It picks a task from a :class:`~rlvr.envs.tasks.TaskSource` at ``reset`` (by seed, or as asked in
``options``), renders the opening messages, and guards ``step`` (before ``reset``, after the end,
non-string actions). Subclasses implement :meth:`TaskEnv._step`.
"""

from __future__ import annotations

import copy
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.base import Message, TextEnv
from rlvr.envs.errors import EnvArgumentError, EpisodeOverError, ResetNeededError, TaskSourceError
from rlvr.envs.spaces import DEFAULT_MAX_CHARS, ChatMessages, FreeText
from rlvr.envs.tasks import SourceSpec, Task, TaskSource, resolve_source
from rlvr.envs.tasks.verl_layout import check_messages, is_message_list
from rlvr.verifiers.math import gold_answer

RESET_OPTIONS = ("task_index", "task_id")
"""The keys ``reset(options=...)`` accepts."""


@dataclass
class StepResult:
    """What a subclass's ``_step`` decides; :meth:`TaskEnv.step` turns it into the 5-tuple."""

    messages: list[Message]
    reward: float
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class TaskEnv(TextEnv):
    """A TextEnv over a task source: one task per episode.

    Args:
        source: a task source or a spec for :func:`rlvr.envs.tasks.resolve_source` (a built-in name,
            a file path, a hub name, a list of task dicts).
        split: the split to build when ``source`` is a spec (``"train"``, ``"test"``).
        source_kwargs: extra arguments for the source built from a spec.
        system_prompt: the system message, or None for none.
        prompt_template: the user message; ``{field}`` is replaced by the task's field (write
            literal braces as ``{{`` and ``}}``). A template that is one field alone
            (``"{question}"``) whose value is a list of chat messages opens the episode with
            those messages as they are (system turns kept; ``system_prompt`` is not added):
            how prompts in verl's data layout and HF chat datasets are used. Any other
            non-string value in a template field is an error, never a stringified object.
        required_fields: task fields this env reads (checked when the source is built).
        max_action_chars: the action space's ``max_length``.

    ``reset(seed=s)`` picks ``source[i]`` with ``i`` drawn from the env's RNG seeded by ``s``, so
    the same seed gives the same episode; ``reset(options={"task_index": i})`` or
    ``{"task_id": "..."}`` picks a task explicitly (evaluation walks a suite this way).
    """

    def __init__(
        self,
        source: SourceSpec,
        *,
        split: str = "train",
        source_kwargs: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        prompt_template: str = "{question}",
        required_fields: Sequence[str] = (),
        json_fields: Sequence[str] = (),
        max_action_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        self.prompt_template = _check_template(prompt_template)
        self.source: TaskSource = resolve_source(
            source,
            split=split,
            source_kwargs=source_kwargs,
            required=required_fields,
            json_fields=json_fields,
            text_fields=_template_fields(self.prompt_template),
        )
        if len(self.source) == 0:
            raise TaskSourceError(f"task source {self.source!r} is empty")
        self.split = getattr(self.source, "split", split)
        self.system_prompt = system_prompt
        self.action_space = FreeText(max_action_chars)
        self.observation_space = ChatMessages()
        self._task: Task | None = None
        self._task_index = -1
        self._turn = 0
        self._done = False
        self._ids: dict[str, int] | None = None

    @property
    def num_tasks(self) -> int:
        """How many tasks the source holds (valid ``task_index`` values are ``0..num_tasks-1``)."""
        return len(self.source)

    @property
    def task(self) -> Task:
        """The current episode's task (a copy); raises before the first ``reset``."""
        if self._task is None:
            raise ResetNeededError("no task yet: call reset() first")
        return copy.deepcopy(self._task)

    def demonstration(self, tool_results: Sequence[Message], *,
                      use_tool: bool = True) -> str | None:
        """The task's gold answer (the final answer inside ``task["answer"]``), or None."""
        if self._task is None or "answer" not in self._task:
            return None
        return gold_answer(str(self._task["answer"]))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode on one task.

        Args:
            seed: seeds the env's RNG; the same seed picks the same task (and episode).
            options: ``{"task_index": i}`` or ``{"task_id": "..."}`` to choose the task.

        Returns:
            messages: the opening chat messages: the system message (when configured) and the
                user message rendered from ``prompt_template``.
            info: ``task_id`` (str), ``task_index`` (int), ``task_metadata`` (dict) when the
                task carries one (e.g. verl's ``data_source``, ``ability``, ``extra_info``),
                plus what the subclass adds (e.g. ``tools``). The gold answer is never in
                ``info``.
        """
        super().reset(seed=seed)
        self._task_index = self._choose_task(options)
        self._task = self.source[self._task_index]
        self._turn = 0
        self._done = False
        self._on_reset(self._task)
        messages = self._opening_messages(self._task)
        info = {"task_id": str(self._task["task_id"]), "task_index": self._task_index}
        if isinstance(self._task.get("metadata"), Mapping):
            info["task_metadata"] = copy.deepcopy(dict(self._task["metadata"]))
        info.update(self._reset_info())
        return messages, info

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Play the assistant's turn.

        Args:
            action: the assistant's text for this turn.

        Returns:
            messages: new messages from the env (feedback, tool results); empty when the episode
                ends.
            reward: this turn's reward (a float; see the subclass for its range).
            terminated: the task is decided: the verifier made its final call.
            truncated: a turn or budget limit ended the episode before the task was decided.
            info: ``task_id``, ``turn`` (1-based), ``verdict`` when one was made, optional
                ``reward_spans`` as ``(char_start, char_end, value)`` inside ``action``, and
                ``gold`` (the task's reference answer, for reports) only on the step that ends
                the episode, when the env has one.

        Raises:
            ResetNeededError: before the first ``reset``.
            EpisodeOverError: after the episode ended (call ``reset``).
            EnvArgumentError: when ``action`` is not a string.
        """
        if self._task is None:
            raise ResetNeededError("step() called before reset(): call reset() first")
        if self._done:
            raise EpisodeOverError(
                f"step() called after the episode on task {self._task['task_id']!r} ended "
                "(terminated or truncated); call reset() to start a new one"
            )
        if not isinstance(action, str):
            raise EnvArgumentError(f"action must be a str, got {type(action).__name__}")
        self._turn += 1
        result = self._step(action, self._task)
        self._done = result.terminated or result.truncated
        info = {"task_id": str(self._task["task_id"]), "turn": self._turn, **result.info}
        messages = [] if self._done else result.messages
        return messages, float(result.reward), result.terminated, result.truncated, info

    def _step(self, action: str, task: Task) -> StepResult:
        """Decide the turn (subclasses implement)."""
        raise NotImplementedError

    def _on_reset(self, task: Task) -> None:
        """Reset per-episode state (subclasses extend)."""

    def _reset_info(self) -> dict[str, Any]:
        """Extra ``reset`` info (subclasses extend; return fresh objects)."""
        return {}

    def _opening_messages(self, task: Task) -> list[Message]:
        fields = _template_fields(self.prompt_template)
        whole = len(fields) == 1 and self.prompt_template == "{" + fields[0] + "}"
        for name in fields:
            value = task.get(name)
            where = f"task {task.get('task_id')!r}: field {name!r}"
            if whole and is_message_list(value):
                return [dict(m) for m in check_messages(value, where=where)]
            if value is not None and not isinstance(value, str):
                kind = "a list of chat messages" if is_message_list(value) else type(value).__name__
                raise EnvArgumentError(
                    f"{where} holds {kind}, which cannot be written into prompt_template "
                    f"{self.prompt_template!r}; a message list is used only when the template "
                    f"is the field alone ('{{{name}}}')"
                )
        messages: list[Message] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        try:
            content = self.prompt_template.format_map(task)
        except (KeyError, IndexError) as exc:
            raise EnvArgumentError(
                f"prompt_template {self.prompt_template!r} uses {exc} but task "
                f"{task.get('task_id')!r} has fields {sorted(task)}"
            ) from exc
        messages.append({"role": "user", "content": content})
        return messages

    def _choose_task(self, options: dict[str, Any] | None) -> int:
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise EnvArgumentError(
                f"unknown reset option(s) {unknown}; accepted: {list(RESET_OPTIONS)}"
            )
        if "task_index" in options:
            index = options["task_index"]
            if isinstance(index, bool) or not isinstance(index, int):
                raise EnvArgumentError(f"options['task_index'] must be an int, got {index!r}")
            if not 0 <= index < len(self.source):
                raise EnvArgumentError(
                    f"options['task_index']={index} is out of range: the source has "
                    f"{len(self.source)} tasks"
                )
            return index
        if "task_id" in options:
            if self._ids is None:
                self._ids = {str(self.source[i]["task_id"]): i for i in range(len(self.source))}
            task_id = str(options["task_id"])
            if task_id not in self._ids:
                raise EnvArgumentError(f"options['task_id']={task_id!r} is not in {self.source!r}")
            return self._ids[task_id]
        return int(self.np_random.integers(len(self.source)))


def _template_fields(template: str) -> tuple[str, ...]:
    """The task fields a prompt template reads (``"{question} ({hint})"`` -> question, hint)."""
    names = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name:
            field = name.split(".")[0].split("[")[0]
            if field and field not in names:
                names.append(field)
    return tuple(names)


def _check_template(template: str) -> str:
    if not isinstance(template, str):
        raise EnvArgumentError(f"prompt_template must be a str, got {type(template).__name__}")
    try:
        list(string.Formatter().parse(template))
    except ValueError as exc:
        raise EnvArgumentError(
            f"prompt_template {template!r} is not a valid format string ({exc}); "
            "write literal braces as '{{' and '}}'"
        ) from exc
    return template
