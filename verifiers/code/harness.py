"""The code that runs inside the sandbox: a warm "zygote" that forks one fresh process per program.

This module is stdlib-only and is run by the system interpreter (``/usr/bin/python3 -I -B -c``)
inside bubblewrap, together with :mod:`rlvr.verifiers.code.protocol` (the value codec, framing and
check-body splitter that the host uses too, so both sides share one definition).

Processes inside one sandbox (one PID namespace, one private ``/tmp``)::

    zygote (pid 1, uid 0 with only CAP_SETUID/SETGID/KILL left, non-dumpable, child subreaper)
      U  the untrusted program, as the sandbox's program uid: its own session, rlimits, a seccomp
         filter, stdin/stdout/stderr pipes to the host
      T  the tester (AssertTests only), as the sandbox's tester uid (another uid, same filter):
         runs the trusted test code; every call of the program's functions is a round trip to U
         over a socket, with arguments and results converted to plain data by :func:`encode` /
         :func:`decode`

Each sandbox gets its own pair of uids from the host (see ``sandbox.UidLease``), so
``RLIMIT_NPROC`` counts one sandbox's processes only, and U can signal, renice, ``prlimit`` or
``ptrace`` neither T nor the zygote (other uids, and the zygote is root). ``/proc`` is mounted
with ``hidepid=invisible``: a process sees only its own uid's processes.

Why this cannot be fooled:

* The zygote never holds job data: the host sends the program to U and the tests to T directly,
  over sockets whose host ends the zygote hands over by ``SCM_RIGHTS`` and closes. U is forked
  from the zygote, so U's memory holds no earlier program's tests.
* Results come only from T (or, for call and stdio tests, are judged by the host itself). U never
  holds T's socket, runs as another uid, and cannot see T in ``/proc``. Test code never shares an
  interpreter with the program, so exiting early, patching builtins, deleting ``check`` or
  printing markers in U changes nothing T reports; killing T is not possible (another uid).
* T takes from the program only its entry point: helpers the tests use are trusted source
  (``AssertTests.helpers``) run in T, so a program's ``abs``, ``range`` or ``poly`` cannot change
  what a test computes, and no value a test passes to a helper reaches the program.
* Values cross from U as tagged JSON of exact builtin types, so an object with a rigged
  ``__eq__`` never reaches the comparison; the program's exceptions reach the test code as the
  builtin class of the same name, except the iteration-protocol ones (``StopIteration``,
  ``StopAsyncIteration``), which become ``RuntimeError`` (as PEP 479 does for generators) so that
  they cannot end a test's ``all(map(candidate, xs))`` early.
* Nothing survives a run: the seccomp filter refuses SysV IPC, POSIX message queues and kernel
  keyrings (objects that outlive processes), new namespaces, ``io_uring``, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, ``ptrace`` and mounts; between programs the zygote
  SIGKILLs every other process in the namespace (``kill(-1)``), reaps them, and detaches
  ``/tmp`` and ``/dev/shm``; each program gets freshly mounted ones and U a network namespace of
  its own, so no file, directory time, xattr, tmpfs counter or socket state reaches a later run.
* No nonce is needed: a forged record could only come from a process that holds T's or the
  zygote's descriptors, and U holds neither (it holds no descriptor but its own channels; the
  host also checks that each control message carries the zygote's credentials, which the kernel
  attaches); what U itself sends is treated as data, never as a verdict.
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
    from rlvr_protocol import (
        MAX_REPLY_BYTES,
        EncodeError,
        decode,
        encode,
        recv_msg,
        send_msg,
        split_check,
    )
else:
    from rlvr.verifiers.code.protocol import (
        MAX_REPLY_BYTES,
        EncodeError,
        decode,
        encode,
        recv_msg,
        send_msg,
        split_check,
    )

MAX_PROGRAM_BYTES = 4 * 1024 * 1024
TESTER_MIN_MEMORY = 256 << 20
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


# ---------------------------------------------------------------------------- seccomp

# Refused with EPERM (numbers: x86_64, aarch64). Objects that outlive a process (SysV IPC, POSIX
# message queues, kernel keyrings: cross-run channels), new namespaces (a full capability set
# inside a user namespace is kernel attack surface), and interfaces a Python program never needs.
_DENIED = {
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195),
    "semget": (64, 190), "semop": (65, 193), "semctl": (66, 191), "semtimedop": (220, 192),
    "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182),
    "mq_timedreceive": (243, 183), "mq_notify": (244, 184), "mq_getsetattr": (245, 185),
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "fsopen": (430, 430), "fsmount": (432, 432),
    "fspick": (433, 433), "open_tree": (428, 428), "move_mount": (429, 429),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "kexec_load": (246, 104), "syslog": (103, 116), "acct": (163, 89), "quotactl": (179, 60),
    "swapon": (167, 224),
    # The host's page cache is shared (``/usr`` is the host's): no reading its residency without
    # timing, no evicting pages of shared files (see docs/sandbox.md for what timing still shows).
    "mincore": (27, 232), "fadvise64": (221, 223), "readahead": (187, 213),
    "cachestat": (451, 451),
}
_PREADV2, _PWRITEV2, _MADVISE = (327, 286), (328, 287), (28, 233)
_RWF_NOWAIT = 0x8
_MADV_COLD, _MADV_PAGEOUT = 20, 21
_CLONE, _CLONE3 = (56, 220), (435, 435)
_CLONE_NEW_FLAGS = 0x7E020080  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME
_ARCHES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}  # column, AUDIT_ARCH_*


def seccomp_filter(machine: str) -> bytes | None:
    """The classic-BPF program of the sandbox's seccomp filter, or None on another architecture.

    Allows everything but :data:`_DENIED` (EPERM), ``clone`` with a namespace flag (EPERM),
    ``preadv2``/``pwritev2`` with ``RWF_NOWAIT`` and ``madvise`` with ``MADV_COLD``/
    ``MADV_PAGEOUT`` (EPERM), and ``clone3`` (ENOSYS, whose flags BPF cannot read: libc falls
    back to ``clone``); on x86_64 the x32 ABI is refused too; a foreign architecture's syscall
    kills the process.
    """
    import struct

    if machine not in _ARCHES:
        return None
    col, audit_arch = _ARCHES[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, JMP|J*|K, RET|K
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38
    # Instructions (code, k, jump-if-true label, jump-if-false label) and labels (str).
    prog: list[str | tuple[int, int, str | None, str | None]] = [
        (ld, 4, None, None), (jeq, audit_arch, "nr", "kill"),
        "nr", (ld, 0, None, None),
    ]
    if machine == "x86_64":
        prog.append((jge, 0x40000000, "deny", None))
    prog += [(jeq, _CLONE3[col], "nosys", None), (jeq, _CLONE[col], "clone", None),
             (jeq, _PREADV2[col], "rwf", None), (jeq, _PWRITEV2[col], "rwf", None),
             (jeq, _MADVISE[col], "madvise", None)]
    prog += [(jeq, nrs[col], "deny", None) for nrs in _DENIED.values()]
    prog += [(ret, allow, None, None),
             "clone", (ld, 16, None, None), (jset, _CLONE_NEW_FLAGS, "deny", None),
             (ret, allow, None, None),
             "rwf", (ld, 56, None, None), (jset, _RWF_NOWAIT, "deny", None),  # args[5], low word
             (ret, allow, None, None),
             "madvise", (ld, 32, None, None), (jeq, _MADV_COLD, "deny", None),  # args[2]
             (jeq, _MADV_PAGEOUT, "deny", None),
             (ret, allow, None, None),
             "deny", (ret, eperm, None, None),
             "nosys", (ret, enosys, None, None),
             "kill", (ret, kill, None, None)]
    labels: dict[str, int] = {}
    code: list[tuple[int, int, str | None, str | None]] = []
    for op in prog:
        if isinstance(op, str):
            labels[op] = len(code)
        else:
            code.append(op)
    out = []
    for i, (opcode, k, jt, jf) in enumerate(code):
        t = labels[jt] - i - 1 if jt else 0
        f = labels[jf] - i - 1 if jf else 0
        out.append(struct.pack("=HBBI", opcode, t, f, k))
    return b"".join(out)


class _Seccomp:
    """The filter, built once in the zygote and installed in each child before its own code."""

    def __init__(self) -> None:
        import ctypes

        blob = seccomp_filter(os.uname().machine)
        self.active = blob is not None
        if blob is None:
            return

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self._buf = ctypes.create_string_buffer(blob, len(blob))
        self._prog = SockFprog(len(blob) // 8, ctypes.cast(self._buf, ctypes.c_void_p))
        self._ref = ctypes.byref(self._prog)
        self._libc = _libc()

    def install(self) -> None:
        """Applies the filter to this process (after NO_NEW_PRIVS); raises if the kernel refuses."""
        if self.active and self._libc.prctl(22, 2, self._ref, 0, 0) != 0:  # PR_SET_SECCOMP
            raise OSError("seccomp filter refused")


_SECCOMP: _Seccomp | None = None


# ---------------------------------------------------------------------------- zygote

_KEEP_CAPS = (1 << 5) | (1 << 6) | (1 << 7)  # CAP_KILL, CAP_SETGID, CAP_SETUID
# Permitted but not effective: raised only for a moment, to mount fresh tmpfs between runs
# (CAP_SYS_ADMIN) and to give each program a network namespace of its own with loopback up
# (CAP_SYS_ADMIN, CAP_NET_ADMIN). A child loses them with its uid (``_drop_to``).
_SPARE_CAPS = (1 << 12) | (1 << 21)
TMP_DIRS = ("/tmp", "/dev/shm", "/var/tmp")
WORK_DIR = "/tmp/work"
MAX_TMP_INODES = 16384
_TMP: dict[str, Any] = {}  # backend, bytes (how _mount_tmp mounts), mounted


def _mount(libc: Any, source: bytes, target: bytes, fstype: bytes, flags: int,
           opts: bytes) -> None:
    import ctypes

    if libc.mount(source, target, fstype, flags, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target.decode()}: {os.strerror(err)}")


def _set_caps(effective: int) -> None:
    """Sets this process's effective capabilities (permitted: ``_KEEP_CAPS | _SPARE_CAPS``)."""
    import ctypes

    permitted = _KEEP_CAPS | _SPARE_CAPS
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)(effective, permitted, 0, 0, 0, 0)  # effective, permitted, inh.
    if _libc().capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def _mount_tmp() -> None:
    """Mounts a new, empty tmpfs on each writable dir.

    Nothing of an earlier run's files survives: not their names or contents, nor the times,
    modes and extended attributes of the directories, nor the tmpfs's inode counter.
    """
    libc = _libc()
    nosuid, nodev, noexec = 0x2, 0x4, 0x8
    opts = f"size={_TMP['bytes']},nr_inodes={MAX_TMP_INODES},mode=1777".encode()
    for path in TMP_DIRS:
        if os.path.isdir(path):
            flags = nosuid | nodev
            if _TMP["backend"] == "unshare" or path == "/var/tmp":
                flags |= noexec
            _mount(libc, b"tmpfs", path.encode(), b"tmpfs", flags, opts)
    os.mkdir(WORK_DIR)
    os.chmod(WORK_DIR, 0o777)


