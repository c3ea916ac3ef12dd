"""The math verifier's worker process: the child side of ``rlvr.verifiers.math.worker``.

A ``WorkerPool`` starts ``python -c`` running ``serve`` here: it limits its own memory, exits when
its parent does, and answers one JSON line per request read on stdin (the grader's decisions run
in this process, ``grader.IN_WORKER``). The parent side never imports this module, so the pool
knows nothing of the grader it serves.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from rlvr.verifiers.math import grader


def serve(memory_mb: int) -> None:
    """Worker main loop: read JSON requests on stdin, answer one JSON line each on stdout.

    The worker is ready once the verifier is imported (no sympy yet: most decisions never need
    it); sympy is imported by a background thread right after, so a request that needs it waits
    for the import at most, and a cold worker answers the common cases at once.
    """
    _limit_memory(memory_mb)
    _exit_with_parent()
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the protocol
    grader.IN_WORKER = True
    _SYMPY_IMPORT.start()
    protocol.write(b"ready\n")
    protocol.flush()
    for line in sys.stdin.buffer:
        protocol.write(json.dumps(_handle(json.loads(line))).encode() + b"\n")
        protocol.flush()


def _import_sympy() -> None:
    try:
        import rlvr.verifiers.math.sympy_backend  # noqa: F401 - warms the import for later
    except Exception:  # noqa: BLE001 - a request that needs it reports the failure
        pass


_SYMPY_IMPORT = threading.Thread(target=_import_sympy, daemon=True)


def _handle(request: dict[str, Any]) -> dict[str, Any]:
    try:
        op = request.get("op")
        if op == "ping":  # also waits for sympy: warm_up() leaves a worker fully ready
            _SYMPY_IMPORT.join()
            return {"ok": True}
        if op == "clear_cache":
            grader.clear_cache()
            return {"ok": True}
        if op in ("verify", "verify_answer", "grade"):
            return {"ok": True, "result": grader.decide_here(op, request)}
    except Exception as err:  # noqa: BLE001 - any failure is a verdict, not a crash
        return grader.failure_response(err)
    return grader.sympy_compare_here(request)  # the sympy stage's own request


def _limit_memory(memory_mb: int) -> None:
    try:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # pragma: no cover - non-POSIX
        pass


def _exit_with_parent() -> None:
    # Not PR_SET_PDEATHSIG: it fires when the *thread* that started us exits, and pools are
    # used from short-lived threads. A reparented process sees its parent id change.
    parent = os.getppid()

    def watchdog() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
