"""``TransformersOptions``: the transformers engine's own options.

``rollout.transformers`` in the training config and ``transformers`` in ``rlvr eval``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlvr.agents.errors import EngineConfigError
from rlvr.config_checks import bounded, check_fields


@dataclass(kw_only=True)
class TransformersOptions:
    """Options of the in-process transformers engine (``rlvr.agents.hf.engine.TransformersEngine``).

    Attributes:
        threads: intra-op threads of the engine's forwards, set on its worker thread only
            (``rlvr.agents.hf.intra_op``): the thread that trains keeps ``trainer.threads``. Null
            keeps
            the process's count. Small models decode faster on one thread: their many tiny ops
            gain nothing from a second one (the quickstart's rollout on two threads took 1.3x
            as long as on one; see BENCHMARKS.md); a large model on a many-core CPU wants more.
        lean: run the hand-written forward of ``rlvr.agents.hf.lean_decoder`` when the model allows
        it
            (same logits, less Python per step); false: always the module's own forward.
    """

    #: Caveats the configuration reference prints (``rlvr.config.docs``).
    CAVEATS: ClassVar[dict[str, str]] = {"": "Takes effect only with the `transformers` engine."}

    threads: int | None = bounded(None, ge=1)
    lean: bool = True

    def __post_init__(self) -> None:
        """Validate the fields (``EngineConfigError``'s ``key`` names the field)."""
        check_fields(self, error=EngineConfigError)
