"""Suites: named lists of (env id, kwargs, split, number of tasks), read from YAML.

A suite file (``configs/suites/<name>.yaml``)::

    name: arith_small            # optional, default: the file's stem
    description: tiny held-out arithmetic
    entries:
      - env: rlvr/Math-v0        # a registered id
        kwargs: {answer_format: plain, source_kwargs: {n_tasks: 32}}
        split: test              # passed to the env as split= (null: not passed)
        n_tasks: 32              # evaluate tasks 0..n_tasks-1 (capped by the source's size)
        name: arith              # optional label, default: the env id

:func:`load_suite` takes a suite name (looked up in ``$RLVR_SUITES_PATH``, ``./configs/suites``
and the repository's ``configs/suites``) or a path to a YAML file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium
import yaml

from rlvr.envs.errors import SuiteError
from rlvr.envs.registration import make

ENTRY_KEYS = ("env", "kwargs", "split", "n_tasks", "name")
SUITE_KEYS = ("name", "description", "entries")
SUITES_PATH_VARIABLE = "RLVR_SUITES_PATH"


@dataclass(frozen=True)
class SuiteEntry:
    """One environment of a suite.

    Attributes:
        env_id: the registered id.
        kwargs: constructor arguments.
        split: passed as ``split=`` unless None.
        n_tasks: how many tasks to play (indices ``0..n_tasks-1``).
        name: a label for reports.
    """

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    split: str | None = "test"
    n_tasks: int = 100
    name: str = ""

    def make(self) -> gymnasium.Env:
        """Build the environment through :func:`rlvr.envs.make`."""
        kwargs = dict(self.kwargs)
        if self.split is not None:
            kwargs["split"] = self.split
        return make(self.env_id, **kwargs)

    def task_indices(self, env: gymnasium.Env) -> range:
        """Indices to pass as ``reset(options={"task_index": i})``.

        ``n_tasks`` capped by the env's ``num_tasks`` when it has one.
        """
        try:
            available = int(env.get_wrapper_attr("num_tasks"))
        except AttributeError:
            return range(self.n_tasks)
        return range(min(self.n_tasks, available))


@dataclass(frozen=True)
class Suite:
    """A named list of suite entries."""

    name: str
    entries: tuple[SuiteEntry, ...]
    description: str = ""
    path: Path | None = None


def suite_dirs() -> list[Path]:
    """Directories searched for ``<name>.yaml``, in order."""
    dirs = [Path(p) for p in os.environ.get(SUITES_PATH_VARIABLE, "").split(os.pathsep) if p]
    dirs.append(Path.cwd() / "configs" / "suites")
    dirs.append(Path(__file__).resolve().parent.parent / "configs" / "suites")
    unique: list[Path] = []
    for directory in dirs:
        if directory.resolve() not in [d.resolve() for d in unique]:
            unique.append(directory)
    return unique


def list_suites() -> list[str]:
    """Names of the suites found in :func:`suite_dirs`."""
    names = {p.stem for d in suite_dirs() if d.is_dir() for p in d.glob("*.yaml")}
    return sorted(names)


def load_suite(name_or_path: str | Path) -> Suite:
    """Load a suite by name or path.

    Raises:
        SuiteError: for an unknown name (listing the available suites), or malformed YAML
            (naming the file, the entry and the key).
    """
    path = _find(name_or_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SuiteError(f"{path}: cannot read suite YAML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise SuiteError(f"{path}: a suite is a mapping with keys {list(SUITE_KEYS)}")
    _check_keys(data, SUITE_KEYS, f"{path}")
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, list) or not raw_entries:
        raise SuiteError(f"{path}: 'entries' must be a non-empty list")
    entries = tuple(_entry(raw, f"{path}: entries[{i}]") for i, raw in enumerate(raw_entries))
    return Suite(
        name=str(data.get("name") or path.stem),
        entries=entries,
        description=str(data.get("description") or ""),
        path=path,
    )


def _find(name_or_path: str | Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        if not candidate.is_file():
            raise SuiteError(f"suite file not found: {candidate}")
        return candidate
    for directory in suite_dirs():
        path = directory / f"{name_or_path}.yaml"
        if path.is_file():
            return path
    raise SuiteError(
        f"unknown suite {str(name_or_path)!r}; available suites: {list_suites()} (searched "
        f"{[str(d) for d in suite_dirs()]}; set ${SUITES_PATH_VARIABLE} to add directories)"
    )


def _entry(raw: Any, where: str) -> SuiteEntry:
    if not isinstance(raw, Mapping):
        raise SuiteError(f"{where}: an entry is a mapping with keys {list(ENTRY_KEYS)}")
    _check_keys(raw, ENTRY_KEYS, where)
    env_id = raw.get("env")
    if not isinstance(env_id, str) or not env_id:
        raise SuiteError(f"{where}: 'env' must be an environment id such as 'rlvr/Math-v0'")
    kwargs = raw.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise SuiteError(f"{where}: 'kwargs' must be a mapping, got {type(kwargs).__name__}")
    n_tasks = raw.get("n_tasks", 100)
    if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or n_tasks < 1:
        raise SuiteError(f"{where}: 'n_tasks' must be an int >= 1, got {n_tasks!r}")
    split = raw.get("split", "test")
    if split is not None and not isinstance(split, str):
        raise SuiteError(f"{where}: 'split' must be a string or null, got {split!r}")
    return SuiteEntry(
        env_id=env_id,
        kwargs=dict(kwargs),
        split=split,
        n_tasks=n_tasks,
        name=str(raw.get("name") or env_id),
    )


def _check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise SuiteError(f"{where}: unknown key(s) {unknown}; accepted: {list(allowed)}")
