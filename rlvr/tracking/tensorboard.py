"""TensorBoard event files under ``run_dir/tensorboard/`` (``tensorboard --logdir``).

Scalars only, one per metric at its step; on resume the events after the checkpoint's step are
purged (``purge_step``), so curves do not double back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr.tracking.base import RunInfo, Table

__all__ = ["TensorBoardLogger"]


class TensorBoardLogger:
    """Writes every finite metric as a scalar at its step."""

    def __init__(self, run: RunInfo) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.dir = run.run_dir / "tensorboard"
        self._tb: Any = SummaryWriter(str(self.dir), purge_step=run.start_step + 1)

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        """One scalar per metric (None values are left out)."""
        for key, value in metrics.items():
            if value is not None:
                self._tb.add_scalar(key, value, step)

    def log_table(self, step: int, name: str, table: Table) -> None:
        """Nothing: TensorBoard gets scalars only."""

    def log_artifact(self, path: Path, name: str) -> None:
        """Nothing: TensorBoard gets scalars only."""

    def close(self, summary: Mapping[str, float], *, failed: bool = False) -> None:
        """Flush and close the event file."""
        self._tb.close()
