"""The zygote: pid 1 of the sandbox, which forks U (and T) for each program and cleans up after.

It takes orders from the host on its control socket (``spawn``, ``reset``, ``ping``), hands the
host the ends of each run's channels by ``SCM_RIGHTS``, reports each child's exit, and between
programs kills and reaps every other process in the namespace. Stdlib only; the sandbox's
bootstrap (:data:`rlvr.verifiers.code.sandbox.BOOTSTRAP`) calls :func:`main`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
from typing import Any

from rlvr.verifiers.code.harness.namespace import refresh, root_setup, take_fresh
from rlvr.verifiers.code.harness.privileges import drop_to
from rlvr.verifiers.code.harness.program import run_user
from rlvr.verifiers.code.harness.seccomp import Seccomp
from rlvr.verifiers.code.harness.tester import run_tester

ZYGOTE_MARKER = "rlvr-sandbox-zygote"
_exit = os._exit  # saved: a program may patch os._exit in its own process
_PRELOAD = (
    "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string", "json",
    "hashlib", "random", "typing", "copy", "fractions", "decimal", "statistics", "operator",
    "traceback", "types", "io", "dataclasses", "array", "datetime",
)
_SECCOMP: Seccomp | None = None  # built in main(), installed in each child


def _kill_all_and_reap(roles: dict[int, str], ctl: socket.socket) -> None:
    """SIGKILLs every other process in this PID namespace and reaps them all."""
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


def _spawn(mode: str, limits: dict[str, Any], ctl: socket.socket, roles: dict[int, str],
           uids: tuple[int, int]) -> None:
    """Forks U (and T in assert mode) and hands the host ends of their channels to the host."""
    take_fresh()  # raises if it cannot: the zygote exits, the host replaces the sandbox
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
    rpc_u = -1  # stdio: U gets fds 0-3 only (and closes 3 before the program runs)
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
    user_fds = [in_r, out_w, err_w, setup_u] + ([rpc_u] if rpc_u >= 0 else [])
    pid = os.fork()
    if pid == 0:
        _in_child(user_fds, uids[0], run_user, mode, limits, program=True)
    roles[pid] = "user"
    pids["user"] = pid
    if mode == "assert":
        null = os.open("/dev/null", os.O_RDWR)
        child_fds.append(null)
        pid = os.fork()
        if pid == 0:
            _in_child([null, null, null, spec_t, rpc_other], uids[1], run_tester, mode, limits)
        roles[pid] = "tester"
        pids["tester"] = pid
    for fd in child_fds:
        os.close(fd)
    names = list(host_fds)
    _ctl_send(ctl, {"op": "spawned", "pids": pids, "fds": names}, [host_fds[n] for n in names])
    for fd in host_fds.values():
        os.close(fd)


def _in_child(fds: list[int], uid: int, target: Any, mode: str, limits: dict[str, Any],
              program: bool = False) -> None:
    """In a fresh fork: ``fds`` go to 0, 1, ...; becomes ``uid`` and runs ``target``.

    Every other descriptor is closed (the zygote's control socket and wake-up pipe included).
    The program's process is the first the OOM killer picks when the sandbox's memory cgroup
    is full.
    """
    code = 70
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as in a fresh interpreter
        import fcntl

        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
        for target_fd, fd in enumerate(high):
            os.dup2(fd, target_fd)
        os.closerange(len(fds), 1 << 20)
        if sorted(int(n) for n in os.listdir("/proc/self/fd")) != list(range(len(fds) + 1)):
            raise RuntimeError("a descriptor survived")  # the extra one is listdir's own
        os.setsid()
        if program:
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("1000")
        drop_to(uid)
        if _SECCOMP is not None:
            _SECCOMP.install()
        code = target(mode, limits)
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        code = 71
    finally:
        _exit(code)


def _zygote_loop(ctl: socket.socket, uids: tuple[int, int]) -> None:
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
            _spawn(msg["mode"], msg["limits"], ctl, roles, uids)
        elif msg["op"] == "reset":
            _kill_all_and_reap(roles, ctl)
            _ctl_send(ctl, {"op": "clean", "ok": True})
            try:
                refresh()
            except OSError:
                pass  # the next spawn tries again, and fails the sandbox if it cannot
        elif msg["op"] == "ping":
            _ctl_send(ctl, {"op": "pong"})


def main(argv: list[str]) -> None:
    """Zygote entry point: ``--ctl-fd N --backend bwrap|unshare --tmp-bytes B --uids U,T``."""
    global _SECCOMP
    args = dict(zip(argv[0::2], argv[1::2], strict=False))
    import fcntl

    # Well above 0-2 (a host run with a standard descriptor closed can hand it down as one).
    ctl_fd = fcntl.fcntl(int(args["--ctl-fd"]), fcntl.F_DUPFD, 64)
    os.close(int(args["--ctl-fd"]))
    ctl = socket.socket(fileno=ctl_fd)
    user_uid, tester_uid = (int(x) for x in args["--uids"].split(","))
    root_setup(args["--backend"], int(args["--tmp-bytes"]))
    _SECCOMP = Seccomp()
    for name in _PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    _ctl_send(ctl, {"op": "hello", "pid": os.getpid(), "uid": os.getuid(),
                    "seccomp": _SECCOMP.active})
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _zygote_loop(ctl, (user_uid, tester_uid))
