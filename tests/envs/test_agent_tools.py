"""Tool schemas for agents: the tool envs ship their tools' JSON schemas with every task.

An agent that calls tools natively passes ``task.tools`` as ``tools=``; the schemas come from
``reset``'s info or, for an env that announces its tools in a message (rlvr/CompactToolUse-v0),
from the env's ``tool_schemas()``. ``check-env`` checks that they are well formed.
"""

from __future__ import annotations

import re

import gymnasium
import pytest

from rlvr.envs import AgentEnv, check_env
from rlvr.envs.check import PASS
from rlvr.envs.check.tool_schemas import schema_problems
from rlvr.envs.registration import import_plugins

CALCULATOR_AGENTS = ["examples/Calculator-v0", "examples/NativeCalculator-v0"]


@pytest.fixture(scope="module", autouse=True)
def _examples():
    import_plugins(["examples.calculator_agent", "examples.native_tools_agent"])


async def _agent(client, task):  # never played here: only reset and grading
    return ""


@pytest.mark.parametrize("env_id", CALCULATOR_AGENTS)
def test_the_calculator_agents_get_the_tools_schema_with_each_task(env_id):
    env = gymnasium.make(env_id)
    env.reset(seed=0)
    task = env.unwrapped.agent_task()
    assert schema_problems(task.tools) == []
    (tool,) = task.tools
    assert tool["type"] == "function" and tool["function"]["name"] == "calculator"
    parameters = tool["function"]["parameters"]
    assert parameters["properties"]["expression"]["type"] == "string"
    assert parameters["required"] == ["expression"]
    roles = [m["role"] for m in task.messages]
    assert roles == (["system", "user"] if env_id == "examples/Calculator-v0" else ["user"])


@pytest.mark.parametrize(("env_id", "names"), [
    ("rlvr/ToolUse-v0", ["search", "calculator", "python"]),
    ("rlvr/CompactToolUse-v0", ["calculator"]),
])
def test_agents_over_the_tool_envs_get_their_toolset(env_id, names):
    env = AgentEnv(_agent, env=env_id)
    env.reset(seed=0)
    assert [t["function"]["name"] for t in env.agent_task().tools] == names


def test_an_env_without_tools_gives_none():
    env = AgentEnv(_agent, env="rlvr/CompactToolUse-v0", tools=[])
    env.reset(seed=0)
    assert env.agent_task().tools is None


@pytest.mark.parametrize("env_id", CALCULATOR_AGENTS)
def test_check_env_checks_the_schemas_and_the_tool_calls_of_the_agent_envs(env_id):
    report = check_env(gymnasium.make(env_id), deep=True)
    rows = {r.name: r.status for r in report.results}
    assert rows["tool schemas well-formed"] == PASS
    assert [r.status for r in report.results if r.topic == "tools"] == [PASS, PASS]


@pytest.mark.parametrize(("schemas", "needle"), [
    ({"type": "function"}, "tools is a dict, not a list"),
    ([{"name": "calculator"}], r"tools\[0\] is not"),
    ([{"type": "function", "function": {"name": "my tool"}}], "is not 1-64 of"),
    ([{"type": "function", "function": {"name": "a"}}] * 2, "'a' is a duplicate"),
    ([{"type": "function", "function": {"name": "a", "description": 3}}], "description"),
    ([{"type": "function", "function": {"name": "a", "parameters": {"type": "string"}}}],
     "parameters is not a JSON object schema"),
    ([{"type": "function", "function": {"name": "a", "parameters": {
        "type": "object", "properties": {"x": {}}, "required": ["y"]}}}], r"required \['y'\]"),
])
def test_malformed_schemas_are_named(schemas, needle):
    problems = schema_problems(schemas)
    assert len(problems) == 1 and re.search(needle, problems[0]), problems
