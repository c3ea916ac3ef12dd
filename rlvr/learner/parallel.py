"""Process group, device mesh and FSDP2 sharding of a transformer.

``init_distributed()`` joins (or creates) the default process group: under ``torchrun`` it uses
the ``env://`` rendezvous; in a plain ``python`` process it creates a single-rank group on an
in-process ``HashStore`` (no port, no environment variables), so world size 1 runs the very same
collectives as many ranks (``uses_fsdp`` says when a single rank also shards with FSDP2).
Backends: gloo on CPU; ``cpu:gloo,cuda:nccl`` on GPU (NCCL for the model, gloo for CPU-side
collectives).

``apply_fsdp(model, mesh, mp_policy)`` follows torchtitan's ``parallelize``: ``fully_shard`` each
decoder layer, then the root (embeddings, final norm and the LM/value head live in the root's
group, which also keeps tied embeddings in one group).
"""

from __future__ import annotations

import gc
import os
import socket
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from rlvr.errors import ConfigError, DistributedSetupError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job.

    Attributes:
        rank: global rank.
        world_size: number of ranks.
        local_rank: rank on this node (selects the GPU).
        device: the device this rank computes on.
        mesh: the 1-D data-parallel device mesh (dim name ``"dp"``) FSDP shards over.
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh

    @property
    def is_main(self) -> bool:
        """Rank 0, the one that writes files that exist once per job."""
        return self.rank == 0


def _launched_by_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _init_process_group(**kwargs: Any) -> None:
    """``dist.init_process_group``, with gloo's "no interface" failure explained.

    gloo binds to the interface holding this host's address; with none (the loopback interface
    down, as in a network namespace made by ``unshare -n`` without ``ip link set lo up``) it
    fails at once with an enforce message about ``ifa != nullptr``.
    """
    try:
        dist.init_process_group(**kwargs)
    except RuntimeError as e:
        if "Unable to find interface" not in str(e):
            raise
        raise DistributedSetupError(
            "init_distributed: gloo found no network interface holding this host's address "
            f"({socket.gethostname()!r}). Usually the loopback interface is down, as in a "
            "network namespace made by `unshare -n` / a container started without networking: "
            "bring it up (`ip link set lo up`), or name a working interface with "
            f"GLOO_SOCKET_IFNAME. (gloo said: {str(e).strip().splitlines()[0]})"
        ) from e


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the default process group (creating it if needed) and build the device mesh.

    Idempotent: a second call reuses the existing process group.

    Args:
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.

    Returns:
        The rank, world size, device and 1-D ``"dp"`` mesh of this process.

    Raises:
        ConfigError: ``device`` is not one of the allowed values, or ``cuda`` was asked for
            without CUDA.
        DistributedSetupError: gloo found no network interface (e.g. loopback down).
    """
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device must be one of 'auto', 'cpu', 'cuda'; got {device!r}")
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise ConfigError("device='cuda' but CUDA is not available; use 'cpu' or 'auto'")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        backend = "cpu:gloo,cuda:nccl" if use_cuda else "gloo"
        if _launched_by_torchrun():
            _init_process_group(backend=backend)
        else:
            _init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    dev = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    mesh = init_device_mesh(dev.type, (dist.get_world_size(),), mesh_dim_names=("dp",))
    return DistInfo(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        device=dev,
        mesh=mesh,
    )


def _drop_torch_caches_of_meshes() -> None:
    """Empty torch's module-level DTensor caches: they hold device meshes, and so their groups.

    FSDP2's DTensor parameters leave the training mesh (a ``DeviceMesh`` holds its process
    groups) in DTensor's sharding-propagation caches (Python and C++; torch's own
    ``debug._clear_sharding_prop_cache`` empties both), the redistribute planners' dict, and the
    ``functools`` caches of ``_gen_transform_infos`` and ``MeshTopoInfo.build_from_mesh``
    (torch 2.13). Each is looked up by name and skipped where absent;
    ``tests/rlvr/test_trainer.py`` checks that no gloo thread outlives ``rlvr train``, so a new
    holder in a later torch shows up there. The caches refill if the process trains again.
    """
    from torch.distributed.tensor import _collective_utils, _redistribute, debug

    clear_sharding: Any = getattr(debug, "_clear_sharding_prop_cache", None)
    if callable(clear_sharding):
        clear_sharding()
    planners: Any = getattr(_redistribute, "_planner_cache", None)
    if isinstance(planners, dict):
        planners.clear()
    topo: Any = getattr(_collective_utils, "MeshTopoInfo", None)
    for cache in (getattr(_redistribute, "_gen_transform_infos", None),
                  getattr(topo, "build_from_mesh", None)):
        clear = getattr(cache, "cache_clear", None)
        if callable(clear):
            clear()


def close_distributed(*, barrier: bool) -> None:
    """Destroy the default process group so that its gloo threads end before the interpreter's.

    ``dist.destroy_process_group`` only drops torch's registry of groups; the C++ group, with
    gloo's worker and I/O threads, lives as long as anything else holds it, and after an FSDP2
    run torch's own DTensor caches do (see ``_drop_torch_caches_of_meshes``). The group then
    outlived ``rlvr train`` until the interpreter tore those modules down, and it was destroyed
    in the middle of that teardown: its destructor gives up the GIL to join the gloo threads,
    and a gloo thread that drops the last reference to a tensor owned by Python takes the GIL;
    in a finalizing interpreter Python ends such a thread with ``pthread_exit``, whose unwinding
    through a C++ destructor calls ``std::terminate`` (SIGABRT, "terminate called without an
    active exception", no Python frame). Here, every rank first passes a barrier (gloo runs it
    after the group's earlier work), the caches and the collectable garbage (the trainer's
    modules) go, and the group is destroyed while the interpreter is whole: its threads are
    joined here.

    Args:
        barrier: wait for every rank first (the run ended normally). False on an error path,
            where another rank may never come.
    """
    if not dist.is_initialized():
        return
    if barrier:
        dist.barrier()
    _drop_torch_caches_of_meshes()
    gc.collect()
    dist.destroy_process_group()
    gc.collect()  # the group itself, if only garbage held it


def mixed_precision_policy(mode: str, device: torch.device) -> MixedPrecisionPolicy:
    """The FSDP2 mixed-precision policy for ``mode`` on ``device``.

    Args:
        mode: ``auto`` (bf16 on CUDA, fp32 elsewhere), ``bf16`` or ``fp32``.
        device: the compute device.

    Returns:
        bf16 parameters for compute with fp32 gradient reduction, or a full-fp32 policy.
    """
    bf16 = mode == "bf16" or (mode == "auto" and device.type == "cuda")
    if bf16:
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy(param_dtype=None, reduce_dtype=None)


def uses_fsdp(mode: str, world_size: int, policy: MixedPrecisionPolicy) -> bool:
    """Whether a learner model is FSDP2-sharded (``LearnerConfig.fsdp``).

    ``always``: yes. ``auto``: with several ranks, or when ``policy`` computes in another dtype
    than the fp32 master weights (FSDP2 does that cast); one fp32 rank runs the plain module
    (the same numbers without the per-layer hooks).
    """
    return mode == "always" or world_size > 1 or policy.param_dtype is not None


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of decoder layers (the units ``fully_shard`` and checkpointing wrap).

    Looks for the ``nn.ModuleList`` whose items are ``*DecoderLayer``/``*Block`` modules (HF
    Llama/Qwen/Mistral/GPT-style models), else the longest ``nn.ModuleList``.

    Raises:
        ConfigError: the model has no ``nn.ModuleList`` at all.
    """
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    for candidate in lists:
        name = type(candidate[0]).__name__
        if name.endswith(("DecoderLayer", "Block", "Layer")):
            return candidate
    if not lists:
        raise ConfigError(f"{type(model).__name__} has no nn.ModuleList of decoder layers to shard")
    return max(lists, key=len)


