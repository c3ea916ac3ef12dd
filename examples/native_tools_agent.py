"""The calculator task with native tool calling: ``tools=``, ``tool_calls``, ``tool_call_id``.

The same task as ``examples/calculator_agent.py``, written the way agents for the OpenAI API
usually are: the tools go in the request as JSON schemas (``task.tools``, which the env ships),
the calls come back parsed in ``message.tool_calls``, and each result goes back as a ``tool``
message with the call's id:

    rlvr train configs/tool_quickstart.yaml env.id=examples/NativeCalculator-v0 \
        --import examples.native_tools_agent

The env is rlvr/CompactToolUse-v0 with ``announce="template"``: no tool line in the messages,
the schemas in ``task.tools``. The tool quickstart's tiny model (``model.tiny.tool_prompt:
line``) renders a request's ``tools`` as the one line ``Tools: calculator(expression)``, the
tokens its scripted warm-up shows it, so the agent learns as the content-parsing example does.
"""

import json

from rlvr.envs import register_agent
from rlvr.envs.calculator import evaluate, format_number


def calculator(expression: str) -> str:
    """The tool: evaluate ``expression`` exactly, or say what went wrong."""
    try:
        return format_number(evaluate(str(expression)))
    except Exception as exc:  # a bad call is the model's mistake: show it, never crash
        return f"Error: {exc}"


def run_tool(name: str, arguments: str) -> str:
    """Run one call of ``message.tool_calls`` (its arguments are a JSON string)."""
    try:
        args = json.loads(arguments)
    except ValueError:
        return f"Error: arguments are not JSON: {arguments!r}"
    if name != "calculator" or not isinstance(args, dict):
        return f"Error: unknown tool {name!r}"
    return calculator(args.get("expression", ""))


async def native_tools_agent(client, task):
    """Ask with the task's tools, run the calls the model makes, repeat until it answers."""
    messages = list(task.messages)  # the question
    content = ""
    for _ in range(3):
        reply = await client.chat.completions.create(model="policy", messages=messages,
                                                     tools=task.tools)
        message = reply.choices[0].message
        content = message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return content  # the final answer ("... Answer: 20126"), graded by the env
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": run_tool(call.function.name, call.function.arguments)})
    return content


# Tasks and grading from the built-in env; its tools reach the agent as task.tools.
register_agent("examples/NativeCalculator-v0", native_tools_agent, env="rlvr/CompactToolUse-v0",
               announce="template")
