"""Warm sandboxes: one bubblewrap (or ``unshare``) namespace per worker, a zygote inside each.

A :class:`SandboxPool` keeps up to ``size`` workers. Each worker is one sandbox, started once:

* bubblewrap (``--unshare-pid --unshare-net --unshare-ipc --unshare-uts``, ``--die-with-parent``,
  ``--new-session``, all capabilities dropped but SETUID/SETGID/KILL and, for its start-up mounts
  only, SYS_ADMIN), read-only binds of ``/usr`` (and ``/lib``, ``/lib64``, ``/bin`` as on the
  host) plus ``/etc/ld.so.cache`` and nothing else of the host, a fresh ``/proc`` (remounted with
  ``hidepid=invisible``; the host's boot id hidden), its own hostname, a minimal ``/dev``,
  size- and inode-limited private tmpfs mounts on ``/tmp`` and ``/dev/shm``, and an empty
  environment (bwrap itself is started with an empty environment too, since ``/proc/1/environ``
  is readable inside);
* inside it, the zygote of :mod:`rlvr.verifiers.code.harness` (root, but with only
  CAP_SETUID/SETGID/KILL left, NO_NEW_PRIVS, non-dumpable, a child subreaper) forks a fresh
  process per program and runs it as the sandbox's *program uid*, and the tests as its *tester
  uid*, both under a seccomp filter (see
  :func:`~rlvr.verifiers.code.harness.seccomp.seccomp_filter`).

Every sandbox on the host holds its own pair of uids (a :class:`UidLease`, from
``UID_BASE``), so ``RLIMIT_NPROC`` is a per-sandbox process limit, and no sandbox can signal,
renice or inspect another's processes, its own zygote, or its own tester.

Without bubblewrap the fallback is ``unshare --net --pid --ipc --uts --mount`` with private
tmpfs mounts on ``/tmp``, ``/var/tmp`` and ``/dev/shm``; the rest of the host filesystem is then
visible read-only *by permission only* (an unprivileged uid), which is weaker. It warns loudly.

A worker is thrown away (its whole PID namespace dies with bwrap) whenever a job overran its
deadline or anything looked wrong, and after ``recycle_after`` jobs; otherwise the zygote kills
and reaps everything the program left and mounts fresh ``/tmp`` and ``/dev/shm`` for the next
program. Each worker runs in a memory cgroup of its own (:class:`MemoryCgroup`).
The threat model is in ``docs/sandbox.md``.
"""

from __future__ import annotations

import array
import fcntl
import json
import logging
import os
import select
import shutil
import socket
import struct
import subprocess
import threading
import time
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.config_checks import bounded, check_choice, check_fields
from rlvr.verifiers.code import harness, protocol
from rlvr.verifiers.code.harness import namespace, privileges, program, seccomp, tester, zygote
from rlvr.verifiers.errors import InvalidArgumentError, SandboxUnavailableError

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "bwrap", "unshare")
# Sandbox uids: slot k owns UID_BASE + 2k (its programs) and UID_BASE + 2k + 1 (its tester).
UID_BASE = 1_700_000_000
UID_SLOTS = 32768
UID_LOCK_DIR = "/run/rlvr-sandbox-uids"
# What runs inside the sandbox, each module after the ones it imports: the protocol and the
# harness package, under their own names (their parent packages are empty placeholders there).
_SANDBOX_PACKAGES = ("rlvr", "rlvr.verifiers", "rlvr.verifiers.code")
_SANDBOX_MODULES = (protocol, harness, privileges, seccomp, namespace, program, tester, zygote)
_SANDBOX_SOURCES = [arg for name in _SANDBOX_PACKAGES for arg in (name, "")] + [
    arg for module in _SANDBOX_MODULES
    for arg in (module.__name__, Path(str(module.__file__)).read_text())
]
# Runs inside the sandbox: argv holds (name, source) pairs up to ZYGOTE_MARKER; each becomes a
# module in sys.modules (and an attribute of its parent package), then the zygote starts.
BOOTSTRAP = (
    "import sys, types\n"
    f"end = sys.argv.index({zygote.ZYGOTE_MARKER!r})\n"
    "for name, source in zip(sys.argv[1:end:2], sys.argv[2:end:2]):\n"
    "    module = sys.modules[name] = types.ModuleType(name)\n"
    "    parent, _, leaf = name.rpartition('.')\n"
    "    if parent:\n"
    "        sys.modules[parent].__path__ = []\n"
    "        setattr(sys.modules[parent], leaf, module)\n"
    "    exec(compile(source, name, 'exec'), module.__dict__)\n"
    f"sys.modules[{zygote.__name__!r}].main(sys.argv[end + 1:])\n"
)
# bwrap's --die-with-parent (PR_SET_PDEATHSIG) fires when the *thread* that forked it exits, so
# every sandbox is started from this one long-lived thread, whatever thread asks for it.
_launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-sandbox-launcher")


@dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    """How sandboxes are built. Per-call limits (time, memory) are arguments of ``run_tests``.

    Attributes:
        backend: "bwrap", "unshare" (weaker fallback, warns) or "auto" (bwrap when installed).
        python: interpreter run inside; it must be readable by any uid (not under /root).
        tmp_mb: size of each private writable tmpfs (``/tmp``, where the program's cwd is
            /tmp/work, and ``/dev/shm``); both are mounted afresh for every program.
        nproc: RLIMIT_NPROC of the program: processes and threads of its sandbox (each sandbox
            runs its programs under a uid of its own).
        max_file_mb: RLIMIT_FSIZE of the program.
        max_open_files: RLIMIT_NOFILE of the program.
        output_limit_bytes: stdout (and, separately, stderr) a program may write per run; more
            ends the run with reason "output_limit".
        start_timeout_s: how long a new sandbox may take to start.
        recycle_after: jobs after which a worker is replaced by a fresh one.
    """

    backend: str = "auto"
    python: str = "/usr/bin/python3"
    tmp_mb: int = bounded(64, gt=0)
    nproc: int = bounded(128, gt=0)
    max_file_mb: int = bounded(16, gt=0)
    max_open_files: int = bounded(64, gt=0)
    output_limit_bytes: int = bounded(1 << 20, gt=0)
    start_timeout_s: float = bounded(15.0, gt=0)
    recycle_after: int = 1000

    def __post_init__(self) -> None:
        """Validate the fields (``InvalidArgumentError``'s ``key`` names the field)."""
        check_choice("backend", self.backend, BACKENDS, error=InvalidArgumentError)
        check_fields(self, error=InvalidArgumentError)


def resolve_backend(requested: str) -> str:
    """Picks the isolation backend; warns when falling back to ``unshare``.

    Raises:
        SandboxUnavailableError: not running as root, or neither bwrap nor unshare is installed.
    """
    if os.geteuid() != 0:
        raise SandboxUnavailableError(
            "rlvr.verifiers.code needs to run as root (it runs each sandbox's programs under uids "
            f"of their own so that RLIMIT_NPROC applies); running as uid {os.geteuid()}"
        )
    if requested in ("auto", "bwrap") and shutil.which("bwrap"):
        return "bwrap"
    if requested == "bwrap":
        raise SandboxUnavailableError("backend 'bwrap' requested but bwrap is not installed")
    if not shutil.which("unshare"):
        raise SandboxUnavailableError("neither bwrap nor unshare is installed; cannot sandbox")
    why = "bubblewrap is not installed" if requested == "auto" else "backend 'unshare' requested"
    message = (
        f"rlvr.verifiers.code: {why}; using the weaker `unshare` + rlimits sandbox: the host "
        "filesystem is visible to programs (limited only by an unprivileged uid's permissions)"
    )
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    logger.warning(message)
    return "unshare"


