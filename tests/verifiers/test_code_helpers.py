"""Shared helpers for the verifiers.code tests (host-side checks on sandbox processes)."""

from __future__ import annotations

import os
import time

SANDBOX_UID = 65534


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
    """uid-65534 processes started by this test process that are not an idle zygote.

    An idle sandbox has exactly one uid-65534 process (its zygote) whose parent is bwrap (or
    unshare). Anything else of that uid below us is something a program left behind.
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

    stray, per_parent = [], {}
    for pid, (ppid, uid, name) in procs.items():
        if uid != SANDBOX_UID or not descends(pid):
            continue
        parent = procs.get(ppid, (0, 0, ""))[2]
        if parent not in ("bwrap", "unshare"):
            stray.append(f"{pid} {name} (parent {ppid} {parent})")
        per_parent[ppid] = per_parent.get(ppid, 0) + 1
    stray += [f"{n} processes under {ppid}" for ppid, n in per_parent.items() if n > 1]
    return stray


def wait_no_strays(timeout: float = 3.0) -> list[str]:
    """Polls until no stray sandbox processes remain (killed namespaces die asynchronously)."""
    end = time.monotonic() + timeout
    while True:
        stray = stray_sandbox_processes()
        if not stray or time.monotonic() > end:
            return stray
        time.sleep(0.05)
