"""The weight versions SGLang servers serve, and weight updates while requests run.

``set_weight_version`` names the servers' weights ``str(version)`` (``/update_weight_version``);
from then on each completion's ``versions`` come from the server's ``meta_info.weight_versions``
spans. An in-flight update pauses generation (``/pause_generation``), updates with the version,
and continues (``/continue_generation``): mode "continue" pauses ``in_place`` (the running
requests keep their KV cache; the update does not flush the prefix cache, which sglang refuses
while requests run), mode "abort" aborts the running requests, which are then sent again
(``ServedVersions.regenerating``), counted in ``Completion.regenerated``.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace

from rlvr.agents.engine import Completion, InflightMode
from rlvr.agents.sglang.server_calls import ServerCalls
from rlvr.agents.sglang.wire import token_versions


class ServedVersions:
    """Version bookkeeping of one engine (only the leader names versions on the servers).

    Args:
        calls: the servers.
        leader: whether this engine sends the version, pause and continue calls.
    """

    def __init__(self, calls: ServerCalls, leader: bool) -> None:
        self.calls = calls
        self.leader = leader
        self.version = 0
        """The version of the servers' weights."""
        self.versioned = False
        """A version was declared: completions report per-token versions."""
        self.regenerated = 0
        """Requests aborted by "abort" in-flight updates and sent again so far."""
        self.abort_epoch = 0
        """Odd while an "abort" in-flight update runs."""
        self._lock = threading.Lock()

    def declare(self, version: int, *, send: bool) -> None:
        """Take ``version`` as the servers' (``send``: name it on them first)."""
        if send:
            self.calls.post_all("/update_weight_version", {"new_version": str(int(version)),
                                                           "abort_all_requests": False})
        self.version = int(version)
        self.versioned = True

    def served(self) -> int | None:
        """The oldest version the servers hold (``/model_info``'s ``weight_version``).

        None while one holds no numbered version (``"default"`` before the first
        ``set_weight_version``, or a name that is no number).
        """
        clients = self.calls.clients
        futures = [self.calls.control.submit(clients[u].get, "/model_info")
                   for u in self.calls.server_urls]
        versions = [str(fut.result().get("weight_version", "")) for fut in futures]
        if not all(v.lstrip("-").isdigit() for v in versions):
            return None
        return min(int(v) for v in versions)

    def in_flight(self, update: Callable[[str, bool], None], version: int,
                  mode: InflightMode) -> None:
        """Pause, ``update(str(version), flush)``, continue; then take ``version``.

        Raises:
            SGLangError: a server refused a call (generation is continued before it is raised).
        """
        with self._lock:
            if mode == "abort":
                self.abort_epoch += 1
            try:
                if self.leader:
                    self.calls.post_all("/pause_generation",
                                        {"mode": "in_place" if mode == "continue" else "abort"})
                try:
                    update(str(int(version)), mode == "abort")
                finally:
                    if self.leader:
                        self.calls.post_all("/continue_generation", {})
            finally:
                if mode == "abort":
                    self.abort_epoch += 1
            self.version = int(version)
            self.versioned = True

    async def regenerating(self, post: Callable[[], Awaitable[Completion]]) -> Completion:
        """``post()`` until its completion was not aborted by an in-flight update; versioned."""
        regenerated = 0
        while True:
            epoch = self.abort_epoch
            out = await post()
            if out.finish_reason != "abort" or epoch == self.abort_epoch:
                break
            regenerated += 1  # aborted by an in-flight update: again, under the new weights
            self.regenerated += 1
        if self.versioned and out.token_ids:
            out = replace(out, versions=token_versions(out), regenerated=regenerated)
        elif regenerated:
            out = replace(out, regenerated=regenerated)
        return out
