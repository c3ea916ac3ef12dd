"""Persistent verifier worker processes with a hard wall-clock limit per request.

Every math decision (extraction, parsing, comparison, sympy) runs in a worker, so that no response
can stall the caller or hold its GIL. Why processes: sympy can run for minutes or eat gigabytes on
hostile input, and a Python thread cannot be stopped; SIGALRM only works in the main thread. So
sympy runs in child processes (``python -c`` running ``worker_main.serve``; no multiprocessing, so
the caller's ``__main__`` is never re-imported) that speak JSON lines over pipes. A request that is
not answered by its deadline gets its worker killed (SIGKILL) and replaced at once, so the next
request finds a fresh worker already importing sympy. Each worker caps its address space
(``RLIMIT_AS``), exits when its parent dies (a watchdog thread notices the new parent id; stdin
also closes), and is killed when its pool is shut down, garbage-collected, or at interpreter exit.

The pool is thread-safe: each request borrows one idle worker; up to ``max_workers`` are started
lazily and reused. A forked child process starts its own workers (the parent's stay untouched). The
deadline covers the whole request, including waiting for a free worker and for a cold worker to
start (call ``warm_up`` ahead of time to keep a start-up out of the first deadline).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from rlvr.verifiers.errors import InvalidArgumentError, VerifierTimeout
from rlvr.verifiers.process_wide import ProcessWide

__all__ = ["WorkerPool", "default_pool", "shutdown_default_pool"]

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = "import sys; from rlvr.verifiers.math.worker_main import serve; serve(int(sys.argv[1]))"


class _WorkerDied(Exception):
    """The worker process exited (crash, memory limit) or broke the protocol."""


class _Worker:
    """One child process and the buffered reading end of its stdout."""

    def __init__(self, memory_mb: int) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(memory_mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        if self.process.stdout is None or self.process.stdin is None:  # pragma: no cover
            raise RuntimeError("subprocess pipes were not created")
        self._stdin = self.process.stdin
        self._fd = self.process.stdout.fileno()
        self._poller = select.poll()
        self._poller.register(self._fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        self._buffer = b""
        self.ready = False
        self.started = time.monotonic()

    def wait_ready(self, deadline: float) -> bool:
        """Wait until the worker has imported sympy; False if the deadline came first."""
        if not self.ready:
            line = self._read_line(deadline)
            if line is None:
                return False
            if line != b"ready":
                raise _WorkerDied(f"unexpected greeting {line[:80]!r}")
            self.ready = True
        return True

    def request(self, payload: dict[str, Any], deadline: float) -> dict[str, Any] | None:
        """Send one request; its response, or None if the deadline came first."""
        try:
            self._stdin.write(json.dumps(payload).encode() + b"\n")
            self._stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise _WorkerDied("worker stdin closed") from err
        line = self._read_line(deadline)
        if line is None:
            return None
        try:
            response: dict[str, Any] = json.loads(line)
        except ValueError as err:
            raise _WorkerDied(f"bad response {line[:80]!r}") from err
        return response

    def _read_line(self, deadline: float) -> bytes | None:
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not self._poller.poll(max(1, int(remaining * 1000))):
                continue
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise _WorkerDied("worker exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def kill(self) -> None:
        """Kill the process and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class WorkerPool:
    """A thread-safe pool of sympy worker processes.

    Args:
        max_workers: most processes alive at once (each holds ~100 MB).
        memory_mb: address-space limit of each worker, in MiB.
        startup_timeout_s: a worker not ready after this long is killed and replaced.
    """

    def __init__(
        self, *, max_workers: int = 2, memory_mb: int = 2048, startup_timeout_s: float = 60.0
    ) -> None:
        if max_workers < 1:
            raise InvalidArgumentError(f"max_workers must be >= 1, got {max_workers}")
        if memory_mb < 256:
            raise InvalidArgumentError(f"memory_mb must be >= 256, got {memory_mb}")
        if startup_timeout_s <= 0:
            raise InvalidArgumentError(f"startup_timeout_s must be > 0, got {startup_timeout_s}")
        self.max_workers = max_workers
        self.memory_mb = memory_mb
        self.startup_timeout_s = startup_timeout_s
        self._start_fresh()

    def _start_fresh(self) -> None:
        """Empty state; also used in a forked child, which must not touch the parent's workers."""
        self._owner_pid = os.getpid()
        self._condition = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: list[_Worker] = []
        weakref.finalize(self, _kill_all, self._all)

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Run one request on a worker within ``timeout_s`` seconds of wall-clock time.

        Raises:
            VerifierTimeout: the deadline passed (the worker, if busy, was killed and replaced),
                or the worker died (e.g. it hit its memory limit).
        """
        deadline = time.monotonic() + timeout_s
        worker = self._acquire(deadline)
        try:
            if not worker.wait_ready(deadline):
                if time.monotonic() - worker.started > self.startup_timeout_s:
                    worker = self._replace(worker)
                raise VerifierTimeout(f"no sympy worker was ready within {timeout_s:g} s")
            response = worker.request(payload, deadline)
            if response is None:
                worker = self._replace(worker)
                raise VerifierTimeout(f"sympy took longer than {timeout_s:g} s")
            return response
        except _WorkerDied as err:
            worker = self._replace(worker)
            raise VerifierTimeout(f"sympy worker died ({err}); memory limit?") from err
        finally:
            self._release(worker)

    def broadcast_idle(self, payload: dict[str, Any], timeout_s: float) -> None:
        """Send ``payload`` to every idle, ready worker (e.g. to clear their caches)."""
        with self._condition:
            idle = list(self._idle)
            self._idle.clear()
        for worker in idle:
            try:
                if worker.ready:
                    worker.request(payload, time.monotonic() + timeout_s)
            except _WorkerDied:
                worker = self._replace(worker)
            self._release(worker)

    def warm_up(self, timeout_s: float = 60.0) -> None:
        """Start one worker (if none is idle) and wait until it is ready."""
        self.request({"op": "ping"}, timeout_s)

    def shutdown(self) -> None:
        """Kill every worker; the pool starts new ones if used again."""
        with self._condition:
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            self._condition.notify_all()
        _kill_all(workers)

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for tests and monitoring)."""
        with self._condition:
            return [w.process.pid for w in self._all]

    def _acquire(self, deadline: float) -> _Worker:
        if os.getpid() != self._owner_pid:  # forked: the inherited workers belong to the parent
            self._start_fresh()
        with self._condition:
            while True:
                if self._idle:
                    return self._idle.pop()
                if len(self._all) < self.max_workers:
                    worker = _Worker(self.memory_mb)
                    self._all.append(worker)
                    return worker
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise VerifierTimeout("every sympy worker stayed busy until the deadline")
                self._condition.wait(remaining)

    def _release(self, worker: _Worker) -> None:
        with self._condition:
            if worker in self._all:
                self._idle.append(worker)
            self._condition.notify()

    def _replace(self, worker: _Worker) -> _Worker:
        """Kill ``worker`` and start its successor (which begins importing sympy at once)."""
        worker.kill()
        fresh = _Worker(self.memory_mb)
        with self._condition:
            if worker in self._all:
                self._all.remove(worker)
            self._all.append(fresh)
        return fresh


def _kill_all(workers: list[_Worker]) -> None:
    for worker in list(workers):
        worker.kill()


_default_pool = ProcessWide(WorkerPool)


def default_pool() -> WorkerPool:
    """The process-wide pool used by ``verify``/``is_equivalent`` (created on first use)."""
    return _default_pool.get()


def shutdown_default_pool() -> None:
    """Kill the default pool's workers (safe to call any time; it restarts on next use)."""
    pool = _default_pool.made()
    if pool is not None:
        pool.shutdown()
