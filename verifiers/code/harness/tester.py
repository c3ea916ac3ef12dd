"""T, the tester's process: runs the trusted test code against stand-ins of the program's functions.

Every call of the program's entry point is a round trip to U over a socket (:class:`_Remote`);
what comes back is plain data, and the program's exceptions come back as the builtin class of
the same name. T reports one result per test to the host, and nothing the program does reaches
that channel. Stdlib only; runs inside the sandbox (see :mod:`rlvr.verifiers.code.harness`).
"""

from __future__ import annotations

import socket
from typing import Any

from rlvr.verifiers.code.harness.privileges import set_limits
from rlvr.verifiers.code.protocol import (
    MAX_REPLY_BYTES,
    EncodeError,
    decode,
    encode,
    program_raised,
    recv_msg,
    send_msg,
    split_check,
)

TESTER_MIN_MEMORY = 256 << 20


class _RemoteDied(Exception):
    """The program's process ended while a test was calling it."""


class _NotPlainData(Exception):
    """The program returned a value that is not plain data."""


class _Remote:
    """A stand-in for one of the program's functions: each call is a round trip to U."""

    def __init__(self, rpc: socket.socket, name: str, builtins_dict: dict[str, Any]) -> None:
        self._rpc, self._name, self._builtins = rpc, name, builtins_dict

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        payload = {"name": self._name, "args": encode(list(args)), "kwargs": encode(kwargs)}
        try:
            send_msg(self._rpc, payload)
            reply = recv_msg(self._rpc, MAX_REPLY_BYTES)
        except OSError:
            reply = None
        except EncodeError as exc:
            raise _RemoteDied(f"the program garbled its replies ({exc})") from None
        if reply is None:
            raise _RemoteDied("the program exited before the test finished")
        if not isinstance(reply, dict):
            raise _RemoteDied("the program garbled its replies")
        if "ok" in reply:
            return decode(reply["ok"])
        if "bad" in reply:
            raise _NotPlainData(str(reply["bad"])[:300])
        name, msg = str(reply.get("exc")), str(reply.get("msg"))[:300]
        cls = self._builtins.get(name)
        err: BaseException | None = None
        try:
            # StopIteration would end the test's own iteration (all(map(candidate, xs)) is then
            # true): iteration-protocol exceptions become RuntimeError, as PEP 479 does.
            if (isinstance(cls, type) and issubclass(cls, Exception)
                    and not issubclass(cls, (StopIteration, StopAsyncIteration))):
                err = cls(msg)
        except Exception:  # noqa: BLE001
            err = None
        if err is None:
            err = RuntimeError(f"{name}: {msg}")
        err._rlvr_remote = name  # type: ignore[attr-defined]
        raise err


def _classify(exc: BaseException) -> tuple[str, str]:
    remote = getattr(exc, "_rlvr_remote", None)
    if remote is not None:
        return program_raised(remote, exc)
    if isinstance(exc, _RemoteDied):
        return "runtime_error", str(exc)
    if isinstance(exc, _NotPlainData):
        return "wrong_answer", f"the program returned a value that is not plain data: {exc}"
    if isinstance(exc, EncodeError):
        return "sandbox_error", f"test arguments are not plain data: {exc}"
    if isinstance(exc, AssertionError):
        return "wrong_answer", f"assertion failed {exc}".strip()[:300]
    return "wrong_answer", f"{type(exc).__name__}: {exc}"[:300]


def _fail_every_test(host: socket.socket, n_tests: int, status: str, msg: str) -> int:
    """Reports each of the ``n_tests`` tests as ``status`` with ``msg``, then the end of the run."""
    for i in range(n_tests):
        send_msg(host, {"i": i, "status": status, "msg": msg})
    send_msg(host, {"done": True})
    return 0


def run_tester(mode: str, limits: dict[str, Any]) -> int:
    """T: run the trusted test code against proxies of the program's functions; report results."""
    import builtins

    host = socket.socket(fileno=3)
    rpc = socket.socket(fileno=4)
    spec = recv_msg(host)
    # The tester decodes what the program returns: it gets the program's memory limit (but at
    # least TESTER_MIN_MEMORY, for the interpreter and the test code).
    set_limits(limits, max(int(limits["memory_bytes"]), TESTER_MIN_MEMORY))
    test_code, entry_point = spec["test_code"], spec["entry_point"]
    plan = split_check(test_code)
    n_tests = 1 if plan is None else sum(1 for t, _ in plan[1] if t)
    try:
        ready = recv_msg(rpc, MAX_REPLY_BYTES)
    except (EncodeError, OSError):
        ready = {"exc": "ProtocolError", "msg": "the program garbled its channel"}
    if ready is not None and not isinstance(ready, dict):  # None: it exited before a word
        ready = {"exc": "ProtocolError", "msg": "the program garbled its channel"}
    if not ready or not ready.get("ready"):
        why = "the program exited before its functions could be called"
        status = "runtime_error"
        if ready:
            status, why = program_raised(str(ready.get("exc")), ready.get("msg"))
        return _fail_every_test(host, n_tests, status, why)
    bdict = dict(vars(builtins))
    ns: dict[str, Any] = {"__builtins__": bdict, "__name__": "__test__"}
    # The program provides the entry point and nothing else: every helper the tests use comes
    # from trusted source (spec["helpers"], e.g. HumanEval's prompt) and runs here, so neither
    # the helpers nor the values the tests pass to them ever reach the program.
    candidate = _Remote(rpc, entry_point, bdict)
    try:
        exec(compile(str(spec.get("helpers", "")), "<helpers>", "exec"), ns)
        ns[entry_point] = candidate
        exec(compile(test_code, "<tests>", "exec"), ns)
    except Exception as exc:  # noqa: BLE001 - a broken test module fails every test
        why = f"the test code failed to load: {type(exc).__name__}: {exc}"
        return _fail_every_test(host, n_tests, "sandbox_error", why)
    if plan is None:
        try:
            ns["check"](candidate)
            send_msg(host, {"i": 0, "status": "passed", "msg": ""})
        except Exception as exc:  # noqa: BLE001
            status, msg = _classify(exc)
            send_msg(host, {"i": 0, "status": status, "msg": msg})
        send_msg(host, {"done": True})
        return 0
    param, statements = plan
    ns[param] = candidate
    index = 0
    setup_error: tuple[str, str] | None = None
    for is_test, src in statements:
        outcome: tuple[str, str] | None = setup_error
        if outcome is None:
            try:
                exec(compile(src, "<check>", "exec"), ns)
            except Exception as exc:  # noqa: BLE001
                outcome = _classify(exc)
                if not is_test:
                    setup_error = outcome
        if is_test:
            status, msg = outcome if outcome else ("passed", "")
            send_msg(host, {"i": index, "status": status, "msg": msg})
            index += 1
    send_msg(host, {"done": True})
    return 0