def _bwrap_argv(config: SandboxConfig, ctl_fd: int, uids: tuple[int, int]) -> list[str]:
    argv = [
        "bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
        "--unshare-cgroup-try", "--as-pid-1", "--die-with-parent", "--new-session",
        "--hostname", "sandbox", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
        "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL", "--cap-add", "CAP_SYS_ADMIN",
        "--cap-add", "CAP_NET_ADMIN",
        "--ro-bind", "/usr", "/usr",
    ]
    for path in ("/lib", "/lib64", "/bin", "/sbin"):
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += [
        "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--proc", "/proc", "--ro-bind", "/dev/null", "/proc/sys/kernel/random/boot_id",
        "--dev", "/dev",
        "--perms", "01777", "--size", str(config.tmp_mb << 20), "--tmpfs", "/dev/shm",
        "--perms", "01777", "--size", str(config.tmp_mb << 20), "--tmpfs", "/tmp",
        "--remount-ro", "/", "--chdir", "/tmp", "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
    ]
    return argv + _python_argv(config, ctl_fd, "bwrap", uids)


def _python_argv(config: SandboxConfig, ctl_fd: int, backend: str,
                 uids: tuple[int, int]) -> list[str]:
    return [
        config.python, "-I", "-B", "-c", BOOTSTRAP, *_SANDBOX_SOURCES, zygote.ZYGOTE_MARKER,
        "--ctl-fd", str(ctl_fd), "--backend", backend, "--tmp-bytes", str(config.tmp_mb << 20),
        "--uids", f"{uids[0]},{uids[1]}",
    ]


def _unshare_argv(config: SandboxConfig, ctl_fd: int, uids: tuple[int, int]) -> list[str]:
    return [
        "unshare", "--net", "--pid", "--ipc", "--uts", "--mount", "--fork", "--mount-proc",
        "--kill-child",
    ] + _python_argv(config, ctl_fd, "unshare", uids)


