"""Experiment tracking: the loggers a run writes to (``trainer.loggers``).

``metrics.jsonl`` always; TensorBoard by default; MLflow (``rlvr[mlflow]``) and Weights & Biases
(``rlvr[wandb]``) when listed; a plugin adds its own with ``register_logger`` (``registry``).
Every logger implements the small ``Logger`` protocol (``base``); ``LoggerSet`` (``fanout``)
calls them and disables one that fails, so training never stops for a tracker.
"""

from rlvr.tracking.base import Logger, LoggerFactory, RunInfo, Table, flatten_params
from rlvr.tracking.fanout import LoggerSet
from rlvr.tracking.registry import (
    LOGGERS,
    LoggerSpec,
    build_logger,
    check_loggers,
    register_logger,
)
from rlvr.tracking.tables import episode_table, passk_table

__all__ = [
    "LOGGERS",
    "Logger",
    "LoggerFactory",
    "LoggerSet",
    "LoggerSpec",
    "RunInfo",
    "Table",
    "build_logger",
    "check_loggers",
    "episode_table",
    "flatten_params",
    "passk_table",
    "register_logger",
]
