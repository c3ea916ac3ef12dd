"""Environment ids in gymnasium's own registry, under the ``rlvr/`` namespace.

Importing :mod:`envs` calls :func:`register_builtins` (idempotent). Third-party packages register
their own ids with ``gymnasium.register("mypkg/MyTask-v0", entry_point=...)`` at import time; the
CLI's ``--import mypkg`` goes through :func:`import_plugins`.

:func:`make` wraps ``gymnasium.make``: an unknown id gets close-name suggestions and a bad keyword
argument gets an error naming it and the accepted ones. ``gymnasium.make`` adds its usual
wrappers (``OrderEnforcing`` and, on the first reset/step, the passive env checker); rlvr envs
pass that checker, so there is no need for ``disable_env_checker``. Reach ``reset``/``step``
through the wrapper as usual; the tools' schemas come in ``reset``'s ``info["tools"]``, and
attributes of the env itself through ``env.unwrapped`` or ``env.get_wrapper_attr(name)``.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
import typing
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import gymnasium
from gymnasium.envs.registration import EnvSpec, load_env_creator

from rlvr.envs.base import TextEnv
from rlvr.envs.errors import EnvArgumentError, PluginImportError, UnknownEnvError

NAMESPACE = "rlvr"

BUILTIN_ENVS: dict[str, str] = {
    "rlvr/Math-v0": "rlvr.envs.math_env:MathEnv",
    "rlvr/Code-v0": "rlvr.envs.code_env:CodeEnv",
    "rlvr/ToolUse-v0": "rlvr.envs.tool_env:ToolUseEnv",
    "rlvr/CompactToolUse-v0": "rlvr.envs.compact_tool_env:CompactToolUseEnv",
    "rlvr/ReasoningGym-v0": "rlvr.envs.reasoning_gym_env:ReasoningGymEnv",
    "rlvr/Verifiers-v0": "rlvr.envs.verifiers_env:VerifiersEnv",
    "rlvr/VerifiersHarness-v0": "rlvr.envs.verifiers_harness_env:VerifiersHarnessEnv",
    "rlvr/OpenEnv-v0": "rlvr.envs.openenv_env:OpenEnvEnv",
}
"""The built-in ids and their entry points."""

_MAKE_OPTIONS = ("max_episode_steps", "disable_env_checker", "render_mode")


def register_builtins() -> None:
    """Register the built-in ids with gymnasium (a no-op for ids already registered)."""
    for env_id, entry_point in BUILTIN_ENVS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=entry_point)


def list_envs(namespace: str | None = None) -> list[str]:
    """Ids of the registered text environments, sorted.

    Args:
        namespace: only ids in this namespace (e.g. ``"rlvr"``); None for all.

    An id counts when its entry point resolves to a :class:`~rlvr.envs.TextEnv` subclass (ids whose
    entry point cannot be imported are skipped).
    """
    ids = []
    for env_id, spec in gymnasium.registry.items():
        if namespace is not None and spec.namespace != namespace:
            continue
        if _is_text_env(spec):
            ids.append(env_id)
    return sorted(ids)


def make(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """``gymnasium.make`` with helpful errors.

    Args:
        env_id: a registered id, e.g. ``"rlvr/Math-v0"``.
        **kwargs: the env's constructor arguments, plus ``gymnasium.make``'s own
            (``max_episode_steps``, ``disable_env_checker``, ``render_mode``).

    Raises:
        UnknownEnvError: the id is not registered (the message suggests close names).
        EnvArgumentError: a keyword is not accepted (the message lists the accepted ones).
    """
    spec = _spec_or_error(env_id)
    env_kwargs = {k: v for k, v in kwargs.items() if k not in _MAKE_OPTIONS}
    accepted = _accepted_kwargs(spec)
    if accepted is not None:
        for name in env_kwargs:
            if name not in accepted:
                raise EnvArgumentError(_bad_kwarg_message(env_id, name, accepted))
    try:
        return gymnasium.make(env_id, **kwargs)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc) and accepted is None:
            names = _signature_names(spec) or []
            raise EnvArgumentError(f"{env_id}: {exc}; accepted: {names}") from exc
        raise


def import_plugins(modules: Iterable[str]) -> list[ModuleType]:
    """Import modules so that their ``gymnasium.register`` calls run (the CLI's ``--import``).

    Args:
        modules: importable module names, e.g. ``["mypkg.envs"]``.

    Raises:
        PluginImportError: naming the module that failed and why.
    """
    imported = []
    for name in modules:
        try:
            imported.append(_import_plugin(name))
        except Exception as exc:
            raise PluginImportError(
                f"--import {name!r} failed: {type(exc).__name__}: {exc}. The module must be "
                "importable (installed, on PYTHONPATH, or under the current directory) and "
                "register its envs at import time"
            ) from exc
    return imported


def _import_plugin(name: str) -> ModuleType:
    """Import ``name``; a top-level package or module in the current directory is found too.

    ``python -m`` puts the current directory on ``sys.path``; the ``rlvr`` console script does
    not, so ``--import examples.calculator_agent`` from a checkout's root would fail. When the
    top-level name is not importable but exists in the current directory, the directory is
    appended to ``sys.path`` (after installed packages, so it shadows nothing) and the import
    retried.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top = name.split(".", 1)[0]
        cwd = os.getcwd()
        here = os.path.isdir(os.path.join(cwd, top)) or os.path.isfile(
            os.path.join(cwd, f"{top}.py"))
        if exc.name != top or not here or cwd in sys.path:
            raise
        sys.path.append(cwd)
        return importlib.import_module(name)


def _spec_or_error(env_id: str) -> EnvSpec:
    if isinstance(env_id, str) and env_id in gymnasium.registry:
        return gymnasium.registry[env_id]
    candidates = list_envs() or list(gymnasium.registry)
    close = difflib.get_close_matches(str(env_id), candidates, n=3, cutoff=0.5)
    if not close:
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[m] for m in difflib.get_close_matches(str(env_id).lower(), lowered, n=3)]
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownEnvError(
        f"environment {env_id!r} is not registered.{hint} Registered text envs: {candidates}. "
        "A third-party env must be imported first (rlvr.envs.import_plugins / --import)."
    )


