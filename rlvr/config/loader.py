"""Load any config dataclass from YAML plus dotted ``key=value`` overrides, checking every key.

Generic: nothing here knows which config it builds. ``from_dict`` builds a dataclass from a
nested mapping; an unknown key fails with the keys allowed at that level and close-match
suggestions (and, for a key in the class's ``MOVED_KEYS``, where it lives now); a value of the
wrong type names the key and the expected type; an error a component raises about one of its
fields (``rlvr.errors.ConfigError``, or any ``ValueError`` with a ``key``, such as an engine's
``EngineConfigError``) is re-raised under the dotted path the user typed (``actor.optim.lr``).
A class may define two classmethods that see its raw mapping before any field is built:
``import_plugins_from(data)`` imports the modules the mapping names, so that what they register
(an env, an advantage estimator, a loss) is known when the fields are checked;
``defaults_from(data)`` returns the mapping with defaults that depend on other keys filled in.
A class attribute ``BELONGS_TO = {"kwargs": "id"}`` says a field's value only makes sense with
another's: when the overrides change ``id``, the file's ``kwargs`` are dropped, not merged with
the overrides' own.

Example::

    cfg = load(TrainConfig, "configs/quickstart.yaml", ["trainer.steps=20"])
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from rlvr.config_checks import check_choice
from rlvr.errors import ConfigError


def _type_name(tp: Any) -> str:
    """A readable name for a type annotation."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp`` (converting where lossless) or raise."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = typing.get_args(tp)
        if isinstance(value, bool) and ("on" if value else "off") in allowed:
            value = "on" if value else "off"  # YAML 1.1 reads a bare on/off as a boolean
        check_choice(key, value, allowed)
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        sections = [a for a in args if dataclasses.is_dataclass(a) and isinstance(a, type)]
        if isinstance(value, Mapping) and len(sections) == 1:  # an optional section: its own
            return _coerce(value, sections[0], key)             # errors name its keys
        for arg in (a for a in args if a is not type(None)):
            with contextlib.suppress(ConfigError):
                return _coerce(value, arg, key)
        raise ConfigError(f"{key}: expected {_type_name(tp)}; got {value!r}", key=key)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping of {tp.__name__} fields; got {value!r}",
                              key=key)
        return from_dict(tp, value, prefix=key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false; got {value!r}", key=key)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer; got {value!r}", key=key)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)  # YAML 1.1 reads "1e-3" as a string
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number; got {value!r}", key=key)
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string; got {value!r}", key=key)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list; got {value!r}", key=key)
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{key}: expected {len(args)} items; got {value!r}", key=key)
            return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        items = [_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping; got {value!r}", key=key)
        return dict(value)
    return value


def from_dict(cls: type[Any], data: Mapping[str, Any], *, prefix: str = "") -> Any:
    """Build the dataclass ``cls`` from a (nested) mapping, checking every key and value.

    Args:
        cls: a dataclass type; nested dataclass fields are built recursively.
        data: field values; missing fields keep their defaults.
        prefix: the dotted path of ``cls`` inside the whole config, used in messages.

    Returns:
        The instance (its ``__post_init__`` has run).

    Raises:
        ConfigError: an unknown key (the message lists the allowed keys and close matches), a
            value of the wrong type, or a value a component rejects.
    """
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    plugins = getattr(cls, "import_plugins_from", None)
    if plugins is not None:
        plugins(data)  # before any field is checked: plugins may register the names it allows
    hook = getattr(cls, "defaults_from", None)
    if hook is not None:
        data = hook(data)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            message = f"unknown config key {dotted!r}; allowed keys here: {', '.join(names)}"
            moved = getattr(cls, "MOVED_KEYS", {}).get(key)
            if moved:
                raise ConfigError(f"{message}. {dotted!r} moved: use {moved}")
            close = difflib.get_close_matches(str(key), names, n=3)
            if close:
                message += f". Did you mean {' or '.join(repr(c) for c in close)}?"
            raise ConfigError(message)
        kwargs[key] = _coerce(value, hints[key], dotted)
    try:
        return cls(**kwargs)
    except ConfigError as err:
        if err.key is None and prefix and not str(err).startswith(prefix):
            raise ConfigError(f"invalid config in {prefix!r}: {err}") from err
        if err.key is None or not prefix:
            raise
        raise err.under(prefix) from err
    except (ValueError, TypeError) as err:
        field_key = getattr(err, "key", None)  # a component's error naming its field (an engine's)
        if isinstance(field_key, str):
            raise ConfigError(str(err), key=field_key).under(prefix) from err
        where = f" in {prefix!r}" if prefix else ""
        raise ConfigError(f"invalid config{where}: {err}") from err


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """Turn ``["a.b=1", "c=x"]`` into ``{"a": {"b": 1}, "c": "x"}`` (values parsed as YAML).

    Raises:
        ConfigError: an item without ``=`` or with an empty key.
    """
    tree: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip() or any(not p for p in key.strip().split(".")):
            raise ConfigError(f"override {item!r} must look like dotted.key=value")
        value = yaml.safe_load(raw) if raw.strip() else ""
        node = tree
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r} sets a key under {part!r}, a plain value")
            node = child
        node[parts[-1]] = value
    return tree


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``extra`` over ``base`` (mappings merge, anything else replaces).

    An empty mapping replaces (``env.kwargs={}`` clears the kwargs, as written).
    """
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and value and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load(cls: type[Any], path: str | Path | None = None, overrides: Sequence[str] = ()) -> Any:
    """Load the config class ``cls`` from a YAML file and dotted ``key=value`` overrides.

    Args:
        cls: the config class to build (a dataclass).
        path: a YAML file (a mapping of component names to their fields); None = all defaults.
        overrides: ``dotted.key=value`` strings, values parsed as YAML scalars/lists.

    Returns:
        The validated config object.

    Raises:
        ConfigError: the file is missing or not a mapping, or any key/value is invalid.
    """
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"config file {str(p)!r} is not valid YAML: {err}") from err
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
        data = dict(loaded)
    extra = parse_overrides(overrides)
    return from_dict(cls, merge(drop_foreign(cls, data, extra), extra))


def drop_foreign(cls: type[Any], base: Mapping[str, Any],
                 extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` without the fields that belong to a value ``extra`` changes (``BELONGS_TO``).

    Walks the dataclass fields of ``cls`` alongside both mappings, so nested sections
    (``env.kwargs``) are handled wherever they sit.
    """
    out = dict(base)
    for dependent, owner in getattr(cls, "BELONGS_TO", {}).items():
        if owner in extra and extra[owner] != out.get(owner):
            out.pop(dependent, None)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints.get(f.name)
        sub, here, there = _section(tp), out.get(f.name), extra.get(f.name)
        if sub is not None and isinstance(here, Mapping) and isinstance(there, Mapping):
            out[f.name] = drop_foreign(sub, here, there)
    return out


