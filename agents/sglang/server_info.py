"""What an SGLang server says about itself, and the checks rlvr makes before using it.

Read on attach from ``/server_info`` (sglang >= 0.5.10; ``/get_server_info`` before), which
returns the server's resolved launch arguments plus ``version``, and the context length from
``/v1/models`` (``max_model_len``, the limit sglang checks requests against).

Refused on attach (``check_server``):

* versions before 0.5.5: without ``--skip-tokenizer-init`` their ``output_ids`` start with up to
  five prompt tokens (upstream issue #17240), so every completion would be misaligned;
* ``dp_size > 1``: the weight-update group gives each server ``tp_size * pp_size`` ranks, one
  model replica per server (run data-parallel replicas as separate servers behind a router);
* ``pp_size > 1``: sglang 0.5.23 joins the weight-update group as ``rank_offset + tp_rank``
  (``model_runner_components/weight_updater.py``), so the stages of a pipeline claim the same
  ranks and the group never forms (the update hangs): use ``--tp-size`` instead;
* a server whose logprobs are un-tempered (``SGLANG_RETURN_ORIGINAL_LOGPROB=1`` in its
  environment, which no route reports): probed by ``logprobs_are_tempered``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.agents.engine import Completion
from rlvr.agents.errors import SGLangError

MIN_VERSION = (0, 5, 5)


@dataclass(frozen=True)
class ServerInfo:
    """The facts rlvr needs from one server.

    Attributes:
        version: sglang's version string ("unknown" when not reported).
        tp_size / dp_size / pp_size: parallel sizes; the server's weight-update ranks are
            ``tp_size * pp_size``.
        dtype: the server's ``--dtype`` ("auto", "float32", "bfloat16", ...).
        context_length: prompt + completion tokens a request may hold (None when unknown).
        max_input_len: prompts must be shorter than this (sglang's ``max_req_input_len``:
            ``min(context_length, KV pool tokens) - 6``; None when not reported).
        deterministic: launched with ``--enable-deterministic-inference`` (``sampling_seed``
            works only then).
        memory_saver: launched with ``--enable-memory-saver`` (release/resume free memory).
        weights_cpu_backup: launched with ``--enable-weights-cpu-backup`` (weights survive a
            release).
        device: the server's ``--device`` ("cuda", "cpu", ...).
        model_path: what it was launched on.
        base_gpu_id / gpu_id_step: its ranks' GPUs are ``base_gpu_id + i * gpu_id_step``.
        nccl_version: the server's NCCL version when it reports one (None otherwise).
        lora_enabled: launched with ``--enable-lora`` (it can serve adapters).
        max_lora_rank: its ``--max-lora-rank`` (None when not set).
        lora_target_modules: its ``--lora-target-modules`` (``("all",)`` for every layer).
    """

    version: str = "unknown"
    tp_size: int = 1
    dp_size: int = 1
    pp_size: int = 1
    dtype: str = "auto"
    context_length: int | None = None
    max_input_len: int | None = None
    deterministic: bool = False
    memory_saver: bool = False
    weights_cpu_backup: bool = False
    device: str = "cuda"
    model_path: str = ""
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    nccl_version: str | None = None
    lora_enabled: bool = False
    max_lora_rank: int | None = None
    lora_target_modules: tuple[str, ...] = ()

    @property
    def ranks(self) -> int:
        """Ranks this server contributes to the weight-update group."""
        return self.tp_size * self.pp_size

    @classmethod
    def from_json(cls, info: dict[str, Any], context_length: int | None = None) -> ServerInfo:
        """Parse ``/server_info``'s answer.

        ``context_length`` (``/v1/models``' ``max_model_len``, the limit sglang enforces) wins
        over the launch argument, which is often null.
        """
        nested = info.get("server_args")
        args: dict[str, Any] = nested if isinstance(nested, dict) else info

        def get(key: str, default: Any) -> Any:
            value = args.get(key, info.get(key))
            return default if value is None else value

        ctx = context_length or get("context_length", None)
        return cls(
            version=str(info.get("version") or args.get("version") or "unknown"),
            tp_size=int(get("tp_size", 1)),
            dp_size=int(get("dp_size", 1)),
            pp_size=int(get("pp_size", 1)),
            dtype=str(get("dtype", "auto")),
            context_length=int(ctx) if ctx else None,
            max_input_len=int(get("max_req_input_len", 0)) or None,
            deterministic=bool(get("enable_deterministic_inference", False)),
            memory_saver=bool(get("enable_memory_saver", False)),
            weights_cpu_backup=bool(get("enable_weights_cpu_backup", False)),
            device=str(get("device", "cuda")),
            model_path=str(get("model_path", "")),
            base_gpu_id=int(get("base_gpu_id", 0)),
            gpu_id_step=int(get("gpu_id_step", 1)) or 1,
            nccl_version=str(get("nccl_version", "")) or None,
            lora_enabled=bool(get("enable_lora", False)),
            max_lora_rank=int(rank) if isinstance(rank := get("max_lora_rank", None), int)
            else None,
            lora_target_modules=_names(get("lora_target_modules", ())),
        )


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(sorted(str(v) for v in value)) if isinstance(value, list | tuple | set) else ()


def parse_version(version: str) -> tuple[int, ...] | None:
    """``"0.5.23"`` -> ``(0, 5, 23)``; None for an unparsable version."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(g) for g in match.groups()) if match else None


def check_server(url: str, info: ServerInfo) -> None:
    """Refuse servers rlvr cannot use correctly (see the module docstring).

    Raises:
        SGLangError: naming the server, what is wrong and what to do.
    """
    parsed = parse_version(info.version)
    if parsed is None or parsed < MIN_VERSION:
        raise SGLangError(
            f"{url} runs sglang {info.version}; rlvr needs sglang >= 0.5.5 (earlier versions "
            "start output_ids with prompt tokens, misaligning every completion): upgrade the "
            "server (pip install 'sglang>=0.5.23')"
        )
    if info.dp_size > 1:
        raise SGLangError(
            f"{url} runs with dp_size={info.dp_size}; rlvr's weight-update group assumes one "
            "model replica per server (tp_size * pp_size ranks): launch each data-parallel "
            "replica as its own server and list them in rollout.sglang.server_urls behind a router"
        )
    if info.pp_size > 1:
        raise SGLangError(
            f"{url} runs with pp_size={info.pp_size}; sglang joins the weight-update group as "
            "rank_offset + tp_rank, so its pipeline stages would claim the same ranks and the "
            "weight sync would hang: launch it with --tp-size instead of --pp-size"
        )


def resolved_dtype(info: ServerInfo) -> str:
    """The dtype a server computes in: its ``--dtype``, or for ``auto`` sglang's own rule.

    sglang 0.5.23 (``model_config._get_and_verify_dtype``) resolves ``auto`` from the model's
    ``config.json``: its ``dtype``/``torch_dtype``, except that a float32 (or missing) one
    becomes float16 (bfloat16 for Gemma models). The server reports only ``auto``, so the
    config is read from the server's ``model_path``.

    Raises:
        SGLangError: ``auto`` and the server's ``config.json`` cannot be read here.
    """
    if info.dtype != "auto":
        return info.dtype
    config_file = Path(info.model_path) / "config.json"
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise SGLangError(
            f"the server runs --dtype auto on {info.model_path!r}, whose config.json cannot be "
            f"read here ({exc}), so the dtype it computes in is unknown: launch the server "
            "with an explicit --dtype (e.g. bfloat16)"
        ) from None
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    if dtype in ("float32", "float"):
        return "bfloat16" if str(config.get("model_type", "")).startswith("gemma") else "float16"
    return dtype


def context_length_from(model_info: dict[str, Any]) -> int | None:
    """The context length in a ``/model_info`` or ``/v1/models`` answer, if present."""
    for key in ("context_length", "max_model_len", "max_context_length"):
        value = model_info.get(key)
        if isinstance(value, int) and value > 0:
            return value
    for entry in model_info.get("data", []) or []:
        if isinstance(entry, dict):
            found = context_length_from(entry)
            if found:
                return found
    return None


def seed_refusal(seed: int | None, infos: Mapping[str, ServerInfo]) -> str | None:
    """Why a request with ``seed`` cannot be honoured by these servers (None: it can).

    Servers without ``--enable-deterministic-inference`` silently ignore ``sampling_seed``.
    """
    if seed is None:
        return None
    plain = [u for u, i in infos.items() if not i.deterministic]
    if not plain:
        return None
    return (f"seeded sampling asked (seed={seed}) but {', '.join(plain)} runs "
            "without --enable-deterministic-inference, where sglang silently ignores "
            "sampling_seed: launch with that flag (SGLangEngine.launch(deterministic=True)), "
            "or accept unseeded sampling (allow_unseeded=True; rollout.sglang.allow_unseeded)")


def smallest_limit(infos: Mapping[str, ServerInfo], field: str) -> int | None:
    """The smallest ``context_length`` or ``max_input_len`` of the servers (None: none says)."""
    known = [getattr(i, field) for i in infos.values() if getattr(i, field)]
    return min(known) if known else None


def generation_room(prompt_len: int, max_new: int,
                    infos: Mapping[str, ServerInfo]) -> int | Completion:
    """``max_new`` clamped to the servers' context; a "length" completion when none is left.

    sglang refuses a prompt at or over ``max_input_len``, and ``prompt + max_new_tokens`` over
    the context length (an HTTP 400); rlvr answers both with a "length" finish instead.
    """
    ctx = smallest_limit(infos, "context_length")
    max_input = smallest_limit(infos, "max_input_len")
    if max_input is not None and prompt_len >= max_input:
        return Completion([], [], "length", {"max_input_len": max_input})
    if ctx is not None:
        room = ctx - prompt_len
        if room < 1:
            return Completion([], [], "length", {"context_length": ctx})
        max_new = min(max_new, room)
    return max_new
