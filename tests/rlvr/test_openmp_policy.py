"""Importing rlvr before torch makes OpenMP's idle threads sleep, unless the user chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import os, sys; {imports}; print(os.environ.get('OMP_WAIT_POLICY', '<unset>'))"


@pytest.mark.parametrize(("imports", "preset", "expected"), [
    ("import rlvr; import torch", None, "PASSIVE"),
    ("import rlvr; import torch", "ACTIVE", "ACTIVE"),  # the user's choice is kept
    ("import torch; import rlvr", None, "<unset>"),     # too late: OpenMP has read it
])
def test_omp_wait_policy(imports, preset, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if preset is not None:
        env["OMP_WAIT_POLICY"] = preset
    out = subprocess.run([sys.executable, "-c", PROBE.format(imports=imports)], env=env,
                         capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == expected