def _section(tp: Any) -> type[Any] | None:
    """The dataclass a field holds (also inside ``X | None``), or None."""
    candidates = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union,
                                                                 types.UnionType) else (tp,)
    found = [a for a in candidates if dataclasses.is_dataclass(a) and isinstance(a, type)]
    return found[0] if len(found) == 1 else None


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain YAML-able data (round-trips through ``from_dict``)."""
    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        return value

    return plain(config)


#: The last line ``dump_config`` writes: the SHA-256 of the YAML above it.
CHECKSUM_LINE = "# rlvr sha256: "


def dump_config(config: Any, path: str | Path) -> None:
    """Write ``config`` as YAML to ``path``, atomically, ending with its checksum line.

    The text goes to a hidden sibling first, is flushed to disk and renamed over ``path``: a
    crash or a full disk leaves the old file or the new one, never part of one.
    """
    import hashlib
    import os

    body = yaml.safe_dump(to_dict(config), sort_keys=False)
    text = f"{body}{CHECKSUM_LINE}{hashlib.sha256(body.encode()).hexdigest()}\n"
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def config_checksum_ok(text: str) -> bool | None:
    """Whether ``text`` (a ``dump_config`` file) still matches its checksum line.

    Returns:
        None when it has no checksum line (an older or a truncated file), else the verdict.
    """
    import hashlib

    body, sep, tail = text.rpartition(CHECKSUM_LINE)
    if not sep or "\n" in tail.strip():
        return None
    return hashlib.sha256(body.encode()).hexdigest() == tail.strip()


__all__ = ["CHECKSUM_LINE", "config_checksum_ok", "drop_foreign", "dump_config", "from_dict",
           "load", "merge", "parse_overrides", "to_dict"]
