"""Tool envs (``info["tools"]`` or ``tool_schemas()``): malformed calls and the tool-call limit.

- A malformed call (bad JSON, unknown tool, arguments that break the schema, no closing tag)
  must come back as a message that says "error", never raise, and never end the episode with a
  reward.
- Repeating a well-formed call must end the episode with ``truncated=True`` and no reward within
  the env's ``max_tool_calls`` (plus one turn), and within 128 turns in any case.
"""

from __future__ import annotations

import json
from typing import Any

from rlvr.envs.check.episode import Session
from rlvr.envs.check.report import FAIL, PASS, CheckResult

__all__ = ["check_tools"]

_MAX_CALL_TURNS = 128  # a limit beyond this many turns of calls counts as no limit
_SAMPLES = {"string": "1+1", "integer": 1, "number": 1, "boolean": True, "array": [],
            "object": {}}


def check_tools(session: Session) -> list[CheckResult]:
    """Run the tool checks; no rows when the env offers no tools."""
    opening = session.play([], max_steps=0)
    offered = opening.reset_info.get("tools") or _env_tools(session)
    schemas = [s for s in offered or [] if isinstance(s, dict)]
    if not schemas:
        return []
    function = schemas[0].get("function", {})
    name = str(function.get("name", "tool"))
    return [_malformed(session, name), _limit(session, name, function.get("parameters") or {})]


def _env_tools(session: Session) -> Any:
    """The env's ``tool_schemas()`` (an env that announces its tools in a message), or None."""
    tool_schemas = getattr(session.env.unwrapped, "tool_schemas", None)
    try:
        return tool_schemas() if callable(tool_schemas) else None
    except Exception:  # the contract's "tool schemas well-formed" row reports it
        return None


def _call(name: str, arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _malformed(session: Session, name: str) -> CheckResult:
    calls = {
        "bad JSON": "<tool_call>\n{not json\n</tool_call>",
        "unknown tool": _call("no_such_tool_xyz", {}),
        "arguments break the schema": _call(name, {"no_such_argument": [[[]]]}),
        "no closing tag": f'<tool_call>\n{{"name": "{name}", "arguments": {{}}',
        "arguments not an object": _call(name, "just a string"),
    }
    problems = []
    for label, action in calls.items():
        episode = session.play(action, max_steps=1)
        if episode.error is not None:
            problems.append(f"{label}: {episode.error}")
            continue
        if not episode.steps:
            continue
        step = episode.steps[0]
        said_error = any("error" in str(m.get("content", "")).lower() for m in step.messages
                         if isinstance(m, dict))
        if step.reward > 0:
            problems.append(f"{label}: rewarded {step.reward:g}")
        elif not step.truncated and not said_error:
            problems.append(f"{label}: no message saying 'error' ({step.messages!r:.100})")
    if problems:
        return CheckResult(
            "tools", "malformed tool call gets an error message", FAIL, "; ".join(problems),
            "parse tool calls with rlvr.verifiers.tools.parse_tool_calls and answer a "
            "ToolCallError with a tool message (rlvr.verifiers.tools.format_error)")
    return CheckResult("tools", "malformed tool call gets an error message", PASS)


def _limit(session: Session, name: str, parameters: dict[str, Any]) -> CheckResult:
    properties = parameters.get("properties") or {}
    arguments = {key: _SAMPLES.get(str(spec.get("type")), "1")
                 for key, spec in properties.items() if isinstance(spec, dict)
                 and key in (parameters.get("required") or properties)}
    declared = getattr(session.env.unwrapped, "max_tool_calls", None)
    steps = min(int(declared) + 1, _MAX_CALL_TURNS) if isinstance(declared, int) else (
        _MAX_CALL_TURNS)
    episode = session.play(_call(name, arguments), max_steps=steps)
    row = "max-tool-calls limit truncates"
    fix = ("count tool calls per episode and end the episode with truncated=True and reward 0 "
           "when a turn would go past max_tool_calls")
    if episode.error is not None:
        return CheckResult("tools", row, FAIL, episode.error, fix)
    if not episode.ended:
        return CheckResult("tools", row, FAIL,
                           f"{len(episode.steps)} turns of tool calls did not end the episode",
                           fix)
    if not episode.truncated or episode.total_reward > 0:
        last = episode.steps[-1]
        return CheckResult("tools", row, FAIL,
                           f"ended with terminated={last.terminated}, truncated={last.truncated},"
                           f" reward {episode.total_reward:g}", fix)
    return CheckResult("tools", row, PASS, f"truncated after {len(episode.steps)} turn(s)")
