"""Tasks from the ``datasets`` library: local JSON-lines/JSON/parquet files, or a hub name."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.envs.errors import TaskSourceError
from rlvr.envs.tasks.base import DATA_DIR, Task, check_index, check_split, stable_fraction
from rlvr.envs.tasks.verl_layout import check_messages, is_message_list, is_verl_layout, verl_task

_LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class DatasetSource:
    """Tasks read through ``datasets``, renamed with a column mapping.

    Args:
        path: a local ``.jsonl``/``.json``/``.parquet`` file, or a hub dataset name (needs
            network access and, for a hub name, ``hub_split``/``hub_config`` as needed).
        split: the split label; for a hub dataset also the split loaded unless ``hub_split``
            says otherwise.
        columns: task field -> dataset column, e.g. ``{"question": "problem", "answer":
            "solution"}``. Fields not mapped keep their column name. A nested column is named by
            its dotted path: ``{"answer": "reward_model.ground_truth"}``.
        required: task fields every row must have, non-null (the env using the source sets it).
        text_fields: task fields that go into a prompt: each must hold a string, or a list of
            chat messages (then used as the opening messages); any other type is an error
            naming the file, row and column, never a stringified object in a prompt.
        id_column: the column holding a task id; default ``"{stem}/{split}/{row}"``.
        json_fields: task fields whose value may be a JSON string to decode (e.g. ``tests``).
        split_column: keep only rows whose value in this column equals ``split`` (one file
            holding several splits).
        holdout: hold out this fraction of a local file's rows (0 < holdout < 1): split
            ``"train"`` is the other rows, every other split (``"test"``) the held-out ones.
            The rows are chosen by a seeded hash of their row number (``holdout_seed``), the
            same on every machine; ``round(holdout * rows)`` rows are held out, at least one.
            Not with ``split_column`` or a hub dataset (their splits are already apart).
            Without either, every split of one file holds the same rows (``selection`` tells
            a trainer so: it refuses to call them held-out).
        holdout_seed: the seed of the ``holdout`` choice.
        hub_split: the hub split to load when it differs from ``split``.
        hub_config: the hub configuration name, if any.

    A file in verl's RL layout (columns ``prompt`` and ``reward_model``; see
    :mod:`rlvr.envs.tasks.verl_layout`) is read as such when no ``columns`` mapping is given.

    A row that lacks a required field (or whose JSON field does not decode) raises
    :class:`~rlvr.envs.errors.TaskSourceError` naming the file and the row, when it is read.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        split: str = "train",
        columns: Mapping[str, str] | None = None,
        required: Sequence[str] = (),
        text_fields: Sequence[str] = (),
        id_column: str | None = None,
        json_fields: Sequence[str] = (),
        split_column: str | None = None,
        hub_split: str | None = None,
        hub_config: str | None = None,
        holdout: float | None = None,
        holdout_seed: int = 0,
    ) -> None:
        self.path = str(path)
        self.split = split
        self.columns = dict(columns or {})
        self.required = tuple(required)
        self.text_fields = tuple(text_fields)
        self.id_column = id_column
        self.json_fields = tuple(json_fields)
        self.holdout: tuple[float, int, int, int] | None = None
        self._rows = _load(self.path, hub_split or split, hub_config, _mtime(self.path))
        available = list(self._rows.column_names)
        self.layout = "verl" if not self.columns and is_verl_layout(available) else "columns"
        wanted = [] if self.layout == "verl" else [self._column(f) for f in self.required]
        wanted += [c for c in (id_column, split_column) if c is not None]
        missing = [column for column in wanted if column.split(".")[0] not in available]
        if missing:
            raise TaskSourceError(
                f"{self.path}: column(s) {missing} not found; the file has columns {available}. "
                "Map task fields to columns with columns={'question': '<column>', ...}"
            )
        if split_column is not None:
            keep = [i for i, value in enumerate(self._rows[split_column]) if value == split]
            if not keep:
                found = sorted({str(v) for v in self._rows[split_column]})
                raise TaskSourceError(
                    f"{self.path}: no row has {split_column}={split!r}; values found: {found}"
                )
            self._rows = self._rows.select(keep)
        local = _is_local(self.path)
        self.total_rows = len(self._rows)
        self.selection: tuple[Any, ...] = (self.path, hub_config, hub_split or split) \
            if not local else (self.path, split_column, split if split_column else None)
        if holdout is not None:
            self._hold_out(holdout, holdout_seed, local=local, split_column=split_column)

    def _hold_out(self, holdout: float, seed: int, *, local: bool,
                  split_column: str | None) -> None:
        """Keep the rows of this split under a seeded ``holdout`` split of the file's rows."""
        if isinstance(holdout, bool) or not isinstance(holdout, int | float) \
                or not 0 < holdout < 1:
            raise TaskSourceError(f"{self.path}: holdout must be a fraction between 0 and 1 "
                                  f"(exclusive), got {holdout!r}")
        if split_column is not None or not local:
            raise TaskSourceError(
                f"{self.path}: holdout is for one local file without splits; this source "
                f"already has its {self.split!r} split ("
                + (f"split_column={split_column!r})" if split_column else "a hub split)"))
        n = len(self._rows)
        if n < 2:
            raise TaskSourceError(f"{self.path}: holdout needs at least 2 rows, the file has {n}")
        held = min(n - 1, max(1, round(holdout * n)))
        order = sorted(range(n), key=lambda i: stable_fraction(f"{seed}/{i}"))
        chosen = set(order[:held])
        train = self.split == "train"
        self._rows = self._rows.select([i for i in range(n) if (i in chosen) != train])
        self.holdout = (holdout, seed, held, n)
        self.selection = (self.path, "holdout", holdout, seed, train)
    def __len__(self) -> int:
        return len(self._rows)

    def _column(self, field: str) -> str:
        return self.columns.get(field, field)

    def _describe_column(self, field: str) -> str:
        if self.layout == "verl":
            origin = "reward_model.ground_truth" if field in ("answer", "tests") else "prompt"
            return f"field {field!r} (verl layout, from column {origin!r})"
        return f"field {field!r} (column {self._column(field)!r})"

    def __getitem__(self, index: int) -> Task:
        index = check_index(self, index)
        row: dict[str, Any] = dict(self._rows[index])
        where = f"{self.path}: row {index}"
        if self.layout == "verl":
            task: Task = verl_task(row, where=where)
        else:
            renamed = {column: field for field, column in self.columns.items()}
            task = {renamed.get(key, key): value for key, value in row.items()}
            for field, column in self.columns.items():
                if "." in column and column not in row:
                    task[field] = _nested(row, column)
        for field in self.required:
            if task.get(field) is None:
                raise TaskSourceError(
                    f"{where}: {self._describe_column(field)} is missing or null"
                )
        for field in self.text_fields:
            value = task.get(field)
            if value is None or isinstance(value, str):
                continue
            column = self._describe_column(field)
            if is_message_list(value):
                task[field] = check_messages(value, where=f"{where}: {column}")
                continue
            raise TaskSourceError(
                f"{where}: {column} holds a {type(value).__name__}, not text or a list of chat "
                f"messages ({repr(value)[:80]}); map the field to a text column"
            )
        for field in self.json_fields:
            value = task.get(field)
            if isinstance(value, str):
                try:
                    task[field] = json.loads(value)
                except ValueError as exc:
                    raise TaskSourceError(
                        f"{self.path}: row {index}: field {field!r} is not valid JSON ({exc})"
                    ) from exc
        if self.id_column is not None:
            task["task_id"] = str(row[self.id_column])
        elif not isinstance(task.get("task_id"), str):
            task["task_id"] = f"{Path(self.path).stem}/{self.split}/{index}"
        return task

    def describe(self) -> str:
        """Which rows this source serves, in words (a trainer logs it for its held-out set)."""
        if self.holdout is not None:
            fraction, seed, held, n = self.holdout
            return (f"{self.path}: split {self.split!r} = {len(self)} of {n} rows (holdout="
                    f"{fraction:g}, holdout_seed={seed}: {held} rows held out by a seeded hash "
                    "of the row number)")
        return f"{self.path}: split {self.split!r} = {len(self)} of {self.total_rows} rows"

    def __repr__(self) -> str:
        return f"DatasetSource({self.path!r}, split={self.split!r}, n={len(self)})"


