"""An asyncio event loop kept from one run of episodes to the next.

``asyncio.run`` makes a new loop for every call (an epoll selector, a self-pipe socket pair, a
SIGINT handler) and tears it down after (cancelling leftovers, closing the pipe): ~0.5 ms per
call, on the trainer's critical path at every step. ``KeptLoop.run`` runs each coroutine on one
loop instead, made on first use and closed by ``close``.

What ``asyncio.run`` guarantees still holds: the loop is never entered twice at once (a call
made while it runs, from a coroutine or another thread, gets a fresh loop of its own, as from a
thread that already runs a loop); when a run ends with an exception (``KeyboardInterrupt``
included) the tasks it left are cancelled and awaited, and that loop is closed and replaced, so
nothing of a failed run reaches the next one. The coroutine's result is handed back beside its
task rather than read from it: formatting a finished task that holds a step's trajectories
(asyncio does when it logs or restores handlers) costs milliseconds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_fresh(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on a new loop (with the result kept out of the finished task)."""
    out: list[T] = []
    asyncio.run(_result_beside(coro, out))
    return out[0]


async def _result_beside(coro: Coroutine[Any, Any, T], out: list[T]) -> None:
    """Await ``coro`` and put its result in ``out`` (not in this coroutine's task)."""
    out.append(await coro)


class KeptLoop:
    """Runs coroutines to completion on one event loop kept between calls (thread-safe)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._busy = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion and return its result (or raise its exception).

        On the kept loop; on a fresh one (``run_fresh``) when the kept loop is busy, and on a
        fresh one in a helper thread when the calling thread already runs a loop.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:  # a loop runs in this thread: run_until_complete would refuse
            with concurrent.futures.ThreadPoolExecutor(1) as helper:
                return helper.submit(run_fresh, coro).result()
        if not self._busy.acquire(blocking=False):
            return run_fresh(coro)
        try:
            return self._run_kept(coro)
        finally:
            self._busy.release()

    def close(self) -> None:
        """Close the kept loop (a later ``run`` makes a new one)."""
        with self._busy:
            loop, self._loop = self._loop, None
            if loop is not None:
                _shut(loop)

    def _run_kept(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        loop = self._loop
        out: list[T] = []
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(_result_beside(coro, out))
        except BaseException:
            self._loop = None
            _shut(loop)
            raise
        finally:
            asyncio.set_event_loop(None)
        return out[0]


def _shut(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and await the tasks left on ``loop``, finish its async generators, close it."""
    try:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


__all__ = ["KeptLoop", "run_fresh"]