class UidLease:
    """A pair of uids no other sandbox on this host holds: (program uid, tester uid).

    Slots are ``flock``-ed files in ``UID_LOCK_DIR``; the kernel drops the lock when the holder
    closes it or dies, so a crashed process never leaks its slot.

    Raises:
        SandboxUnavailableError: every slot is taken.
    """

    def __init__(self) -> None:
        try:
            os.makedirs(UID_LOCK_DIR, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise SandboxUnavailableError(
                f"cannot create {UID_LOCK_DIR} for the sandbox uid leases: {exc}") from None
        start = (os.getpid() * 7919 + threading.get_ident()) % UID_SLOTS
        for i in range(UID_SLOTS):
            slot = (start + i) % UID_SLOTS
            try:
                fd = os.open(f"{UID_LOCK_DIR}/{slot}", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC,
                             0o600)
            except OSError as exc:
                raise SandboxUnavailableError(f"cannot lease a sandbox uid: {exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self._fd: int | None = fd
            self.uids = (UID_BASE + 2 * slot, UID_BASE + 2 * slot + 1)
            return
        raise SandboxUnavailableError(f"all {UID_SLOTS} sandbox uid slots are in use")

    def release(self) -> None:
        """Gives the slot back (call only once the sandbox's processes are gone)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


CGROUP_ROOT = "/sys/fs/cgroup"
# What a sandbox needs beyond its program, tester and tmpfs: bwrap, the zygote's interpreter.
SANDBOX_OVERHEAD_BYTES = 64 << 20
_cgroup_counter = iter(range(1 << 62))


class MemoryCgroup:
    """The memory cgroup of one sandbox, which caps all the memory the sandbox uses.

    The kernel charges it every page the sandbox's processes use, mapped or not (memfd,
    tmpfs, pipe and socket buffers included); ``memory.max`` (v2) or ``memory.limit_in_bytes``
    (v1) caps the sum; past it the kernel reclaims, then OOM-kills inside the sandbox (the
    program first: see ``harness.zygote._in_child``).

    :meth:`create` returns None where no memory controller can be used (not mounted, or not
    writable); the sandbox is then bounded by rlimits only (see docs/sandbox.md).
    """

    def __init__(self, path: str, limit_file: str, swap_file: str | None) -> None:
        self.path, self._limit_file, self._swap_file = path, limit_file, swap_file
        self.limit: int | None = None

    @staticmethod
    def create() -> MemoryCgroup | None:
        """A new, empty cgroup (v2 if its memory controller is there, else v1), or None."""
        name = f"{os.getpid()}-{next(_cgroup_counter)}"
        try:
            with open(f"{CGROUP_ROOT}/cgroup.controllers") as fh:
                v2 = "memory" in fh.read().split()
        except OSError:
            v2 = False
        try:
            if v2:
                parent = f"{CGROUP_ROOT}/rlvr-sandbox"
                _write_once_dir(parent)
                with open(f"{parent}/cgroup.subtree_control", "w") as fh:
                    fh.write("+memory")
                path = f"{parent}/{name}"
                os.mkdir(path, 0o700)
                cgroup = MemoryCgroup(path, "memory.max", "memory.swap.max")
            else:
                own = _own_v1_memory_cgroup()
                if own is None:
                    return None
                parent = f"{CGROUP_ROOT}/memory{own}/rlvr-sandbox"
                _write_once_dir(parent)
                path = f"{parent}/{name}"
                os.mkdir(path, 0o700)
                cgroup = MemoryCgroup(path, "memory.limit_in_bytes", None)
            cgroup.set_limit(SANDBOX_OVERHEAD_BYTES)
        except OSError:
            return None
        return cgroup

    @property
    def procs_file(self) -> str:
        """Writing "0" here moves the writer into this cgroup."""
        return f"{self.path}/cgroup.procs"

    def set_limit(self, limit_bytes: int) -> None:
        """Caps the sandbox's memory (and, on v2, allows it no swap). Raises OSError."""
        if limit_bytes == self.limit:
            return
        with open(f"{self.path}/{self._limit_file}", "w") as fh:
            fh.write(str(limit_bytes))
        if self._swap_file is not None and self.limit is None:
            try:
                with open(f"{self.path}/{self._swap_file}", "w") as fh:
                    fh.write("0")
            except OSError:
                pass  # no swap accounting: nothing to cap
        self.limit = limit_bytes

    def oom_kills(self) -> int:
        """How many processes the kernel has OOM-killed in this cgroup so far (0 if unknown)."""
        name = "memory.events" if self._swap_file is not None else "memory.oom_control"
        try:
            with open(f"{self.path}/{name}") as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        """Removes the cgroup once its processes are gone (tries for up to a second)."""
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)
        logger.warning("could not remove the sandbox cgroup %s", self.path)


def _write_once_dir(path: str) -> None:
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass


def _own_v1_memory_cgroup() -> str | None:
    """This process's cgroup in the v1 memory hierarchy (e.g. ``/`` or ``/a/b``), if mounted."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if "memory" in controllers.split(","):
                    own = path.rstrip("/")
                    if os.path.isdir(f"{CGROUP_ROOT}/memory{own}"):
                        return own
    except (OSError, ValueError):
        return None
    return None


def sandbox_memory_bytes(memory_mb: int, mode: str, config: SandboxConfig) -> int:
    """The cgroup limit of a sandbox while it runs one program under ``memory_mb``."""
    tester_bytes = max(memory_mb << 20, tester.TESTER_MIN_MEMORY) if mode == "assert" else 0
    return (memory_mb << 20) + tester_bytes + 2 * (config.tmp_mb << 20) + SANDBOX_OVERHEAD_BYTES


class WorkerDied(Exception):
    """The sandbox's zygote went away (the program killed it, or it crashed)."""


@dataclass
class Spawned:
    """Processes forked for one program and the host ends of their channels."""

    pids: dict[str, int]
    fds: dict[str, int]