def _accepted_kwargs(spec: EnvSpec) -> set[str] | None:
    """Keyword names the entry point accepts, or None when it takes ``**kwargs`` we cannot see."""
    names = _signature_names(spec)
    return None if names is None else set(names)


def _signature_names(spec: EnvSpec) -> list[str] | None:
    """Keyword names along the constructor chain, following ``**kwargs`` up the MRO."""
    try:
        creator = _creator(spec)
    except Exception:
        return None
    functions = (
        [k.__dict__["__init__"] for k in inspect.getmro(creator) if "__init__" in k.__dict__]
        if inspect.isclass(creator)
        else [creator]
    )
    names: list[str] = []
    for function in functions:
        if function is object.__init__:
            break
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            return None
        names += [
            p.name
            for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name != "self"
            and p.name not in names
        ]
        rest = [p for p in parameters if p.kind is p.VAR_KEYWORD]
        if not rest:
            return names
        typed = _typed_kwargs(function, rest[0].name)
        if typed is not None:  # **kwargs: Unpack[SomeTypedDict] names exactly its keys
            return names + [k for k in typed if k not in names]
    return None


def _typed_kwargs(function: Any, name: str) -> list[str] | None:
    """The keys of ``**name: Unpack[TD]`` in ``function``'s signature, or None."""
    try:
        hint = typing.get_type_hints(function, include_extras=True).get(name)
    except Exception:
        return None
    if typing.get_origin(hint) is not typing.Unpack:
        return None
    return list(typing.get_type_hints(typing.get_args(hint)[0]))


def _bad_kwarg_message(env_id: str, name: str, accepted: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(accepted), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (
        f"{env_id} got an unexpected parameter {name!r}.{hint} Accepted parameters: "
        f"{sorted(accepted)}"
    )


def _creator(spec: EnvSpec) -> Any:
    entry = spec.entry_point
    return load_env_creator(entry) if isinstance(entry, str) else entry


def _is_text_env(spec: EnvSpec) -> bool:
    try:
        creator = _creator(spec)
    except Exception:
        return False
    return inspect.isclass(creator) and issubclass(creator, TextEnv)
