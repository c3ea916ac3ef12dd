"""bench/bench_vs_trl.py times only seeds whose runs ran on a quiet machine."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_bench():
    path = ROOT / "bench" / "bench_vs_trl.py"
    spec = importlib.util.spec_from_file_location("bench_vs_trl", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_vs_trl", module)
    spec.loader.exec_module(module)
    return module


def row(seed: int, before: float, after: float) -> dict:
    return {"start": "m", "seed": seed, "load_before": before, "load_after": after}


def test_a_seed_with_a_loaded_run_in_either_arm_is_left_out_of_the_timing(capsys):
    bench = load_bench()
    rows = {"rlvr": [row(0, 1.0, 2.0), row(1, 1.0, 2.0), row(2, 1.5, 2.5)],
            # seed 0's TRL run ended at load 40 (another job beside it); seed 2's began loaded
            "trl": [row(0, 2.0, 40.0), row(1, 2.0, 2.0), row(2, 9.0, 2.0)]}
    assert bench.quiet_runs(rows, max_load=3.0) == {("m", 1)}
    out = capsys.readouterr().out
    assert "seed 0" in out and "seed 2" in out and "left out of" in out


def test_with_no_quiet_seed_every_seed_is_timed_and_the_report_says_so(capsys):
    bench = load_bench()
    rows = {"rlvr": [row(0, 9.0, 9.0)], "trl": [row(0, 9.0, 9.0)]}
    assert bench.quiet_runs(rows, max_load=3.0) == {("m", 0)}
    assert "kept in (no quiet seed)" in capsys.readouterr().out
