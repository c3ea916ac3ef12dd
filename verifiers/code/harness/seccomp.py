"""The sandbox's seccomp filter: which system calls a program (and the tester) may not make.

Stdlib only; runs inside the sandbox (see :mod:`rlvr.verifiers.code.harness`). The zygote builds
the filter once (:class:`Seccomp`) and installs it in each child after it has dropped to its uid.
"""

from __future__ import annotations

import os

from rlvr.verifiers.code.harness.privileges import open_libc

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


class Seccomp:
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
        self._libc = open_libc()

    def install(self) -> None:
        """Applies the filter to this process (after NO_NEW_PRIVS); raises if the kernel refuses."""
        if self.active and self._libc.prctl(22, 2, self._ref, 0, 0) != 0:  # PR_SET_SECCOMP
            raise OSError("seccomp filter refused")

