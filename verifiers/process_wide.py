"""``ProcessWide``: one object per process, made on first use, for the pools verifiers share.

The sandbox pool of ``run_tests``, the math grader's worker pool and the tool env's own sandbox
pool are each made once per process, when first asked for, from any thread; a pool that holds
processes is closed when the interpreter exits.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ProcessWide(Generic[T]):
    """The one ``make()`` of this process, made on the first ``get`` (thread-safe).

    Args:
        make: builds the object.
        close_at_exit: called with the object when the interpreter exits (None: nothing).
    """

    def __init__(self, make: Callable[[], T],
                 close_at_exit: Callable[[T], object] | None = None) -> None:
        self._make = make
        self._close_at_exit = close_at_exit
        self._lock = threading.Lock()
        self._value: T | None = None

    def get(self) -> T:
        """The object, made now if it was not yet."""
        with self._lock:
            if self._value is None:
                self._value = self._make()
                if self._close_at_exit is not None:
                    atexit.register(self._close_at_exit, self._value)
            return self._value

    def made(self) -> T | None:
        """The object if it was made, else None (never makes it)."""
        with self._lock:
            return self._value


__all__ = ["ProcessWide"]
