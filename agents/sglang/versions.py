"""The weight versions SGLang servers serve, and weight updates while requests run.

``set_weight_version`` names the servers' weights ``str(version)`` (``/update_weight_version``);
from then on each completion's ``versions`` come from the server's ``meta_info.weight_versions``
spans. An in-flight update pauses generation (``/pause_generation``), updates with the version,
and continues (``/continue_generation``): mode "continue" pauses ``in_place`` (the running
requests keep their KV cache; the update does not flush the prefix cache, which sglang refuses
while requests run), mode "abort" aborts the running requests, which are then sent again
(``ServedVersions.regenerating``), counted in ``Completion.regenerated``.

The bookkeeping (``VersionBook``) is the same for every server engine; only the server calls
differ: ``ServedVersions`` makes sglang's, ``rlvr.agents.vllm.versions`` vLLM's.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace

from rlvr.agents.engine import Completion, InflightMode
from rlvr.agents.sglang.server_calls import ServerCalls
from rlvr.agents.sglang.wire import token_versions


class VersionBook:
    """Version bookkeeping of one server engine (only the leader names versions on the servers).

    Subclasses make the server calls: ``name_version``, ``served_names``, ``pause``,
    ``resume``, and read each completion's ``token_versions``.

    Args:
        leader: whether this engine sends the version, pause and continue calls.
    """

    def __init__(self, leader: bool) -> None:
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
            self.name_version(str(int(version)))
        self.version = int(version)
        self.versioned = True

    def served(self) -> int | None:
        """The oldest version the servers hold (``served_names``).

        None while one holds no numbered version (``"default"`` before the first
        ``set_weight_version``, or a name that is no number).
        """
        versions = self.served_names()
        if not all(v.lstrip("-").isdigit() for v in versions):
            return None
        return min(int(v) for v in versions)

    def in_flight(self, update: Callable[[str, bool], None], version: int,
                  mode: InflightMode) -> None:
        """Pause, ``update(str(version), flush)``, continue; then take ``version``.

        Raises:
            AgentError: a server refused a call (generation is continued before it is raised).
        """
        with self._lock:
            if mode == "abort":
                self.abort_epoch += 1
            try:
                if self.leader:
                    self.pause(mode)
                try:
                    update(str(int(version)), mode == "abort")
                finally:
                    if self.leader:
                        self.resume()
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
            out = replace(out, versions=self.token_versions(out), regenerated=regenerated)
        elif regenerated:
            out = replace(out, regenerated=regenerated)
        return out

    # ------------------------------------------------------------------ the server calls
    def name_version(self, name: str) -> None:
        """Name the servers' current weights ``name`` (every server)."""
        raise NotImplementedError

    def served_names(self) -> list[str]:
        """The name of the weights each server holds."""
        raise NotImplementedError

    def pause(self, mode: InflightMode) -> None:
        """Pause generation on every server, keeping ("continue") or aborting its requests."""
        raise NotImplementedError

    def resume(self) -> None:
        """Continue generation on every server."""
        raise NotImplementedError

    def token_versions(self, completion: Completion) -> list[int]:
        """The version of each of ``completion``'s tokens (-1: unknown), from its answer."""
        raise NotImplementedError


class ServedVersions(VersionBook):
    """``VersionBook`` over sglang servers.

    Args:
        calls: the servers.
        leader: whether this engine sends the version, pause and continue calls.
    """

    def __init__(self, calls: ServerCalls, leader: bool) -> None:
        super().__init__(leader)
        self.calls = calls

    def name_version(self, name: str) -> None:
        """``/update_weight_version`` on every server."""
        self.calls.post_all("/update_weight_version", {"new_version": name,
                                                       "abort_all_requests": False})

    def served_names(self) -> list[str]:
        """Each server's ``/model_info`` ``weight_version``."""
        clients = self.calls.clients
        futures = [self.calls.control.submit(clients[u].get, "/model_info")
                   for u in self.calls.server_urls]
        return [str(fut.result().get("weight_version", "")) for fut in futures]

    def pause(self, mode: InflightMode) -> None:
        """``/pause_generation`` in place ("continue") or aborting ("abort")."""
        self.calls.post_all("/pause_generation",
                            {"mode": "in_place" if mode == "continue" else "abort"})

    def resume(self) -> None:
        """``/continue_generation`` on every server."""
        self.calls.post_all("/continue_generation", {})

    def token_versions(self, completion: Completion) -> list[int]:
        """From the answer's ``meta_info.weight_versions`` (``rlvr.agents.sglang.wire``)."""
        return token_versions(completion)
