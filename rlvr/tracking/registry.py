"""Loggers by name: the built-ins (jsonl, tensorboard, mlflow, wandb) and any a plugin adds.

``trainer.loggers`` names entries of ``LOGGERS``. A plugin module (imported through
``env.imports`` before the config is checked) registers another::

    from rlvr.tracking import LoggerSpec, register_logger

    register_logger("swanlab", LoggerSpec(factory=SwanLabLogger, package="swanlab"))

and ``trainer.loggers=[jsonl,swanlab]`` uses it; the trainer is not touched. A logger whose
package is missing is refused when the config is checked, naming the package and the extra that
installs it (``pip install 'rlvr[mlflow]'``).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass

from rlvr.algorithms.registry import Registry
from rlvr.errors import ConfigError
from rlvr.tracking.base import Logger, LoggerFactory, RunInfo

__all__ = ["LOGGERS", "LoggerSpec", "build_logger", "check_loggers", "register_logger"]


@dataclass(frozen=True)
class LoggerSpec:
    """How to build one logger.

    Attributes:
        factory: ``RunInfo -> Logger``, or ``"module:attribute"`` imported when first built
            (the built-ins' way: their packages load only when used).
        package: the import name the logger needs (``"mlflow"``), checked with the config;
            None when it needs nothing beyond rlvr.
        extra: the rlvr extra that installs ``package`` (``"mlflow"`` for ``rlvr[mlflow]``).
        background: build and call it on a thread of its own (``rlvr.tracking.background``):
            for a logger whose calls wait on a store, a server or a service (MLflow, W&B).
    """

    factory: LoggerFactory | str
    package: str | None = None
    extra: str | None = None
    background: bool = False

    def build(self, run: RunInfo) -> Logger:
        """Build the logger for ``run`` (its ``Background`` wrapper when ``background``)."""
        factory = self.factory
        if isinstance(factory, str):
            module, _, attribute = factory.partition(":")
            factory = getattr(importlib.import_module(module), attribute)
        if self.background:
            from rlvr.tracking.background import Background

            made = factory
            return Background(lambda: made(run), name=f"rlvr-logger-{run.name}")
        return factory(run)


LOGGERS: Registry[LoggerSpec] = Registry("logger")


def register_logger(name: str, spec: LoggerSpec) -> None:
    """Add a logger under ``name`` (``DuplicateNameError`` when taken; ``LOGGERS.remove``)."""
    LOGGERS.add(name, spec)


def check_loggers(names: Sequence[str], key: str = "trainer.loggers") -> None:
    """Refuse unknown logger names and loggers whose package is not installed.

    Raises:
        ConfigError: naming ``key``, the logger and, for a missing package, how to install it.
    """
    for name in names:
        if name not in LOGGERS:
            raise ConfigError(f"{key}: unknown logger {name!r}; allowed: "
                              f"{', '.join(LOGGERS)} (a plugin registers more with "
                              "rlvr.tracking.register_logger)", key=key)
        spec = LOGGERS[name]
        if spec.package is not None and importlib.util.find_spec(spec.package) is None:
            how = f"pip install 'rlvr[{spec.extra}]'" if spec.extra else \
                f"pip install {spec.package}"
            raise ConfigError(f"{key}: the {name} logger needs the {spec.package} package, "
                              f"which is not installed; {how}", key=key)


def build_logger(name: str, run: RunInfo) -> Logger:
    """The logger ``name`` for ``run``."""
    return LOGGERS[name].build(run)


register_logger("jsonl", LoggerSpec(factory="rlvr.tracking.jsonl:JsonlLogger"))
register_logger("tensorboard", LoggerSpec(factory="rlvr.tracking.tensorboard:TensorBoardLogger",
                                          package="tensorboard"))
register_logger("mlflow", LoggerSpec(factory="rlvr.tracking.mlflow_logger:MlflowLogger",
                                     package="mlflow", extra="mlflow", background=True))
register_logger("wandb", LoggerSpec(factory="rlvr.tracking.wandb_logger:WandbLogger",
                                    package="wandb", extra="wandb", background=True))
