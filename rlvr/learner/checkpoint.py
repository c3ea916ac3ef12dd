"""Checkpoints with ``torch.distributed.checkpoint`` and export to a HuggingFace directory.

``Checkpointer`` saves and loads a mapping of named ``Stateful`` objects (the actor and critic
each give model + optimizer + scheduler + counters; the trainer adds its own counters and RNG
states) as one sharded DCP checkpoint. A save is atomic: every rank writes into a hidden
``.<name>.partial`` directory next to the target, rank 0 then adds a ``COMPLETE`` marker and
renames it into place. A process killed mid-save therefore leaves at most a stale ``.partial``
directory (ignored, and replaced by the next save), never a half-written checkpoint under the
real name; ``latest_checkpoint`` only returns directories carrying the marker.

The marker lists the size and SHA-256 of every file (``rlvr.learner.checksums``); ``load``
checks them first and raises ``CheckpointError`` naming each damaged file (a flipped bit, a
truncated file), never loading different weights silently. ``Checkpoints.maybe_resume`` (in
``rlvr.training.state``) then falls back to the previous intact checkpoint, with a warning.

``export_hf`` gathers the full (unsharded) weights of an FSDP2 causal LM and writes a directory
that ``transformers.AutoModelForCausalLM.from_pretrained`` (and SGLang) load: safetensors,
``config.json``, ``generation_config.json`` and the tokenizer files.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from rlvr.distributed import barrier, rank_and_world
from rlvr.errors import RunStoppedError
from rlvr.learner.checksums import damage, hash_share, merge_shares

COMPLETE_MARKER = "COMPLETE"


class CheckpointError(RunStoppedError):
    """A checkpoint is damaged: a file is missing, truncated or changed since it was saved.

    Attributes:
        path: the checkpoint directory.
        problems: one line per damaged file.
    """

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"checkpoint {path} is damaged: {'; '.join(problems[:3])}"
                         + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(tmp: Path, target: Path, marker_text: str = "ok\n") -> None:
    """Mark ``tmp`` complete and rename it to ``target`` (replacing an old one). Rank 0 only."""
    marker = tmp / COMPLETE_MARKER
    with open(marker, "w") as f:
        f.write(marker_text)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    old = target.parent / f".{target.name}.old"
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)
    os.rename(tmp, target)
    _fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)


def _prepare_tmp(target: Path, suffix: str) -> Path:
    """A fresh hidden sibling directory of ``target`` (same name on every rank)."""
    tmp = target.parent / f".{target.name}.{suffix}"
    if rank_and_world()[0] == 0:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    barrier()
    return tmp


class Checkpointer:
    """Save/load named ``Stateful`` objects with ``torch.distributed.checkpoint``.

    Example::

        ckpt = Checkpointer({"actor": actor, "critic": critic, "trainer": trainer_state})
        ckpt.save(run_dir / "checkpoints" / "step_000010")
        ckpt.load(latest_checkpoint(run_dir / "checkpoints"))

    Args:
        states: name -> object with ``state_dict()``/``load_state_dict()``. All ranks must
            build the same mapping.
    """

    def __init__(self, states: Mapping[str, Stateful]) -> None:
        self.states = dict(states)

    def save(self, step_dir: str | Path) -> Path:
        """Write a checkpoint to ``step_dir`` atomically (collective: call on every rank).

        Returns:
            ``step_dir`` as a ``Path``; it exists, complete, when this returns.
        """
        target = Path(step_dir)
        tmp = _prepare_tmp(target, "partial")
        try:
            dcp.save(dict(self.states), checkpoint_id=str(tmp))
        except CheckpointException as exc:  # DCP wraps what its writers raised
            raise _unwrapped(exc) from exc
        barrier()
        rank, world = rank_and_world()
        hash_share(tmp, rank, world)
        barrier()
        if rank == 0:
            _publish(tmp, target, merge_shares(tmp, world))
        barrier()
        return target

    def load(self, step_dir: str | Path) -> None:
        """Restore every object from ``step_dir`` in place (collective).

        Raises:
            FileNotFoundError: ``step_dir`` is not a complete checkpoint.
            CheckpointError: a file does not match its checksum, or torch cannot read it (the
                message names the checkpoint and the file).
        """
        path = Path(step_dir)
        if not (path / COMPLETE_MARKER).is_file():
            raise FileNotFoundError(
                f"step_dir {str(path)!r} is not a complete checkpoint (no {COMPLETE_MARKER} file)"
            )
        problems = damage(path, COMPLETE_MARKER)
        if problems:
            raise CheckpointError(path, problems)
        try:
            dcp.load(dict(self.states), checkpoint_id=str(path))
        except Exception as exc:  # DCP raises many types for an unreadable file
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(path, [f"torch cannot read it: {first[:300]}"]) from exc


def _unwrapped(exc: CheckpointException) -> BaseException:
    """What a rank's writer raised inside ``dcp.save``: Ctrl-C or a disk error as themselves.

    A ``KeyboardInterrupt`` comes back as one (the save is abandoned: its hidden ``.partial``
    folder is never loaded); an ``OSError`` (a full disk) as itself; anything else as ``exc``.
    """
    failures = [value[0] if isinstance(value, tuple) else value
                for value in getattr(exc, "failures", {}).values()]
    for kind in (KeyboardInterrupt, OSError):
        for failure in failures:
            if isinstance(failure, kind):
                return failure
    return exc


def latest_checkpoint(root: str | Path) -> Path | None:
    """The complete checkpoint under ``root`` with the highest trailing step number, or None.

    Hidden directories (``.partial``/``.old`` leftovers of an interrupted save) and directories
    without the ``COMPLETE`` marker are ignored.
    """
    found = complete_checkpoints(root)
    return found[0] if found else None


def complete_checkpoints(root: str | Path) -> list[Path]:
    """The complete checkpoints under ``root``, newest (highest trailing step number) first."""
    base = Path(root)
    if not base.is_dir():
        return []
    found = []
    for child in base.iterdir():
        if child.name.startswith(".") or not (child / COMPLETE_MARKER).is_file():
            continue
        m = re.search(r"(\d+)$", child.name)
        found.append((int(m.group(1)) if m else -1, child.name, child))
    return [entry[2] for entry in sorted(found, reverse=True)]


def prune_checkpoints(root: str | Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest complete checkpoints under ``root`` (rank 0 only).

    Leftovers of interrupted saves (hidden ``.partial``/``.old`` directories) are removed too.
    Call it after a successful ``save`` on every rank (other ranks do nothing).

    Returns:
        The directories removed (empty on ranks other than 0).

    Raises:
        ValueError: ``keep`` < 1.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1; got {keep}")
    base = Path(root)
    if rank_and_world()[0] != 0 or not base.is_dir():
        return []
    complete = []
    stale = []
    for child in base.iterdir():
        if child.name.startswith(".") and child.name.endswith((".partial", ".old")):
            stale.append(child)
        elif child.is_dir() and (child / COMPLETE_MARKER).is_file():
            m = re.search(r"(\d+)$", child.name)
            complete.append((int(m.group(1)) if m else -1, child.name, child))
    doomed = [c[2] for c in sorted(complete)[:-keep]] + stale
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def full_state_dict(module: nn.Module) -> dict[str, Any]:
    """The unsharded state dict of an FSDP2 module on CPU (collective; every rank gets it)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(module, options=options)


