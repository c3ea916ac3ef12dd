"""``TransformersOptions``: the transformers engine's own options.

``rollout.transformers`` in the training config and ``transformers`` in ``rlvr eval``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.agents.errors import EngineConfigError


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

    threads: int | None = None
    lean: bool = True

    def __post_init__(self) -> None:
        """Validate the fields (``EngineConfigError`` names the field)."""
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise EngineConfigError(
                f"threads must be null or an int >= 1; got {self.threads!r}", key="threads"
            )
        if not isinstance(self.lean, bool):
            raise EngineConfigError(f"lean must be true or false; got {self.lean!r}", key="lean")
