from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "bench" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run")
def test_gpu_check_without_cuda_says_so_and_exits_0():
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA device here" in proc.stdout and "nothing run" in proc.stdout


def test_gpu_check_runs_on_cpu_without_gymnasium_jsonschema_or_sglang(tmp_path):
    # The offline GPU box has torch and transformers only: block the rest, as if missing.
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import importlib.abc, sys\n"
        "class _Missing(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if (name.split('.')[0] in ('gymnasium', 'jsonschema', 'sglang')\n"
        "                or name.split('.')[:2] in (['rlvr', 'envs'], ['rlvr', 'verifiers'])):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (blocked)')\n"
        "sys.meta_path.insert(0, _Missing())\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--layers", "1", "--vocab", "512",
         "--rows", "4", "--new-tokens", "6"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout.split("\ngpu-check\n")[-1]
    assert "FAILED" not in table
    for row in ("logprob |engine - learner| (bf16)", "GRPO step", "resume (step 2",
                "NCCL to a server on trainer GPU 0"):
        assert row in table
    assert "refused as expected" in table
