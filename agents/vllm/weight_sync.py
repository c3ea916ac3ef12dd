"""How ``(name, tensor)`` pairs reach vLLM servers: one strategy class per weight-sync mode.

Each strategy ends in the worker extension (``rlvr_vllm_worker``), which hands the tensors to the
model's own ``load_weights`` (HF names; vLLM fuses q/k/v and gate/up itself), then every server's
prefix cache is reset (it holds KV of the old weights), except in an update while requests are
paused in place (``flush`` false: vLLM refuses the reset then).

* ``VLLMDiskSync`` (``disk``): bucketed safetensors shards in ``sync_dir``; every worker loads
  them (``rlvr_load_shards``). Needs a filesystem the servers see.
* ``VLLMBroadcastSync`` (``distributed``): a process group of this process (rank 0) and every
  server's workers (ranks after it), formed on the first push (``rlvr_init_group``); each bucket
  is announced to the workers (``rlvr_receive``: names, dtypes, shapes) and broadcast. gloo on
  CPU servers, NCCL on GPU ones.
* ``DrainSync`` (a rank other than the leader) is sglang's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from rlvr.agents.errors import VLLMError
from rlvr.agents.sglang.server_process import free_port
from rlvr.agents.sglang.weight_sync import SyncDir
from rlvr.agents.sglang.weights import TorchGroup, buckets, meta, sglang_layout_group, write_shards
from rlvr.agents.vllm.rpc import ServerRPC

Pairs = Iterable[tuple[str, torch.Tensor]]


def load_shards(rpc: ServerRPC, files: list[str], *, flush: bool = True) -> None:
    """Have every worker of every server load the safetensors ``files``; reset the caches.

    ``flush`` false leaves the prefix caches (an update while requests are paused in place).

    Raises:
        VLLMError: a server refused, or a worker loaded nothing.
    """
    if not files:
        raise VLLMError("no safetensors files to load")
    for results in rpc.collective_all("rlvr_load_shards", files):
        if not results or any(not r for r in results):
            raise VLLMError(f"a vLLM worker loaded no tensors from {files[:3]}: {results}")
    if flush:
        rpc.reset_prefix_cache()


def checkpoint_files(path: str) -> list[str]:
    """The safetensors files of a HF checkpoint folder (absolute paths).

    Raises:
        VLLMError: the folder holds none.
    """
    files = sorted(str(p.resolve()) for p in Path(path).glob("*.safetensors"))
    if not files:
        raise VLLMError(f"{path} holds no *.safetensors files (the vllm engine loads those)")
    return files


class VLLMDiskSync:
    """Safetensors shards under ``sync_dir``, loaded by every worker.

    Args:
        rpc: the servers.
        sync_dir: where the shards go.
        dtype: the servers' dtype (read when a push needs it).
    """

    mode = "disk"

    def __init__(self, rpc: ServerRPC, sync_dir: SyncDir,
                 dtype: Callable[[], torch.dtype]) -> None:
        self.rpc = rpc
        self.sync_dir = sync_dir
        self.dtype = dtype

    def push(self, weights: Pairs, *, weight_version: str | None, flush: bool,
             bucket_bytes: int) -> None:
        """Write the shards, then have every worker load them (``WeightSync.push``)."""
        out = self.sync_dir.path
        names = write_shards(buckets(weights, max_bytes=bucket_bytes, dtype=self.dtype()), out)
        load_shards(self.rpc, [str((out / n).resolve()) for n in names], flush=flush)


class VLLMBroadcastSync:
    """Buckets broadcast over a process group with every server's workers.

    Args:
        rpc: the servers.
        world_sizes: each server's worker count (tensor x pipeline parallel), in server order.
        master_address: this host as the servers reach it.
        backend: ``gloo`` (CPU servers) or ``nccl``.
        dtype: the servers' dtype (read when a push needs it).
    """

    mode = "distributed"

    def __init__(self, rpc: ServerRPC, world_sizes: list[int], master_address: str,
                 backend: str, dtype: Callable[[], torch.dtype]) -> None:
        self.rpc = rpc
        self.world_sizes = world_sizes
        self.master_address = master_address
        self.backend = backend
        self.dtype = dtype
        self.group: TorchGroup | None = None

    def join(self) -> None:
        """Form the group: this process is rank 0, server ``i``'s workers follow in order.

        Raises:
            VLLMError: a server's workers could not join (the group is not formed).
        """
        port = free_port(self.master_address)
        world = 1 + sum(self.world_sizes)
        name = f"rlvr-vllm-{uuid.uuid4().hex[:8]}"
        offsets = [1 + sum(self.world_sizes[:i]) for i in range(len(self.world_sizes))]
        futures = [self.rpc.pool.submit(self.rpc.collective, c, "rlvr_init_group",
                                        self.master_address, port, off, world, name,
                                        self.backend)
                   for c, off in zip(self.rpc.clients, offsets)]
        group = sglang_layout_group(backend=self.backend,
                                    init_method=f"tcp://{self.master_address}:{port}",
                                    world_size=world, rank=0, group_name=name)
        for fut in futures:
            fut.result()
        self.group = group  # type: ignore[assignment]

    def push(self, weights: Pairs, *, weight_version: str | None, flush: bool,
             bucket_bytes: int) -> None:
        """Announce and broadcast each bucket, then (``flush``) reset the prefix caches."""
        if self.group is None:
            self.join()
        group = self.group
        if group is None:  # pragma: no cover - join sets it or raises
            raise VLLMError("the weight group was not formed")
        device = "cuda" if self.backend == "nccl" else "cpu"
        self.rpc.collective_all("rlvr_begin_update")
        for bucket in buckets(weights, max_bytes=bucket_bytes, dtype=self.dtype(),
                              device=device):
            m = meta(bucket)
            futures = [self.rpc.pool.submit(self.rpc.collective, c, "rlvr_receive",
                                            m["names"], m["dtypes"], m["shapes"])
                       for c in self.rpc.clients]
            for _, tensor in bucket:
                group.broadcast(tensor).wait()
            for fut in futures:
                fut.result()
        self.rpc.collective_all("rlvr_finish_update")
        if flush:
            self.rpc.reset_prefix_cache()

    def leave(self) -> None:
        """Destroy the group here and on the servers (errors there are ignored)."""
        if self.group is None:
            return
        try:
            self.rpc.collective_all("rlvr_destroy_group")
        except VLLMError:
            pass
        self.group.destroy()
        self.group = None
