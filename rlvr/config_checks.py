"""One way to validate a config field, shared by every config dataclass of the project.

A leaf: it imports nothing of the project but ``rlvr.errors``, so every package (the learner,
``rlvr.config``, ``rlvr.agents``, ``rlvr.envs``, ``rlvr.verifiers``) may use it (the import
contracts in pyproject.toml keep it so).

A numeric field declares its range next to its default (``lr: float = bounded(1e-6, gt=0)``)
and ``check_fields(self)`` (in each config's ``__post_init__``, or the one ``Checked`` gives)
checks it, along with every ``bool``, ``Literal`` and nested-dataclass field's annotation.
What spans several fields or needs a registry (an estimator name) is checked after that,
raising the same ``ConfigError`` (``check_choice`` for names), so messages have one shape::

    lr must be > 0; got 0.0
    mixed_precision: unknown value 'fp16'; allowed: auto, bf16, fp32

Each ``ConfigError`` carries the field's ``key``: ``rlvr.config.loader.from_dict`` re-raises it
under the dotted path of the component (``actor.optim.lr must be > 0; got 0.0``), so a message
names the key the user typed and no class name. A package with errors of its own passes its
subclass of ``ConfigError`` as ``error`` (``check_fields(self, error=RunnerConfigError)``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Iterable
from typing import Any, Literal, TypeVar

from rlvr.errors import ConfigError

T = TypeVar("T")


def bounded(
    default: T, *, gt: float | None = None, ge: float | None = None, lt: float | None = None,
    le: float | None = None,
) -> T:
    """A dataclass field with ``default`` that ``check_fields`` keeps within the bounds.

    ``gt``/``lt`` are exclusive bounds, ``ge``/``le`` inclusive ones. The field's annotation
    says the rest: an ``int`` field must hold an integer, an ``X | None`` field may be None.
    """
    bounds = {"gt": gt, "ge": ge, "lt": lt, "le": le}
    return typing.cast(T, dataclasses.field(default=default, metadata={"bounds": bounds}))


def range_text(bounds: dict[str, float | None]) -> str:
    """A ``bounded`` range as written in messages and the reference: ``(0, 1]``, ``>= 1``, ``< 2``.

    "" when it has no bound.
    """
    gt, ge, lt, le = bounds["gt"], bounds["ge"], bounds["lt"], bounds["le"]
    low, high = (gt if gt is not None else ge), (lt if lt is not None else le)
    if low is not None and high is not None:
        left, right = "(" if gt is not None else "[", ")" if lt is not None else "]"
        return f"{left}{low:g}, {high:g}{right}"
    if low is not None:
        return f"{'>' if gt is not None else '>='} {low:g}"
    return f"{'<' if lt is not None else '<='} {high:g}" if high is not None else ""


def _check_bounds(key: str, value: object, bounds: dict[str, float | None], *, integer: bool,
                  optional: bool, error: type[ConfigError]) -> None:
    """The ``bounded`` check of one field (``integer``/``optional`` from its annotation)."""
    if optional and value is None:
        return
    null = " or null" if optional else ""
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        kind = "an integer" if integer else "a number"
        raise error(f"{key} must be {kind}{null}; got {value!r}", key=key)
    if not math.isfinite(value):
        raise error(f"{key} must be a finite number{null}; got {value!r}", key=key)
    gt, ge, lt, le = bounds["gt"], bounds["ge"], bounds["lt"], bounds["le"]
    if ((gt is not None and not value > gt) or (ge is not None and not value >= ge)
            or (lt is not None and not value < lt) or (le is not None and not value <= le)):
        text = range_text(bounds)
        phrase = f"in {text}" if text.startswith(("(", "[")) else text or "a number"
        raise error(f"{key} must be {phrase}{null}; got {value!r}", key=key)


def check_choice(key: str, value: object, allowed: Iterable[object], *,
                 error: type[ConfigError] = ConfigError) -> None:
    """Raise ``error`` (a ``ConfigError``) unless ``value`` is one of ``allowed``.

    The message names ``key``, the allowed values and the close matches.
    """
    options = list(allowed)
    if value in options:
        return
    names = sorted(str(a) for a in options)
    message = f"{key}: unknown value {value!r}; allowed: {', '.join(names)}"
    close = difflib.get_close_matches(str(value), names, n=3)
    if close:
        message += f". Did you mean {' or '.join(repr(c) for c in close)}?"
    raise error(message, key=key)


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    """The resolved annotations of the dataclass ``cls`` (computed once per class)."""
    if cls not in _FIELD_TYPES:
        _FIELD_TYPES[cls] = typing.get_type_hints(cls)
    return _FIELD_TYPES[cls]


def _check_type(key: str, value: object, tp: Any, error: type[ConfigError]) -> None:
    """The annotation-level checks of one field: bool, Literal and dataclass fields."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            _check_type(key, value, rest[0], error)
        return
    if tp is bool and not isinstance(value, bool):
        raise error(f"{key} must be true or false; got {value!r}", key=key)
    if typing.get_origin(tp) is Literal:
        check_choice(key, value, args, error=error)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type) and not isinstance(value, tp):
        raise error(f"{key} must be of type {tp.__name__}; got {value!r}", key=key)


class Checked:
    """A base for config dataclasses whose only checks are ``check_fields``, on construction."""

    def __post_init__(self) -> None:
        check_fields(self)


def check_fields(config: Any, *, error: type[ConfigError] = ConfigError) -> None:
    """Check every field of the dataclass ``config`` against its annotation and ``bounded`` range.

    Raises:
        ConfigError: ``error``, for the first bad field (its ``key`` is the field's name).
    """
    types_ = _field_types(type(config))
    for f in dataclasses.fields(config):
        value, tp = getattr(config, f.name), types_[f.name]
        _check_type(f.name, value, tp, error)
        bounds = f.metadata.get("bounds")
        if bounds is not None:
            integer = tp is int or (typing.get_origin(tp) in (typing.Union, types.UnionType)
                                    and int in typing.get_args(tp))
            _check_bounds(f.name, value, bounds, integer=integer,
                          optional=type(None) in typing.get_args(tp), error=error)


__all__ = ["Checked", "bounded", "check_choice", "check_fields", "range_text"]
