"""Env calls off the event loop, dispatched in batches.

The runner never runs an env call (make, reset, step, close) on its event loop: a slow sandbox
must not stall the other episodes. Sending each call to a thread pool on its own costs more
than a math env's whole turn, though (a ``concurrent.futures.Future`` with its condition
variable, a queue hand-off, a wake-up of the loop per result, and a thread switch each way).
``EnvCalls`` therefore stages the calls made in one event-loop iteration and sends them to the
env threads together: at most ``workers`` pool jobs per iteration, each running its share of
the calls in order and handing all of its results back with one wake-up of the loop.

The jobs of one flush take its calls in order from one queue, and a watcher on the loop looks
at them every ``HAND_BACK_S`` or so: when a job has been inside one call for longer than that (a
slow or hung env), the results finished so far go back at once, and while calls are still
queued and every job is in such a call, another job joins (up to ``workers``). So quick calls
batched with a slow one are neither held behind it nor kept from their callers until it ends.

Semantics kept from one-pool-job-per-call: up to ``workers`` calls run at once; a call's
wall-clock limit counts from when it was issued (time spent queued behind other calls
included); a call that runs past it fails with ``TimeoutError`` while its thread, which cannot
be killed, finishes it in the background; an exception raised by the call is raised to its
caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

#: One staged call: the function, its arguments and the future its caller awaits.
_Call = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]

#: A call slower than this (seconds) hands back its job's finished results at once.
HAND_BACK_S = 0.01
#: Calls expected to take less than this in all (seconds, from the running mean duration of a
#: call) run in one job: spreading GIL-bound Python over threads only adds switches, and one
#: hand-back lets the engine prefill all of their episodes' prompts together.
SPREAD_S = 0.05


class EnvCalls:
    """Runs env calls on a thread pool, batched per event-loop iteration.

    Args:
        workers: env threads (``>= 1``); also the most calls running at once.
        timeout_s: wall-clock limit of one call, from when it is issued (``> 0``).
    """

    def __init__(self, workers: int, timeout_s: float) -> None:
        self.workers = workers
        self.timeout_s = timeout_s
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._staged: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
        self._lock = threading.Lock()
        self._mean_s: float | None = None  # running mean duration of a call

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on an env thread; its result, or the exception it raised.

        Raises:
            TimeoutError: the call did not finish within ``timeout_s``.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            staged = self._staged.get(loop)
            if staged is None:
                staged = self._staged[loop] = []
                loop.call_soon(self._flush, loop)
            staged.append((fn, args, fut))
        return await fut

    def close(self) -> None:
        """Shut the env threads down (threads stuck in timed-out calls are abandoned)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send the calls staged on ``loop`` to the pool: at most ``workers`` jobs."""
        with self._lock:
            staged = self._staged.pop(loop, [])
        if not staged:
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.workers, thread_name_prefix="env"
            )
        # One timer for the calls issued in this iteration (they share a deadline), cancelled
        # once all of them are settled.
        batch = _Batch(len(staged))
        batch.timer = loop.call_later(self.timeout_s, _expire, staged, self.timeout_s)
        jobs = min(self.workers, len(staged))
        if self._mean_s is not None and self._mean_s * len(staged) < SPREAD_S:
            jobs = 1  # quick calls: one thread runs them all and hands them back together
        queue = _Queue(staged)
        for _ in range(jobs):
            self._add_job(loop, queue, batch)
        loop.call_later(HAND_BACK_S, self._watch, loop, queue, batch, HAND_BACK_S)

    def _add_job(self, loop: asyncio.AbstractEventLoop, queue: _Queue, batch: _Batch) -> None:
        with queue.lock:
            queue.jobs += 1
        if self._pool is not None:
            self._pool.submit(self._run_share, loop, queue, batch)

    def _watch(self, loop: asyncio.AbstractEventLoop, queue: _Queue, batch: _Batch,
               every: float) -> None:
        """Watch a flush's jobs from the loop while it has unsettled calls.

        When a job is in a slow call, what is finished is settled; when every job is and calls
        wait, a job is added. Looks again later, backing off to every 0.1 s.
        """
        if batch.pending <= 0:
            return
        now = time.perf_counter()
        running = list(queue.started.values())
        slow = [now - t > HAND_BACK_S for t in running]
        if any(slow):
            _settle_all(*queue.take(), batch)
        if queue.calls and queue.jobs < self.workers and len(running) >= queue.jobs \
                and all(slow):
            self._add_job(loop, queue, batch)
        every = min(2 * every, 0.1)
        loop.call_later(every, self._watch, loop, queue, batch, every)

    def _run_share(self, loop: asyncio.AbstractEventLoop, queue: _Queue, batch: _Batch) -> None:
        """Take calls from ``queue`` in order and run them; settle their futures in few wake-ups.

        A call whose caller gave up (timed out or cancelled) before it started is skipped.
        Results go back together, except after a call slower than ``HAND_BACK_S`` (such as
        sandboxed code): then what is finished goes back at once, so slow calls do not hold
        back the results of the calls before them.
        """
        me = threading.get_ident()
        while True:
            try:
                fn, args, fut = queue.calls.popleft()
            except IndexError:
                break
            if fut.done():
                queue.settle(None)
                continue
            start = queue.started[me] = time.perf_counter()
            try:
                result: tuple[asyncio.Future[Any], Any, BaseException | None] = (
                    fut, fn(*args), None)
            except BaseException as exc:  # handed to the caller, which decides
                result = (fut, None, exc)
            finally:
                del queue.started[me]
            queue.settle(result)
            took = time.perf_counter() - start
            mean = self._mean_s
            self._mean_s = took if mean is None else 0.9 * mean + 0.1 * took
            if took > HAND_BACK_S:
                _hand_back(loop, *queue.take(), batch)
        _hand_back(loop, *queue.take(), batch)


class _Queue:
    """The calls of one flush, taken in order by the jobs that run them.

    Attributes:
        calls: the calls not yet started.
        started: when each job's thread (by ident) started the call it is in.
        jobs: jobs submitted for this flush.
    """

    def __init__(self, calls: list[_Call]) -> None:
        self.calls: deque[_Call] = deque(calls)
        self.started: dict[int, float] = {}
        self.jobs = 0
        self.lock = threading.Lock()
        self._settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        self._skipped = 0

    def settle(self, result: tuple[asyncio.Future[Any], Any, BaseException | None] | None
               ) -> None:
        """Record a finished call (None: one skipped, its caller gone), not yet handed back."""
        with self.lock:
            if result is None:
                self._skipped += 1
            else:
                self._settled.append(result)

    def take(self) -> tuple[list[tuple[asyncio.Future[Any], Any, BaseException | None]], int]:
        """The finished calls not handed back yet (and the skipped count); clears them."""
        with self.lock:
            taken = self._settled, self._skipped
            self._settled, self._skipped = [], 0
        return taken


class _Batch:
    """The calls of one flush: how many are unsettled, and their shared timeout timer."""

    def __init__(self, pending: int) -> None:
        self.pending = pending
        self.timer: asyncio.TimerHandle | None = None

    def settled(self, n: int) -> None:
        """``n`` more calls are settled (on the loop's thread); cancel the timer after the last."""
        self.pending -= n
        if self.pending <= 0 and self.timer is not None:
            self.timer.cancel()


def _hand_back(loop: asyncio.AbstractEventLoop,
               settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]],
               skipped: int, batch: _Batch) -> None:
    if settled or skipped:
        with contextlib.suppress(RuntimeError):  # the caller's loop is already closed
            loop.call_soon_threadsafe(_settle_all, settled, skipped, batch)


def _settle_all(settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]],
                skipped: int, batch: _Batch) -> None:
    if not (settled or skipped):
        return
    batch.settled(len(settled) + skipped)
    for fut, result, exc in settled:
        if fut.done():
            continue
        if exc is None:
            fut.set_result(result)
        else:
            fut.set_exception(exc)


def _expire(staged: list[_Call], timeout_s: float) -> None:
    """Fail the calls of a flush that are still running or queued at their deadline."""
    for fn, _, fut in staged:
        if not fut.done():
            fut.set_exception(TimeoutError(
                f"{getattr(fn, '__name__', 'env call')} took longer than "
                f"env_step_timeout_s={timeout_s}"
            ))
