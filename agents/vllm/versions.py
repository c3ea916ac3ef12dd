"""The weight versions vLLM servers serve, and weight updates while requests run.

The bookkeeping is sglang's (``rlvr.agents.sglang.versions.VersionBook``); the calls are vLLM
0.32's dev-mode RL routes (``vllm/entrypoints/rl/online/api_router.py``):

* ``POST /update_weight_version`` ``{"new_version": "<n>"}`` labels the weights: the engine core
  stamps every later step's tokens with it, and ``/inference/v1/generate`` answers carry the
  spans (``weight_versions``); ``GET /weight_info`` reads it back.
* ``POST /pause?mode=keep&clear_cache=true`` freezes the running requests until
  ``POST /resume`` (rlvr's "continue"). With ``clear_cache`` (its default; the route calls it
  deprecated, yet 0.32's engine core still honours it in every mode) the pause resets the
  prefix cache with ``reset_running_requests``: the running requests are preempted, keep the
  tokens they sampled, and recompute their KV cache under the new weights when they resume.
  Their later tokens are therefore exactly the new weights' (measured on CPU: the new model's
  logprobs of the whole sequence within 1e-6), unlike sglang's in-place pause, which continues
  over the KV cache the old weights wrote. The update itself skips the reset (``flush``).
* ``POST /pause?mode=abort&clear_cache=true`` aborts them (they answer finish reason ``abort``
  and are sent again under the new weights) and clears the caches; rlvr's "abort".

Requests that arrive while a server is paused wait in its queue.
"""

from __future__ import annotations

from rlvr.agents.engine import Completion, InflightMode
from rlvr.agents.sglang.versions import VersionBook
from rlvr.agents.vllm.rpc import ServerRPC
from rlvr.agents.vllm.wire import token_versions

PAUSE_MODES: dict[str, str] = {"continue": "keep", "abort": "abort"}
"""rlvr's in-flight mode -> vLLM's ``/pause`` ``mode``."""


def pause_path(mode: InflightMode) -> str:
    """The ``/pause`` request (query parameters) of an in-flight update in ``mode``."""
    return f"/pause?mode={PAUSE_MODES[mode]}&clear_cache=true"


class VLLMVersions(VersionBook):
    """``VersionBook`` over vLLM servers.

    Args:
        rpc: the servers.
        leader: whether this engine sends the version, pause and resume calls.
    """

    def __init__(self, rpc: ServerRPC, leader: bool) -> None:
        super().__init__(leader)
        self.rpc = rpc

    def name_version(self, name: str) -> None:
        """``/update_weight_version`` on every server."""
        self.rpc.each(lambda c: self.rpc.post(c, "/update_weight_version",
                                              {"new_version": name}))

    def served_names(self) -> list[str]:
        """Each server's ``/weight_info`` ``weight_version``."""
        return [str(body.get("weight_version", "")) for body in
                self.rpc.each(lambda c: self.rpc.get(c, "/weight_info"))]

    def pause(self, mode: InflightMode) -> None:
        """``/pause`` keeping ("continue") or aborting ("abort") the running requests."""
        self.rpc.each(lambda c: self.rpc.post(c, pause_path(mode)))

    def resume(self) -> None:
        """``/resume`` on every server."""
        self.rpc.each(lambda c: self.rpc.post(c, "/resume"))

    def token_versions(self, completion: Completion) -> list[int]:
        """From the answer's ``weight_versions`` spans (``rlvr.agents.vllm.wire``)."""
        return token_versions(completion)
