"""The code that runs inside the sandbox: a warm "zygote" that forks one fresh process per program.

This module is stdlib-only and is run by the system interpreter (``/usr/bin/python3 -I -B -c``)
inside bubblewrap, together with :mod:`verifiers.code.protocol` (the value codec, framing and
check-body splitter that the host uses too, so both sides share one definition).

Processes inside one sandbox (one PID namespace, one private ``/tmp``)::

    bwrap (pid 1, root, reaps)
      zygote (uid 65534 after start-up, non-dumpable, child subreaper, NO_NEW_PRIVS)
        U  the untrusted program: its own session, rlimits, stdin/stdout/stderr pipes to the host
        T  the tester (AssertTests only): runs the trusted test code; every call of the program's
           functions is a round trip to U over a socket, with arguments and results converted to
           plain data by :func:`encode` / :func:`decode`

Why this cannot be fooled:

* The zygote never holds job data: the host sends the program to U and the tests to T directly,
  over sockets whose host ends the zygote hands over by ``SCM_RIGHTS`` and closes. U is forked
  from the zygote, so U's memory holds no earlier program's tests.
* Results come only from T (or, for call and stdio tests, are judged by the host itself). U never
  holds T's socket, and T is non-dumpable, so U cannot read T's memory or file descriptors
  through ``/proc`` or ``ptrace``. Test code never shares an interpreter with the program, so
  exiting early, patching builtins, deleting ``check`` or printing markers in U changes nothing
  T reports; killing T only loses the "done" record, which counts as a failure.
* Values cross from U as tagged JSON of exact builtin types, so an object with a rigged
  ``__eq__`` never reaches the comparison.
* No nonce is needed: a forged record could only come from a process that holds T's or the
  zygote's descriptors, and U holds neither (what U itself sends is treated as data, never as a
  verdict).

Between programs the zygote SIGKILLs every other process of its uid in the namespace
(``kill(-1)``), reaps them, and empties ``/tmp``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
from typing import Any

if "rlvr_protocol" in sys.modules:  # inside the sandbox (see sandbox.BOOTSTRAP)
    from rlvr_protocol import EncodeError, decode, encode, recv_msg, send_msg, split_check
else:
    from verifiers.code.protocol import (
        EncodeError,
        decode,
        encode,
        recv_msg,
        send_msg,
        split_check,
    )

SANDBOX_UID = 65534
MAX_PROGRAM_BYTES = 4 * 1024 * 1024
ZYGOTE_MARKER = "rlvr-sandbox-zygote"
_exit = os._exit  # saved: a program may patch os._exit in its own process
_PRELOAD = (
    "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string", "json",
    "hashlib", "random", "typing", "copy", "fractions", "decimal", "statistics", "operator",
    "traceback", "types", "io", "dataclasses", "array", "datetime",
)


# ---------------------------------------------------------------------------- zygote


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _root_setup(backend: str, tmp_bytes: int) -> None:
    """Runs as root inside the namespaces: private tmpfs mounts (unshare backend), then drop."""
    if backend == "unshare":
        libc = _libc()
        opts = f"size={tmp_bytes},mode=0777".encode()
        for path in (b"/tmp", b"/var/tmp", b"/dev/shm"):
            if os.path.isdir(path):
                libc.mount(b"tmpfs", path, b"tmpfs", 0x2 | 0x4 | 0x8, opts)  # nosuid,nodev,noexec
    os.setgroups([])
    os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    libc = _libc()
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, /proc/<pid>/{mem,fd,environ}
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us to be reaped
    if os.getuid() != SANDBOX_UID or os.geteuid() != SANDBOX_UID:
        raise RuntimeError("could not drop to the sandbox uid")


def _wipe(path: str) -> None:
    """Removes everything under ``path`` (not ``path`` itself), whatever its permissions."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        full = entry.path
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(full, 0o700)
                _wipe(full)
                os.rmdir(full)
            else:
                os.unlink(full)
        except OSError:
            pass


