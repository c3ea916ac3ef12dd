"""init_distributed in a network namespace whose loopback is down: a clear error, at once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

CODE = """
from rlvr.errors import DistributedSetupError
from rlvr.learner import init_distributed
try:
    init_distributed("cpu")
except DistributedSetupError as e:
    print("CLEAR:", e)
    raise SystemExit(3)
print("initialised")
"""


def _netns_usable() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _netns_usable(), reason="needs root and unshare -n (a network namespace)")
def test_loopback_down_fails_fast_naming_the_interface():
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("GLOO_SOCKET_IFNAME", None)
    # A fresh network namespace: the loopback interface exists but is down.
    proc = subprocess.run(["unshare", "-n", sys.executable, "-c", CODE], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    assert "loopback interface is down" in proc.stdout
    assert "ip link set lo up" in proc.stdout and "GLOO_SOCKET_IFNAME" in proc.stdout
