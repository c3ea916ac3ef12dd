"""Typed errors of the ``rlvr`` package.

Every error the core raises for bad input is one of these, so callers can catch
``RlvrError`` (or the specific subclass) instead of parsing messages. Each also derives from
the builtin exception a Python user would expect (``ValueError``), so ``except ValueError``
keeps working. Messages name the offending field or parameter and the allowed values.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "BatchError",
    "ConfigError",
    "DistributedSetupError",
    "DuplicateNameError",
    "InsufficientDataError",
    "RegistryError",
    "RlvrError",
    "RunStoppedError",
    "ShapeError",
    "UnknownNameError",
    "WeightSyncError",
    "unknown_name",
]


class RlvrError(Exception):
    """Base class of every error raised on purpose by ``rlvr``."""


class ConfigError(RlvrError, ValueError):
    """A configuration value or function parameter is out of its allowed range.

    ``key``, when given, is the offending field's dotted name relative to the config object
    that raised, and the message starts with it (``lr must be > 0; got 0``). ``under(prefix)``
    is the same error seen from an enclosing config (``actor.optim.lr must be > 0; got 0``):
    the loader re-raises through it, so a message names the key as the user typed it.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def under(self, prefix: str) -> ConfigError:
        """This error for the field ``<prefix>.<key>`` (itself when it names no key)."""
        if self.key is None or not prefix:
            return self
        return ConfigError(f"{prefix}.{self}", key=f"{prefix}.{self.key}")


class BatchError(RlvrError, ValueError):
    """A trajectory or rollout batch is malformed (the message names the field and row)."""


class DistributedSetupError(RlvrError, RuntimeError):
    """The process group could not be created (e.g. no usable network interface for gloo)."""


class WeightSyncError(RlvrError, RuntimeError):
    """The rollout engine's logprobs drifted from the learner's after a weight sync."""


class RunStoppedError(RlvrError, RuntimeError):
    """The run stopped on purpose: the env produced no valid episode, the run folder is taken.

    The message says why and what to do; ``rlvr train`` prints it and exits with status 1.
    """


class ShapeError(RlvrError, ValueError):
    """Tensors do not have the shapes a function requires (the message gives both shapes)."""


class InsufficientDataError(RlvrError, ValueError):
    """A statistic needs more valid (unmasked) elements than it was given."""


class RegistryError(RlvrError, ValueError):
    """Base class of registry errors (unknown or duplicate names)."""


class UnknownNameError(RegistryError):
    """A name is not registered; the message lists the known names and close matches."""


class DuplicateNameError(RegistryError):
    """A name is registered twice."""


def unknown_name(kind: str, name: object, known: Iterable[str]) -> UnknownNameError:
    """Build the error for a name that is not among ``known``, with close-match suggestions.

    Args:
        kind: what the name designates, used in the message, e.g. ``"advantage estimator"``.
        name: the name that was asked for.
        known: the valid names.

    Returns:
        An ``UnknownNameError`` (to ``raise``) whose message lists the known names and, when
        ``difflib`` finds any, the closest ones.
    """
    names = sorted(known)
    message = f"unknown {kind} {name!r}; known: {', '.join(names) or '(none)'}"
    close = difflib.get_close_matches(str(name), names, n=3)
    if close:
        message += f". Did you mean {' or '.join(repr(c) for c in close)}?"
    return UnknownNameError(message)
