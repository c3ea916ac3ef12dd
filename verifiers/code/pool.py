"""Public entry points: :func:`run_tests` on a shared default pool, or your own pool."""

from __future__ import annotations

import os

from rlvr.verifiers.code.runner import run_spec
from rlvr.verifiers.code.sandbox import SandboxConfig, WorkerPool
from rlvr.verifiers.code.specs import AssertTests, CallTests, StdioTests, TestSpec
from rlvr.verifiers.errors import InvalidArgumentError
from rlvr.verifiers.process_wide import ProcessWide
from rlvr.verifiers.verdict import Verdict

MAX_TIMEOUT_S = 600.0
MIN_MEMORY_MB = 64


class SandboxPool:
    """Warm sandboxes that run programs against tests; safe to share between threads.

    Each of up to ``size`` workers is one bubblewrap sandbox with a zygote that forks a fresh
    process per program; callers beyond ``size`` wait for a free worker. Workers start lazily.

    Args:
        size: number of sandboxes (default: the number of CPUs, at least 2).
        config: how sandboxes are built (backend, rlimits, caps).

    Raises:
        SandboxUnavailableError: no usable backend (see ``sandbox.resolve_backend``).
    """

    def __init__(self, size: int | None = None, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._workers = WorkerPool(size or max(2, os.cpu_count() or 2), self.config)

    @property
    def backend(self) -> str:
        """The isolation backend in use: "bwrap" or "unshare"."""
        return self._workers.backend

    def run_tests(self, program: str, tests: TestSpec, *, timeout_s: float = 5.0,
                  memory_mb: int = 512) -> Verdict:
        """Runs ``program`` against ``tests`` in a sandbox; see :func:`run_tests`."""
        _check_args(program, tests, timeout_s, memory_mb)
        worker = self._workers.acquire()
        healthy = False
        try:
            verdict, healthy = run_spec(worker, program, tests, float(timeout_s), memory_mb)
        finally:
            self._workers.release(worker, healthy)
        return verdict

    def close(self) -> None:
        """Destroys the sandboxes (busy ones as soon as their run ends)."""
        self._workers.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_args(program: object, tests: object, timeout_s: object, memory_mb: object) -> None:
    if not isinstance(program, str):
        raise InvalidArgumentError(f"program must be a str, got {type(program).__name__}")
    if not isinstance(tests, (AssertTests, StdioTests, CallTests)):
        raise InvalidArgumentError(
            "tests must be AssertTests, StdioTests or CallTests, "
            f"got {type(tests).__name__}"
        )
    if not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise InvalidArgumentError(
            f"timeout_s must be a number in (0, {MAX_TIMEOUT_S}], got {timeout_s!r}"
        )
    if not isinstance(memory_mb, int) or isinstance(memory_mb, bool) or memory_mb < MIN_MEMORY_MB:
        raise InvalidArgumentError(
            f"memory_mb must be an int >= {MIN_MEMORY_MB}, got {memory_mb!r}"
        )


_default = ProcessWide(SandboxPool, close_at_exit=SandboxPool.close)


def default_pool() -> SandboxPool:
    """The process-wide pool used by :func:`run_tests` (created on first use)."""
    return _default.get()


def run_tests(program: str, tests: TestSpec, *, timeout_s: float = 5.0,
              memory_mb: int = 512) -> Verdict:
    """Runs an untrusted ``program`` against ``tests`` in a sandbox and scores it.

    Args:
        program: Python source from the model (run by the system ``/usr/bin/python3``).
        tests: :class:`AssertTests`, :class:`StdioTests` or :class:`CallTests`.
        timeout_s: wall-clock limit for the whole call (all tests); CPU rlimit ceil(t) + 1 s.
        memory_mb: address-space limit (RLIMIT_AS) of each of the program's processes, and of
            the tester (AssertTests; at least 256 MB there).

    Returns:
        A Verdict: ``score`` = fraction of tests passed, ``passed`` = all passed, ``reason`` =
        "correct" or the first failing test's status ("wrong_answer", "runtime_error",
        "timeout", "memory_limit", "syntax_error", "output_limit", "sandbox_error");
        ``details["tests"]`` lists ``{"index", "name", "status", "message"}`` per test, plus
        ``stdout``/``stderr`` tails, ``elapsed_s`` and ``backend``; every string in it is
        clean UTF-8 text (see ``protocol.clean_text``). Never raises on bad programs. What the
        sandbox promises and what it does not cover: ``docs/sandbox.md``.

    Raises:
        InvalidArgumentError: bad arguments (not a bad program).
        SandboxUnavailableError: no sandbox can be built on this machine.
    """
    return default_pool().run_tests(program, tests, timeout_s=timeout_s, memory_mb=memory_mb)