def _detach_tmp() -> None:
    """Detaches the last run's tmpfs mounts (their memory is freed once nothing holds them)."""
    libc = _libc()
    for path in TMP_DIRS:
        if os.path.isdir(path) and libc.umount2(path.encode(), 2) != 0:  # MNT_DETACH
            raise OSError(f"umount {path} failed")


def _refresh() -> None:
    """What the next program gets fresh: tmpfs mounts and a network namespace (loopback up).

    The zygote moves itself into the new network namespace, so U and T forked later share it
    and the last run's one dies with its processes: sockets in TIME_WAIT, interface counters,
    TCP metrics and abstract unix sockets never reach the next run. Runs right after a reset
    has been answered, so that it overlaps with the host's work (or, failing that, at spawn).
    """
    _TMP["fresh"] = False
    _set_caps(_KEEP_CAPS | _SPARE_CAPS)
    try:
        _detach_tmp()
        _mount_tmp()
        _new_netns()
    finally:
        _set_caps(_KEEP_CAPS)
    _TMP["fresh"] = True


def _root_setup(backend: str, tmp_bytes: int) -> None:
    """Runs as root inside the namespaces: mounts, then keeps only the capabilities it needs.

    ``/proc`` is remounted with ``hidepid=invisible`` (a process sees only its own uid's
    processes), the private tmpfs mounts get an inode cap and the sticky bit, and the zygote keeps
    CAP_SETUID/SETGID (to run U and T as their uids) and CAP_KILL (to kill them between programs)
    effective, plus ``_SPARE_CAPS`` permitted only; it never runs untrusted code itself.
    """
    libc = _libc()
    nosuid, nodev, noexec, remount = 0x2, 0x4, 0x8, 0x20
    os.chdir("/")  # a cwd on /tmp would keep each detached tmpfs alive
    _TMP.update(backend=backend, bytes=tmp_bytes, fresh=True)
    _mount_tmp()  # over what bwrap (or the host) has there; later runs detach and remount
    _mount(libc, b"proc", b"/proc", b"proc", remount | nosuid | nodev | noexec,
           b"hidepid=2")  # = "invisible"; the number works on kernels before 5.8 too
    if backend == "unshare":  # what bwrap's --hostname and the /dev/null bind do there
        socket.sethostname("sandbox")
        _mount(libc, b"/dev/null", b"/proc/sys/kernel/random/boot_id", b"", 0x1000, b"")
    os.setgroups([])
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, /proc/<pid>/{mem,fd,environ}
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us to be reaped
    try:
        _set_caps(_KEEP_CAPS)
    except OSError as exc:
        raise OSError("could not drop capabilities") from exc


