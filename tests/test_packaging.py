"""rlvr installs one top-level import name, ``rlvr``; its folders envs/, agents/ and verifiers/
import only as ``rlvr.envs``, ``rlvr.agents`` and ``rlvr.verifiers``.

Three of those names belong to other PyPI packages (Prime Intellect's ``verifiers``, OpenAI's Agents
SDK ``agents``, ``envs``); a wheel that shipped them would overwrite their files or be overwritten.
tests/test_coexistence.py installs the wheel beside those packages.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(dest: Path) -> Path:
    """Build rlvr's wheel from a copy of the checkout's tracked files (symlinks kept as links, as
    git stores them), so the build leaves nothing in the checkout."""
    src = dest / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        path, target = ROOT / name, src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            target.symlink_to(path.readlink())
        elif path.exists():
            shutil.copy2(path, target)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dest), str(src)], check=True, capture_output=True)
    (wheel,) = dest.glob("rlvr-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_adds_one_top_level_name(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"rlvr"}
    # the symlinked folders travel as files, every package with its __init__.py
    for package in ("envs", "agents", "agents/hf", "agents/gateway", "verifiers",
                    "verifiers/math", "verifiers/code", "verifiers/code/harness"):
        assert f"rlvr/{package}/__init__.py" in names, package
    assert "rlvr/verifiers/math/worker.py" in names
    top_level = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    if top_level:
        with zipfile.ZipFile(wheel) as z:
            assert z.read(top_level[0]).decode().split() == ["rlvr"]


@pytest.mark.parametrize("stale", ["envs", "agents", "verifiers", "verifiers.math", "envs.tasks"])
def test_a_stale_top_level_import_fails_loudly(stale):
    # From the checkout's root the folders are on sys.path: importing one under its old name
    # must raise, never load a second copy of its modules beside rlvr's.
    proc = subprocess.run([sys.executable, "-c", f"import {stale}"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    package = stale.split(".")[0]
    assert f"imports as `rlvr.{package}`, not as `{package}`" in proc.stderr


def test_one_module_object_per_module():
    import rlvr.verifiers.math
    from rlvr.verifiers import math as math_again

    assert math_again is rlvr.verifiers.math
    assert not {"envs", "agents", "verifiers"} & set(sys.modules)
