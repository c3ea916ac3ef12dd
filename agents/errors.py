"""Typed errors of the ``agents`` package.

Every error the agent raises on purpose is an ``AgentError``; each also derives from the builtin
exception a Python user would expect (``ValueError`` for bad arguments, ``RuntimeError`` for a
broken engine, ``ImportError`` for a missing optional package). Messages name the offending field
or parameter and the allowed values. A bad config field raises a subclass of the project's
``ConfigError`` (what the check kit ``rlvr.config_checks`` raises) whose ``key`` names the field,
so a config loader re-raises it under the dotted key the user typed.
"""

from __future__ import annotations

from rlvr.errors import ConfigError

__all__ = [
    "AgentError",
    "ChatTemplateError",
    "EngineClosedError",
    "EngineConfigError",
    "EngineAbortedError",
    "EngineError",
    "EnvContractError",
    "MissingDependencyError",
    "RequestError",
    "RunnerConfigError",
    "SamplingParamsError",
    "SGLangError",
    "TokenMismatchError",
    "VLLMError",
    "WeightUpdateError",
]


class AgentError(Exception):
    """Base class of every error raised on purpose by ``agents``."""


class SamplingParamsError(AgentError, ConfigError):
    """A sampling parameter is out of its allowed range (the message and ``key`` name it)."""


class RunnerConfigError(AgentError, ConfigError):
    """A runner config field or an episode spec is invalid (the message names it).

    ``key``, when given, is the field's name within ``RunnerConfig`` (``max_turns must be ...``):
    the training config's loader re-raises it as ``rollout.runner.max_turns``.
    """


class EngineConfigError(AgentError, ConfigError):
    """An engine option is invalid (the message names it and the allowed values).

    ``key``, when given, is the option's name within its options class, and the message starts
    with it (``threads must be ...``): a config loader re-raises it under the section's dotted
    path (``rollout.transformers.threads`` in training, ``transformers.threads`` in ``rlvr eval``).
    """


class RequestError(AgentError, ValueError):
    """A ``generate`` request is malformed (empty prompt, token id out of the vocabulary)."""


class EngineError(AgentError, RuntimeError):
    """The rollout engine failed to produce a completion."""


class EngineClosedError(EngineError):
    """``generate`` or ``update_weights`` was called after ``close()``."""


class EngineAbortedError(EngineError):
    """The engine aborted one request; the runner ends that episode with reason "error"."""


class SGLangError(EngineError):
    """An SGLang server rejected a request, failed to start, or answered malformed JSON."""


class VLLMError(EngineError):
    """A vLLM server rejected a request, failed to start, or cannot do what rlvr needs."""


class WeightUpdateError(AgentError, ValueError):
    """Weights given to ``update_weights`` do not match the model (unknown name, bad shape)."""


class MissingDependencyError(AgentError, ImportError):
    """An optional package (e.g. ``sglang``) is needed for what was asked but is not installed."""


class ChatTemplateError(AgentError, ValueError):
    """The tokenizer's chat template is not prefix-stable, so token deltas would drift."""


class EnvContractError(AgentError, ValueError):
    """An env broke the TextEnv contract (a malformed reward span, a non-finite reward).

    The runner ends that episode with reason "error", like an env exception.
    """


class TokenMismatchError(AgentError, AssertionError):
    """The token-exactness checker found the learner's sequence differs from the engine's."""
