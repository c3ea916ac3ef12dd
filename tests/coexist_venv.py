"""The coexistence venv (``RLVR_COEXIST_PYTHON``): Prime's verifiers, OpenAI's Agents SDK, envs.

``bash dev.sh test`` builds it and exports its interpreter; the tests that run code in it share
these two helpers.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def coexist_python() -> Path:
    """The venv's interpreter; skips the test without it (fails it in CI, where it must exist)."""
    python = os.environ.get("RLVR_COEXIST_PYTHON")
    if not (python and Path(python).exists()):
        reason = (f"coexistence venv absent (RLVR_COEXIST_PYTHON={python!r}): build it with "
                  "`bash dev.sh setup-coexist` or run `bash dev.sh test`")
        if os.environ.get("RLVR_REQUIRE_SGLANG") == "1":  # CI: the cached venvs must be there
            pytest.fail(reason)
        pytest.skip(reason)
    return Path(python)


def run_in(python: Path, *args: str, cwd: Path) -> str:
    """Run ``python args...`` in ``cwd`` with only ``cwd`` on its path; its stdout.

    Fails the test, with the output's tail, when it exits non-zero.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(cwd), OMP_NUM_THREADS="1")
    proc = subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"{args}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout
