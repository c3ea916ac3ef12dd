"""Task sources: where environments get their problems.

A source is anything that satisfies :class:`TaskSource` (``len``, ``source[i] -> task dict``
with a ``task_id``, and a ``split``). Built in: :class:`ArithmeticSource`,
:class:`BundledCodeSource`, :class:`HumanEvalSource`, :class:`FactTaskSource`,
:class:`MultiplicationSource`, :func:`word_problems`; any local
JSON-lines/parquet file or hub dataset through :class:`DatasetSource`; a list of dicts through
:class:`ListSource`. Environments accept a source object or a spec that :func:`resolve_source`
understands, so suites and configs can name sources in YAML.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.envs.errors import TaskSourceError
from rlvr.envs.tasks.arithmetic import ArithmeticSource
from rlvr.envs.tasks.base import (
    ListSource,
    Task,
    TaskSource,
    check_index,
    read_jsonl,
    stable_fraction,
)
from rlvr.envs.tasks.code import BundledCodeSource, HumanEvalSource
from rlvr.envs.tasks.dataset import DatasetSource, word_problems
from rlvr.envs.tasks.multiplication import MultiplicationSource
from rlvr.envs.tasks.tool_tasks import FactTaskSource, load_facts

SOURCES: dict[str, Callable[..., TaskSource]] = {
    "arithmetic": ArithmeticSource,
    "code": BundledCodeSource,
    "humaneval": HumanEvalSource,
    "facts": FactTaskSource,
    "multiplication": MultiplicationSource,
    "word_problems": word_problems,
}
"""Built-in task sources by name (used by :func:`resolve_source`)."""

SourceSpec = TaskSource | str | Sequence[Mapping[str, Any]]


def resolve_source(
    spec: SourceSpec,
    *,
    split: str,
    source_kwargs: Mapping[str, Any] | None = None,
    required: Sequence[str] = (),
    json_fields: Sequence[str] = (),
    text_fields: Sequence[str] = (),
) -> TaskSource:
    """Turn a source spec into a task source.

    Args:
        spec: a :class:`TaskSource` (returned as is); a built-in name (a key of
            :data:`SOURCES`, built with ``split`` and ``source_kwargs``); a path to a
            ``.jsonl``/``.json``/``.parquet`` file or a hub dataset name (a
            :class:`DatasetSource`, ``source_kwargs`` may give ``columns`` etc.); or a list of
            task dicts (a :class:`ListSource`).
        split: the split to build.
        source_kwargs: extra constructor arguments for the source.
        required: task fields the environment needs (checked for datasets and lists).
        json_fields: task fields a dataset may store as JSON strings.
        text_fields: task fields that go into the prompt (a dataset checks their type per row).

    Raises:
        TaskSourceError: for an unknown name or a source that cannot be built.
    """
    kwargs = dict(source_kwargs or {})
    if isinstance(spec, str):
        if spec in SOURCES:
            try:
                return SOURCES[spec](split=split, **kwargs)
            except TypeError as exc:
                raise TaskSourceError(f"source {spec!r}: bad source_kwargs: {exc}") from exc
        if _looks_like_path(spec) or "/" in spec:
            kwargs.setdefault("required", required)
            kwargs.setdefault("json_fields", json_fields)
            kwargs.setdefault("text_fields", text_fields)
            try:
                return DatasetSource(spec, split=split, **kwargs)
            except TypeError as exc:
                raise TaskSourceError(
                    f"source {spec!r} (a data file or hub dataset): bad source_kwargs: {exc}; "
                    "it accepts columns, id_column, split_column, holdout, holdout_seed, "
                    "json_fields, hub_split, hub_config"
                ) from exc
        raise TaskSourceError(
            f"unknown task source {spec!r}; use one of {sorted(SOURCES)}, a .jsonl/.json/.parquet "
            "path, a hub dataset name ('org/name'), or a TaskSource object"
        )
    if isinstance(spec, TaskSource):
        return spec
    if isinstance(spec, Sequence) and not isinstance(spec, str | bytes):
        return ListSource(spec, split=split, required=required)
    raise TaskSourceError(
        f"source must be a TaskSource, a name, a path or a list of dicts, got {type(spec).__name__}"
    )


def _looks_like_path(spec: str) -> bool:
    return Path(spec).suffix.lower() in {".jsonl", ".json", ".parquet"} or Path(spec).exists()


__all__ = [
    "SOURCES",
    "ArithmeticSource",
    "BundledCodeSource",
    "DatasetSource",
    "FactTaskSource",
    "HumanEvalSource",
    "ListSource",
    "MultiplicationSource",
    "SourceSpec",
    "Task",
    "TaskSource",
    "check_index",
    "load_facts",
    "read_jsonl",
    "resolve_source",
    "stable_fraction",
    "word_problems",
]