def apply_fsdp(
    model: nn.Module,
    mesh: DeviceMesh,
    mp_policy: MixedPrecisionPolicy,
    *,
    reshard_after_forward: bool = True,
) -> nn.Module:
    """Shard ``model`` with FSDP2: ``fully_shard`` each decoder layer, then the root.

    Args:
        model: an HF causal LM or an ``rlvr.learner.modules.CriticModel``, on its compute
            device, in its master dtype (fp32).
        mesh: the 1-D data-parallel mesh.
        mp_policy: see ``mixed_precision_policy``.
        reshard_after_forward: free the gathered layer weights after each forward (ZeRO-3);
            False keeps them until the backward (ZeRO-2-like, more memory, less traffic).

    Returns:
        The same module object, now an ``FSDPModule`` whose parameters are ``DTensor`` shards.
    """
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp_policy,
                    reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=reshard_after_forward)
    return model


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Recompute decoder-layer activations in the backward pass (non-reentrant).

    Uses the model's own HF ``activation_checkpointing_enable`` so parameter names (and thus
    checkpoints and exports) are unchanged. Call before ``apply_fsdp``. It is active only in
    ``train()`` mode.

    Raises:
        ConfigError: the model (or its ``backbone``) is not an HF model supporting it.
    """
    target = getattr(model, "backbone", model)
    if not getattr(target, "supports_gradient_checkpointing", False):
        raise ConfigError(
            f"learner.activation_checkpointing=true but {type(target).__name__} does not "
            "support gradient checkpointing; set it to false"
        )
    kwargs = {"use_reentrant": False}
    enable: Any = getattr(target, "activation_checkpointing_enable", None)
    if enable is not None:  # transformers >= 5.x
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        target.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)  # type: ignore[operator]




def free_cached_memory(device: torch.device) -> None:
    """Return the caching allocator's unused blocks to the device (CUDA; a no-op elsewhere).

    Before a colocated rollout server takes its memory back: torch keeps freed blocks
    reserved, and at 7B on 80 GB GPUs that reserve alone (~40 GB after a step) leaves the
    server too little to resume.
    """
    if device.type == "cuda":
        torch.cuda.empty_cache()


__all__ = [
    "DistInfo",
    "apply_fsdp",
    "close_distributed",
    "decoder_layers",
    "enable_activation_checkpointing",
    "free_cached_memory",
    "init_distributed",
    "mixed_precision_policy",
]
