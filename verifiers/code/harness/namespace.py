"""The sandbox's namespace as the zygote keeps it: set up once as root, made fresh per program.

At start (:func:`root_setup`): private tmpfs mounts, ``/proc`` with ``hidepid=invisible``, no
dumping or new privileges, and only the capabilities the zygote needs. Before each program
(:func:`take_fresh`): new tmpfs mounts and a new network namespace, so nothing of one run reaches
the next. Stdlib only; runs inside the sandbox (see :mod:`rlvr.verifiers.code.harness`).
"""

from __future__ import annotations

import os
import socket
from typing import Any

from rlvr.verifiers.code.harness.privileges import KEEP_CAPS, SPARE_CAPS, open_libc, set_caps

TMP_DIRS = ("/tmp", "/dev/shm", "/var/tmp")
WORK_DIR = "/tmp/work"
MAX_TMP_INODES = 16384
_TMP: dict[str, Any] = {}  # backend, bytes (how _mount_tmp mounts), fresh (still unused)


def _mount(libc: Any, source: bytes, target: bytes, fstype: bytes, flags: int,
           opts: bytes) -> None:
    import ctypes

    if libc.mount(source, target, fstype, flags, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target.decode()}: {os.strerror(err)}")


def _mount_tmp() -> None:
    """Mounts a new, empty tmpfs on each writable dir.

    Nothing of an earlier run's files survives: not their names or contents, nor the times,
    modes and extended attributes of the directories, nor the tmpfs's inode counter.
    """
    libc = open_libc()
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
    libc = open_libc()
    for path in TMP_DIRS:
        if os.path.isdir(path) and libc.umount2(path.encode(), 2) != 0:  # MNT_DETACH
            raise OSError(f"umount {path} failed")


def refresh() -> None:
    """What the next program gets fresh: tmpfs mounts and a network namespace (loopback up).

    The zygote moves itself into the new network namespace, so U and T forked later share it
    and the last run's one dies with its processes: sockets in TIME_WAIT, interface counters,
    TCP metrics and abstract unix sockets never reach the next run. Runs right after a reset
    has been answered, so that it overlaps with the host's work (or, failing that, at spawn).
    """
    _TMP["fresh"] = False
    set_caps(KEEP_CAPS | SPARE_CAPS)
    try:
        _detach_tmp()
        _mount_tmp()
        _new_netns()
    finally:
        set_caps(KEEP_CAPS)
    _TMP["fresh"] = True


def root_setup(backend: str, tmp_bytes: int) -> None:
    """Runs as root inside the namespaces: mounts, then keeps only the capabilities it needs.

    ``/proc`` is remounted with ``hidepid=invisible`` (a process sees only its own uid's
    processes), the private tmpfs mounts get an inode cap and the sticky bit, and the zygote keeps
    CAP_SETUID/SETGID (to run U and T as their uids) and CAP_KILL (to kill them between programs)
    effective, plus ``SPARE_CAPS`` permitted only; it never runs untrusted code itself.
    """
    libc = open_libc()
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
        set_caps(KEEP_CAPS)
    except OSError as exc:
        raise OSError("could not drop capabilities") from exc


def _new_netns() -> None:
    """Moves this process into a new network namespace and brings its loopback up."""
    import ctypes
    import fcntl
    import struct

    libc = open_libc()
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), 0x8913, ifreq))[1]  # GIFFLAGS
        fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", flags | 1))  # IFF_UP


def take_fresh() -> None:
    """Gives the next program fresh tmpfs mounts and network namespace, and marks them used.

    Raises:
        OSError: they could not be made (the zygote exits, the host replaces the sandbox).
    """
    if not _TMP["fresh"]:
        refresh()
    _TMP["fresh"] = False
