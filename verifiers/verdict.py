"""The result every verifier returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Verdict:
    """What a verifier concluded about one model output.

    Attributes:
        score: reward in [0, 1] (1.0 = fully correct; a fraction for partial credit such as the
            fraction of unit tests passed).
        passed: whether the output counts as correct (e.g. all tests passed).
        reason: a short tag: "correct", "wrong_answer", "no_answer", "timeout", "runtime_error",
            "memory_limit", "parse_error", ...
        details: anything else worth showing (extracted answer, per-test outcomes, stderr tail).
    """

    score: float
    passed: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.score) <= 1.0:
            raise ValueError(f"Verdict.score must be in [0, 1], got {self.score!r}")
        if not self.reason:
            raise ValueError("Verdict.reason must be a non-empty tag")
