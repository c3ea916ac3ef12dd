"""U, the untrusted program's process: reads the program, compiles it, runs it or serves calls.

In stdio mode the program runs as ``__main__`` with the host's pipes as its standard streams; in
call and assert mode it is imported as ``solution`` and each request on its socket calls one of
its functions, with arguments and results as plain data (:func:`encode` / :func:`decode`).
Stdlib only; runs inside the sandbox (see :mod:`rlvr.verifiers.code.harness`).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from rlvr.verifiers.code.harness.privileges import set_limits
from rlvr.verifiers.code.protocol import EncodeError, decode, encode, recv_msg, send_msg

MAX_PROGRAM_BYTES = 4 * 1024 * 1024


def run_user(mode: str, limits: dict[str, Any]) -> int:
    """U: read the program, compile it, then run it (stdio) or serve calls of its functions."""
    import io
    import types

    setup = socket.socket(fileno=3)
    chunks = []
    total = 0
    while total <= MAX_PROGRAM_BYTES:
        chunk = setup.recv(1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    source = b"".join(chunks).decode("utf-8", errors="replace")
    del chunks
    set_limits(limits)
    try:
        code = compile(source, "<program>", "exec")
    except BaseException as exc:  # noqa: BLE001 - SyntaxError, ValueError (NUL), RecursionError
        send_msg(setup, {"compiled": False, "error": f"{type(exc).__name__}: {exc}"[:2000]})
        return 0
    send_msg(setup, {"compiled": True})
    setup.close()
    os.makedirs("/tmp/work", exist_ok=True)
    os.chdir("/tmp/work")
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)))
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    sys.argv = ["solution.py"]
    module = types.ModuleType("__main__" if mode == "stdio" else "solution")
    sys.modules[module.__name__] = module
    if mode == "stdio":
        return _exec_stdio(code, module)
    rpc = socket.socket(fileno=4)
    try:
        exec(code, module.__dict__)
    except BaseException as exc:  # noqa: BLE001 - the program's own failure, reported to T/host
        _flush()
        send_msg(rpc, {"ready": False, "exc": type(exc).__name__, "msg": str(exc)[:500]})
        return 1
    _flush()
    send_msg(rpc, {"ready": True})
    _serve_calls(rpc, module.__dict__)
    return 0


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001,S110 - the program may have broken its streams
            pass


def _exec_stdio(code: Any, module: Any) -> int:
    import traceback

    status = 0
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        status = 1
    _flush()
    return status & 0xFF


def _serve_calls(rpc: socket.socket, namespace: dict[str, Any]) -> None:
    while True:
        request = recv_msg(rpc)
        if request is None:
            return
        try:
            fn = namespace.get(request["name"])
            if not callable(fn):
                raise NameError(f"the program defines no function {request['name']!r}")
            args = decode(request["args"])
            kwargs = decode(request["kwargs"])
            result = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported as the call's outcome
            reply = {"exc": type(exc).__name__, "msg": str(exc)[:500]}
        else:
            try:
                reply = {"ok": encode(result)}
            except EncodeError as exc:
                reply = {"bad": str(exc)}
        _flush()
        send_msg(rpc, reply)
