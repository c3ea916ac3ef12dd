"""Weights & Biases: one W&B run per rlvr run, offline unless the user configured W&B.

- Mode: ``WANDB_MODE`` when set; else online when an API key is configured (``WANDB_API_KEY``
  or a ``wandb login`` entry in ``~/.netrc``); else ``offline`` (nothing leaves the machine:
  ``wandb sync <run_dir>/wandb/offline-run-*`` uploads it later).
- Where: ``WANDB_DIR`` when set, else the run folder (``<run_dir>/wandb/``). Project:
  ``WANDB_PROJECT``, else ``rlvr``; entity: ``WANDB_ENTITY`` when set (W&B reads both).
- The run is named after the run folder; its id is kept in ``<run_dir>/wandb_run_id``, and
  ``trainer.resume=true`` continues that W&B run (``resume="allow"`` with the same id).
- Logged: the resolved config (nested, as W&B shows it), every metric at its step, each table
  as a ``wandb.Table`` at its step (``eval/episodes``: a sample of the held-out episodes with
  reward and verdict), files with ``run.save`` and folders (the exported model) as artifacts,
  and the final summary.
"""

from __future__ import annotations

import netrc
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr.tracking.base import RunInfo, Table

__all__ = ["WandbLogger", "wandb_mode"]

ID_FILE = "wandb_run_id"


def _logged_in() -> bool:
    """Whether ``wandb login`` left a key for api.wandb.ai in ``~/.netrc``."""
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode() -> str | None:
    """The mode rlvr asks for: ``WANDB_MODE``; else None when configured; else offline.

    None lets W&B decide (online) when an API key is configured (``WANDB_API_KEY``, ``wandb
    login``).

    ``WANDB_MODE`` and ``WANDB_DIR`` are read here at each run's start and passed to
    ``wandb.init``: W&B reads its environment once per process.
    """
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY") or _logged_in():
        return None
    return "offline"


class WandbLogger:
    """Logs one rlvr run to one W&B run (see the module docstring)."""

    def __init__(self, run: RunInfo) -> None:
        import wandb

        self._wandb = wandb
        id_path = run.run_dir / ID_FILE
        run_id = id_path.read_text().strip() if run.resume and id_path.is_file() else None
        if not run_id:
            run_id = uuid.uuid4().hex[:16]  # W&B ids: lowercase letters and digits
            id_path.write_text(run_id + "\n")
        self.run: Any = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or "rlvr", name=run.name, id=run_id,
            resume="allow", config=dict(run.config), mode=wandb_mode(),
            dir=os.environ.get("WANDB_DIR") or str(run.run_dir),
            job_type=run.kind, reinit="create_new",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))
        self.run_id = run_id

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        """Every finite metric at ``step``."""
        self.run.log({k: v for k, v in metrics.items() if v is not None}, step=step)

    def log_table(self, step: int, name: str, table: Table) -> None:
        """``table`` as a ``wandb.Table`` under ``name`` at ``step``."""
        data = [list(r) for r in table.rows]
        self.run.log({name: self._wandb.Table(columns=list(table.columns), data=data)},
                     step=step)

    def log_artifact(self, path: Path, name: str) -> None:
        """A file with ``run.save``; a folder as an artifact of type ``name``."""
        if path.is_dir():
            artifact = self._wandb.Artifact(f"{self.run.name}-{name}", type=name)
            artifact.add_dir(str(path))
            self.run.log_artifact(artifact)
        else:
            self.run.save(str(path), base_path=str(path.parent), policy="now")

    def close(self, summary: Mapping[str, float], *, failed: bool = False) -> None:
        """Write the summary and finish the run (exit code 1 when the rlvr run raised)."""
        self.run.summary.update(dict(summary))
        self.run.finish(exit_code=1 if failed else 0)
