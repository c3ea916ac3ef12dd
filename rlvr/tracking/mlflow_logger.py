"""MLflow: one MLflow run per rlvr run, through ``mlflow.tracking.MlflowClient`` (no global state).

- Where: ``MLFLOW_TRACKING_URI`` when set (an MLflow server, a database); else a local store in
  the run folder, ``sqlite:///<run_dir>/mlflow.db`` with artifacts in ``<run_dir>/mlartifacts``
  (embedded, nothing to start: ``mlflow ui --backend-store-uri sqlite:///<run_dir>/mlflow.db``).
  The experiment is ``MLFLOW_EXPERIMENT_NAME``, else ``rlvr``.
- The run is named after the run folder; its id is kept in ``<run_dir>/mlflow_run.json``, and
  ``trainer.resume=true`` continues that run (same tracking URI) instead of starting another.
- Params: the resolved config as flattened dotted keys (``actor.optim.lr``). MLflow's params
  are write-once: on a resume the keys the resume changed (``trainer.steps``) are set as tags
  ``resumed.<key>``.
- Metrics: every metric at its step. MLflow allows letters, digits and ``_ - . / :`` and
  spaces in names: ``@`` becomes ``_at_`` (``eval/overall/pass_at_1``), any other
  character ``_``.
- Tables: JSON artifacts ``tables/<name>/step_<step>.json``; files and folders: artifacts
  under their name (``curves/curves.png``, ``model/``, ``eval_report/report.md``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr.tracking.base import RunInfo, Table, flatten_params

__all__ = ["MlflowLogger", "metric_name"]

_BAD = re.compile(r"[^/\w.\- :]")
STATE_FILE = "mlflow_run.json"
MAX_PARAM_LENGTH = 6000  # MLflow's limit on a param's value


def metric_name(key: str) -> str:
    """``eval/overall/pass@1`` -> ``eval/overall/pass_at_1`` (MLflow's allowed characters)."""
    return _BAD.sub("_", key.replace("@", "_at_"))


def default_tracking_uri(run_dir: Path) -> str:
    """The embedded store of a run folder: ``sqlite:///<run_dir>/mlflow.db``."""
    return f"sqlite:///{run_dir.resolve() / 'mlflow.db'}"


def _param(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, list | dict | tuple) else str(value)
    return text[:MAX_PARAM_LENGTH]


class MlflowLogger:
    """Logs one rlvr run to one MLflow run (see the module docstring)."""

    def __init__(self, run: RunInfo) -> None:
        from mlflow.tracking import MlflowClient

        self.uri = os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(run.run_dir)
        self.client = MlflowClient(tracking_uri=self.uri)
        state_path = run.run_dir / STATE_FILE
        state = json.loads(state_path.read_text()) if state_path.is_file() else {}
        params = {k: _param(v) for k, v in flatten_params(run.config).items()}
        if run.resume and state.get("tracking_uri") == self.uri and state.get("run_id"):
            self.run_id: str = state["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            logged = self.client.get_run(self.run_id).data.params
            for key, value in params.items():
                if key not in logged:
                    self.client.log_param(self.run_id, key, value)
                elif logged[key] != value:
                    self.client.set_tag(self.run_id, f"resumed.{key}", value)
        else:
            experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "rlvr"
            found = self.client.get_experiment_by_name(experiment)
            if found is not None:
                experiment_id = found.experiment_id
            else:
                local = "MLFLOW_TRACKING_URI" not in os.environ  # artifacts beside the store
                location = (run.run_dir.resolve() / "mlartifacts").as_uri() if local else None
                experiment_id = self.client.create_experiment(experiment,
                                                              artifact_location=location)
            created = self.client.create_run(experiment_id, run_name=run.name,
                                             tags={"rlvr.kind": run.kind,
                                                   "rlvr.run_dir": str(run.run_dir.resolve())})
            self.run_id = created.info.run_id
            state_path.write_text(json.dumps({"run_id": self.run_id,
                                              "tracking_uri": self.uri}) + "\n")
            from mlflow.entities import Param

            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in params.items()])

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        """One ``log_batch`` with every finite metric at ``step``."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(metric_name(k), float(v), now, step) for k, v in metrics.items()
                 if v is not None]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def log_table(self, step: int, name: str, table: Table) -> None:
        """The table as a JSON artifact ``tables/<name>/step_<step>.json``."""
        self.client.log_dict(self.run_id, table.as_dict(),
                             f"tables/{metric_name(name)}/step_{step:06d}.json")

    def log_artifact(self, path: Path, name: str) -> None:
        """A file under ``<name>/``, a folder's files under ``<name>/``."""
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), artifact_path=name)
        else:
            self.client.log_artifact(self.run_id, str(path), artifact_path=name)

    def close(self, summary: Mapping[str, float], *, failed: bool = False) -> None:
        """End the MLflow run: FINISHED, or FAILED when the rlvr run raised."""
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")
