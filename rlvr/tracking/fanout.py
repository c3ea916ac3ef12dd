"""Several loggers behind one: a logger that raises is reported once and not called again.

Training never stops for a tracker: a server that went away, a full disk under TensorBoard's
folder or a plugin's bug costs that logger only. The first error of each logger is reported
through ``report`` (one line naming the logger, what it was doing and the error) and kept in
``failed`` for the run's summary. Loggers listed in ``strict`` (the run's own ``metrics.jsonl``)
are not isolated: their errors propagate, as any other failure to write the run folder does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlvr.tracking.base import Logger, Table

__all__ = ["LoggerSet"]


class LoggerSet:
    """Calls each logger in turn, isolating failures.

    Args:
        loggers: name -> logger, in the order they are called.
        report: where the one-line failure reports go.
        strict: names whose errors propagate instead.
    """

    def __init__(self, loggers: Mapping[str, Logger], report: Callable[[str], Any] = print,
                 strict: tuple[str, ...] = ()) -> None:
        self.loggers = dict(loggers)
        self.report = report
        self.strict = strict
        self.failed: dict[str, str] = {}

    def names(self) -> list[str]:
        """The loggers still called."""
        return list(self.loggers)

    def fail(self, name: str, doing: str, err: BaseException) -> None:
        """Record that ``name`` failed (reported once) and stop calling it."""
        self.loggers.pop(name, None)
        message = f"{type(err).__name__}: {err}".splitlines()[0][:300]
        self.failed[name] = f"{doing}: {message}"
        self.report(f"[rlvr] WARNING: the {name} logger failed ({doing}: {message}); it is "
                    "disabled for the rest of the run, training goes on")

    def _each(self, doing: str, call: Callable[[Logger], Any]) -> None:
        for name, logger in list(self.loggers.items()):
            if name in self.strict:
                call(logger)
                continue
            try:
                call(logger)
            except Exception as err:  # noqa: BLE001 - any tracker error disables that tracker
                self.fail(name, doing, err)

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        """Every logger's ``log_metrics``."""
        self._each(f"logging step {step}", lambda lg: lg.log_metrics(step, metrics))

    def log_table(self, step: int, name: str, table: Table) -> None:
        """Every logger's ``log_table``."""
        self._each(f"logging table {name} at step {step}",
                   lambda lg: lg.log_table(step, name, table))

    def log_artifact(self, path: Path | None, name: str) -> None:
        """Every logger's ``log_artifact`` (nothing when ``path`` is None or missing)."""
        if path is None or not Path(path).exists():
            return
        self._each(f"keeping {name}", lambda lg: lg.log_artifact(Path(path), name))

    def close(self, summary: Mapping[str, float], *, failed: bool = False) -> None:
        """Every logger's ``close``; afterwards no logger is called."""
        self._each("closing", lambda lg: lg.close(summary, failed=failed))
        self.loggers = {}
