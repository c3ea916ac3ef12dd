"""Agent functions as environments: ``async def agent(client, task) -> answer`` plus a verifier.

People write agents against the OpenAI chat API with their own tool loop. ``register_agent``
turns such a function into a gymnasium id that ``rlvr train``, ``rlvr eval`` and
``rlvr check-env`` use like any env::

    async def agent(client, task):
        reply = await client.chat.completions.create(model="policy", messages=task.messages)
        return reply.choices[0].message.content

    register_agent("me/Arith-v0", agent, source="arithmetic", verifier=math_verifier)
    # or reuse a registered env's tasks and verifier:
    register_agent("me/Calc-v0", calc_agent, env="rlvr/CompactToolUse-v0")

The env itself (``AgentEnv``) is an ordinary ``TextEnv`` over the tasks: ``reset`` gives the
task's opening messages (and tools), and ``step(answer)`` grades an answer text in one turn
with the verifier (or with the wrapped env's ``step``: for a tool env, a reply without tool
calls is its final answer). That is what ``check-env`` checks. The episode runner
(``rlvr.agents.runner``) plays an ``AgentEnv`` differently: it calls ``agent(client, task)`` with an
``openai.AsyncOpenAI`` client pointed at the episode's own gateway endpoint
(``rlvr.agents.gateway``), keeps every call token-exact, and grades the returned answer with
``step(str(answer))``. envs never imports the gateway: the runner finds ``AgentEnv`` and its
``agent`` here.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium

from rlvr.envs.base import Message, TextEnv
from rlvr.envs.errors import EnvArgumentError
from rlvr.envs.tasks import SourceSpec

AgentFunction = Callable[[Any, "AgentTask"], Awaitable[Any]]
"""``async def agent(client, task) -> answer``: ``client`` is an ``openai.AsyncOpenAI``."""

#: Seconds an agent may take per episode (then the episode ends with reason "error").
DEFAULT_AGENT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class AgentTask:
    """What an agent function is given.

    Attributes:
        task_id: the task's id.
        messages: the opening chat messages the env renders for the task (system and user).
        tools: the tools the env executes (OpenAI function schemas: pass them as ``tools=``),
            from ``reset``'s info or else the env's ``tool_schemas()``; None when it has none.
        fields: the task's own fields (e.g. ``question``; the gold ``answer`` too, which an
            honest agent does not read: the verifier grades the returned answer).
    """

    task_id: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None
    fields: dict[str, Any]

    @property
    def question(self) -> Any:
        """``fields["question"]`` (None when the task has none)."""
        return self.fields.get("question")


class AgentEnv(TextEnv):
    """A task source and a verifier, played by an agent function (see the module docstring).

    Args:
        agent: ``async def agent(client, task) -> answer``.
        env: a registered env id whose tasks and ``step`` grade the answers (exclusive with
            ``source``/``verifier``).
        source: a task source or spec (``rlvr.envs.tasks.resolve_source``); needs ``verifier``.
        verifier: ``(answer_text, task) -> Verdict`` (``rlvr.envs.verifier_env.Verifier``).
        timeout_s: wall-clock seconds the agent may take per episode.
        **kwargs: the wrapped env's arguments (``split``, ``source_kwargs``,
            ``system_prompt``, ``prompt_template``, ...).
    """

    def __init__(self, agent: AgentFunction, *, env: str | None = None,
                 source: SourceSpec | None = None, verifier: Any = None,
                 timeout_s: float = DEFAULT_AGENT_TIMEOUT_S, **kwargs: Any) -> None:
        check_agent(agent, timeout_s)
        if (env is None) == (source is None):
            raise EnvArgumentError("give either env=<registered id> or source=... with "
                                   "verifier=...")
        if env is not None:
            if verifier is not None:
                raise EnvArgumentError("verifier is given by env=...; pass one or the other")
            from rlvr.envs.registration import make

            self.base: Any = make(env, **kwargs)
        else:
            if verifier is None or source is None:
                raise EnvArgumentError("source=... needs verifier=(answer, task) -> Verdict")
            from rlvr.envs.verifier_env import VerifierEnv

            self.base = VerifierEnv(source, verifier, **kwargs)
        self._attach(self.base, agent, timeout_s)

    def _attach(self, base: Any, agent: AgentFunction, timeout_s: float) -> None:
        """Play ``base``'s tasks with ``agent``.

        A subclass that builds its own env calls this (after ``check_agent``) instead of
        ``AgentEnv.__init__``.
        """
        self.base = base
        self.agent = agent
        self.timeout_s = float(timeout_s)
        self.action_space = base.action_space
        self.observation_space = base.observation_space
        self.reward_range = getattr(base.unwrapped, "reward_range", (0.0, 1.0))
        self._task: AgentTask | None = None

    @property
    def num_tasks(self) -> int:
        """The wrapped env's task count."""
        return int(self.base.unwrapped.num_tasks)

    def __getattr__(self, name: str) -> Any:
        """Other attributes are the wrapped env's (``task``, ``toolset``, ``max_turns``, ...)."""
        if name.startswith("_") or "base" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.base.unwrapped, name)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[list[Message], dict[str, Any]]:
        """The wrapped env's ``reset``: the task's opening messages and info."""
        super().reset(seed=seed)
        messages, info = self.base.reset(seed=seed, options=options)
        fields = getattr(self.base.unwrapped, "task", None)
        self._task = AgentTask(
            task_id=str(info.get("task_id", "")),
            messages=copy.deepcopy(list(messages)),
            tools=copy.deepcopy(info.get("tools") or self.tool_schemas()) or None,
            fields=dict(fields) if isinstance(fields, Mapping) else {},
        )
        return messages, info

    def tool_schemas(self) -> list[dict[str, Any]] | None:
        """The wrapped env's tools (OpenAI function schemas), or None."""
        schemas = getattr(self.base.unwrapped, "tool_schemas", None)
        return schemas() if callable(schemas) else None  # type: ignore[no-any-return]

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Grade ``action`` (the agent's answer as text) with the wrapped env's ``step``."""
        return self.base.step(action)  # type: ignore[no-any-return]

    def demonstration(self, tool_results: Sequence[Message], *,
                      use_tool: bool = True) -> str | None:
        """The wrapped env's scripted teacher (for the supervised warm-up), or None."""
        teacher = getattr(self.base.unwrapped, "demonstration", None)
        if teacher is None:
            return None
        return teacher(tool_results, use_tool=use_tool)  # type: ignore[no-any-return]

    def agent_task(self) -> AgentTask:
        """The current episode's ``AgentTask`` (a copy).

        Raises:
            EnvArgumentError: before the first ``reset``.
        """
        if self._task is None:
            raise EnvArgumentError("no task yet: call reset() first")
        return copy.deepcopy(self._task)

    def close(self) -> None:
        """Close the wrapped env."""
        self.base.close()


def check_agent(agent: Any, timeout_s: Any) -> None:
    """Check an agent function and its per-episode timeout.

    Raises:
        EnvArgumentError: ``agent`` is not callable, or ``timeout_s`` is not a number > 0.
    """
    if not callable(agent):
        raise EnvArgumentError(f"agent must be an async function, got {agent!r}")
    if not (isinstance(timeout_s, int | float) and timeout_s > 0):
        raise EnvArgumentError(f"timeout_s must be a number > 0, got {timeout_s!r}")


def register_agent(env_id: str, agent: AgentFunction, *, env: str | None = None,
                   source: SourceSpec | None = None, verifier: Any = None,
                   timeout_s: float = DEFAULT_AGENT_TIMEOUT_S, **kwargs: Any) -> None:
    """Register ``agent`` as the gymnasium id ``env_id`` (an ``AgentEnv``).

    Args:
        env_id: the new id, e.g. ``"me/Calc-v0"``.
        agent: ``async def agent(client, task) -> answer``.
        env: reuse this registered env's tasks and grading (exclusive with source/verifier).
        source: a task source or spec, with ``verifier``.
        verifier: ``(answer_text, task) -> Verdict``.
        timeout_s: seconds the agent may take per episode.
        **kwargs: default arguments of the wrapped env (``make`` may override them).

    Raises:
        EnvArgumentError: ``env_id`` is already registered, or the arguments are inconsistent.
    """
    if env_id in gymnasium.registry:
        raise EnvArgumentError(f"{env_id!r} is already registered")
    if (env is None) == (source is None):
        raise EnvArgumentError("give either env=<registered id> or source=... with verifier=...")
    defaults: dict[str, Any] = {"agent": agent, "timeout_s": timeout_s, **kwargs}
    if env is not None:
        defaults["env"] = env
    else:
        defaults.update(source=source, verifier=verifier)
    gymnasium.register(env_id, entry_point="rlvr.envs.agent_env:AgentEnv", kwargs=defaults)
