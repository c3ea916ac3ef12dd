"""The tool quickstart's calculator task, written as a plain OpenAI-client agent.

The agent keeps its own chat history and tool loop; rlvr trains the model behind the client:

    rlvr train configs/tool_quickstart.yaml env.id=examples/Calculator-v0 \
        --import examples.calculator_agent

The tiny quickstart model announces tools in one line (rlvr/CompactToolUse-v0) and writes Hermes
``<tool_call>`` blocks in its text, so this agent reads the calls from the reply's content. With
a model whose chat template renders tool schemas, pass ``tools=[...]`` and read
``message.tool_calls`` instead (see docs/gateway.md).
"""

import json
import re

from rlvr.envs import register_agent
from rlvr.envs.calculator import evaluate, format_number

CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def calculator(arguments: dict) -> str:
    """The tool: evaluate ``arguments["expression"]`` exactly, or say what went wrong."""
    try:
        return format_number(evaluate(str(arguments["expression"])))
    except Exception as exc:  # a bad call is the model's mistake: show it, never crash
        return f"Error: {exc}"


async def calculator_agent(client, task):
    """Ask, run the calculator calls the model writes, repeat until it answers."""
    messages = list(task.messages)  # system "Tools: calculator(expression)" + the question
    text = ""
    for _ in range(3):
        reply = await client.chat.completions.create(model="policy", messages=messages)
        text = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        calls = CALL.findall(text)
        if not calls:
            return text  # the final answer ("... Answer: 20126"), graded by the env
        for body in calls:
            try:
                arguments = json.loads(body)["arguments"]
            except (ValueError, KeyError, TypeError):
                arguments = {}
            messages.append({"role": "tool", "name": "calculator",
                             "content": calculator(arguments)})
    return text


# Tasks and grading come from the built-in env: a reply without tool calls is its answer.
register_agent("examples/Calculator-v0", calculator_agent, env="rlvr/CompactToolUse-v0")
