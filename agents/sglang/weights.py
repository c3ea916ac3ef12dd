"""Moving the learner's weights into SGLang servers: buckets, the process group, disk shards.

The learner yields ``(name, full tensor)`` one gathered tensor at a time (collective on every
trainer rank); this module owns everything after that:

* ``buckets`` casts each tensor to the server's dtype, moves it to the broadcast device (NCCL
  needs CUDA tensors; gloo takes CPU ones) and groups consecutive tensors into buckets of at most
  ``max_bytes`` (one tensor larger than that is a bucket on its own). For each name in a request
  every server GPU first allocates a full unsharded tensor and only then loads it, so a bucket is
  the peak extra memory of an update instead of a whole model copy.
* ``sglang_layout_group`` is the trainer's end (rank 0) of the weight-update group, made exactly
  like sglang's ``init_custom_process_group``: a rendezvous store wrapped in
  ``PrefixStore(group_name)``, handed to torch's group helper, which wraps it again in
  ``PrefixStore(group_name + "/")``. A custom ``group_factory`` must reproduce that nesting, or
  its keys never meet the server's and ``init_weights_update_group`` times out.
* ``write_shards`` writes the buckets as safetensors shards for ``/update_weights_from_disk``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import torch

DEFAULT_BUCKET_BYTES = 512 * 1024**2
"""Default bytes per weight-update request (the issue's 512 MB-1 GB range, low end)."""

Bucket = list[tuple[str, torch.Tensor]]


class WeightGroup(Protocol):
    """The trainer's end (rank 0) of the weight-update process group."""

    def broadcast(self, tensor: torch.Tensor) -> Any:
        """Start sending ``tensor`` from rank 0 to every other rank of the group.

        Returns a handle with ``wait()`` (an asynchronous broadcast: the engine first waits for
        the servers' answers, so a server that refused the request cannot hang the trainer), or
        None when the broadcast already completed.
        """
        ...

    def destroy(self) -> None:
        """Leave the group (idempotent)."""
        ...


GroupFactory = Callable[..., WeightGroup]
"""``factory(backend=, init_method=, world_size=, rank=0, group_name=, timeout=) -> WeightGroup``;
it must lay out its store keys like ``sglang_layout_group``."""


def meta(bucket: Bucket) -> dict[str, list[Any]]:
    """``names``, ``dtypes`` (torch names without ``torch.``) and ``shapes`` of a bucket."""
    return {
        "names": [n for n, _ in bucket],
        "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in bucket],
        "shapes": [list(t.shape) for _, t in bucket],
    }


def nbytes(tensor: torch.Tensor) -> int:
    """Bytes of ``tensor``'s elements."""
    return tensor.numel() * tensor.element_size()


def buckets(
    named: Iterable[tuple[str, torch.Tensor]],
    *,
    max_bytes: int = DEFAULT_BUCKET_BYTES,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
) -> Iterator[Bucket]:
    """Group ``named`` into buckets of at most ``max_bytes``, cast and moved as they come.

    Args:
        named: ``(name, tensor)`` pairs; read lazily, so at most one bucket plus one tensor is
            held at a time.
        max_bytes: the most bytes per bucket (after the cast); ``>= 1``.
        dtype: the server's dtype; floating tensors are cast to it (others keep theirs).
        device: where the tensors go before broadcasting.

    Yields:
        Lists of ``(name, contiguous tensor)`` in the order of ``named``.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1; got {max_bytes}")
    bucket: Bucket = []
    size = 0
    for name, tensor in named:
        t = tensor.detach()
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        t = t.to(device).contiguous()
        n = nbytes(t)
        if bucket and size + n > max_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += n
    if bucket:
        yield bucket


def bracket_host(host: str) -> str:
    """``host`` as it goes in a URL: IPv6 literals get brackets (``[::1]``)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class TorchGroup:
    """A ``torch.distributed`` process group used as a ``WeightGroup``."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def broadcast(self, tensor: torch.Tensor) -> Any:
        """Start an asynchronous broadcast from rank 0 of the group; returns its work."""
        return torch.distributed.broadcast(tensor, src=0, group=self.group, async_op=True)

    def destroy(self) -> None:
        """Destroy the group."""
        if self.group is not None:
            torch.distributed.destroy_process_group(self.group)
            self.group = None


def sglang_layout_group(
    *,
    backend: str,
    init_method: str,
    world_size: int,
    rank: int,
    group_name: str,
    timeout: timedelta = timedelta(minutes=10),
) -> WeightGroup:
    """One rank of a process group laid out like sglang's ``init_custom_process_group``.

    The same steps as sglang 0.5.x (itself from vLLM/OpenRLHF): rendezvous on ``init_method``,
    ``PrefixStore(group_name, store)``, then torch's ``_new_process_group_helper``, which prefixes
    again with ``group_name + "/"``. Works with or without a default process group in this
    process (the trainer's own ranks form another group).

    The store is made here, not by ``rendezvous``: under torchrun (``TORCHELASTIC_USE_AGENT_STORE``
    set) ``rendezvous`` makes every rank a client of the launcher's own store, so rank 0 would
    wait for a store server that never starts at ``init_method`` (the servers' ranks connect to
    it as clients).
    """
    from urllib.parse import urlparse

    from torch.distributed import distributed_c10d as c10d

    where = urlparse(init_method)
    if where.scheme != "tcp" or where.hostname is None or where.port is None:
        raise ValueError(f"init_method must be tcp://host:port; got {init_method!r}")
    tcp = torch.distributed.TCPStore(where.hostname, where.port, world_size,
                                     is_master=rank == 0, timeout=timeout)
    store = c10d.PrefixStore(group_name, tcp)
    pg, _ = c10d._new_process_group_helper(
        world_size, rank, [], backend, store, group_name=c10d.GroupName(group_name),
        timeout=timeout,
    )
    c10d._world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return TorchGroup(pg)


def write_shards(bucket_iter: Iterable[Bucket], out_dir: Path) -> list[str]:
    """Write each bucket as ``model-0000k-of-0000n.safetensors`` plus the index (replacing old).

    Tensors that share storage (tied weights under two names) are cloned so safetensors accepts
    them. Returns the shard file names.
    """
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    for old in list(out_dir.glob("*.safetensors")) + list(out_dir.glob("*.safetensors.index.json")):
        old.unlink()
    written: list[tuple[str, list[str]]] = []
    for i, bucket in enumerate(bucket_iter):
        seen: set[int] = set()
        tensors: dict[str, torch.Tensor] = {}
        for name, t in bucket:
            t = t.cpu()
            ptr = t.untyped_storage().data_ptr()
            tensors[name] = t.clone() if ptr in seen else t
            seen.add(ptr)
        file = f"part-{i:05d}.safetensors"
        save_file(tensors, str(out_dir / file), metadata={"format": "pt"})
        written.append((file, list(tensors)))
    n = len(written)
    names: list[str] = []
    weight_map: dict[str, str] = {}
    for i, (file, keys) in enumerate(written):
        final = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        (out_dir / file).rename(out_dir / final)
        names.append(final)
        weight_map.update(dict.fromkeys(keys, final))
    index = {"metadata": {}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    return names