def _nested(row: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` inside nested dicts, or None when any step is missing."""
    value: Any = row
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _is_local(path: str) -> bool:
    return Path(path).suffix.lower() in _LOCAL_FORMATS or Path(path).exists()


def _mtime(path: str) -> float | None:
    try:
        return Path(path).stat().st_mtime
    except OSError:
        return None


@functools.lru_cache(maxsize=16)
def _load(path: str, split: str, config: str | None, mtime: float | None) -> Any:
    """Load once per process per (file version, split); ``_load.cache_clear()`` empties it."""
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a core dependency
        raise TaskSourceError("DatasetSource needs the 'datasets' package") from exc
    local = Path(path)
    suffix = local.suffix.lower()
    if suffix in _LOCAL_FORMATS or local.exists():
        if not local.is_file():
            raise TaskSourceError(f"task file not found: {path}")
        builder = _LOCAL_FORMATS.get(suffix)
        if builder is None:
            raise TaskSourceError(
                f"{path}: unsupported file type {suffix!r}; use one of {sorted(_LOCAL_FORMATS)}"
            )
        try:
            return datasets.load_dataset(builder, data_files=str(local), split="train")
        except Exception as exc:  # datasets raises many types for a broken file
            raise TaskSourceError(f"{path}: {_locate_bad_line(local) or exc}") from exc
    try:
        return datasets.load_dataset(path, config, split=split)
    except Exception as exc:
        raise TaskSourceError(
            f"cannot load hub dataset {path!r} (config={config!r}, split={split!r}): {exc}. "
            "Offline? Pass a local .jsonl or .parquet path instead."
        ) from exc


def _locate_bad_line(path: Path) -> str | None:
    if path.suffix.lower() != ".jsonl":
        return None
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                return f"line {line_number}: invalid JSON ({exc})"
            if not isinstance(value, dict):
                return f"line {line_number}: expected a JSON object"
    return None


WORD_PROBLEMS_FILE = DATA_DIR / "word_problems.jsonl"


def word_problems(split: str = "train") -> DatasetSource:
    """The bundled grade-school word problems (GSM8K style: the gold solution ends in ``#### N``).

    Args:
        split: ``"train"`` (16 problems) or ``"test"`` (8).
    """
    return DatasetSource(
        WORD_PROBLEMS_FILE,
        split=check_split(split),
        columns={"question": "problem", "answer": "solution"},
        required=("question", "answer"),
        id_column="id",
        split_column="split",
    )
