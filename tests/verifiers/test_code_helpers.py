"""Shared helpers for the rlvr.verifiers.code tests (host-side checks on sandbox processes)."""

from __future__ import annotations

import os
import time

from rlvr.verifiers.code.sandbox import UID_BASE, UID_SLOTS


def is_sandbox_uid(uid: int) -> bool:
    """Whether ``uid`` is one that sandboxes run programs or testers as."""
    return UID_BASE <= uid < UID_BASE + 2 * UID_SLOTS


def _procs() -> dict[int, tuple[int, int, str]]:
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        out[int(entry)] = (
            int(fields["PPid"]),
            int(fields["Uid"].split()[0]),
            fields["Name"].strip(),
        )
    return out


def stray_sandbox_processes() -> list[str]:
    """Processes of a sandbox uid started by this test process.

    An idle sandbox has none (its zygote runs as root); anything of a sandbox uid below us is
    something a program or a tester left behind.
    """
    procs = _procs()
    me = os.getpid()

    def descends(pid: int) -> bool:
        seen = 0
        while pid in procs and seen < 100:
            pid = procs[pid][0]
            if pid == me:
                return True
            seen += 1
        return False

    stray = []
    for pid, (ppid, uid, name) in procs.items():
        if not is_sandbox_uid(uid) or not descends(pid):
            continue
        parent = procs.get(ppid, (0, 0, ""))[2]
        stray.append(f"{pid} {name} uid {uid} (parent {ppid} {parent})")
    return stray


def wait_no_strays(timeout: float = 3.0) -> list[str]:
    """Polls until no stray sandbox processes remain (killed namespaces die asynchronously)."""
    end = time.monotonic() + timeout
    while True:
        stray = stray_sandbox_processes()
        if not stray or time.monotonic() > end:
            return stray
        time.sleep(0.05)
