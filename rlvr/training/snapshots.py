"""``episodes.html`` at the end of a run: the same few held-out episodes before and after RL.

The held-out evaluator plays the same planned episodes (same tasks, same seeds) at every
evaluation; this keeps the first ``n`` records of the evaluation before RL and of the last one,
and renders both with ``rlvr.eval.html`` (prompt, model and env/tool tokens in different
colours, each model turn's reward as a badge), grouped as "before RL" and "after RL".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.eval.html import write_html


class EpisodeSnapshots:
    """Collects labelled held-out episodes and writes them to one page.

    Args:
        path: the HTML file to write.
        n: episodes kept per snapshot (0 disables the page).
    """

    def __init__(self, path: Path, n: int) -> None:
        self.path = path
        self.n = n
        self.records: list[dict[str, Any]] = []

    def take(self, label: str, evaluator: Any) -> None:
        """Keep the first ``n`` episodes of ``evaluator``'s last evaluation under ``label``."""
        if self.n <= 0 or evaluator is None:
            return
        for record in evaluator.last_records[: self.n]:
            self.records.append({**record, "model": label})

    def write(self, title: str = "held-out episodes before and after RL") -> Path | None:
        """Write the page (None when disabled or nothing was taken)."""
        if self.n <= 0 or not self.records:
            return None
        return write_html(self.records, self.path, title=title, expanded=True)
