"""MCP tool servers as tools of rlvr/ToolUse-v0 and rlvr/CompactToolUse-v0, against a real server.

The server (tests/envs/mcp_server.py) is written with the ``mcp`` package and runs as a child
process over stdio, as a user's would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from rlvr import envs  # noqa: E402
from rlvr.envs import EnvArgumentError, check_env  # noqa: E402
from rlvr.envs.check import PASS  # noqa: E402

pytestmark = pytest.mark.slow  # a server process starts (seconds)

SERVER = f"{sys.executable} {Path(__file__).with_name('mcp_server.py')}"
TASKS = [{"question": "What is 2 + 3?", "answer": "5"}]


def call(name, arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_the_servers_tools_are_offered_with_their_own_schemas():
    env = envs.make("rlvr/ToolUse-v0", tools=["calculator", {"mcp": SERVER}], source=TASKS)
    _, info = env.reset(seed=0)
    by_name = {t["function"]["name"]: t["function"] for t in info["tools"]}
    assert list(by_name) == ["calculator", "add", "lookup", "fail", "sleep"]
    assert by_name["add"]["description"] == "Add two integers."
    assert by_name["add"]["parameters"]["properties"]["a"]["type"] == "integer"
    assert by_name["add"]["parameters"]["required"] == ["a", "b"]
    compact = envs.make("rlvr/CompactToolUse-v0", tools=[{"mcp": SERVER, "tools": ["lookup"]}])
    assert compact.unwrapped.system_prompt == "Tools: lookup(key)"


def test_calls_are_forwarded_and_answered_as_tool_messages():
    env = envs.make("rlvr/ToolUse-v0", tools=[{"mcp": SERVER, "timeout_s": 20}], source=TASKS)
    env.reset(seed=0)
    messages, reward, terminated, truncated, info = env.step(
        call("add", {"a": 2, "b": 3}) + call("lookup", {"key": "Alderholm"}))
    assert messages == [{"role": "tool", "name": "add", "content": "5"},
                        {"role": "tool", "name": "lookup", "content": "Vesk"}]
    assert (reward, terminated, truncated, info["tool_errors"]) == (0.0, False, False, 0)
    _, reward, terminated, _, info = env.step("Answer: 5")
    assert (reward, terminated, info["verdict"].passed) == (1.0, True, True)


def test_errors_and_timeouts_come_back_like_a_built_in_tools():
    env = envs.make("rlvr/ToolUse-v0", tools=[{"mcp": SERVER, "timeout_s": 2}], source=TASKS)
    env.reset(seed=0)
    messages, _, terminated, _, info = env.step(
        call("sleep", {"seconds": 6}) + call("add", {"a": "x"}) + call("nope", {}))
    contents = [m["content"] for m in messages]
    assert contents[0].startswith("Error (tool_error): McpToolError: sleep")
    assert "timed out" in contents[0]
    assert contents[1].startswith("Error (schema_violation)")  # checked before it is sent
    assert contents[2].startswith("Error (unknown_tool)")
    assert not terminated and info["tool_errors"] == 3
    slow = envs.make("rlvr/ToolUse-v0", tools=[{"mcp": SERVER, "timeout_s": 30}], source=TASKS)
    slow.reset(seed=0)
    messages, *_ = slow.step(call("fail", {"message": "boom"}) + call("add", {"a": 1, "b": 1}))
    assert messages[0]["content"].startswith("Error (tool_error): McpToolError")
    assert messages[1]["content"] == "2"  # the connection outlives a failed and a timed-out call


def test_bad_entries_name_the_problem():
    with pytest.raises(EnvArgumentError, match=r"unknown key\(s\) \['timeout'\]"):
        envs.make("rlvr/ToolUse-v0", tools=[{"mcp": SERVER, "timeout": 3}], source=TASKS)
    with pytest.raises(EnvArgumentError, match=r"has no tool\(s\) \['divide'\]"):
        envs.make("rlvr/ToolUse-v0", tools=[{"mcp": SERVER, "tools": ["divide"]}], source=TASKS)
    with pytest.raises(EnvArgumentError, match="cannot connect to the MCP server"):
        envs.make("rlvr/ToolUse-v0", tools=[{"mcp": "/nonexistent/mcp-server"}], source=TASKS)


def test_a_tool_env_on_mcp_tools_passes_check_env():
    env = envs.make("rlvr/ToolUse-v0", tools=[{"mcp": SERVER}], max_tool_calls=2)  # facts tasks
    report = check_env(env, deep=True, tasks=1, raise_on_failure=False)
    assert [r.status for r in report.results if r.topic == "tools"] == [PASS, PASS], report.table()
    assert report.passed, report.table()


def test_the_example_calculator_server_answers_as_the_built_in_calculator():
    example = Path(__file__).parents[2] / "examples" / "mcp_calculator_server.py"
    mcp_env = envs.make("rlvr/CompactToolUse-v0", tools=[{"mcp": f"{sys.executable} {example}"}])
    built_in = envs.make("rlvr/CompactToolUse-v0")
    assert mcp_env.unwrapped.system_prompt == built_in.unwrapped.system_prompt
    for expression in ("347*58", "(12+30)/4", "2**"):
        replies = []
        for env in (mcp_env, built_in):
            env.reset(seed=0)
            messages, _, _, _, info = env.step(call("calculator", {"expression": expression}))
            replies.append((messages[0]["content"].split(":")[0], info["tool_errors"]))
        assert replies[0] == replies[1], expression  # the same result, or both a tool error
