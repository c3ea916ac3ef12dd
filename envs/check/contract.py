"""The TextEnv contract, rule by rule: what every ``reset`` and ``step`` must return.

Every episode the checker plays (contract episodes, probes, limit inputs) goes through these
validators, so a probe that makes ``step`` return a NaN reward fails the contract as well. The
rules (keys of :data:`RULES`) become one row each in the report.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium
from gymnasium import spaces

from rlvr.envs.base import TextEnv
from rlvr.envs.check.report import FAIL, PASS, CheckResult
from rlvr.envs.check.tool_schemas import schema_problems
from rlvr.verifiers import Verdict

__all__ = ["RULES", "Violations", "check_after_end", "check_spaces", "contract_results",
           "validate_reset", "validate_step"]

RULES: dict[str, tuple[str, str]] = {
    "spaces": (
        "spaces: Text actions, messages observations",
        "subclass rlvr.envs.TextEnv; set action_space = rlvr.envs.FreeText() and "
        "observation_space = rlvr.envs.ChatMessages()",
    ),
    "reset": (
        "reset returns (messages, info)",
        "return a list of {'role', 'content'} dicts and a dict from reset()",
    ),
    "step": (
        "step returns a 5-tuple of the right types",
        "return (messages: list, reward: float, terminated: bool, truncated: bool, info: dict)",
    ),
    "messages": (
        "messages well-formed",
        "every message is a dict with a role in system/user/assistant/tool and a str content, "
        "inside observation_space; no messages once the episode ends",
    ),
    "reward": (
        "rewards finite and inside reward_range",
        "return a finite float inside env.reward_range (declare the range you use)",
    ),
    "flags": (
        "terminated/truncated semantics",
        "terminated=True when the verifier decided, truncated=True when a limit ended the "
        "episode undecided; never both",
    ),
    "verdict": (
        "info['verdict'] present when decided",
        "put the verifier's Verdict in info['verdict'] on the step that terminates the episode",
    ),
    "spans": (
        "reward spans inside the action",
        "info['reward_spans'] holds (char_start, char_end, value) with "
        "0 <= start < end <= len(action) and a finite value",
    ),
    "tools": (
        "tool schemas well-formed",
        "give tools (info['tools'] and tool_schemas()) as {'type': 'function', 'function': "
        "{'name', 'description', 'parameters': {'type': 'object', 'properties': {...}}}}, "
        "names unique (rlvr.envs.function_schema writes one from a typed function)",
    ),
    "fresh": (
        "fresh objects on every call",
        "build new message lists and info dicts each call (never return a cached object)",
    ),
    "ends": (
        "episodes end",
        "end every episode (terminated or truncated) within a bounded number of turns",
    ),
    "after_end": (
        "step after the end raises",
        "raise rlvr.envs.EpisodeOverError when step() is called after terminated/truncated",
    ),
    "raises": (
        "nothing raises out of step",
        "catch errors of the model's output inside step and return them as a Verdict/feedback",
    ),
    "hangs": (
        "every call returns in time",
        "reset and step must return (put a wall-clock limit around slow verification, e.g. a "
        "child process with a timeout); the checker's deadline is --call-timeout-s",
    ),
}
"""Rule key -> (row name, how to fix it)."""

Violations = dict[str, list[str]]
"""Rule key -> what was seen, for the rules that were broken."""


def check_spaces(env: gymnasium.Env, violations: Violations) -> None:
    """Record a violation when the env is not a TextEnv with the standard spaces."""
    if not isinstance(env.unwrapped, TextEnv):
        _add(violations, "spaces", f"{type(env.unwrapped).__name__} does not subclass TextEnv")
    if not isinstance(env.action_space, spaces.Text):
        _add(violations, "spaces", f"action_space is {env.action_space!r}, not a spaces.Text")
    if not isinstance(env.observation_space, spaces.Space):
        _add(violations, "spaces", f"observation_space is {env.observation_space!r}")


def validate_reset(env: gymnasium.Env, result: Any, violations: Violations) -> bool:
    """Check what ``reset`` returned; False when it cannot be used at all."""
    if not isinstance(result, tuple) or len(result) != 2:
        _add(violations, "reset", f"reset returned {_short(result)}")
        return False
    messages, info = result
    if not isinstance(info, dict):
        _add(violations, "reset", f"info is a {type(info).__name__}, not a dict")
        return False
    _check_messages(env, messages, "reset", violations)
    _check_info(info, "reset", violations)
    _check_env_tools(env, violations)
    return isinstance(messages, list)


def validate_step(
    env: gymnasium.Env, action: str, result: Any, previous: tuple[Any, Any],
    violations: Violations,
) -> bool:
    """Check one ``step`` result against the contract; False when it is not a usable 5-tuple.

    Args:
        env: the env (for its spaces and reward range).
        action: the action that was played (for the reward spans).
        result: what ``step`` returned.
        previous: the (messages, info) objects of the previous call (must not be reused).
        violations: where broken rules are recorded.
    """
    where = f"action {action[:40]!r}"
    if not isinstance(result, tuple) or len(result) != 5:
        _add(violations, "step", f"{where}: step returned {_short(result)}")
        return False
    messages, reward, terminated, truncated, info = result
    if not isinstance(info, dict) or not isinstance(messages, list):
        _add(violations, "step", f"{where}: messages {type(messages).__name__}, "
                                 f"info {type(info).__name__}")
        return False
    _check_messages(env, messages, where, violations)
    _check_info(info, where, violations)
    _check_reward(reward, getattr(env.unwrapped, "reward_range", None), where, violations)
    _check_spans(info.get("reward_spans"), action, where, violations)
    flags_ok = True
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, bool):
            _add(violations, "step", f"{where}: {name} is {flag!r}, not a bool")
            flags_ok = False
    if flags_ok and terminated and truncated:
        _add(violations, "flags", f"{where}: terminated and truncated are both True")
    if terminated is True and not isinstance(info.get("verdict"), Verdict):
        _add(violations, "verdict", f"{where}: terminated without info['verdict']")
    if (terminated or truncated) and messages:
        _add(violations, "messages", f"{where}: {len(messages)} message(s) after the end")
    if messages is previous[0] or info is previous[1]:
        _add(violations, "fresh", f"{where}: the same list/dict object as the last call")
    return flags_ok


def check_after_end(env: gymnasium.Env, violations: Violations) -> None:
    """``step`` after an ended episode must raise (call this right after an episode ended)."""
    try:
        env.step("one more")
    except Exception:
        return
    _add(violations, "after_end", "step() after the episode ended returned normally")


def contract_results(violations: Violations) -> list[CheckResult]:
    """One row per rule, failed when any episode broke it."""
    results = []
    for key, (name, fix) in RULES.items():
        seen = violations.get(key, [])
        if seen:
            detail = f"{seen[0]}" + (f" (and {len(seen) - 1} more)" if len(seen) > 1 else "")
            if key == "reset" and seen[0].startswith("reset raised"):
                fix = ("reset() raised: make reset(seed=..., options=...) return (messages, "
                       "info) for every task; call env.reset(seed=N) yourself to see the "
                       "traceback")
            results.append(CheckResult("contract", name, FAIL, detail, fix))
        else:
            results.append(CheckResult("contract", name, PASS))
    return results


def _check_messages(env: gymnasium.Env, messages: Any, where: str, violations: Violations) -> None:
    if not isinstance(messages, list):
        _add(violations, "messages", f"{where}: messages is a {type(messages).__name__}")
        return
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            _add(violations, "messages", f"{where}: no str 'content' in {_short(message)}")
        elif message.get("role") not in ("system", "user", "assistant", "tool"):
            _add(violations, "messages", f"{where}: bad role in {_short(message)}")
    try:
        inside = env.observation_space.contains(messages)
    except Exception as exc:  # a broken space is the env's bug too
        inside = False
        where = f"{where} ({type(exc).__name__})"
    if not inside:
        _add(violations, "messages", f"{where}: messages are not in the observation space")


def _check_info(info: dict[str, Any], where: str, violations: Violations) -> None:
    if "verdict" in info and not isinstance(info["verdict"], Verdict):
        _add(violations, "verdict", f"{where}: info['verdict'] is a "
                                    f"{type(info['verdict']).__name__}, not a Verdict")
    if "task_id" in info and not isinstance(info["task_id"], str):
        _add(violations, "reset", f"{where}: info['task_id'] is not a str")
    if info.get("tools") is not None:
        for problem in schema_problems(info["tools"]):
            _add(violations, "tools", f"{where}: info['tools']: {problem}")


def _check_env_tools(env: gymnasium.Env, violations: Violations) -> None:
    """The env's ``tool_schemas()`` (what an agent's ``tools=`` gets) are well formed."""
    tool_schemas = getattr(env.unwrapped, "tool_schemas", None)
    if not callable(tool_schemas):
        return
    try:
        schemas = tool_schemas()
    except Exception as exc:  # a broken method is the env's bug
        _add(violations, "tools", f"tool_schemas() raised {type(exc).__name__}: {exc}")
        return
    if schemas is not None:
        for problem in schema_problems(schemas):
            _add(violations, "tools", f"tool_schemas(): {problem}")


def _check_reward(reward: Any, reward_range: Any, where: str, violations: Violations) -> None:
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        _add(violations, "step", f"{where}: reward is a {type(reward).__name__}")
        return
    if not math.isfinite(reward):
        _add(violations, "reward", f"{where}: reward {reward} is not finite")
    elif reward_range is not None:
        low, high = reward_range
        if not low <= reward <= high:
            _add(violations, "reward", f"{where}: reward {reward} outside reward_range "
                                       f"{tuple(reward_range)}")


def _check_spans(spans: Any, action: str, where: str, violations: Violations) -> None:
    if spans is None:
        return
    if not isinstance(spans, list | tuple):
        _add(violations, "spans", f"{where}: reward_spans is a {type(spans).__name__}")
        return
    for span in spans:
        if not (isinstance(span, tuple | list) and len(span) == 3):
            _add(violations, "spans", f"{where}: span {_short(span)} is not (start, end, value)")
            continue
        start, end, value = span
        try:
            inside = 0 <= start < end <= len(action) and math.isfinite(float(value))
        except (TypeError, ValueError):
            inside = False
        if not inside:
            _add(violations, "spans", f"{where}: span {_short(span)} is not inside the "
                                      f"{len(action)}-character action")


def _add(violations: Violations, rule: str, message: str) -> None:
    violations.setdefault(rule, []).append(message)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
