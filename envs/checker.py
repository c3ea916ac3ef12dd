"""check_env: does an environment keep the TextEnv contract? In the spirit of gymnasium's.

It plays a few short episodes with probe actions and checks: the spaces (a ``Text`` action
space, an observation space that contains the messages), the types of everything ``reset`` and
``step`` return, rewards (finite floats inside ``env.reward_range`` when the env declares one)
and reward spans (inside the action), ``info["verdict"]`` being a Verdict, fresh objects on
every call, determinism (same seed and actions, same episode), and that ``step`` after the end
raises.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import gymnasium
from gymnasium import spaces

from envs.base import TextEnv
from envs.errors import EnvCheckError
from verifiers import Verdict

DEFAULT_PROBES = (
    "I am not sure.",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>',
    "<tool_call>{not json",
    "```python\nprint(42)\n```",
    "The answer is \\boxed{42}.",
    "42",
    "",
)
"""Actions played in turn until the episode ends (cycled if needed)."""


def check_env(
    env: gymnasium.Env,
    *,
    seed: int = 0,
    actions: Sequence[str] = DEFAULT_PROBES,
    max_steps: int = 32,
) -> None:
    """Check ``env`` against the TextEnv contract; raise on the first violation.

    Args:
        env: a TextEnv, possibly wrapped (e.g. from ``gymnasium.make``).
        seed: the reset seed used for the determinism check.
        actions: probe actions played in turn (cycled) until the episode ends.
        max_steps: an episode still running after this many steps is a failure.

    Raises:
        EnvCheckError: naming what broke the contract.
    """
    _check_spaces(env)
    first = _play(env, seed, actions, max_steps)
    second = _play(env, seed, actions, max_steps)
    if first != second:
        raise EnvCheckError(
            f"same seed ({seed}) and actions gave different episodes:\n{first}\nvs\n{second}"
        )
    try:
        env.step("one more")
    except Exception:
        pass
    else:
        raise EnvCheckError("step() after the episode ended must raise (e.g. EpisodeOverError)")


def _check_spaces(env: gymnasium.Env) -> None:
    if not isinstance(env.unwrapped, TextEnv):
        raise EnvCheckError(f"{type(env.unwrapped).__name__} does not subclass envs.TextEnv")
    if not isinstance(env.action_space, spaces.Text):
        raise EnvCheckError(
            f"action_space must be a gymnasium.spaces.Text, got {env.action_space!r}"
        )
    if not isinstance(env.observation_space, spaces.Space):
        raise EnvCheckError(f"observation_space must be a Space, got {env.observation_space!r}")


def _play(env: gymnasium.Env, seed: int, actions: Sequence[str], max_steps: int) -> list[Any]:
    messages, info = env.reset(seed=seed)
    _check_messages(env, messages, "reset")
    _check_info(info, "reset")
    record: list[Any] = [_canonical(messages), _canonical(_plain_info(info))]
    previous: tuple[Any, Any] = (messages, info)
    reward_range = getattr(env.unwrapped, "reward_range", None)
    for step in range(max_steps):
        action = actions[step % len(actions)]
        result = env.step(action)
        where = f"step {step + 1} (action {action[:40]!r})"
        if not isinstance(result, tuple) or len(result) != 5:
            raise EnvCheckError(f"{where}: step must return a 5-tuple, got {result!r}")
        messages, reward, terminated, truncated, info = result
        _check_messages(env, messages, where)
        _check_info(info, where)
        _check_reward(reward, reward_range, where)
        _check_spans(info.get("reward_spans"), action, where)
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, bool):
                raise EnvCheckError(f"{where}: {name} must be a bool, got {flag!r}")
        if (terminated or truncated) and messages:
            raise EnvCheckError(f"{where}: messages must be empty when the episode ends")
        if messages is previous[0] or info is previous[1]:
            raise EnvCheckError(f"{where}: returned the same list/dict object as the last call")
        previous = (messages, info)
        record.append(
            [_canonical(messages), reward, terminated, truncated, _canonical(_plain_info(info))]
        )
        if terminated or truncated:
            return record
    raise EnvCheckError(f"the episode did not end within {max_steps} steps of probe actions")


def _check_messages(env: gymnasium.Env, messages: Any, where: str) -> None:
    if not isinstance(messages, list):
        raise EnvCheckError(f"{where}: messages must be a list, got {type(messages).__name__}")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise EnvCheckError(f"{where}: each message needs a string 'content': {message!r}")
        if message.get("role") not in ("system", "user", "assistant", "tool"):
            raise EnvCheckError(f"{where}: bad role in {message!r}")
    if not env.observation_space.contains(messages):
        raise EnvCheckError(f"{where}: messages are not in the observation space")


def _check_info(info: Any, where: str) -> None:
    if not isinstance(info, dict):
        raise EnvCheckError(f"{where}: info must be a dict, got {type(info).__name__}")
    if "verdict" in info and not isinstance(info["verdict"], Verdict):
        raise EnvCheckError(f"{where}: info['verdict'] must be a Verdict")
    if "task_id" in info and not isinstance(info["task_id"], str):
        raise EnvCheckError(f"{where}: info['task_id'] must be a str")
    if "tools" in info:
        for schema in info["tools"]:
            function = schema.get("function", {}) if isinstance(schema, dict) else {}
            if schema.get("type") != "function" or not isinstance(function.get("name"), str):
                raise EnvCheckError(
                    f"{where}: info['tools'] entries must be "
                    '{"type": "function", "function": {"name", "description", "parameters"}}'
                )


def _check_reward(reward: Any, reward_range: Any, where: str) -> None:
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise EnvCheckError(f"{where}: reward must be a float, got {type(reward).__name__}")
    if not math.isfinite(reward):
        raise EnvCheckError(f"{where}: reward must be finite, got {reward}")
    if reward_range is not None:
        low, high = reward_range
        if not low <= reward <= high:
            raise EnvCheckError(f"{where}: reward {reward} outside reward_range {reward_range}")


def _check_spans(spans: Any, action: str, where: str) -> None:
    if spans is None:
        return
    for span in spans:
        if not (isinstance(span, tuple | list) and len(span) == 3):
            raise EnvCheckError(f"{where}: a reward span is (char_start, char_end, value): {span}")
        start, end, value = span
        if not (0 <= start < end <= len(action)) or not math.isfinite(float(value)):
            raise EnvCheckError(f"{where}: reward span {span} is not inside the action")


def _plain_info(info: dict[str, Any]) -> dict[str, Any]:
    plain = dict(info)
    verdict = plain.pop("verdict", None)
    if verdict is not None:
        plain["verdict"] = [verdict.score, verdict.passed, verdict.reason]
    return plain


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)
