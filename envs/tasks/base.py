"""The task-source protocol and the small helpers every source shares."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rlvr.envs.errors import TaskSourceError

Task = dict[str, Any]
"""One task: a dict with a string ``task_id`` plus the fields its environment reads."""

SPLITS = ("train", "test")


@runtime_checkable
class TaskSource(Protocol):
    """A finite, indexable, deterministic collection of tasks.

    ``source[i]`` returns a fresh task dict that always carries a string ``task_id`` unique
    within the source; ``split`` names the partition (``"train"``, ``"test"``, ...).
    Environments pick ``source[i]`` at ``reset`` and keep the task (and its gold answer) to
    themselves.
    """

    split: str

    def __len__(self) -> int:
        """Number of tasks."""
        ...

    def __getitem__(self, index: int) -> Task:
        """The task at ``index`` (0 <= index < len)."""
        ...


class ListSource:
    """Tasks given as a list of dicts (tests, small hand-made sets, the README example).

    Args:
        tasks: the task dicts; those without a ``task_id`` get ``"{name}/{split}/{index}"``.
        split: the split label.
        name: used in generated task ids.
        required: fields every task must have (checked here, naming the index).
    """

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]],
        *,
        split: str = "train",
        name: str = "list",
        required: Sequence[str] = (),
    ) -> None:
        self.split = split
        self.name = name
        self._tasks: list[Task] = []
        for index, task in enumerate(tasks):
            if not isinstance(task, Mapping):
                raise TaskSourceError(
                    f"{name}: task {index} must be a dict, got {type(task).__name__}"
                )
            missing = [key for key in required if key not in task]
            if missing:
                raise TaskSourceError(
                    f"{name}: task {index} is missing field(s) {missing}; "
                    f"required: {list(required)}"
                )
            row = dict(task)
            row.setdefault("task_id", f"{name}/{split}/{index}")
            self._tasks.append(row)

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index: int) -> Task:
        return json.loads(json.dumps(self._tasks[check_index(self, index)]))

    def __iter__(self) -> Iterator[Task]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"ListSource(name={self.name!r}, split={self.split!r}, n={len(self)})"


def check_index(source: Any, index: int) -> int:
    """Validate ``index`` against ``len(source)`` (negative indices count from the end)."""
    size = len(source)
    if isinstance(index, bool) or not isinstance(index, int):
        raise TaskSourceError(f"task index must be an int, got {type(index).__name__}")
    if not -size <= index < size:
        raise TaskSourceError(f"task index {index} out of range for {size} tasks")
    return index % size


def check_split(split: str, allowed: Sequence[str] = SPLITS) -> str:
    """Validate a split name for a source with fixed splits."""
    if split not in allowed:
        raise TaskSourceError(f"split must be one of {list(allowed)}, got {split!r}")
    return split


def stable_fraction(key: str) -> float:
    """A hash of ``key`` mapped to [0, 1), identical across processes and machines."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSON-lines file; a bad line raises an error naming the file and line number."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskSourceError(f"cannot read task file {path}: {exc}") from exc
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise TaskSourceError(f"{path}: line {line_number}: invalid JSON ({exc})") from exc
        if not isinstance(row, dict):
            raise TaskSourceError(
                f"{path}: line {line_number}: expected a JSON object, got {type(row).__name__}"
            )
        rows.append(row)
    return rows


DATA_DIR = Path(__file__).parent / "data"
"""Where the bundled task files live."""


