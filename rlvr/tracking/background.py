"""A logger on a thread of its own, so the training step never waits for a tracking store.

``Background(build)`` builds the logger on its worker thread (an MLflow store's first start
creates its database, W&B starts its service: seconds to a minute) and runs every call after
it there, in order. The caller's calls only queue. The worker's first error ends it: the next
call (or ``close``) raises that error in the caller, so ``rlvr.tracking.fanout.LoggerSet``
reports and disables the logger as it does for any logger that fails in place.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlvr.tracking.base import Logger, Table

__all__ = ["Background"]

_STOP = object()


class Background:
    """Runs ``build()``'s logger on a worker thread (see the module docstring).

    Args:
        build: makes the logger (called on the worker thread).
        name: the thread's name.
    """

    def __init__(self, build: Callable[[], Logger], name: str = "rlvr-logger") -> None:
        self._calls: queue.Queue[Any] = queue.Queue()
        self._error: BaseException | None = None
        self._doing = "starting"
        self._thread = threading.Thread(target=self._work, args=(build,), name=name,
                                        daemon=True)
        self._thread.start()

    def _work(self, build: Callable[[], Logger]) -> None:
        try:
            logger = build()
            while True:
                item = self._calls.get()
                if item is _STOP:
                    return
                self._doing, call = item
                call(logger)
        except BaseException as err:  # noqa: BLE001 - raised in the caller by _put/close
            self._error = err

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"{self._doing}: {type(self._error).__name__}: "
                               f"{self._error}") from self._error

    def _put(self, doing: str, call: Callable[[Logger], Any]) -> None:
        self._raise()
        self._calls.put((doing, call))

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        """Queue ``log_metrics`` (the mapping is copied)."""
        values = dict(metrics)
        self._put(f"logging step {step}", lambda lg: lg.log_metrics(step, values))

    def log_table(self, step: int, name: str, table: Table) -> None:
        """Queue ``log_table``."""
        self._put(f"logging table {name}", lambda lg: lg.log_table(step, name, table))

    def log_artifact(self, path: Path, name: str) -> None:
        """Queue ``log_artifact``."""
        self._put(f"keeping {name}", lambda lg: lg.log_artifact(path, name))

    def close(self, summary: Mapping[str, float], *, failed: bool = False) -> None:
        """Queue ``close``, wait for the worker to finish everything queued, raise its error."""
        values = dict(summary)
        if self._thread.is_alive():
            self._calls.put(("closing", lambda lg: lg.close(values, failed=failed)))
            self._calls.put(_STOP)
            self._thread.join()
        self._raise()
