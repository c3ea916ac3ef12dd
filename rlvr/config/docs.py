"""The configuration reference, ``docs/configuration.md``, generated from the config dataclasses.

Every key of ``rlvr train``'s config (``rlvr.config.TrainConfig`` and the component configs it
composes) gets one row: its dotted name, type, default, allowed values and the first sentence of
its description in the owning class's ``Attributes:`` docstring. Allowed values come from the
field itself (a ``Literal``, a ``bounded`` range) or, for names looked up in a registry, from
that registry as it stands after import (built-in entries only; plugins add their own).

A key that takes effect only in some setups (an engine, a sync mode, launching vs attaching) says
so: a config class lists those caveats in a class attribute ``CAVEATS`` (field name -> sentence;
the empty name is the whole section's), and the reference prints each after the key's meaning or
the section's summary, so the reference never shows such a key without its condition.

Regenerate after changing a config class::

    python -m rlvr.config.docs            # rewrites docs/configuration.md
    python -m rlvr.config.docs --check    # exit 1 when the file is stale (the tests do this)
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlvr.config_checks import range_text
from rlvr.errors import ConfigError

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

HEADER = """\
# Configuration reference

`rlvr train CONFIG.yaml [dotted.key=value ...]` fills one typed dataclass per section
(`rlvr/config/schema.py`). Every key and value is checked before any work starts: an unknown key
fails with the keys allowed there and close matches, a value out of range names the dotted key.
Overrides on the command line use the same dotted names (`actor.optim.lr=3e-4`).

This page is generated from the dataclasses' fields and docstrings by
`python -m rlvr.config.docs`; a test fails when it is stale. Names looked up in a registry list
the built-in entries; a plugin imported through `env.imports` (or `--import`) may add more.
How the sections fit together is in [training.md](training.md); the engines' options in
[engines.md](engines.md).
"""


def _registries() -> dict[str, Callable[[], list[str]]]:
    """Keys whose allowed values are the names of a registry, and how to read them."""

    def estimators() -> list[str]:
        from rlvr.algorithms.advantages import ADVANTAGE_ESTIMATORS
        return list(ADVANTAGE_ESTIMATORS)

    def losses() -> list[str]:
        from rlvr.algorithms.losses import POLICY_LOSSES
        return list(POLICY_LOSSES)

    def kl() -> list[str]:
        from rlvr.learner.config import KL_ESTIMATORS
        return list(KL_ESTIMATORS)

    def engines() -> list[str]:
        from rlvr.agents.engine_registry import ENGINES
        return list(ENGINES)

    def syncs() -> list[str]:
        from rlvr.agents.sglang.options import WEIGHT_SYNCS
        return list(WEIGHT_SYNCS)

    def env_ids() -> list[str]:
        from rlvr import envs
        return [e for e in envs.list_envs() if e.startswith("rlvr/")]

    return {
        "env.id": env_ids,
        "rollout.engine": engines,
        "rollout.sglang.weight_sync": syncs,
        "algorithm.estimator": estimators,
        "algorithm.kl.reward.estimator": kl,
        "algorithm.kl.loss.estimator": kl,
        "actor.policy_loss": losses,
        "actor.kl_loss_estimator": kl,
    }


@dataclass(frozen=True)
class KeyDoc:
    """One documented config key."""

    key: str
    type: str
    default: str
    allowed: str
    meaning: str


def _attribute_docs(cls: type) -> dict[str, str]:
    """Field name -> description from the ``Attributes:`` sections of ``cls`` and its bases."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        doc = inspect.getdoc(klass) if klass.__doc__ else None
        if not doc or "Attributes:" not in doc:
            continue
        body = doc.split("Attributes:", 1)[1]
        name: str | None = None
        for line in body.splitlines():
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            match = re.match(r"\s{4}(\w+):\s*(.*)$", line)
            if match and indent == 4:
                name = match.group(1)
                out[name] = match.group(2).strip()
            elif indent > 4 and name is not None:
                out[name] += " " + line.strip()
            elif indent < 4:
                break
    return out