class Worker:
    """One warm sandbox. Not thread-safe: a pool hands each worker to one caller at a time."""

    def __init__(self, config: SandboxConfig, backend: str) -> None:
        self.config = config
        self.backend = backend
        self.jobs = 0
        self.events: deque[dict[str, Any]] = deque()
        self.lease = UidLease()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Every message carries its sender's credentials (the kernel fills them in): only the
        # zygote (root, the pid that said hello) is listened to, whoever else holds its socket.
        parent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.ctl = parent
        self.zygote_pid: int | None = None
        build = _bwrap_argv if backend == "bwrap" else _unshare_argv
        argv = build(config, child.fileno(), self.lease.uids)
        self.cgroup = MemoryCgroup.create()
        if self.cgroup is None:
            _warn_once("rlvr.verifiers.code: no usable memory cgroup (v2, or v1 at "
                       f"{CGROUP_ROOT}/memory): a sandbox's memory is bounded by RLIMIT_AS only, "
                       "which memfd, pipe and socket pages escape")
        else:  # joined before exec, so every process of the sandbox is charged from its start
            argv = ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', self.cgroup.procs_file,
                    shutil.which(argv[0]) or argv[0], *argv[1:]]
        try:
            self.proc = _launcher.submit(_popen, argv, child.fileno()).result()
        except BaseException:
            self.lease.release()
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        finally:
            child.close()
        try:
            hello = self._recv(config.start_timeout_s)
        except WorkerDied:
            hello = None
        if hello is None or hello[0].get("op") != "hello":
            err = self._stderr_text()
            self.close()
            raise SandboxUnavailableError(f"sandbox ({backend}) failed to start: {err.strip()}")
        if not hello[0].get("seccomp"):
            _warn_once(f"rlvr.verifiers.code: no seccomp filter for {os.uname().machine}; programs "
                       "can use SysV IPC, keyrings and user namespaces (cross-run channels)")
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def _stderr_text(self) -> str:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
            if self.proc.stderr is None:
                return ""
            return self.proc.stderr.read().decode(errors="replace")[-2000:]
        except (OSError, subprocess.TimeoutExpired):
            return ""

    def _recv(self, timeout: float) -> tuple[dict[str, Any], list[int]] | None:
        """One message from the zygote, or None after ``timeout``. Raises WorkerDied on EOF."""
        poller = select.poll()  # not select(): host fds may be numbered above 1024
        poller.register(self.ctl, select.POLLIN)
        if not poller.poll(max(timeout, 0.0) * 1000):
            return None
        try:
            data, ancdata, _, _ = self.ctl.recvmsg(
                65536, socket.CMSG_SPACE(16 * 4) + socket.CMSG_SPACE(12))
        except OSError as exc:
            raise WorkerDied(str(exc)) from None
        fds: list[int] = []
        cred: tuple[int, int, int] | None = None
        for level, kind, body in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", body[: len(body) - len(body) % 4]).tolist()
            elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                cred = struct.unpack("3i", body[:12])  # pid, uid, gid
        if not data:
            for fd in fds:
                os.close(fd)
            raise WorkerDied("the sandbox zygote exited")
        if self.zygote_pid is None and cred is not None and cred[1] == 0:
            self.zygote_pid = cred[0]  # the hello, sent before any program ran
        if cred is None or cred[1] != 0 or cred[0] != self.zygote_pid:
            for fd in fds:
                os.close(fd)
            raise WorkerDied(f"a control message came from a process other than the zygote "
                             f"({cred})")
        try:
            return json.loads(data), fds
        except ValueError:
            for fd in fds:
                os.close(fd)
            raise WorkerDied("the sandbox zygote sent a malformed message") from None

    def fileno(self) -> int:
        """The control socket, for ``poll`` (readable = an event is waiting)."""
        return self.ctl.fileno()

    def read_event(self) -> None:
        """Reads one waiting message into :attr:`events` (call when :meth:`fileno` is readable)."""
        got = self._recv(0.0)
        if got is not None:
            for fd in got[1]:
                os.close(fd)
            self.events.append(got[0])

    def spawn(self, mode: str, limits: dict[str, Any], timeout: float) -> Spawned:
        """Forks the processes of one program run (see ``harness.zygote``)."""
        if self.cgroup is not None:
            try:
                self.cgroup.set_limit(sandbox_memory_bytes(
                    int(limits["memory_bytes"]) >> 20, mode, self.config))
            except OSError as exc:
                raise WorkerDied(f"could not set the sandbox's memory limit: {exc}") from None
        self.ctl.send(json.dumps({"op": "spawn", "mode": mode, "limits": limits}).encode())
        deadline = time.monotonic() + timeout
        while True:
            got = self._recv(deadline - time.monotonic())
            if got is None:
                raise WorkerDied("the sandbox did not answer a spawn request in time")
            msg, fds = got
            if msg.get("op") == "spawned":
                return Spawned(dict(msg["pids"]), dict(zip(msg["fds"], fds, strict=True)))
            for fd in fds:
                os.close(fd)
            self.events.append(msg)

    def reset(self, timeout: float) -> bool:
        """Kills and reaps everything left of the last program, drops its /tmp; False if stuck."""
        try:
            self.ctl.send(b'{"op": "reset"}')
            deadline = time.monotonic() + timeout
            while True:
                got = self._recv(deadline - time.monotonic())
                if got is None:
                    return False
                for fd in got[1]:
                    os.close(fd)
                if got[0].get("op") == "clean":
                    self.events.clear()
                    return got[0].get("ok") is True
        except (OSError, WorkerDied):
            return False

    def close(self) -> None:
        """Kills the whole sandbox (its PID namespace dies with bwrap)."""
        try:
            self.proc.kill()
        except (OSError, AttributeError):
            pass
        try:
            self.proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, AttributeError):
            pass
        else:  # the namespace is gone with bwrap: its uids are free again
            self.lease.release()
            cgroup = getattr(self, "cgroup", None)
            if cgroup is not None:
                cgroup.remove()
        self.ctl.close()


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        logger.warning(message)


