"""``EngineSection``: which rollout engine runs, and each engine's own options.

One section, two configs: ``rollout.engine`` / ``rollout.transformers`` / ``rollout.sglang`` /
``rollout.vllm`` in ``rlvr train`` (``RolloutConfig`` extends it) and ``engine`` /
``transformers`` / ``sglang`` / ``vllm`` in ``rlvr eval`` (``rlvr.eval.evaluator.SuiteEvalConfig``
does). Each engine's options are its own dataclass
(``rlvr.agents.hf.options.TransformersOptions``, ``rlvr.agents.sglang.options.SGLangOptions``,
``rlvr.agents.vllm.options.VLLMOptions``),
one field here per name in ``rlvr.agents.engine_registry.ENGINES``; the caller hands
``engine_options`` to ``rlvr.agents.engine_registry.EngineRequest``, whatever the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.agents.engine_registry import ENGINES
from rlvr.agents.hf.options import TransformersOptions
from rlvr.agents.sglang.options import SGLangOptions
from rlvr.agents.vllm.options import VLLMOptions
from rlvr.config_checks import check_choice, check_fields


@dataclass(kw_only=True)
class EngineSection:
    """The rollout engine and its options.

    Attributes:
        engine: ``transformers`` (in-process; in training with one rank it shares the actor's
            weights), ``sglang`` or ``vllm`` (servers; weights pushed after each step).
        transformers: the transformers engine's options
        (``rlvr.agents.hf.options.TransformersOptions``):
            ``threads`` (intra-op threads of its forwards, on its own thread; null keeps the
            process's count: ``trainer.threads`` in training), ``lean``.
        sglang: the SGLang engine's options (``rlvr.agents.sglang.SGLangOptions``): ``url`` to
            attach to (null launches a server on the policy), ``weight_sync`` (``auto``,
            ``distributed`` or ``disk``), ``bucket_mb``, ``python`` (the server's venv),
            ``launch_args``, ...
        vllm: the vLLM engine's options (``rlvr.agents.vllm.VLLMOptions``): ``url`` to attach
            to (null launches a server on the policy), ``weight_sync``, ``python`` (the
            server's venv), ``launch_args``, ...
    """

    engine: str = "transformers"
    transformers: TransformersOptions = field(default_factory=TransformersOptions)
    sglang: SGLangOptions = field(default_factory=SGLangOptions)
    vllm: VLLMOptions = field(default_factory=VLLMOptions)

    def __post_init__(self) -> None:
        check_fields(self)
        check_choice("engine", self.engine, ENGINES)

    @property
    def engine_options(self) -> Any:
        """The options of the chosen engine (the section named like it), for ``EngineRequest``."""
        return getattr(self, self.engine)


__all__ = ["EngineSection"]