def _kill_all_and_reap(roles: dict[int, str], ctl: socket.socket) -> None:
    """SIGKILLs every other process of our uid in this PID namespace and reaps them all."""
    for _ in range(1000):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            break
        except PermissionError:
            break
        _reap(roles, ctl, block=True)
    _reap(roles, ctl, block=True)


def _reap(roles: dict[int, str], ctl: socket.socket, block: bool) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        role = roles.pop(pid, None)
        if role is not None:
            _ctl_send(ctl, {"op": "exit", "role": role, "pid": pid, "status": status})


def _ctl_send(ctl: socket.socket, obj: Any, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    if fds:
        socket.send_fds(ctl, [data], fds)
    else:
        ctl.send(data)


def _spawn(mode: str, limits: dict[str, Any], ctl: socket.socket, roles: dict[int, str]) -> None:
    """Forks U (and T in assert mode) and hands the host ends of their channels to the host."""
    host_fds: dict[str, int] = {}
    child_fds: list[int] = []

    def pair() -> tuple[int, int]:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        return a.detach(), b.detach()

    setup_h, setup_u = pair()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    host_fds.update(setup=setup_h, stdout=out_r, stderr=err_r)
    child_fds += [setup_u, out_w, err_w]
    if mode == "stdio":
        in_r, in_w = os.pipe()
        host_fds["stdin"] = in_w
        child_fds.append(in_r)
    else:
        in_r = os.open("/dev/null", os.O_RDONLY)
        child_fds.append(in_r)
    rpc_u = -1
    if mode in ("call", "assert"):
        rpc_other, rpc_u = pair()
        child_fds.append(rpc_u)
        if mode == "call":
            host_fds["rpc"] = rpc_other
        else:
            child_fds.append(rpc_other)
            spec_h, spec_t = pair()
            host_fds["tester"] = spec_h
            child_fds.append(spec_t)
    pids: dict[str, int] = {}
    pid = os.fork()
    if pid == 0:
        _in_child([in_r, out_w, err_w, setup_u, rpc_u], _run_user, mode, limits)
    roles[pid] = "user"
    pids["user"] = pid
    if mode == "assert":
        null = os.open("/dev/null", os.O_RDWR)
        child_fds.append(null)
        pid = os.fork()
        if pid == 0:
            _in_child([null, null, null, spec_t, rpc_other], _run_tester, mode, limits)
        roles[pid] = "tester"
        pids["tester"] = pid
    for fd in child_fds:
        os.close(fd)
    names = list(host_fds)
    _ctl_send(ctl, {"op": "spawned", "pids": pids, "fds": names}, [host_fds[n] for n in names])
    for fd in host_fds.values():
        os.close(fd)


def _in_child(fds: list[int], target: Any, mode: str, limits: dict[str, Any]) -> None:
    """In a fresh fork: puts ``fds`` at 0..4, closes everything else, runs ``target``, exits."""
    code = 70
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as in a fresh interpreter
        import fcntl

        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) if fd >= 0 else -1 for fd in fds]
        for target_fd, fd in enumerate(high):
            if fd >= 0:
                os.dup2(fd, target_fd)
        os.closerange(len(fds), 65536)
        os.setsid()
        code = target(mode, limits)
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        code = 71
    finally:
        _exit(code)


