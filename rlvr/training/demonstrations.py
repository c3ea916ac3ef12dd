"""Multi-turn demonstrations for the supervised warm-up: the env's scripted teacher, token-exact.

The env's own teacher (``TextEnv.demonstration``: e.g. ``ToolUseEnv`` with a calculator calls
it on the task's expression, then answers with the tool's result; a task env without tools
answers with the gold answer) plays the real env. A fixed pool of ``num_demos`` such episodes,
each checked to earn the env's full reward, is built once.

``tool_call_share`` < 1 makes only that share of the pool use the env's tools (exactly
``round(share * num_demos)`` demonstrations, at least one); the others answer directly with the
gold answer on the first turn, as a model without a tool habit would. Those direct demonstrations
earn the env's full reward too (the answer is right), but a model too small to compute the
answer in its weights cannot imitate them: it learns to answer directly *with wrong digits*, and
to call the tool (and copy its result) in about ``tool_call_share`` of its samples. RL then has a
decision to learn, whether to call, rather than the copying itself.

Each demonstration is tokenized exactly as the episode runner would record it
(``rlvr.agents.chat``):
the opening prompt, then per turn the model's tokens (loss mask 1, ending with the end-of-turn
token, or with ``</tool_call>`` when the runner stops generation there) and the env's tokens (the
template's turn closing, the tool message, the next generation prompt: loss mask 0). So the
warm-up trains on the same token sequences RL later samples, and never on tool output.
"""

from __future__ import annotations

import random
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


class ScriptedDemonstrations:
    """A fixed pool of the env's scripted-teacher episodes; ``__call__(rng)`` draws one.

    Args:
        env_id: a registered id whose env has a scripted teacher (``TextEnv.demonstration``;
            e.g. ``rlvr/ToolUse-v0``, ``rlvr/CompactToolUse-v0``).
        env_kwargs: its constructor arguments (the training split).
        tokenizer: the policy's tokenizer (chat template).
        num_demos: demonstrations in the pool (distinct tasks).
        seed: picks the tasks.
        stop_at_tool_call: whether the runner stops generation at ``</tool_call>``
            (``RunnerConfig.stop_at_tool_call``); then a tool turn ends there and its turn
            closing is template tokens, as in a rollout.
        tool_call_share: the share of demonstrations whose teacher uses the env's tools, in
            (0, 1]; the others answer directly (``sft.tool_call_share``). Ignored when the env
            has no tools (every demonstration then answers directly).

    Raises:
        ConfigError: the env has no scripted teacher, ``tool_call_share`` is outside (0, 1],
            or a scripted episode failed to earn the full reward (the teacher and the env
            disagree).
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], tokenizer: Any, *,
                 num_demos: int, seed: int, stop_at_tool_call: bool = True,
                 tool_call_share: float = 1.0) -> None:
        from rlvr import envs
        from rlvr.agents.chat import ChatRenderer

        self.renderer = ChatRenderer(tokenizer)
        self.tokenizer = tokenizer
        stop_ids = tokenizer.encode("</tool_call>", add_special_tokens=False)
        self._tool_stop = stop_ids[0] if stop_at_tool_call and len(stop_ids) == 1 else None
        env = envs.make(env_id, **env_kwargs)
        self.env_id = env_id
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
        """The share of the pool's demonstrations that call a tool."""
        return sum(d.calls_tool for d in self.pool) / len(self.pool)

    def _play(self, env: Any, seed: int, *, use_tool: bool) -> Demonstration:
        messages, info = env.reset(seed=seed)
        task = getattr(env.unwrapped, "task", {})
        schemas = info.get("tools") or None
        ids = self.renderer.prompt_ids(messages, schemas)
        mask = [0] * len(ids)
        history: list[Message] = []
        reward = 0.0
        called = False
        for _ in range(getattr(env.unwrapped, "max_turns", 4)):
            action = env.unwrapped.demonstration(history, use_tool=use_tool)
            if action is None:
                raise ConfigError(f"sft.demos='scripted' needs an env with a scripted teacher "
                                  f"(TextEnv.demonstration, e.g. rlvr/ToolUse-v0); "
                                  f"{self.env_id} has none", key="demos")
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
                f"the scripted demonstration of task {task.get('task_id')!r} earned "
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
