"""How ``(name, tensor)`` pairs reach SGLang servers: one strategy class per weight-sync mode.

``SGLangEngine`` holds one ``WeightSync``, chosen once: on attach from where the servers are
(``rlvr.agents.sglang.placement``: ``DiskSync`` or ``BroadcastSync`` on the leader,
``DrainSync`` on the other ranks), or ``AdapterSync`` once the engine serves a LoRA adapter.
A HF directory is no strategy's business: every server reloads it from disk.

* ``DiskSync``: the pairs, cast to the servers' dtype, written as safetensors shards of at most
  ``bucket_bytes`` under ``sync_dir``, reloaded by every server (``/update_weights_from_disk``).
  Works everywhere.
* ``BroadcastSync``: the pairs broadcast in buckets over the weight-update group (NCCL on GPU
  servers, gloo on CPU ones; ``rlvr.agents.sglang.dist_sync``), then the prefix caches flushed.
* ``AdapterSync``: the servers keep the base and serve the policy's adapter; each push takes the
  adapter alone, writes it in peft's format under ``sync_dir/lora/<name>``, loads it as
  ``<prefix>-v<n>`` and unloads the previous one (``rlvr.agents.sglang.lora``).
* ``DrainSync``: ranks other than the leader send nothing; they drain the (collective) iterator.

A new mode (CUDA-IPC handles through ``/update_weights_from_tensor``, say) is one more class with
a ``push`` method, and one more line where the engine chooses.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable
from os import PathLike
from pathlib import Path
from typing import Any, Protocol

import torch

from rlvr.agents.sglang.client import check_success
from rlvr.agents.sglang.dist_sync import DistributedWeights
from rlvr.agents.sglang.lora import write_peft_adapter
from rlvr.agents.sglang.memory import ServerMemory
from rlvr.agents.sglang.server_calls import ServerCalls, first_answer
from rlvr.agents.sglang.weights import buckets, write_shards

Pairs = Iterable[tuple[str, torch.Tensor]]


class WeightSync(Protocol):
    """One way of sending ``(name, tensor)`` pairs to the servers."""

    mode: str
    """The mode's name ("disk", "distributed", "adapter", "drain")."""

    def push(self, weights: Pairs, *, weight_version: str | None, flush: bool,
             bucket_bytes: int) -> None:
        """Send ``weights`` (one pass over the iterator).

        Args:
            weights: the pairs, named like the model's ``state_dict``.
            weight_version: names the new weights on the servers (None: the name stays).
            flush: drop the prefix cache with the update (False while requests sit paused in
                place: sglang refuses to flush then).
            bucket_bytes: the most bytes per request (or shard).
        """
        ...


class SyncDir:
    """Where file-based syncs write: a given directory, or a temporary one made on first use."""

    def __init__(self, path: str | PathLike[str] | None = None) -> None:
        self._path = Path(path) if path else None

    @property
    def path(self) -> Path:
        """The directory (created on first use when none was given)."""
        if self._path is None:
            self._path = Path(tempfile.mkdtemp(prefix="rlvr-sglang-sync-"))
        return self._path


class DiskSync:
    """Safetensors shards under ``sync_dir``, reloaded by every server.

    Args:
        calls: the servers.
        sync_dir: where the shards go.
        dtype: the servers' dtype (read when a push needs it).
    """

    mode = "disk"

    def __init__(self, calls: ServerCalls, sync_dir: SyncDir,
                 dtype: Callable[[], torch.dtype]) -> None:
        self.calls = calls
        self.sync_dir = sync_dir
        self.dtype = dtype

    def push(self, weights: Pairs, *, weight_version: str | None, flush: bool,
             bucket_bytes: int) -> None:
        """Write the shards, then have every server reload them (``WeightSync.push``)."""
        write_shards(buckets(weights, max_bytes=bucket_bytes, dtype=self.dtype()),
                     self.sync_dir.path)
        self.calls.load_from_disk(str(self.sync_dir.path), weight_version, flush)


