import json

import pytest

from rlvr.envs import EnvArgumentError, EpisodeOverError, ToolUseEnv
from rlvr.envs.tasks import load_facts


def _call(name, **arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _facts(task):
    by_id = {fact["id"]: fact for fact in load_facts()}
    return [by_id[i] for i in task["facts"]]


def test_full_episode_two_lookups_then_compute():
    env = ToolUseEnv("test")
    messages, info = env.reset(seed=5)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "<tool_call>" in messages[0]["content"]
    assert [t["function"]["name"] for t in info["tools"]] == ["search", "calculator", "python"]
    task = env.task
    first, second = _facts(task)

    turn = _call("search", query=f"{first['attribute']} {first['entity']}", k=1) + _call(
        "search", query=f"{second['attribute']} {second['entity']}", k=1
    )
    messages, reward, terminated, truncated, info = env.step(turn)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert [m["role"] for m in messages] == ["tool", "tool"]
    assert messages[0]["name"] == "search" and str(first["value"]) in messages[0]["content"]
    assert str(second["value"]) in messages[1]["content"]
    assert info["tool_calls"] == 2 and info["tool_errors"] == 0

    operator = "+" if "plus" in task["question"] else "-"
    messages, _, _, _, info = env.step(
        "Now compute. "
        + _call("calculator", expression=f"{first['value']} {operator} {second['value']}")
    )
    (result,) = messages
    assert result == {"role": "tool", "name": "calculator", "content": task["answer"]}

    messages, reward, terminated, truncated, info = env.step(f"Answer: {result['content']}")
    assert (messages, reward, terminated, truncated) == ([], 1.0, True, False)
    assert info["verdict"].passed and info["tool_calls"] == 3
    with pytest.raises(EpisodeOverError):
        env.step("Answer: 1")


def test_wrong_final_answer():
    env = ToolUseEnv("test")
    env.reset(seed=1)
    _, reward, terminated, _, info = env.step("Answer: -1")
    assert (reward, terminated, info["verdict"].passed) == (0.0, True, False)


def test_malformed_and_unknown_calls_become_tool_messages():
    env = ToolUseEnv("train")
    env.reset(seed=0)
    turn = (
        "<tool_call>{not json}</tool_call>"
        + _call("browser", url="x")
        + _call("calculator", expr="1+1")
        + _call("calculator", expression="1/0")
        + '<tool_call>{"name": "search", "arguments": {"query": "x"}}'
    )
    messages, reward, terminated, truncated, info = env.step(turn)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert [m["name"] for m in messages] == [
        "invalid",
        "browser",
        "calculator",
        "calculator",
        "invalid",
    ]
    contents = [m["content"] for m in messages]
    assert contents[0].startswith("Error (bad_json)")
    assert contents[1].startswith("Error (unknown_tool)")
    assert "available tools: calculator, python, search" in contents[1]
    assert contents[2].startswith("Error (schema_violation)")
    assert contents[3] == "Error: division by zero"
    assert contents[4].startswith("Error (missing_close_tag)")
    assert info["tool_calls"] == 5 and info["tool_errors"] == 4


def test_max_tool_calls_truncates():
    env = ToolUseEnv("train", max_tool_calls=3)
    env.reset(seed=0)
    env.step(_call("calculator", expression="1") + _call("calculator", expression="2"))
    messages, reward, terminated, truncated, info = env.step(
        _call("calculator", expression="3") + _call("calculator", expression="4")
    )
    assert (messages, reward, terminated, truncated) == ([], 0.0, False, True)
    assert info["stop_reason"] == "max_tool_calls" and info["tool_calls"] == 2


def test_max_turns_truncates():
    env = ToolUseEnv("train", max_turns=2)
    env.reset(seed=0)
    assert env.step(_call("calculator", expression="1"))[3] is False
    messages, _, terminated, truncated, info = env.step(_call("calculator", expression="1"))
    assert (messages, terminated, truncated, info["stop_reason"]) == ([], False, True, "max_turns")


def test_custom_function_tools_and_tasks():
    def population(town: str) -> int:
        """Population of a town.

        Args:
            town: the town's name.
        """
        return {"A": 10, "B": 32}[town]

    env = ToolUseEnv(
        source=[{"question": "A plus B?", "answer": "42"}],
        tools=[population, "calculator"],
        system_prompt=None,
    )
    messages, info = env.reset(seed=0)
    assert messages == [{"role": "user", "content": "A plus B?"}]
    assert info["tools"][0]["function"]["parameters"]["required"] == ["town"]
    messages = env.step(_call("population", town="A") + _call("population", town="Z"))[0]
    assert messages[0]["content"] == "10"
    assert messages[1]["content"].startswith("Error (tool_error): KeyError")
    assert env.step("\\boxed{42}")[1] == 1.0


def test_bad_arguments():
    with pytest.raises(EnvArgumentError, match="max_tool_calls must be an int >= 1"):
        ToolUseEnv(max_tool_calls=0)
    with pytest.raises(EnvArgumentError, match="tools must be a list"):
        ToolUseEnv(tools="calculator")
