"""The logger registry and the failure rule, with the real trainer (no tracker package needed)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from tracking_helpers import train

from rlvr.config import load_config
from rlvr.errors import ConfigError, DuplicateNameError
from rlvr.metrics import read_jsonl
from rlvr.tracking import (
    LOGGERS,
    LoggerSpec,
    RunInfo,
    Table,
    check_loggers,
    flatten_params,
    register_logger,
)
from rlvr.tracking.background import Background
from rlvr.tracking.mlflow_logger import metric_name

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


class Recorder:
    """A plugin's logger: keeps what it is told."""

    made: list[Recorder] = []

    def __init__(self, run: RunInfo) -> None:
        self.run, self.steps, self.tables, self.artifacts = run, [], [], {}
        self.summary: Mapping[str, float] | None = None
        Recorder.made.append(self)

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        self.steps.append(step)

    def log_table(self, step: int, name: str, table: Table) -> None:
        self.tables.append((step, name, table))

    def log_artifact(self, path: Path, name: str) -> None:
        self.artifacts[name] = path

    def close(self, summary: Mapping[str, float], *, failed: bool = False) -> None:
        self.summary = summary


class FullDisk(Recorder):
    """A plugin's logger whose disk fills up at step 2."""

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        if step >= 2:
            raise OSError(28, "No space left on device")
        super().log_metrics(step, metrics)


@pytest.fixture
def plugins():
    Recorder.made = []
    register_logger("recorder", LoggerSpec(factory=Recorder))
    register_logger("fulldisk", LoggerSpec(factory=FullDisk))
    yield Recorder
    LOGGERS.remove("recorder")
    LOGGERS.remove("fulldisk")


def test_default_loggers_are_kept_and_jsonl_is_always_on():
    config = load_config(CONFIGS / "quickstart.yaml")
    assert config.trainer.loggers == ("jsonl", "tensorboard")
    off = load_config(CONFIGS / "quickstart.yaml", ["trainer.loggers=[tensorboard]",
                                                    "trainer.tensorboard=false"])
    assert off.trainer.active_loggers() == ["jsonl"]


def test_unknown_and_missing_loggers_are_refused_naming_the_key_and_extra():
    with pytest.raises(ConfigError, match=r"^trainer\.loggers: unknown logger 'mlflw'.*mlflow"):
        load_config(CONFIGS / "quickstart.yaml", ["trainer.loggers=[jsonl,mlflw]"])
    register_logger("absent", LoggerSpec(factory=Recorder, package="rlvr_no_such_package",
                                         extra="absent"))
    try:
        with pytest.raises(ConfigError, match=r"the absent logger needs the "
                           r"rlvr_no_such_package package.*pip install 'rlvr\[absent\]'"):
            check_loggers(["jsonl", "absent"])
    finally:
        LOGGERS.remove("absent")
    with pytest.raises(DuplicateNameError):
        register_logger("mlflow", LoggerSpec(factory=Recorder))


def test_flattened_params_and_mlflow_metric_names():
    assert flatten_params({"actor": {"optim": {"lr": 1e-6}}, "trainer": {"loggers": ["jsonl"]},
                           "env": {"kwargs": {}}}) == {
        "actor.optim.lr": 1e-6, "trainer.loggers": ["jsonl"], "env.kwargs": {}}
    assert metric_name("eval/overall/pass@1") == "eval/overall/pass_at_1"
    assert metric_name("eval/arith+x/maj@4") == "eval/arith_x/maj_at_4"


def test_a_background_logger_keeps_the_order_and_raises_its_error_in_the_caller(tmp_path):
    Recorder.made = []
    run = RunInfo(run_dir=tmp_path, name="bg")
    ok = Background(lambda: Recorder(run))
    for step in (1, 2, 3):
        ok.log_metrics(step, {"reward/mean": 0.5})
    ok.close({"eval/accuracy": 1.0})
    assert Recorder.made[0].steps == [1, 2, 3] and Recorder.made[0].summary == {
        "eval/accuracy": 1.0}
    full = Background(lambda: FullDisk(run))
    full.log_metrics(1, {})
    full.log_metrics(2, {})  # fails on the worker
    with pytest.raises(RuntimeError, match=r"^logging step 2: OSError: .*No space left"):
        full.close({})
    assert Recorder.made[1].steps == [1] and Recorder.made[1].summary is None

    def broken() -> Recorder:
        raise ConnectionError("server down")

    never = Background(broken)
    never._thread.join()
    with pytest.raises(RuntimeError, match="^starting: ConnectionError: server down"):
        never.log_metrics(1, {})


@pytest.mark.slow
def test_plugin_loggers_get_the_run_and_a_failing_one_is_disabled_once(tmp_path, plugins):
    """Registered plugin loggers are used by name and get metrics, episode tables, artifacts
    and the summary; one that raises (a full disk) is reported once, never called again,
    training finishes, and the exit summary names it."""
    lines: list[str] = []
    result = train(tmp_path, "trainer.loggers=[jsonl,recorder,fulldisk]", "trainer.plot=true",
                   "trainer.export_at_end=true", "eval.show_episodes=2", log=lines.append)
    made, broken = plugins.made
    assert isinstance(broken, FullDisk)
    assert made.run.name == tmp_path.name and made.run.config["trainer"]["steps"] == 2
    assert made.steps == [0, 1, 2] and broken.steps == [0, 1]  # step 0: accuracy before RL
    assert result.steps == 2
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")
            if "reward/mean" in r] == [1, 2]  # jsonl went on
    warnings = [line for line in lines if "fulldisk logger failed" in line]
    assert len(warnings) == 1 and "No space left on device" in warnings[0]
    assert list(result.failed_loggers) == ["fulldisk"]
    assert "logging step 2" in result.failed_loggers["fulldisk"]
    assert broken.summary is None  # disabled: not even closed
    assert "logger fulldisk failed and was disabled" in lines[-1]

    assert [(s, n) for s, n, _ in made.tables] == [(0, "eval/episodes"), (1, "eval/episodes"),
                                                   (2, "eval/episodes")]
    table = made.tables[0][2]
    assert {"prompt", "response", "reward", "passed", "verdict"} <= set(table.columns)
    assert len(table.rows) == 2  # eval.tasks=2
    assert made.artifacts["model"] == result.export_dir
    assert made.artifacts["curves"] == result.curves_path
    assert made.artifacts["episodes"] == result.episodes_path
    assert made.summary is not None and made.summary["eval/accuracy"] == result.final_accuracy


def test_rlvr_eval_takes_log_to_beside_its_config_keys():
    from rlvr.cli import eval_args

    args, config = eval_args(["--model", "m", "--suite", "arith-smoke", "--log-to", "mlflow",
                              "--log-to", "wandb"])
    assert args.loggers == ["mlflow", "wandb"] and config.suite == "arith-smoke"