class BroadcastSync:
    """Buckets broadcast over the weight-update group (joined on the first push).

    Args:
        calls: the servers.
        dist: this process's end of the group.
        join: forms the group (``SGLangEngine.init_weight_update_group``).
        dtype: the servers' dtype (read when a push needs it).
    """

    mode = "distributed"

    def __init__(self, calls: ServerCalls, dist: DistributedWeights, join: Callable[[], None],
                 dtype: Callable[[], torch.dtype]) -> None:
        self.calls = calls
        self.dist = dist
        self.join = join
        self.dtype = dtype

    def push(self, weights: Pairs, *, weight_version: str | None, flush: bool,
             bucket_bytes: int) -> None:
        """One update session over the group, then a flush (``WeightSync.push``)."""
        if self.dist.group is None:
            self.join()
        self.dist.update(weights, weight_version, dtype=self.dtype(), bucket_bytes=bucket_bytes)
        if flush:
            self.calls.flush_cache()


class DrainSync:
    """A rank other than the leader: the pairs are drained (the iterator is collective)."""

    mode = "drain"

    def push(self, weights: Pairs, *, weight_version: str | None, flush: bool,
             bucket_bytes: int) -> None:
        """Drain ``weights``; send nothing (``WeightSync.push``)."""
        for _ in weights:
            pass


class AdapterSync:
    """The policy's LoRA adapter, served by name on top of the servers' base weights.

    Args:
        calls: the servers.
        memory: the servers' memory state (a released base without a CPU backup is reloaded).
        sync_dir: the adapters go under ``sync_dir/lora``.
        dtype: the servers' dtype (read when a push needs it).
        lora: the adapter as ``peft.LoraConfig`` arguments.
        prefix: the adapters' served names are ``<prefix>-v<n>``, the same on every rank.
        base_model: the base model's directory (the adapter's ``base_model_name_or_path``).
        leader: this rank loads the adapters; the others only name the one the leader loaded.
    """

    mode = "adapter"

    def __init__(self, calls: ServerCalls, memory: ServerMemory, sync_dir: SyncDir,
                 dtype: Callable[[], torch.dtype], *, lora: dict[str, Any], prefix: str,
                 base_model: str, leader: bool) -> None:
        self.calls = calls
        self.memory = memory
        self.sync_dir = sync_dir
        self.dtype = dtype
        self.lora = dict(lora)
        self.prefix = prefix
        self.base_model = base_model
        self.leader = leader
        self.version = 0
        self.name: str | None = None
        """The adapter ``/generate`` requests name (None before the first push)."""

    def push(self, weights: Pairs, *, weight_version: str | None, flush: bool,
             bucket_bytes: int) -> None:
        """Load the adapter as the next version, then unload the previous one (leader)."""
        self.version += 1
        name = f"{self.prefix}-v{self.version}"
        old = self.name
        if not self.leader:
            for _ in weights:
                pass
            self.name = name
            return
        if old is None:
            self._unload_stale()
        if self.memory.weights_stale:  # the base was released without a CPU backup: reload it
            self.calls.load_from_disk(self.base_model, None)
        root = self.sync_dir.path / "lora"
        path = write_peft_adapter(weights, self.lora, self.base_model, root / name,
                                  dtype=self.dtype())
        self.calls.post_all("/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        self.name = name
        self.memory.weights_stale = False
        if old is not None:
            self.calls.post_all("/unload_lora_adapter", {"lora_name": old})
            shutil.rmtree(root / old, ignore_errors=True)

    def _unload_stale(self) -> None:
        """Unload adapters of an earlier process with this prefix (their names would clash)."""
        for url in self.calls.server_urls:
            client = self.calls.clients[url]
            listed = first_answer(client, ("/v1/models",)) or {}
            for entry in listed.get("data", []) or []:
                ident = entry.get("id") if isinstance(entry, dict) else None
                if isinstance(ident, str) and ident.startswith(f"{self.prefix}-v"):
                    check_success("/unload_lora_adapter", client.post(
                        "/unload_lora_adapter", {"lora_name": ident}))
