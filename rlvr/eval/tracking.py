"""``rlvr eval`` to the run's trackers: the pass@k table, the report and its files.

``log_results(results, out_dir, loggers)`` opens one tracked run named after ``out_dir`` (the
eval's output folder), with the eval config as params, and logs: every numeric metric of every
checkpoint and env at step 0 (``<label>/<env>/<metric>``, e.g. ``export/overall/pass@1``), the
table ``eval/pass_at_k`` (one row per checkpoint and env), and report.md, results.json,
episodes.html and plots/ as files. A logger that fails is reported and skipped, as in training.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.tracking import LoggerSet, RunInfo, build_logger, check_loggers, passk_table

__all__ = ["log_results"]


def eval_metrics(results: Mapping[str, Any]) -> dict[str, float]:
    """``{"<label>/<env>/<metric>": float}`` over every checkpoint of ``results``."""
    flat: dict[str, float] = {}
    for model in results.get("models", []):
        for env, metrics in model.get("metrics", {}).items():
            for name, value in metrics.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    flat[f"{model['label']}/{env}/{name}"] = float(value)
    return flat


def log_results(results: Mapping[str, Any], out_dir: Path, loggers: Sequence[str],
                report: Callable[[str], Any] = print) -> dict[str, str]:
    """Log an evaluation's results to ``loggers`` (names of ``rlvr.tracking.LOGGERS``).

    Returns:
        The loggers that failed: name -> what they were doing and the error.

    Raises:
        ConfigError: an unknown logger, or one whose package is missing (naming the extra).
    """
    check_loggers(loggers, key="loggers")
    run = RunInfo(run_dir=out_dir, name=out_dir.resolve().name,
                  config=dict(results.get("config", {})), kind="eval")
    fanout = LoggerSet({}, report=report)
    for name in dict.fromkeys(loggers):
        if name == "jsonl":  # results.json is the eval's record
            continue
        try:
            fanout.loggers[name] = build_logger(name, run)
        except Exception as err:  # noqa: BLE001 - a tracker that cannot start is skipped
            fanout.fail(name, "starting", err)
    fanout.log_metrics(0, eval_metrics(results))
    fanout.log_table(0, "eval/pass_at_k", passk_table(results))
    for name in ("report.md", "results.json", "episodes.html", "plots"):
        fanout.log_artifact(out_dir / name, "eval_report")
    summary = {k: v for k, v in eval_metrics(results).items() if k.endswith("/overall/pass@1")}
    fanout.close(summary)
    return fanout.failed
