"""Typed errors of the ``verifiers`` package.

A verifier never raises because of bad *model output*: it returns a ``Verdict`` saying what went
wrong. These errors are for programmer mistakes (bad arguments), plus internal signals that the
verifiers catch and turn into verdicts. Argument errors are the project's ``ConfigError`` (the
one error the check kit ``rlvr.config_checks`` raises), so also a ``ValueError``: ``except
ValueError`` keeps working.
"""

from __future__ import annotations

from rlvr.errors import ConfigError

__all__ = [
    "AnswerParseError",
    "InvalidArgumentError",
    "SandboxUnavailableError",
    "VerifierError",
    "VerifierTimeout",
]


class VerifierError(Exception):
    """Base class of every error raised on purpose by ``verifiers``."""


class InvalidArgumentError(VerifierError, ConfigError):
    """A function parameter or config field has the wrong type or is out of its allowed range.

    ``key``, when given, is the field's name (the message starts with it).
    """


class AnswerParseError(VerifierError):
    """An answer string could not be read (unknown syntax, too large, too deeply nested).

    Internal: verifiers catch it and return a ``parse_error`` verdict.
    """


class VerifierTimeout(VerifierError):
    """A check ran past its wall-clock (or memory) budget.

    Internal: verifiers catch it and return a ``timeout`` verdict.
    """


class SandboxUnavailableError(VerifierError):
    """The code sandbox cannot be built here (not root, no bwrap/unshare, or it failed to start)."""
