"""What every experiment logger takes and implements: ``RunInfo``, ``Table`` and ``Logger``.

A logger is built once per run on rank 0 (``LoggerFactory(run)``) and then told, in order:
metrics at their steps, tables (the held-out episodes of each evaluation, an eval's pass@k
table), files and folders to keep (curves, eval report, exported model), and ``close`` with
the run's summary. It never decides anything about the run: ``rlvr.tracking.fanout`` reports a
logger that raises once and stops calling it, so a tracking server going down never stops
training.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

__all__ = ["Logger", "LoggerFactory", "RunInfo", "Table", "flatten_params"]


@dataclass(frozen=True)
class RunInfo:
    """The run a logger records.

    Attributes:
        run_dir: the run folder (``trainer.output_dir``; ``rlvr eval``'s ``--out``); a logger
            keeps its own state there (a tracked run's id, a local store).
        name: the tracked run's name: the run folder's name.
        config: the resolved config, nested (``flatten_params`` gives the dotted keys).
        kind: ``"train"`` (``rlvr train``) or ``"eval"`` (``rlvr eval``).
        resume: continue the tracked run this folder's earlier process started
            (``trainer.resume=true``) instead of starting a new one.
        start_step: the last step already logged (0 for a fresh run).
    """

    run_dir: Path
    name: str
    config: Mapping[str, Any] = field(default_factory=dict)
    kind: Literal["train", "eval"] = "train"
    resume: bool = False
    start_step: int = 0


@dataclass(frozen=True)
class Table:
    """A small table: named columns and rows of plain values (str, int, float, bool, None).

    Attributes:
        columns: the column names.
        rows: one tuple per row, as long as ``columns``.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"a row of {len(row)} values in a table of columns "
                                 f"{self.columns}")

    def as_dict(self) -> dict[str, Any]:
        """``{"columns": [...], "data": [[...], ...]}`` (JSON-ready)."""
        return {"columns": list(self.columns), "data": [list(r) for r in self.rows]}


class Logger(Protocol):
    """One experiment tracker (JSONL, TensorBoard, MLflow, W&B, a plugin's).

    Every method may raise (a server down, a full disk): the caller reports it once and stops
    calling this logger (``rlvr.tracking.fanout.LoggerSet``).
    """

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        """Record ``metrics`` at ``step`` (keys like ``reward/mean``).

        A value is a finite float, or None where it was not finite (NaN, inf): JSONL writes
        null, the other loggers leave it out.
        """

    def log_table(self, step: int, name: str, table: Table) -> None:
        """Record ``table`` under ``name`` at ``step`` (``eval/episodes``, ``eval/pass_at_k``)."""

    def log_artifact(self, path: Path, name: str) -> None:
        """Keep the file or folder at ``path`` under ``name`` (``curves``, ``model``)."""

    def close(self, summary: Mapping[str, float], *, failed: bool = False) -> None:
        """End the tracked run with its final ``summary``; ``failed``: the run raised."""


#: Builds a logger for a run (a class taking ``RunInfo`` is one).
LoggerFactory = Callable[[RunInfo], Logger]


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"actor": {"optim": {"lr": 1e-6}}}`` -> ``{"actor.optim.lr": 1e-6}``.

    Lists stay values (``trainer.loggers: [jsonl, mlflow]``); an empty mapping is one key with
    the value ``{}`` so that no key of the config goes missing.
    """
    flat: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat |= flatten_params(value, dotted + ".")
        else:
            flat[dotted] = value
    return flat
