"""Rows in verl's RL data layout, read as rlvr tasks with no column mapping.

verl's preprocessing scripts (``examples/data_preprocess/*.py``) write one row per problem::

    data_source   str                    e.g. "openai/gsm8k"
    prompt        list of chat messages  [{"role": "system"|"user", "content": "..."}, ...]
    ability       str                    e.g. "math", "code"
    reward_model  {"style": "rule", "ground_truth": ...}
    extra_info    dict                   e.g. {"split": "train", "index": 7, ...}

A file is read in this layout when it has the columns ``prompt`` and ``reward_model`` and the
source was given no ``columns`` mapping. Each row becomes a task with:

- ``prompt`` and ``question``: the message list, used as the episode's opening messages as they
  are (system turns kept; the env's own system prompt and template are not applied);
- ``answer``: the ground truth when it is a string or a number (math sets: GSM8K, MATH, ...);
- ``tests``: when the ground truth is a code-test layout (below), the equivalent rlvr tests;
- ``metadata``: ``data_source``, ``ability``, ``reward_style`` and ``extra_info``, carried into
  ``reset``'s info as ``task_metadata``, into trajectories and into evaluation records.

Code ground truths (a dict, or a JSON string of one) that are understood:

- ``{"inputs": [...], "outputs": [...]}``: stdin/stdout cases (APPS, TACO, CodeContests,
  PRIME's Eurus-2 code, LiveCodeBench as converted by verl). An input or output given as a list
  of lines is joined with newlines.
- the same with ``"fn_name"``: function-call cases, ``inputs[i]`` the argument list. When every
  ``outputs[i]`` is a one-element list (APPS/TACO wrap each return value so), the element is the
  expected value.
- ``{"test": "<code defining check(candidate)>", "entry_point": "f"}`` (HumanEval's layout) or
  ``{"test_code": ..., "entry_point": ...}``: assert tests.
- rlvr's own ``{"kind": "call"|"stdio"|"assert", ...}`` dict, passed through.

Anything else (e.g. a list of bare ``assert`` lines without an entry point) leaves ``tests``
unset, and an env that needs tests then names the file and row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.envs.errors import TaskSourceError

LAYOUT_COLUMNS = ("prompt", "reward_model")
"""The columns whose presence marks a file as verl's layout."""

METADATA_COLUMNS = ("data_source", "ability", "extra_info")

ROLES = ("system", "user", "assistant", "tool")


def is_verl_layout(columns: Sequence[str]) -> bool:
    """True when a table with these columns is in verl's layout."""
    return all(column in columns for column in LAYOUT_COLUMNS)


def verl_task(row: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """Turn one verl-layout row into an rlvr task (see the module docstring).

    Args:
        row: the row's columns.
        where: ``"<file>: row <i>"``, named in errors.

    Raises:
        TaskSourceError: for a prompt that is not a message list or a missing ground truth.
    """
    messages = check_messages(row.get("prompt"), where=f"{where}: column 'prompt'")
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
        raise TaskSourceError(
            f"{where}: column 'reward_model' must be a dict with 'ground_truth' (verl's layout), "
            f"got {_describe(reward_model)}"
        )
    truth = reward_model["ground_truth"]
    task: dict[str, Any] = {"prompt": messages, "question": messages}
    if isinstance(truth, str | int | float) and not isinstance(truth, bool):
        task["answer"] = str(truth)
    tests = code_tests(truth)
    if tests is not None:
        task["tests"] = tests
    metadata = {key: row[key] for key in METADATA_COLUMNS if row.get(key) is not None}
    if reward_model.get("style") is not None:
        metadata["reward_style"] = reward_model["style"]
    task["metadata"] = metadata
    return task


def check_messages(value: Any, *, where: str) -> list[dict[str, str]]:
    """A chat message list, checked: each a dict with a known ``role`` and a str ``content``.

    Raises:
        TaskSourceError: naming ``where`` and the first bad message.
    """
    if not is_message_list(value):
        raise TaskSourceError(
            f"{where}: expected a list of chat messages ({{'role', 'content'}} dicts), got "
            f"{_describe(value)}"
        )
    out = []
    for i, message in enumerate(value):
        role, content = message.get("role"), message.get("content")
        if role not in ROLES or not isinstance(content, str):
            raise TaskSourceError(
                f"{where}: message {i} must have a role in {list(ROLES)} and a str content, got "
                f"role={role!r}, content of type {type(content).__name__}"
            )
        out.append({"role": str(role), "content": content})
    return out


def is_message_list(value: Any) -> bool:
    """True for a non-empty list of dicts that each have a ``role`` (a chat message list)."""
    return (
        isinstance(value, list | tuple)
        and len(value) > 0
        and all(isinstance(m, Mapping) and "role" in m for m in value)
    )


def code_tests(truth: Any) -> dict[str, Any] | None:
    """The rlvr tests dict for a code ground truth in a supported layout, else None."""
    if isinstance(truth, str):
        text = truth.strip()
        if not text.startswith("{"):
            return None
        try:
            truth = json.loads(text)
        except ValueError:
            return None
    if not isinstance(truth, Mapping):
        return None
    if truth.get("kind") in ("call", "stdio", "assert"):
        return dict(truth)
    test_code = truth.get("test_code", truth.get("test"))
    if isinstance(test_code, str) and isinstance(truth.get("entry_point"), str):
        return {"kind": "assert", "test_code": test_code, "entry_point": truth["entry_point"]}
    inputs, outputs = truth.get("inputs"), truth.get("outputs")
    if not isinstance(inputs, list | tuple) or not isinstance(outputs, list | tuple):
        return None
    if len(inputs) != len(outputs) or not inputs:
        return None
    fn_name = truth.get("fn_name")
    if isinstance(fn_name, str) and fn_name:
        return _call_tests(fn_name, list(inputs), list(outputs))
    return {
        "kind": "stdio",
        "cases": [[_text(i), _text(o)] for i, o in zip(inputs, outputs)],
    }


def _call_tests(fn_name: str, inputs: list[Any], outputs: list[Any]) -> dict[str, Any]:
    wrapped = all(isinstance(o, list | tuple) and len(o) == 1 for o in outputs)
    cases = []
    for args, expected in zip(inputs, outputs):
        args = list(args) if isinstance(args, list | tuple) else [args]
        cases.append([args, expected[0] if wrapped else expected])
    return {"kind": "call", "function": fn_name, "cases": cases}


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "\n".join(str(v) for v in value)
    return str(value)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"
