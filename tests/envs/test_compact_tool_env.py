import json

import pytest

from rlvr import envs
from rlvr.envs.compact_tool_env import CompactToolUseEnv, tool_line


def _call(expression, name="calculator"):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': {'expression': expression}})}" \
           "\n</tool_call>"


def test_one_line_tool_prompt_and_no_schemas_for_the_template():
    env = envs.make("rlvr/CompactToolUse-v0", split="test")
    messages, info = env.reset(seed=0)
    assert messages[0] == {"role": "system", "content": "Tools: calculator(expression)"}
    assert messages[1]["role"] == "user" and "*" in messages[1]["content"]
    assert "tools" not in info


def test_call_then_answer_is_rewarded_on_the_answer_turn():
    env = CompactToolUseEnv("train")
    env.reset(seed=3)
    task = env.task
    obs, reward, terminated, truncated, info = env.step(_call(task["expression"]))
    assert obs == [{"role": "tool", "name": "calculator", "content": task["answer"]}]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert (info["tool_calls"], info["tool_errors"]) == (1, 0)
    obs, reward, terminated, _, info = env.step(task["answer"])
    assert (obs, reward, terminated) == ([], 1.0, True) and info["verdict"].passed


@pytest.mark.parametrize("action", [_call("347*"), _call("2", name="calc"),
                                    '<tool_call>\n{"name": "calculator"\n</tool_call>',
                                    '<tool_call>\n{"name": "calculator", "arguments": {}}'])
def test_bad_calls_are_tool_errors_not_crashes(action):
    env = CompactToolUseEnv("train")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs[0]["role"] == "tool" and obs[0]["content"].startswith("Error")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["tool_errors"] == 1


def test_without_tools_there_is_no_system_message_and_calls_fail():
    env = envs.make("rlvr/CompactToolUse-v0", tools=[])
    messages, _ = env.reset(seed=0)
    assert [m["role"] for m in messages] == ["user"]
    obs, _, _, _, info = env.step(_call("1*2"))
    assert "unknown tool" in obs[0]["content"] and info["tool_errors"] == 1


def test_turn_and_call_budgets_truncate():
    env = CompactToolUseEnv("train", max_tool_calls=5, max_turns=2)
    env.reset(seed=0)
    env.step(_call("1*2"))
    _, reward, terminated, truncated, info = env.step(_call("1*2"))
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["stop_reason"] == "max_turns"


def test_tool_line_lists_signatures():
    schemas = CompactToolUseEnv("train", tools=["calculator", "lookup"]).tool_schemas()
    assert tool_line(schemas) == "Tools: calculator(expression), lookup(title)"
    assert tool_line([]) is None


def test_announce_template_gives_the_schemas_to_the_template_and_writes_no_line():
    env = envs.make("rlvr/CompactToolUse-v0", split="test", announce="template")
    messages, info = env.reset(seed=0)
    assert [m["role"] for m in messages] == ["user"]
    assert info["tools"] == env.unwrapped.tool_schemas()
    assert [t["function"]["name"] for t in info["tools"]] == ["calculator"]
    with pytest.raises(ValueError, match=r"announce must be one of \['line', 'template'\]"):
        CompactToolUseEnv(announce="schema")