def _first_sentence(text: str) -> str:
    """The description up to its first full stop (the one line of meaning)."""
    match = re.search(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\bDr)\.(\s|$)", text)
    sentence = text[: match.start() + 1] if match else text
    return sentence.replace("``", "`").replace("|", "\\|").strip()


def _type_text(tp: Any) -> str:
    """A short YAML-minded name of an annotation."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "str"
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_text(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        inner = _type_text(args[0]) if args else "any"
        return f"list of {inner}"
    if origin is dict:
        return "mapping"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def _value_text(value: Any) -> str:
    """A default as it would be written in YAML."""
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, tuple)):
        return "`[" + ", ".join(_value_text(v).strip("`") for v in value) + "]`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return f"`{value}`"


def _caveat(cls: type, name: str) -> str:
    """The caveat ``cls.CAVEATS`` gives for the field ``name`` ("" = the section), or ""."""
    text = getattr(cls, "CAVEATS", {}).get(name, "")
    return text.replace("``", "`").replace("|", "\\|")


def _is_section(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def iter_keys(cls: type, prefix: str = "", defaults: Any = None,
              ) -> Iterator[tuple[str, type, list[KeyDoc]]]:
    """Each section of ``cls`` (dotted name, class, its keys), depth first.

    Defaults are read off ``defaults`` (``cls()`` when None), so a section whose owner builds it
    with other defaults (the critic's learning rate) shows the owner's.

    Raises:
        ConfigError: a field has no description in its class's ``Attributes:`` docstring.
    """
    hints = typing.get_type_hints(cls)
    defaults = cls() if defaults is None else defaults
    docs = _attribute_docs(cls)
    registries = _registries()
    rows: list[KeyDoc] = []
    nested: list[tuple[str, type, Any]] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if _is_section(tp):
            nested.append((key, tp, getattr(defaults, f.name)))
            continue
        if f.name not in docs:
            raise ConfigError(f"{key}: no description in {cls.__qualname__}'s Attributes: "
                              "docstring (the configuration reference needs one)", key=key)
        allowed = ""
        if typing.get_origin(tp) is Literal:
            allowed = ", ".join(f"`{a}`" for a in typing.get_args(tp))
        elif key in registries:
            allowed = ", ".join(f"`{a}`" for a in registries[key]())
        bounds = f.metadata.get("bounds")
        if bounds is not None and range_text(bounds):
            allowed = range_text(bounds)
        meaning = " ".join(filter(None, (_first_sentence(docs[f.name]), _caveat(cls, f.name))))
        rows.append(KeyDoc(key, _type_text(tp), _value_text(getattr(defaults, f.name)), allowed,
                           meaning))
    yield prefix, cls, rows
    for key, tp, value in nested:
        yield from iter_keys(tp, key, value)


def render() -> str:
    """The whole reference as Markdown."""
    from rlvr.config import TrainConfig

    parts = [HEADER]
    for prefix, cls, rows in iter_keys(TrainConfig):
        if not prefix:
            continue  # the top level holds only sections
        summary = _first_sentence(" ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split()))
        summary = " ".join(filter(None, (summary, _caveat(cls, ""))))
        parts.append(f"## `{prefix}`\n\n{summary} Class: `{cls.__module__}.{cls.__qualname__}`.\n")
        if rows:
            parts.append("| key | type | default | allowed | meaning |\n|---|---|---|---|---|")
            parts.extend(f"| `{r.key}` | {r.type} | {r.default} | {r.allowed} | {r.meaning} |"
                         for r in rows)
            parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the reference (or, with ``--check``, say whether the file is stale)."""
    parser = argparse.ArgumentParser(prog="python -m rlvr.config.docs", description=__doc__)
    parser.add_argument("--out", type=Path, default=DOC_PATH)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python -m rlvr.config.docs", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
