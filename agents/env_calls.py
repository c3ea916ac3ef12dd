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

A call still running after ``ASIDE_FRACTION`` of its limit is presumed hung and set aside: its
thread stops counting against ``workers`` (another starts for the calls waiting, in this flush
and later ones), so hung calls never take the env threads of healthy ones and only the call
that hung runs out its limit. At most ``MAX_ASIDE`` threads are set aside at once.

Semantics kept from one-pool-job-per-call: up to ``workers`` calls run at once (calls set aside
not counted); a call's
wall-clock limit counts from when it was issued (time spent queued behind other calls
included); an exception raised by the call is raised to its caller.

A call that runs past its limit fails with ``EnvCallTimeout`` (a ``TimeoutError``), and its
work is stopped: ``EnvCallKilled`` (a ``BaseException``, so ``except Exception`` in an env does
not swallow it) is raised inside the thread running it, again every ``KILL_EVERY_S`` while the
call goes on, so a verifier spinning in Python ends at once. A thread blocked inside C code
(``time.sleep``, a C extension's loop) only sees it when it returns to Python; such a thread is
given up: a new one takes its place, and as every env thread is a daemon thread it never keeps
the process from exiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
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
#: A call past its limit is told to stop again this often (seconds) while it goes on.
KILL_EVERY_S = 0.5
#: A call running longer than this fraction of its limit no longer holds an env thread's place.
ASIDE_FRACTION = 0.25
#: The most threads set aside (in presumed-hung calls) at once, per pool.
MAX_ASIDE = 64


class EnvCallTimeout(TimeoutError):
    """An env call ran past ``env_step_timeout_s``: its episode ends with reason "timeout"."""


class EnvCallKilled(BaseException):
    """Raised inside the env thread of a call past its limit, to stop its work.

    A ``BaseException`` (like ``KeyboardInterrupt``), so an env's ``except Exception`` does not
    swallow it.
    """


def raise_in_thread(ident: int, exc: type[BaseException] | None) -> None:
    """Have thread ``ident`` raise ``exc`` at its next Python instruction (None: cancel that)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                               ctypes.py_object(exc) if exc else None)


class EnvThreads:
    """A pool of daemon threads running jobs, up to ``size`` at once.

    Unlike ``concurrent.futures.ThreadPoolExecutor`` (whose threads the interpreter joins at
    exit), a thread stuck in a call that never returns does not keep the process alive, and a
    thread given up (``give_up``) no longer counts: a new one may start in its place.
    """

    def __init__(self, size: int, name: str = "env") -> None:
        self.size = size
        self.name = name
        self._cond = threading.Condition()
        self._jobs: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._idle = 0
        self._threads = 0  # threads counted against ``size`` (not given up)
        self._given_up: set[int] = set()
        self._aside: set[int] = set()  # given up while still in a (presumed hung) call
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a pool thread (it must not raise)."""
        with self._cond:
            if self._closed:
                return
            self._jobs.append((fn, args))
            self._start_or_wake()

    def _start_or_wake(self) -> None:
        if self._idle >= len(self._jobs):
            self._cond.notify()
        elif self._threads < self.size:
            self._threads += 1
            threading.Thread(target=self._work, name=self.name, daemon=True).start()

    def give_up(self, ident: int) -> None:
        """Stop counting thread ``ident`` (stuck in a call): another may start for queued jobs."""
        with self._cond:
            if ident in self._given_up:
                return
            self._given_up.add(ident)
            self._threads -= 1
            if self._jobs:
                self._start_or_wake()

    def set_aside(self, ident: int) -> bool:
        """Stop counting thread ``ident`` (in a call presumed hung); it exits after its job.

        Returns:
            False when ``MAX_ASIDE`` threads are already set aside (``ident`` still counts).
        """
        with self._cond:
            if ident in self._given_up:
                return True
            if len(self._aside) >= MAX_ASIDE:
                return False
            self._aside.add(ident)
        self.give_up(ident)
        return True

    def close(self) -> None:
        """Drop queued jobs; idle threads exit, busy ones after their job."""
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify_all()

    def _work(self) -> None:
        me = threading.get_ident()
        while True:
            with self._cond:
                while not self._jobs and not self._closed and me not in self._given_up:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if me in self._given_up:
                    self._given_up.discard(me)
                    self._aside.discard(me)
                    return
                if not self._jobs:  # closed
                    self._threads -= 1
                    return
                fn, args = self._jobs.popleft()
            try:
                fn(*args)
            except BaseException:  # noqa: S112 - a stop that came late; the thread goes on
                raise_in_thread(me, None)


class EnvCalls:
    """Runs env calls on a thread pool, batched per event-loop iteration.

    Args:
        workers: env threads (``>= 1``); also the most calls running at once.
        timeout_s: wall-clock limit of one call, from when it is issued (``> 0``).
    """

    def __init__(self, workers: int, timeout_s: float) -> None:
        self.workers = workers
        self.timeout_s = timeout_s
        self._pool: EnvThreads | None = None
        self._staged: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
        self._lock = threading.Lock()
        self._mean_s: float | None = None  # running mean duration of a call

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on an env thread; its result, or the exception it raised.

        Raises:
            EnvCallTimeout: the call did not finish within ``timeout_s`` (its work is stopped).
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
        """Shut the env threads down (threads stuck in timed-out calls are daemons, given up)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send the calls staged on ``loop`` to the pool: at most ``workers`` jobs."""
        with self._lock:
            staged = self._staged.pop(loop, [])
        if not staged:
            return
        if self._pool is None:
            self._pool = EnvThreads(self.workers)
        # One timer for the calls issued in this iteration (they share a deadline), cancelled
        # once all of them are settled.
        batch = _Batch(len(staged))
        queue = _Queue(staged)
        batch.timer = loop.call_later(self.timeout_s, self._expire, loop, staged, queue)
        jobs = min(self.workers, len(staged))
        if self._mean_s is not None and self._mean_s * len(staged) < SPREAD_S:
            jobs = 1  # quick calls: one thread runs them all and hands them back together
        for _ in range(jobs):
            self._add_job(loop, queue, batch)
        loop.call_later(HAND_BACK_S, self._watch, loop, queue, batch, HAND_BACK_S)

    def _add_job(self, loop: asyncio.AbstractEventLoop, queue: _Queue, batch: _Batch) -> None:
        with queue.lock:
            queue.jobs += 1
        if self._pool is not None:
            self._pool.submit(self._run_share, loop, queue, batch)

    def _expire(self, loop: asyncio.AbstractEventLoop, staged: list[_Call], queue: _Queue
                ) -> None:
        """At a flush's deadline: fail its unsettled calls and stop the ones still running."""
        for fn, _, fut in staged:
            if not fut.done():
                fut.set_exception(EnvCallTimeout(
                    f"{getattr(fn, '__name__', 'env call')} took longer than "
                    f"env_step_timeout_s={self.timeout_s}"
                ))
        self._kill(loop, queue)

    def _kill(self, loop: asyncio.AbstractEventLoop, queue: _Queue) -> None:
        """Raise ``EnvCallKilled`` in every thread still in one of ``queue``'s calls.

        Their callers already have their ``EnvCallTimeout``; the threads are given up by the pool
        (a new one may take their place) and told again every ``KILL_EVERY_S`` while they stay.
        """
        with queue.lock:
            running = list(queue.running)
            for ident in running:
                queue.killed.add(ident)
                raise_in_thread(ident, EnvCallKilled)
        if not running:
            return
        if self._pool is not None:
            for ident in running:
                self._pool.give_up(ident)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the daemons are left
            loop.call_later(KILL_EVERY_S, self._kill, loop, queue)

    def _watch(self, loop: asyncio.AbstractEventLoop, queue: _Queue, batch: _Batch,
               every: float) -> None:
        """Watch a flush's jobs from the loop while it has unsettled calls.

        When a job is in a slow call, what is finished is settled; when every job is and calls
        wait, a job is added. Looks again later, backing off to every 0.1 s.
        """
        if batch.pending <= 0:
            return
        now = time.perf_counter()
        started = dict(queue.started)
        for ident, t in started.items():  # presumed hung: its place goes to the others
            if ident not in queue.aside and now - t > ASIDE_FRACTION * self.timeout_s \
                    and self._pool is not None and self._pool.set_aside(ident):
                queue.aside.add(ident)
        running = [t for ident, t in started.items() if ident not in queue.aside]
        slow = [now - t > HAND_BACK_S for t in running]
        if any(slow) or len(running) < len(started):
            _settle_all(*queue.take(), batch)
        jobs = queue.jobs - len(queue.aside)
        if queue.calls and jobs < self.workers and len(running) >= jobs and all(slow):
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
                with queue.lock:  # from here on, a deadline stops this call
                    queue.running.add(me)
                result: tuple[asyncio.Future[Any], Any, BaseException | None] = (
                    fut, fn(*args), None)
            except BaseException as exc:  # handed to the caller, which decides
                result = (fut, None, exc)
            queue.leave(me)
            queue.started.pop(me, None)
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
        self.running: set[int] = set()  # threads inside a call (the ones a deadline stops)
        self.aside: set[int] = set()  # threads set aside in a presumed-hung call
        self.killed: set[int] = set()
        self.jobs = 0
        self.lock = threading.Lock()
        self._settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        self._skipped = 0

    def leave(self, me: int) -> None:
        """Thread ``me`` left its call: no stop is sent to it now, and a pending one is dropped.

        A stop delivered while this runs (the call had just returned) is caught and this is
        done again, so it never escapes into the job.
        """
        while True:
            try:
                with self.lock:
                    self.running.discard(me)
                    if me in self.killed:
                        raise_in_thread(me, None)
                        self.killed.discard(me)
                return
            except EnvCallKilled:
                continue

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


__all__ = ["ASIDE_FRACTION", "MAX_ASIDE", "EnvCallKilled", "EnvCallTimeout", "EnvCalls",
           "EnvThreads", "raise_in_thread"]
