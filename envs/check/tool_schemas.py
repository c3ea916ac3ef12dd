"""Tool schemas an agent can pass as ``tools=``: the OpenAI function format, checked field by field.

An env's tools reach agents as ``rlvr.envs.AgentTask.tools`` (``reset``'s ``info["tools"]``, or
the env's ``tool_schemas()``) and chat templates as ``info["tools"]``. The gateway refuses a
request whose tools are malformed (400), so a malformed schema would fail every episode of an
agent that forwards it; the checker fails it first.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["schema_problems"]

#: The names the OpenAI API accepts for a function (and what the gateway's clients send).
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def schema_problems(schemas: Any) -> list[str]:
    """What is wrong with ``schemas`` as a list of OpenAI function tools; empty when nothing.

    Each entry must be ``{"type": "function", "function": {"name", "description"?,
    "parameters"?}}`` with a name of 1-64 letters, digits, ``_`` or ``-``, unique in the list;
    ``description`` a string; ``parameters`` a JSON object schema (``"type": "object"``, its
    ``properties`` a mapping of schemas, its ``required`` names among them).
    """
    if not isinstance(schemas, list):
        return [f"tools is a {type(schemas).__name__}, not a list"]
    problems: list[str] = []
    seen: set[str] = set()
    for i, schema in enumerate(schemas):
        function = schema.get("function") if isinstance(schema, dict) else None
        if not isinstance(schema, dict) or schema.get("type") != "function" or not isinstance(
                function, dict):
            problems.append(f"tools[{i}] is not {{'type': 'function', 'function': {{...}}}}")
            continue
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            problems.append(f"tools[{i}].function.name {name!r} is not 1-64 of [A-Za-z0-9_-]")
        elif name in seen:
            problems.append(f"tools[{i}].function.name {name!r} is a duplicate")
        else:
            seen.add(name)
        if not isinstance(function.get("description", ""), str):
            problems.append(f"tools[{i}].function.description is not a string")
        if "parameters" in function:
            problems += [f"tools[{i}].function.parameters{p}"
                         for p in _object_schema_problems(function["parameters"])]
    return problems


def _object_schema_problems(parameters: Any) -> list[str]:
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        return [" is not a JSON object schema ({'type': 'object', ...})"]
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict) or not all(isinstance(v, dict)
                                                   for v in properties.values()):
        return [".properties is not a mapping of name -> schema"]
    required = parameters.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) and r in properties
                                                 for r in required):
        return [f".required {required!r} names parameters not in properties"]
    return []