def _popen(argv: list[str], ctl_fd: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        pass_fds=(ctl_fd,),
        env={},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        cwd="/",
    )


class WorkerPool:
    """Up to ``size`` warm workers, handed out one caller at a time (thread-safe)."""

    def __init__(self, size: int, config: SandboxConfig) -> None:
        if not isinstance(size, int) or size < 1:
            raise InvalidArgumentError(f"pool size must be a positive int, got {size!r}")
        self.size = size
        self.config = config
        self.backend = resolve_backend(config.backend)
        self._idle: list[Worker] = []
        self._live = 0
        self._closed = False
        self._cond = threading.Condition()

    def acquire(self) -> Worker:
        """A ready worker (started if needed); blocks while all ``size`` workers are busy."""
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxUnavailableError("the sandbox pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._live < self.size:
                    self._live += 1
                    break
                self._cond.wait()
        try:
            return Worker(self.config, self.backend)
        except BaseException:
            with self._cond:
                self._live -= 1
                self._cond.notify()
            raise

    def release(self, worker: Worker, healthy: bool) -> None:
        """Returns a worker; an unhealthy or worn-out one is destroyed (a fresh one comes later)."""
        worker.jobs += 1
        keep = healthy and worker.jobs < self.config.recycle_after
        with self._cond:
            if keep and not self._closed:
                self._idle.append(worker)
                self._cond.notify()
                return
        worker.close()
        with self._cond:
            self._live -= 1
            self._cond.notify()

    def close(self) -> None:
        """Destroys idle workers now and busy ones when they are released."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live -= len(idle)
            self._cond.notify_all()
        for worker in idle:
            worker.close()
