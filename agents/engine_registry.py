"""One factory for rollout engines, so callers never branch on engine names.

``build_engine(EngineRequest(...))`` looks the engine's name up in ``ENGINES`` (name ->
``"module:function"`` of its builder, imported only when used, so ``sglang`` costs nothing
unless asked for) and returns a ``BuiltEngine``. Each engine registers its options dataclass in
``ENGINE_OPTIONS`` (``engine_options(request)`` gives a builder its options, typed). A third
engine is one new module with a ``build(request) -> BuiltEngine`` function, its options class,
one line in each registry and a section of that name in ``rlvr.config.engine.EngineSection``;
everything else reaches it through the ``rlvr.agents.engine.Engine`` protocol (``update_weights``,
``release_memory``, ``resume_memory`` are no-ops where they mean nothing).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlvr.agents.engine import Engine
from rlvr.agents.errors import EngineConfigError

ENGINES: dict[str, str] = {
    "transformers": "rlvr.agents.engine_registry:build_transformers",
    "sglang": "rlvr.agents.sglang.engine_builder:build",
    "vllm": "rlvr.agents.vllm.engine_builder:build",
}
"""Engine name -> ``"module:function"`` of its builder."""

ENGINE_OPTIONS: dict[str, str] = {
    "transformers": "rlvr.agents.hf.options:TransformersOptions",
    "sglang": "rlvr.agents.sglang.options:SGLangOptions",
    "vllm": "rlvr.agents.vllm.options:VLLMOptions",
}
"""Engine name -> ``"module:Class"`` of its options dataclass (the section of the same name in
the configs: ``rollout.<name>`` in training, ``<name>`` in ``rlvr eval``)."""


@dataclass(frozen=True, kw_only=True)
class EngineRequest:
    """What the caller (trainer, evaluator) asks of an engine.

    Attributes:
        engine: a name in ``ENGINES``.
        model_path: the policy as a HuggingFace model directory.
        module: the live policy module, when the engine may run it in-process and share its
            weights (the transformers engine does; server engines ignore it).
        tokenizer: the policy's tokenizer.
        max_batch_size: sequences the engine should batch at once.
        device: where an in-process engine runs (None: its default).
        leader: this process sends weight/memory calls to shared servers (trainer rank 0).
        world_size: trainer ranks (engines that launch servers refuse more than one).
        work_dir: a directory the engine may write to (e.g. weight shards for a disk sync).
        serve_model: an engine attached to running servers must serve ``model_path`` (it
            loads it from disk) rather than whatever they hold; the trainer leaves it off, it
            syncs its own weights at start.
        options: the engine's own options: its options dataclass (``rollout.<engine>`` in the
            training config, e.g. ``rlvr.agents.sglang.SGLangOptions``) or a mapping of its fields.
        lora: the policy's LoRA adapter as ``peft.LoraConfig`` arguments, or None. An engine
            that can hold the same adapter layers does (then a sync sends the adapter alone);
            one that cannot receives merged weights.
    """

    engine: str
    model_path: str | Path
    module: torch.nn.Module | None = None
    tokenizer: Any = None
    max_batch_size: int = 64
    device: str | None = None
    leader: bool = True
    world_size: int = 1
    work_dir: str | Path | None = None
    serve_model: bool = False
    options: Any = None
    lora: dict[str, Any] | None = None


@dataclass
class BuiltEngine:
    """An engine and the facts its caller needs.

    Attributes:
        engine: the ``Engine``.
        dtype: the dtype it computes in (the sync guard's default threshold depends on it).
        shares_weights: it runs the caller's own module: there is nothing to sync.
        serves_adapter: it holds the request's LoRA layers: a sync sends the adapter tensors
            alone (else merged weights).
        info: engine-specific extras for logs (e.g. the server URL).
    """

    engine: Engine
    dtype: torch.dtype
    shares_weights: bool = False
    serves_adapter: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def engine_names() -> tuple[str, ...]:
    """The names ``build_engine`` accepts (the default, ``transformers``, first)."""
    return tuple(ENGINES)


def check_engine_name(name: str, where: str = "engine") -> None:
    """Raise ``EngineConfigError`` naming ``where`` and the allowed names for an unknown name."""
    if name not in ENGINES:
        raise EngineConfigError(f"{where}: unknown engine {name!r}; allowed: "
                                f"{', '.join(engine_names())}")


def options_class(name: str) -> type:
    """The options dataclass engine ``name`` registered in ``ENGINE_OPTIONS``.

    Raises:
        EngineConfigError: an unknown engine name.
    """
    check_engine_name(name, "engine")
    module, _, cls = ENGINE_OPTIONS[name].partition(":")
    found: type = getattr(importlib.import_module(module), cls)
    return found


def engine_options(request: EngineRequest) -> Any:
    """``request.options`` as its engine's options dataclass.

    A mapping is its fields; None gives the defaults.

    Raises:
        EngineConfigError: options of another type, or a bad field (named).
    """
    cls = options_class(request.engine)
    options = request.options
    if options is None:
        return cls()
    if isinstance(options, cls):
        return options
    if isinstance(options, Mapping):
        try:
            return cls(**options)
        except TypeError as err:  # an unknown field
            raise EngineConfigError(f"{request.engine} engine options: {err}") from err
    raise EngineConfigError(f"the {request.engine} engine takes {cls.__name__}; got "
                            f"{type(options).__name__}")


def build_engine(request: EngineRequest) -> BuiltEngine:
    """Build the engine ``request.engine`` names.

    Raises:
        EngineConfigError: an unknown engine name.
    """
    check_engine_name(request.engine, "engine")
    module, _, func = ENGINES[request.engine].partition(":")
    builder: Callable[[EngineRequest], BuiltEngine] = getattr(importlib.import_module(module), func)
    return builder(request)


def build_transformers(request: EngineRequest) -> BuiltEngine:
    """The in-process transformers engine (shares weights when given a module)."""
    from rlvr.agents.hf.engine import TransformersEngine

    kwargs: dict[str, Any] = {"max_batch_size": request.max_batch_size,
                              **asdict(engine_options(request))}
    if request.module is not None:
        engine = TransformersEngine(request.module, request.tokenizer, **kwargs)
        return BuiltEngine(engine, next(engine.model.parameters()).dtype, shares_weights=True,
                           serves_adapter=request.lora is not None)
    if request.device is not None:
        kwargs.setdefault("device", request.device)
    model: Any = str(request.model_path)
    if request.lora is not None:  # its own copy, with the same adapter layers
        from transformers import AutoModelForCausalLM

        loaded: Any = AutoModelForCausalLM.from_pretrained(
            model, dtype=kwargs.get("dtype") or torch.float32)
        loaded = loaded.to(kwargs.get("device") or "cpu")
        model = with_lora_layers(loaded, request.lora)
    engine = TransformersEngine(model, tokenizer=request.tokenizer, **kwargs)
    return BuiltEngine(engine, next(engine.model.parameters()).dtype,
                       serves_adapter=request.lora is not None)


def with_lora_layers(model: torch.nn.Module, lora: dict[str, Any]) -> torch.nn.Module:
    """``model`` with peft's LoRA layers injected (``peft.LoraConfig(**lora)``), in place."""
    import peft

    peft.inject_adapter_in_model(peft.LoraConfig(**lora), model, adapter_name="default")
    model.requires_grad_(False)
    return model
