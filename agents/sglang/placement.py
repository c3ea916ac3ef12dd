"""Where the SGLang servers are, and the weight-sync mode that follows from it.

``weight_sync: auto`` (the default) is decided once, on the first weight update, from facts the
trainer can read (``choose_weight_sync``):

* Servers on the CPU: ``distributed`` over gloo.
* A server *colocated* with the trainer (on this host, on a GPU one of this node's trainer ranks
  uses): ``disk``. NCCL cannot hold two ranks of one communicator on one device ("Duplicate GPU
  detected"), so the NCCL broadcast is impossible there; sglang's colocated path is
  ``/update_weights_from_tensor`` with CUDA-IPC handles, which rlvr does not implement yet, so
  colocated runs reload bf16 shards from disk (``/update_weights_from_disk``).
* Servers on GPUs of their own (another host, or GPUs no trainer rank uses): ``distributed``
  over NCCL, provided the trainer's NCCL and the servers' are the same version (NCCL rejects
  mismatched peers); when they differ, ``disk``.

``weight_sync: distributed`` asked explicitly is refused (``SGLangError``) where it cannot work:
a server on trainer GPUs, or known different NCCL versions. ``disk`` always works.

A server's GPUs are ``base_gpu_id + i * gpu_id_step`` for its ``tp_size * pp_size`` ranks, as
its ``/server_info`` reports them; the trainer's are the first ``LOCAL_WORLD_SIZE`` entries of
``CUDA_VISIBLE_DEVICES`` (torchrun's ``LOCAL_RANK`` picks ``cuda:LOCAL_RANK``). A server started
under its own ``CUDA_VISIBLE_DEVICES`` reports GPU ids relative to that list, which this file
cannot see: start disaggregated servers with ``--base-gpu-id`` instead (or set
``weight_sync`` yourself).

NCCL versions: the trainer's is ``torch.cuda.nccl.version()``; a server's is read from its
``/server_info`` when it reports one, else probed by running its interpreter when that is known
(a launched server, ``rollout.sglang.python`` or ``$RLVR_SGLANG_PYTHON``), else taken from the
torch that the server's sglang release pins (``PINNED_NCCL``), else unknown (not checked).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from rlvr.agents.errors import SGLangError
from rlvr.agents.sglang.server_info import ServerInfo

PINNED_NCCL: dict[str, str] = {"0.5.23": "2.30.7"}
"""NCCL of the torch an sglang release pins (sglang 0.5.23: ``torch==2.14.1``, NCCL 2.30.7)."""

_PROBE = ("import torch\n"
          "v = torch.cuda.nccl.version() if torch.cuda.is_available() else None\n"
          "print('.'.join(map(str, v)) if isinstance(v, tuple) else (v or ''))")


@dataclass(frozen=True)
class SyncFacts:
    """What the weight-sync choice depends on.

    Attributes:
        colocated: the servers that share a GPU with this node's trainer ranks.
        trainer_nccl: the trainer's NCCL version ("2.27.5"), None without CUDA.
        server_nccl: each server's NCCL version, None where unknown.
        all_cpu: every server runs on the CPU.
    """

    colocated: tuple[str, ...]
    trainer_nccl: str | None
    server_nccl: Mapping[str, str | None]
    all_cpu: bool


def server_gpus(info: ServerInfo) -> set[int]:
    """The GPU ids a server's ranks use, as its launch arguments give them."""
    return {info.base_gpu_id + i * info.gpu_id_step for i in range(info.ranks)}


def trainer_gpus(environ: Mapping[str, str] | None = None) -> set[int]:
    """The GPU ids this node's trainer ranks use (``cuda:LOCAL_RANK`` of each local rank)."""
    env = os.environ if environ is None else environ
    local = int(env.get("LOCAL_WORLD_SIZE", "1"))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if all(v.isdigit() for v in ids):
            return {int(v) for v in ids[:local]}
    return set(range(local))


def is_local(url: str) -> bool:
    """Whether ``url``'s host is this machine (loopback, or an address this host can bind)."""
    host = urlsplit(url).hostname or "127.0.0.1"
    try:
        addr = ipaddress.ip_address(socket.getaddrinfo(host, None)[0][4][0])
    except (OSError, ValueError, IndexError):
        return False
    if addr.is_loopback or addr.is_unspecified:
        return True
    family = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
    with socket.socket(family) as s:
        try:
            s.bind((str(addr), 0))
        except OSError:
            return False
    return True


def probe_nccl(python: str, timeout_s: float = 120.0) -> str | None:
    """The NCCL version of the torch that ``python`` imports; None when it has no CUDA."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True,
                             timeout=timeout_s, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def trainer_nccl() -> str | None:
    """This process's NCCL version; None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def server_nccl(info: ServerInfo, python: str | None) -> str | None:
    """A server's NCCL version: reported, probed through ``python``, pinned, or None."""
    if info.nccl_version:
        return info.nccl_version
    if python:
        probed = probe_nccl(python)
        if probed:
            return probed
    return PINNED_NCCL.get(info.version)


def colocated_servers(infos: Mapping[str, ServerInfo],
                      environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The servers on this host whose GPUs a trainer rank of this node also uses."""
    mine = trainer_gpus(environ)
    return tuple(url for url, info in infos.items()
                 if info.device != "cpu" and is_local(url) and server_gpus(info) & mine)


def choose_weight_sync(requested: str, facts: SyncFacts) -> str:
    """``distributed`` or ``disk`` for ``requested`` (``auto``, ``distributed``, ``disk``).

    Raises:
        SGLangError: ``distributed`` asked where it cannot work (see the module docstring).
    """
    if requested == "disk":
        return "disk"
    if facts.all_cpu:
        return "distributed"  # gloo: no device or NCCL constraint
    if facts.colocated:
        if requested == "distributed":
            raise SGLangError(
                f"weight_sync is 'distributed' but {', '.join(facts.colocated)} runs on a GPU "
                "that a trainer rank uses: NCCL cannot put two ranks of one group on one GPU "
                "('Duplicate GPU detected'). Use rollout.sglang.weight_sync: auto (colocated "
                "servers reload from disk) or disk, or move the servers to GPUs of their own "
                "(--base-gpu-id)"
            )
        return "disk"
    mismatched = {url: v for url, v in facts.server_nccl.items()
                  if v and facts.trainer_nccl and v != facts.trainer_nccl}
    if mismatched:
        if requested == "distributed":
            theirs = ", ".join(f"{u} NCCL {v}" for u, v in mismatched.items())
            raise SGLangError(
                f"weight_sync is 'distributed' but the trainer's torch has NCCL "
                f"{facts.trainer_nccl} and {theirs}: NCCL rejects peers of another version. "
                "Run trainer and servers on the same torch, or use rollout.sglang.weight_sync: "
                "auto or disk"
            )
        return "disk"
    return "distributed"


def sync_mode(requested: str, infos: Mapping[str, ServerInfo], python: str | None) -> str:
    """``choose_weight_sync`` for these servers, from the facts read here.

    Args:
        requested: ``auto``, ``distributed`` or ``disk``.
        infos: each server's ``ServerInfo``.
        python: the servers' interpreter when known (probed for its NCCL version).
    """
    all_cpu = all(i.device == "cpu" for i in infos.values())
    colocated = () if all_cpu else colocated_servers(infos)
    mine = None
    theirs: dict[str, str | None] = {}
    if not all_cpu and not colocated and requested != "disk":
        mine = trainer_nccl()
        if mine is not None:
            theirs = {u: server_nccl(i, python) for u, i in infos.items()}
    return choose_weight_sync(requested, SyncFacts(colocated, mine, theirs, all_cpu))
