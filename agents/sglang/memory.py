"""Releasing and resuming SGLang servers' memory around training (servers with the memory saver).

``release`` pauses generation, then releases the servers' memory (only servers with
``--enable-memory-saver``: elsewhere it frees nothing and is skipped); ``resume`` resumes the
tags asked (default: all released), continues generation once nothing is left released, and
marks the weights stale when they did not survive (no ``--enable-weights-cpu-backup``) until the
next weight update. The colocated order is the caller's: free its own cached memory, resume
``("weights",)``, update the weights, resume the rest (KV cache and CUDA graphs come back after
the update, not before).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlvr.agents.sglang.client import check_success
from rlvr.agents.sglang.server_calls import ServerCalls
from rlvr.agents.sglang.server_info import ServerInfo

ALL_TAGS = ("kv_cache", "weights", "cuda_graph")


class ServerMemory:
    """What the servers released, and whether their weights are gone (leader only).

    Args:
        calls: the servers.
    """

    def __init__(self, calls: ServerCalls) -> None:
        self.calls = calls
        self.released: dict[str, tuple[str, ...]] = {}
        """Server URL -> the tags it released and has not resumed yet."""
        self.cpu_backup: dict[str, bool] = {}
        """Server URL -> whether its weights survive a release (``--enable-weights-cpu-backup``)."""
        self.weights_stale = False
        """The servers' weights were released without a CPU backup: reload before generating."""

    def release(self, infos: Mapping[str, ServerInfo], tags: Sequence[str] | None) -> None:
        """Pause generation and release ``tags`` (default: all) on the memory-saver servers.

        Generation is paused first (sglang asserts an idle scheduler; a failure there kills
        it); the released tags are remembered so ``resume`` resumes exactly those.
        """
        wanted = tuple(tags) if tags else ALL_TAGS
        targets = [u for u, i in infos.items() if i.memory_saver and u not in self.released]
        clients = self.calls.clients
        for url in targets:
            clients[url].post("/pause_generation", {"mode": "abort"})
            self.released[url] = wanted
            self.cpu_backup[url] = infos[url].weights_cpu_backup
            check_success("/release_memory_occupation",
                          clients[url].post("/release_memory_occupation", {"tags": list(wanted)}))

    def resume(self, tags: Sequence[str] | None) -> None:
        """Resume ``tags`` (default: every tag still released); continue once all is back."""
        clients = self.calls.clients
        for url, released in list(self.released.items()):
            now = [t for t in released if tags is None or t in tags]
            left = tuple(t for t in released if t not in now)
            if now:
                check_success("/resume_memory_occupation",
                              clients[url].post("/resume_memory_occupation", {"tags": now}))
            if left:
                self.released[url] = left
            else:
                del self.released[url]
                clients[url].post("/continue_generation", {})
            if "weights" in now and not self.cpu_backup[url]:
                self.weights_stale = True
