"""The import contracts in pyproject.toml cover every rlvr module, including ones added later.

The contracts list forbidden modules (import-linter's ``forbidden`` type), so a new module under
``rlvr/`` would be importable from ``rlvr.agents`` or from the tensor math until someone adds it
to the list. These tests fail then, naming the module and the contract. import-linter only sees
packages (folders with an ``__init__.py``): a folder of modules without one is never checked, so
that fails here too.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]

#: What each source package may import from rlvr (itself included).
#: The check kit (``rlvr.config_checks``) and the errors it raises are leaves every package uses.
KIT = {"rlvr.config_checks", "rlvr.errors"}
ALLOWED = {
    "rlvr.verifiers": {"rlvr.verifiers"} | KIT,
    "rlvr.envs": {"rlvr.envs", "rlvr.verifiers"} | KIT,
    "rlvr.agents": {"rlvr.agents", "rlvr.envs", "rlvr.verifiers", "rlvr.trajectory", "rlvr.seeds",
                    "rlvr.hf_compat"} | KIT,
    "rlvr.algorithms": {"rlvr.algorithms", "rlvr.errors"},
    "rlvr.config_checks": KIT,
    "rlvr.errors": {"rlvr.errors"},
}


def rlvr_children() -> set[str]:
    """``rlvr.X`` for every module and package directly under ``rlvr/``."""
    names = set()
    for p in (ROOT / "rlvr").iterdir():
        if p.suffix == ".py" and p.stem != "__init__":
            names.add(f"rlvr.{p.stem}")
        elif p.is_dir() and (p / "__init__.py").exists():
            names.add(f"rlvr.{p.name}")
    return names


def contract_for(source: str) -> dict:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
    found = [c for c in contracts if c.get("source_modules") == [source]]
    assert len(found) == 1, f"expected one contract with source_modules = [{source!r}]"
    return found[0]


@pytest.mark.parametrize("source", sorted(ALLOWED))
def test_every_rlvr_module_is_allowed_or_forbidden(source: str) -> None:
    forbidden = set(contract_for(source)["forbidden_modules"])
    missing = sorted(rlvr_children() - ALLOWED[source] - forbidden)
    assert not missing, (
        f"{missing} are neither allowed for {source} nor in its contract's forbidden_modules "
        "in pyproject.toml; add them there"
    )


@pytest.mark.parametrize("source", sorted(ALLOWED))
def test_the_allowed_modules_are_not_forbidden(source: str) -> None:
    forbidden = set(contract_for(source)["forbidden_modules"])
    assert not (ALLOWED[source] & forbidden)
    assert ALLOWED[source] <= rlvr_children()


def test_rlvr_children_sees_modules_and_packages() -> None:
    children = rlvr_children()
    assert {"rlvr.trajectory", "rlvr.algorithms", "rlvr.config", "rlvr.trainer"} <= children
    assert {"rlvr.envs", "rlvr.agents", "rlvr.verifiers"} <= children  # the symlinked folders


def test_every_folder_of_modules_is_a_package() -> None:
    # rlvr/ follows its symlinks to envs/, agents/ and verifiers/
    missing = sorted(
        str(Path(d).relative_to(ROOT))
        for d, _, files in os.walk(ROOT / "rlvr", followlinks=True)
        if any(f.endswith(".py") for f in files) and "__init__.py" not in files)
    assert not missing, f"{missing} hold modules but no __init__.py: import-linter skips them"
