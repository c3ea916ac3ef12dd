"""Multi-step tool-use tasks over the bundled collection of (fictional) facts.

Every question combines two facts of the same kind ("What is the total population of Alderholm
and Brennick?"): the model has to look both up (``search``) and compute (``calculator`` or
``python``). The facts are invented so that a model cannot answer from memory. A question lands
in the test split when a stable hash of its text falls below ``test_fraction``.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

from rlvr.envs.errors import TaskSourceError
from rlvr.envs.tasks.base import (
    DATA_DIR,
    Task,
    check_index,
    check_split,
    read_jsonl,
    stable_fraction,
)

FACTS_FILE = DATA_DIR / "facts.jsonl"

_QUESTIONS = {
    "sum": "What is the {attribute} of {a} plus the {attribute} of {b}?",
    "difference": "How much greater is the {attribute} of {a} than the {attribute} of {b}?",
}


def load_facts(path: str | Path = FACTS_FILE) -> list[dict[str, Any]]:
    """Read a facts file: JSON lines with string ``id``, ``title`` and ``text``.

    Rows used for task generation also carry ``entity``, ``attribute`` and a numeric ``value``.
    """
    rows = read_jsonl(path)
    for line, row in enumerate(rows, start=1):
        missing = [key for key in ("id", "title", "text") if not isinstance(row.get(key), str)]
        if missing:
            raise TaskSourceError(f"{path}: row {line}: missing string field(s) {missing}")
    return rows


class FactTaskSource:
    """Two-fact arithmetic questions answered with tools.

    Args:
        split: ``"train"`` or ``"test"``.
        n_tasks: how many questions; None = all that exist for the split.
        seed: the order in which questions are drawn.
        test_fraction: share of all questions in the test split.
        facts_path: a facts file (default: the bundled one).

    Each task is ``{"task_id", "question", "answer", "facts": [id_a, id_b]}``.
    """

    def __init__(
        self,
        split: str = "train",
        *,
        n_tasks: int | None = None,
        seed: int = 0,
        test_fraction: float = 0.2,
        facts_path: str | Path = FACTS_FILE,
    ) -> None:
        self.split = check_split(split)
        if n_tasks is not None and n_tasks < 1:
            raise TaskSourceError(f"n_tasks must be >= 1, got {n_tasks}")
        if not 0.0 < test_fraction < 1.0:
            raise TaskSourceError(f"test_fraction must be in (0, 1), got {test_fraction}")
        facts = [row for row in load_facts(facts_path) if isinstance(row.get("value"), int | float)]
        candidates = [
            task
            for task in _all_questions(facts)
            if (stable_fraction(task["question"]) < test_fraction) == (split == "test")
        ]
        random.Random(f"facts:{seed}:{split}").shuffle(candidates)
        if n_tasks is None:
            n_tasks = len(candidates)
        if n_tasks > len(candidates):
            raise TaskSourceError(
                f"FactTaskSource: only {len(candidates)} {split} questions exist; "
                f"n_tasks={n_tasks} is too many"
            )
        self._tasks = candidates[:n_tasks]

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index: int) -> Task:
        task = self._tasks[check_index(self, index)]
        return {**task, "facts": list(task["facts"])}

    def __repr__(self) -> str:
        return f"FactTaskSource(split={self.split!r}, n={len(self)})"


def _all_questions(facts: list[dict[str, Any]]) -> list[Task]:
    tasks: list[Task] = []
    by_attribute: dict[str, list[dict[str, Any]]] = {}
    for fact in facts:
        by_attribute.setdefault(str(fact.get("attribute")), []).append(fact)
    for attribute, group in sorted(by_attribute.items()):
        for first, second in itertools.permutations(group, 2):
            for operation, template in _QUESTIONS.items():
                if operation == "difference" and first["value"] <= second["value"]:
                    continue
                if operation == "sum" and first["id"] > second["id"]:
                    continue
                value = first["value"] + second["value"]
                if operation == "difference":
                    value = first["value"] - second["value"]
                question = template.format(
                    attribute=attribute, a=first["entity"], b=second["entity"]
                )
                tasks.append(
                    {
                        "task_id": f"facts:{operation}:{first['id']}:{second['id']}",
                        "question": question,
                        "answer": str(value),
                        "facts": [first["id"], second["id"]],
                    }
                )
    return tasks
