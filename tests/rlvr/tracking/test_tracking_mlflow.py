"""MLflow with the real mlflow package: its embedded store and a real ``mlflow server``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from tracking_helpers import require, train

from rlvr.metrics import read_jsonl


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _steps(client, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def _artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    return {f.path for f in client.list_artifacts(run_id, path)}


@pytest.mark.slow
def test_local_store_run_params_metrics_artifacts_resume_and_eval(tmp_path, monkeypatch):
    require("mlflow")
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "ml-run"
    first = train(out, "trainer.loggers=[jsonl,mlflow]", "trainer.export_at_end=true",
                  "trainer.plot=true")
    assert first.failed_loggers == {}
    client = _client(f"sqlite:///{out}/mlflow.db")  # the default: a store in the run folder
    run_id = json.loads((out / "mlflow_run.json").read_text())["run_id"]
    run = client.get_run(run_id)
    assert run.info.run_name == "ml-run" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "rlvr"
    params = run.data.params
    assert params["trainer.steps"] == "2" and params["rollout.group_size"] == "2"
    assert "actor.optim.lr" in params and params["trainer.loggers"] == '["jsonl", "mlflow"]'
    assert _steps(client, run_id, "reward/mean") == [1, 2]
    assert _steps(client, run_id, "eval/accuracy") == [0, 1, 2]
    assert _steps(client, run_id, "eval/heldout/pass_at_1") == [0, 1, 2]
    assert {"curves", "model", "config", "tables"} <= _artifacts(client, run_id)
    assert "model/config.json" in _artifacts(client, run_id, "model")
    assert "tables/eval/episodes" in _artifacts(client, run_id, "tables/eval")

    resumed = train(out, "trainer.loggers=[jsonl,mlflow]", "trainer.steps=3",
                    "trainer.resume=true")
    assert resumed.failed_loggers == {}
    assert json.loads((out / "mlflow_run.json").read_text())["run_id"] == run_id
    assert [r.info.run_id for r in client.search_runs([run.info.experiment_id])] == [run_id]
    again = client.get_run(run_id)
    assert _steps(client, run_id, "reward/mean") == [1, 2, 3]
    assert again.data.tags["resumed.trainer.steps"] == "3" and again.info.status == "FINISHED"

    # rlvr eval logs its pass@k table and report to the same kind of store, when asked
    from rlvr.eval.evaluator import evaluate

    report = tmp_path / "eval-out"
    results = evaluate(first.export_dir, str(out / "eval_suite.yaml"), out_dir=report,
                       loggers=["mlflow"], progress=False, max_new_tokens=8)
    assert results["failed_loggers"] == {}
    store = _client(f"sqlite:///{report}/mlflow.db")
    eval_id = json.loads((report / "mlflow_run.json").read_text())["run_id"]
    eval_run = store.get_run(eval_id)
    assert eval_run.info.run_name == "eval-out" and eval_run.data.tags["rlvr.kind"] == "eval"
    pass1 = results["models"][0]["metrics"]["overall"]["pass@1"]
    assert eval_run.data.metrics["export/overall/pass_at_1"] == pass1
    files = _artifacts(store, eval_id, "eval_report")
    assert {"eval_report/report.md", "eval_report/results.json"} <= files
    assert "tables/eval/pass_at_k" in _artifacts(store, eval_id, "tables/eval")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    """A real ``mlflow server`` on 127.0.0.1 (sqlite store), killed afterwards."""
    require("mlflow")
    port = _free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path}/server.db",
         "--default-artifact-root", (tmp_path / "server-artifacts").as_uri()],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"), env=env,
        start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 400  # a loaded 2-core machine takes minutes to import it
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=5)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("mlflow server did not start: "
                            + (tmp_path / "server.log").read_text()[-2000:])
            time.sleep(1)
    yield url, proc
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
        proc.wait()


@pytest.mark.slow
def test_a_real_mlflow_server_gets_the_run_and_a_server_down_disables_the_logger(
        tmp_path, monkeypatch, mlflow_server):
    url, proc = mlflow_server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "rlvr-server-test")
    out = tmp_path / "served"
    result = train(out, "trainer.loggers=[jsonl,mlflow]", "trainer.steps=1")
    assert result.failed_loggers == {}
    client = _client(url)
    experiment = client.get_experiment_by_name("rlvr-server-test")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "served" and run.info.status == "FINISHED"
    assert run.data.params["trainer.steps"] == "1"
    assert _steps(client, run.info.run_id, "reward/mean") == [1]
    assert _steps(client, run.info.run_id, "eval/accuracy") == [0, 1]
    assert not (out / "mlflow.db").exists()  # the URI the user set, not the local store

    os.killpg(proc.pid, 9)  # the server goes down: the logger is disabled, reported once
    proc.wait()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    from rlvr.metrics import MetricsLogger

    lines: list[str] = []
    down = MetricsLogger(tmp_path / "down", total_steps=2, progress=False, plot=False,
                         loggers=["jsonl", "mlflow"], report=lines.append)
    down.log(1, {"reward/mean": 0.5})
    down.log(2, {"reward/mean": 0.75})
    down.close()
    assert list(down.failed) == ["mlflow"] and "starting: " in down.failed["mlflow"]
    assert len(lines) == 1 and "mlflow logger failed" in lines[0]
    assert [r["step"] for r in read_jsonl(tmp_path / "down" / "metrics.jsonl")] == [1, 2]