def export_adapter(
    module: nn.Module,
    out_dir: str | Path,
    lora: Any,
    base_model: str | Path,
    tokenizer: Any = None,
    *,
    merged_dir: str | Path | None = None,
) -> Path:
    """Write a LoRA module's adapter in peft's format (collective; rank 0 writes, atomically).

    Args:
        module: the sharded causal LM with LoRA layers (``actor.module``).
        out_dir: the adapter directory to create (replaced if it exists).
        lora: its ``rlvr.learner.lora.LoraConfig``.
        base_model: the base model directory, recorded in ``adapter_config.json``.
        tokenizer: saved beside the adapter when given.
        merged_dir: also write the merged model as a plain HF directory there.
    """
    from rlvr.learner.lora import is_adapter_name, merged_tensors, save_adapter

    target = Path(out_dir)
    state = full_state_dict(module)
    tmp = _prepare_tmp(target, "export")
    if rank_and_world()[0] == 0:
        adapter = {k: v for k, v in state.items() if is_adapter_name(k)}
        save_adapter(adapter, lora, str(base_model), tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        _publish(tmp, target)
    barrier()
    if merged_dir is not None:
        merged = dict(merged_tensors(iter(state.items()), lora))
        export_hf(module, merged_dir, tokenizer, state=merged)
    return target


def export_hf(
    module: nn.Module,
    out_dir: str | Path,
    tokenizer: Any = None,
    *,
    dtype: torch.dtype | None = None,
    state: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """Write an FSDP2-sharded HF causal LM as a plain HuggingFace directory (collective).

    Rank 0 writes, atomically (a hidden sibling directory renamed into place): safetensors
    weights, ``config.json`` (with the plain architecture name, e.g. ``Qwen2ForCausalLM``),
    ``generation_config.json`` and, if given, the tokenizer.

    Args:
        module: the sharded causal LM (e.g. ``actor.module``).
        out_dir: the directory to create (replaced if it exists).
        tokenizer: saved with ``save_pretrained`` when given.
        dtype: the weights' dtype on disk; default the master dtype (fp32).
        state: the full state dict to write (plain HF names), when it is not the module's own
            (a LoRA module's merged weights); default ``full_state_dict(module)``.

    Returns:
        ``out_dir`` as a ``Path``.

    Raises:
        TypeError: ``module`` is not an HF model (it has no ``config``), e.g. a critic.
    """
    from transformers import AutoModelForCausalLM

    if not hasattr(module, "config"):
        raise TypeError(
            f"module must be an HF causal LM such as actor.module; got {type(module).__name__}"
        )
    target = Path(out_dir)
    state = full_state_dict(module) if state is None else state
    tmp = _prepare_tmp(target, "export")
    if rank_and_world()[0] == 0:
        config = module.config  # type: ignore[union-attr]
        with torch.device("meta"):
            plain = AutoModelForCausalLM.from_config(config)
        plain.to_empty(device="cpu")
        plain.tie_weights()
        plain.load_state_dict(state, strict=True)
        if dtype is not None:
            plain.to(dtype)
            plain.config.dtype = dtype
        generation_config = getattr(module, "generation_config", None)
        if generation_config is not None:
            plain.generation_config = generation_config
        plain.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        _publish(tmp, target)
    barrier()
    return target


__all__ = [
    "COMPLETE_MARKER",
    "CheckpointError",
    "Checkpointer",
    "complete_checkpoints",
    "export_adapter",
    "export_hf",
    "full_state_dict",
    "latest_checkpoint",
    "prune_checkpoints",
]
