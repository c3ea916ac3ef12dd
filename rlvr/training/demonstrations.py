"""Multi-turn demonstrations for the supervised warm-up: a scripted tool user, token-exact.

A scripted teacher plays the real env: on the first turn it calls the calculator with the task's
expression (a ``<tool_call>`` block holding ``{"name": "calculator", "arguments":
{"expression": "347*58"}}``), the env runs the call, and on the next turn the teacher answers
with the tool's result. With no tools offered, it answers with the gold answer directly. A fixed
pool of ``num_demos`` such episodes, each checked to earn the env's full reward, is built once.

``tool_call_share`` < 1 makes only that share of the pool call the calculator (exactly
``round(share * num_demos)`` demonstrations, at least one); the others answer directly with the
gold answer on the first turn, as a model without a tool habit would. Those direct demonstrations
earn the env's full reward too (the answer is right), but a model too small to compute the
answer in its weights cannot imitate them: it learns to answer directly *with wrong digits*, and
to call the calculator (and copy its result) in about ``tool_call_share`` of its samples. RL
then has a decision to learn, whether to call, rather than the copying itself.

Each demonstration is tokenized exactly as the episode runner would record it (``agents.chat``):
the opening prompt, then per turn the model's tokens (loss mask 1, ending with the end-of-turn
token, or with ``</tool_call>`` when the runner stops generation there) and the env's tokens (the
template's turn closing, the tool message, the next generation prompt: loss mask 0). So the
warm-up trains on the same token sequences RL later samples, and never on tool output.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.errors import ConfigError

Message = dict[str, Any]


@dataclass(frozen=True)
class Demonstration:
    """One tokenized multi-turn episode.

    Attributes:
        ids: prompt + response token ids, ``(T,)``.
        loss_mask: ``(T,)`` aligned with ``ids``: 1 on tokens the model generates (trained on),
            0 on the prompt and on every env/template token.
        task_id: the env's task id.
        calls_tool: whether the teacher called the calculator (False: it answered directly).
        seed: the env reset seed that drew the task (replays the episode).
    """

    ids: list[int]
    loss_mask: list[int]
    task_id: str
    calls_tool: bool = True
    seed: int | None = None

    def encoded(self) -> tuple[list[int], list[int]]:
        """``(ids, loss_mask)``, the form ``rlvr.sft.collate`` takes."""
        return self.ids, self.loss_mask

    def after_decision(self) -> tuple[list[int], list[int]]:
        """``(ids, loss_mask)`` with the first model token masked out too.

        That token is the decision to call (``<tool_call>``) or to answer directly; the rest
        of the mask covers how the chosen path is carried out (for a tool demonstration: the
        call with the copied expression, and the answer copied from the tool result).
        """
        mask = list(self.loss_mask)
        if 1 in mask:
            mask[mask.index(1)] = 0
        return self.ids, mask


def calculator_call(expression: str, tool: str = "calculator") -> str:
    """The Hermes tool-call text for ``expression``, as the teacher writes it."""
    payload = json.dumps({"name": tool, "arguments": {"expression": expression}})
    return f"<tool_call>\n{payload}\n</tool_call>"


def teacher_action(task: dict[str, Any], tools: Sequence[str], history: Sequence[Message],
                   *, use_tool: bool = True) -> str:
    """The scripted teacher's next action.

    Args:
        task: the env's current task (``expression`` or ``question``, and ``answer``).
        tools: names of the tools on offer (empty: answer directly).
        history: the tool messages received so far in this episode.
        use_tool: whether this episode calls the calculator when it is offered.

    Returns:
        A calculator call on the first turn when ``calculator`` is offered and ``use_tool``;
        the last tool result after it; the gold answer when no calculator is offered or the
        episode does not use it.
    """
    if "calculator" not in tools or not use_tool:
        return str(task["answer"])
    if not history:
        return calculator_call(str(task.get("expression", task["question"])))
    return str(history[-1]["content"])


class CalculatorDemonstrations:
    """A fixed pool of scripted calculator episodes; ``__call__(rng)`` draws one.

    Args:
        env_id: a registered id whose env keeps ``unwrapped.task`` and a ``toolset``
            (``rlvr/ToolUse-v0``, ``rlvr/CompactToolUse-v0``).
        env_kwargs: its constructor arguments (the training split).
        tokenizer: the policy's tokenizer (chat template).
        num_demos: demonstrations in the pool (distinct tasks).
        seed: picks the tasks.
        stop_at_tool_call: whether the runner stops generation at ``</tool_call>``
            (``RunnerConfig.stop_at_tool_call``); then a tool turn ends there and its turn
            closing is template tokens, as in a rollout.
        tool_call_share: the share of demonstrations that call the calculator, in (0, 1];
            the others answer directly (``sft.tool_call_share``). Ignored without a calculator
            on offer (every demonstration then answers directly).

    Raises:
        ConfigError: the env is not a tool env, ``tool_call_share`` is outside (0, 1], or a
            scripted episode failed to earn the full reward (the teacher and the env disagree).
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], tokenizer: Any, *,
                 num_demos: int, seed: int, stop_at_tool_call: bool = True,
                 tool_call_share: float = 1.0) -> None:
        import envs
        from agents.chat import ChatRenderer

        self.renderer = ChatRenderer(tokenizer)
        self.tokenizer = tokenizer
        stop_ids = tokenizer.encode("</tool_call>", add_special_tokens=False)
        self._tool_stop = stop_ids[0] if stop_at_tool_call and len(stop_ids) == 1 else None
        env = envs.make(env_id, **env_kwargs)
        if not hasattr(env.unwrapped, "toolset"):
            raise ConfigError(f"sft.demos='calculator' needs a tool env (rlvr/ToolUse-v0, "
                              f"rlvr/CompactToolUse-v0); {env_id} has no tools")
        if not 0.0 < tool_call_share <= 1.0:
            raise ConfigError(f"tool_call_share must be in (0, 1]; got {tool_call_share}",
                              key="tool_call_share")
        rng = random.Random(f"demos:{seed}")
        seeds = [rng.randrange(2**31) for _ in range(num_demos)]
        uses_tool = tool_plan(num_demos, tool_call_share, random.Random(f"demo-tools:{seed}"))
        try:
            self.pool = [self._play(env, s, use_tool=u) for s, u in zip(seeds, uses_tool,
                                                                        strict=True)]
        finally:
            env.close()

    def __call__(self, rng: random.Random) -> Demonstration:
        """One demonstration of the pool, drawn with ``rng``."""
        return self.pool[rng.randrange(len(self.pool))]

    @property
    def tool_call_share(self) -> float:
        """The share of the pool's demonstrations that call the calculator."""
        return sum(d.calls_tool for d in self.pool) / len(self.pool)

    def _play(self, env: Any, seed: int, *, use_tool: bool) -> Demonstration:
        messages, info = env.reset(seed=seed)
        task = env.unwrapped.task
        schemas = info.get("tools") or None
        tools = list(env.unwrapped.toolset.tools)
        ids = self.renderer.prompt_ids(messages, schemas)
        mask = [0] * len(ids)
        history: list[Message] = []
        reward = 0.0
        called = False
        for _ in range(getattr(env.unwrapped, "max_turns", 4)):
            action = teacher_action(task, tools, history, use_tool=use_tool)
            called = called or action.startswith("<tool_call>")
            model = self.tokenizer.encode(action, add_special_tokens=False)
            if not (schemas and self._tool_stop is not None and model[-1] == self._tool_stop):
                model = model + [self.renderer.end_of_turn_id]
            ids += model
            mask += [1] * len(model)
            obs, step_reward, terminated, truncated, _ = env.step(action)
            reward += float(step_reward)
            if terminated or truncated:
                break
            history += [m for m in obs if m.get("role") == "tool"]
            env_tokens = self.renderer.turn_close(model) + self.renderer.env_delta(obs, schemas)
            ids += env_tokens
            mask += [0] * len(env_tokens)
        if reward < 1.0:
            raise ConfigError(
                f"the scripted calculator demonstration of task {task.get('task_id')!r} earned "
                f"reward {reward}, not 1.0; the teacher does not solve this env"
            )
        return Demonstration(ids=ids, loss_mask=mask, task_id=str(task.get("task_id")),
                             calls_tool=called, seed=seed)


def tool_plan(num_demos: int, share: float, rng: random.Random) -> list[bool]:
    """Which of ``num_demos`` demonstrations call the tool, in pool order.

    Exactly ``round(share * num_demos)`` of them (at least one), at positions drawn with ``rng``.
    """
    calls = max(1, round(share * num_demos))
    plan = [True] * calls + [False] * (num_demos - calls)
    rng.shuffle(plan)
    return plan