def _set_limits(limits: dict[str, Any], memory: bool = True) -> None:
    import resource

    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if memory:
        mem = int(limits["memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["nproc"]),) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limits["fsize_bytes"]),) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(limits["nofile"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run_user(mode: str, limits: dict[str, Any]) -> int:
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
    _set_limits(limits)
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
    names = [k for k, v in list(module.__dict__.items()) if callable(v) and isinstance(k, str)]
    send_msg(rpc, {"ready": True, "names": names})
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
            reply = recv_msg(self._rpc)
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
            if isinstance(cls, type) and issubclass(cls, Exception):
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
        status = "memory_limit" if remote == "MemoryError" else "runtime_error"
        return status, f"the program raised {remote}: {exc}"[:300]
    if isinstance(exc, _RemoteDied):
        return "runtime_error", str(exc)
    if isinstance(exc, _NotPlainData):
        return "wrong_answer", f"the program returned a value that is not plain data: {exc}"
    if isinstance(exc, EncodeError):
        return "sandbox_error", f"test arguments are not plain data: {exc}"
    if isinstance(exc, AssertionError):
        return "wrong_answer", f"assertion failed {exc}".strip()[:300]
    return "wrong_answer", f"{type(exc).__name__}: {exc}"[:300]


def _run_tester(mode: str, limits: dict[str, Any]) -> int:
    """T: run the trusted test code against proxies of the program's functions; report results."""
    import builtins

    host = socket.socket(fileno=3)
    rpc = socket.socket(fileno=4)
    spec = recv_msg(host)
    _set_limits(limits, memory=False)
    test_code, entry_point = spec["test_code"], spec["entry_point"]
    plan = split_check(test_code)
    n_tests = 1 if plan is None else sum(1 for t, _ in plan[1] if t)
    try:
        ready = recv_msg(rpc)
    except (EncodeError, OSError):
        ready = {"exc": "ProtocolError", "msg": "the program garbled its channel"}
    if not isinstance(ready, dict):
        ready = {"exc": "ProtocolError", "msg": "the program garbled its channel"}
    if not ready or not ready.get("ready"):
        why = "the program exited before its functions could be called"
        status = "runtime_error"
        if ready:
            why = f"the program raised {ready.get('exc')}: {ready.get('msg')}"[:300]
            status = "memory_limit" if ready.get("exc") == "MemoryError" else "runtime_error"
        for i in range(n_tests):
            send_msg(host, {"i": i, "status": status, "msg": why})
        send_msg(host, {"done": True})
        return 0
    bdict = dict(vars(builtins))
    ns: dict[str, Any] = {"__builtins__": bdict, "__name__": "__test__"}
    for name in ready.get("names", []):
        if isinstance(name, str):
            ns[name] = _Remote(rpc, name, bdict)
    candidate = _Remote(rpc, entry_point, bdict)
    try:
        exec(compile(test_code, "<tests>", "exec"), ns)
    except Exception as exc:  # noqa: BLE001 - a broken test module fails every test
        for i in range(n_tests):
            send_msg(host, {"i": i, "status": "sandbox_error",
                            "msg": f"the test code failed to load: {type(exc).__name__}: {exc}"})
        send_msg(host, {"done": True})
        return 0
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


def _zygote_loop(ctl: socket.socket) -> None:
    roles: dict[int, str] = {}
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    poller = select.poll()
    poller.register(ctl.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        readable = [fd for fd, _ in poller.poll()]
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(roles, ctl, block=False)
        if ctl.fileno() not in readable:
            continue
        data = ctl.recv(65536)
        if not data:
            return
        msg = json.loads(data)
        if msg["op"] == "spawn":
            _spawn(msg["mode"], msg["limits"], ctl, roles)
        elif msg["op"] == "reset":
            _kill_all_and_reap(roles, ctl)
            for path in ("/tmp", "/dev/shm", "/var/tmp"):
                _wipe(path)
            _ctl_send(ctl, {"op": "clean"})
        elif msg["op"] == "ping":
            _ctl_send(ctl, {"op": "pong"})


def main(argv: list[str]) -> None:
    """Zygote entry point: ``--ctl-fd N --backend bwrap|unshare --tmp-bytes B``."""
    args = dict(zip(argv[0::2], argv[1::2], strict=False))
    ctl = socket.socket(fileno=int(args["--ctl-fd"]))
    _root_setup(args["--backend"], int(args["--tmp-bytes"]))
    for name in _PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    _ctl_send(ctl, {"op": "hello", "pid": os.getpid(), "uid": os.getuid()})
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _zygote_loop(ctl)


if __name__ == "__main__" and ZYGOTE_MARKER in sys.argv:
    main(sys.argv[sys.argv.index(ZYGOTE_MARKER) + 1 :])
