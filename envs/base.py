"""TextEnv: the gymnasium.Env over chat messages that every rlvr environment subclasses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium

Message = dict[str, Any]
"""A chat message: {"role": "system"|"user"|"assistant"|"tool", "content": str, ...}."""


class TextEnv(gymnasium.Env[list[Message], str]):
    """A gymnasium environment whose observations are chat messages and actions are text.

    Subclasses implement ``reset`` and ``step`` with exactly this contract:

    ``reset(*, seed=None, options=None) -> (messages, info)``
        messages: the list of chat messages that opens the episode (system and/or user).
        info: may carry ``tools`` (JSON schemas for the chat template), ``task_id``; whatever
            the verifier needs (the gold answer, the tests) stays inside the env.

    ``step(action) -> (messages, reward, terminated, truncated, info)``
        action: the assistant's text for this turn.
        messages: the new messages the env adds (tool results, feedback); empty when the
            episode ends.
        reward: this turn's reward (float).
        terminated: the task is decided (the verifier made its final call).
        truncated: a turn or budget limit ended the episode before the task was decided.
        info: ``info["verdict"]`` holds the Verdict when one was made; ``info["reward_spans"]``
            may hold dense rewards as ``(char_start, char_end, value)`` inside ``action``.

    Conventions the built-in envs follow (and :func:`rlvr.envs.check_env` checks): the action space
    is
    a ``gymnasium.spaces.Text`` (``rlvr.envs.spaces.FreeText``), the observation space
    ``rlvr.envs.spaces.ChatMessages``; the same ``reset`` seed gives the same episode;
    ``reset(options={"task_index": i})`` or ``{"task_id": ...}`` picks a task; ``info["task_id"]``
    is a string; every call returns fresh lists and dicts; rewards lie in ``self.reward_range``;
    ``step`` after the episode ended raises ``rlvr.envs.errors.EpisodeOverError``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def demonstration(self, tool_results: Sequence[Message], *,
                      use_tool: bool = True) -> str | None:
        """A scripted teacher's next turn on the current task, for supervised warm-ups.

        Args:
            tool_results: the tool messages this episode has received so far.
            use_tool: whether the teacher uses the env's tools in this episode (if it has any).

        Returns:
            The turn's text, or None when the env has no teacher (this default). ``TaskEnv``
            answers with the task's gold answer; ``ToolUseEnv`` with a calculator first calls
            it and then answers with its result.
        """
        return None

    def tool_schemas(self) -> list[dict[str, Any]] | None:
        """The tools this env executes, as OpenAI function schemas, or None (this default).

        Agents that call tools natively (``tools=`` in a chat request) take them from here
        (``rlvr.envs.AgentTask.tools``), also when ``reset``'s info carries none because the
        env announces its tools in a message (rlvr/CompactToolUse-v0).
        """
        return None