def _new_netns() -> None:
    """Moves this process into a new network namespace and brings its loopback up."""
    import ctypes
    import fcntl
    import struct

    libc = _libc()
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), 0x8913, ifreq))[1]  # GIFFLAGS
        fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", flags | 1))  # IFF_UP


def _drop_to(uid: int) -> None:
    """In a fresh child of the zygote: become ``uid`` (no capabilities left), then seccomp."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("could not drop to the sandbox uid")
    libc = _libc()
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS (inherited, but make sure)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    if _SECCOMP is not None:
        _SECCOMP.install()


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
    if not _TMP["fresh"]:
        _refresh()  # raises if it cannot: the zygote exits, the host replaces the sandbox
    _TMP["fresh"] = False
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
        _in_child(user_fds, uids[0], _run_user, mode, limits, program=True)
    roles[pid] = "user"
    pids["user"] = pid
    if mode == "assert":
        null = os.open("/dev/null", os.O_RDWR)
        child_fds.append(null)
        pid = os.fork()
        if pid == 0:
            _in_child([null, null, null, spec_t, rpc_other], uids[1], _run_tester, mode, limits)
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
        _drop_to(uid)
        code = target(mode, limits)
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        code = 71
    finally:
        _exit(code)


def _set_limits(limits: dict[str, Any], memory_bytes: int | None = None) -> None:
    import resource

    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    mem = int(limits["memory_bytes"]) if memory_bytes is None else memory_bytes
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
    # The tester decodes what the program returns: it gets the program's memory limit (but at
    # least TESTER_MIN_MEMORY, for the interpreter and the test code).
    _set_limits(limits, max(int(limits["memory_bytes"]), TESTER_MIN_MEMORY))
    test_code, entry_point = spec["test_code"], spec["entry_point"]
    plan = split_check(test_code)
    n_tests = 1 if plan is None else sum(1 for t, _ in plan[1] if t)
    try:
        ready = recv_msg(rpc, MAX_REPLY_BYTES)
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
    # The program provides the entry point and nothing else: every helper the tests use comes
    # from trusted source (spec["helpers"], e.g. HumanEval's prompt) and runs here, so neither
    # the helpers nor the values the tests pass to them ever reach the program.
    candidate = _Remote(rpc, entry_point, bdict)
    try:
        exec(compile(str(spec.get("helpers", "")), "<helpers>", "exec"), ns)
        ns[entry_point] = candidate
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
                _refresh()
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
    _root_setup(args["--backend"], int(args["--tmp-bytes"]))
    _SECCOMP = _Seccomp()
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

if __name__ == "__main__" and ZYGOTE_MARKER in sys.argv:
    main(sys.argv[sys.argv.index(ZYGOTE_MARKER) + 1 :])
