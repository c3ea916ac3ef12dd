"""A sandboxed process's privileges: the zygote's capabilities, a child's uid, its rlimits.

Stdlib only; runs inside the sandbox (see :mod:`rlvr.verifiers.code.harness`).
"""

from __future__ import annotations

import os
from typing import Any

KEEP_CAPS = (1 << 5) | (1 << 6) | (1 << 7)  # CAP_KILL, CAP_SETGID, CAP_SETUID
# Permitted but not effective: raised only for a moment, to mount fresh tmpfs between runs
# (CAP_SYS_ADMIN) and to give each program a network namespace of its own with loopback up
# (CAP_SYS_ADMIN, CAP_NET_ADMIN). A child loses them with its uid (``drop_to``).
SPARE_CAPS = (1 << 12) | (1 << 21)


def open_libc() -> Any:
    """The C library, with ``errno`` kept for ``ctypes.get_errno``."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def set_caps(effective: int) -> None:
    """Sets this process's effective capabilities (permitted: ``KEEP_CAPS | SPARE_CAPS``)."""
    import ctypes

    permitted = KEEP_CAPS | SPARE_CAPS
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)(effective, permitted, 0, 0, 0, 0)  # effective, permitted, inh.
    if open_libc().capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def drop_to(uid: int) -> None:
    """In a fresh child of the zygote: become ``uid`` (no capabilities left), not dumpable.

    The caller installs the seccomp filter next, before any code of the child's own runs.
    """
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("could not drop to the sandbox uid")
    libc = open_libc()
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS (inherited, but make sure)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0


def set_limits(limits: dict[str, Any], memory_bytes: int | None = None) -> None:
    """Sets this process's rlimits from the run's ``limits`` (``memory_bytes`` overrides one)."""
    import resource

    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    mem = int(limits["memory_bytes"]) if memory_bytes is None else memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["nproc"]),) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limits["fsize_bytes"]),) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(limits["nofile"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
