"""``metrics.jsonl``: one JSON line per logged step, always written (the run's own record).

``{"step": int, "<name>": float | null, ...}``. On resume the lines of steps after the
checkpoint are dropped first, so a run killed mid-way and resumed has each step exactly once.
Tables and artifacts are not its business (the run folder already holds them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from rlvr.tracking.base import RunInfo, Table

__all__ = ["JsonlLogger", "read_jsonl"]


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a metrics JSONL file.

    A missing file gives ``[]``; a torn last line (a process killed mid-write) is skipped.
    """
    p = Path(path)
    if not p.exists():
        return []
    records = []
    for line in p.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class JsonlLogger:
    """Appends each step's metrics to ``run_dir/metrics.jsonl`` (flushed per line)."""

    def __init__(self, run: RunInfo) -> None:
        self.path = run.run_dir / "metrics.jsonl"
        run.run_dir.mkdir(parents=True, exist_ok=True)
        kept = [r for r in read_jsonl(self.path) if r.get("step", 0) <= run.start_step]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self._file = self.path.open("a")

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        """Write one line: ``{"step": step, **metrics}`` (non-finite values already None)."""
        self._file.write(json.dumps({"step": step, **metrics}) + "\n")
        self._file.flush()

    def log_table(self, step: int, name: str, table: Table) -> None:
        """Nothing: episodes.html and the eval reports hold the tables."""

    def log_artifact(self, path: Path, name: str) -> None:
        """Nothing: the files are in the run folder already."""

    def close(self, summary: Mapping[str, float], *, failed: bool = False) -> None:
        """Close the file."""
        if not self._file.closed:
            self._file.close()
