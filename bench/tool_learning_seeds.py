"""The tool-learning test's budget over seeds (not a test): where its thresholds come from.

Runs ``tests/rlvr/tool_learning_budget.run_budget`` (the budget the learning test trains) for each
seed, one after the other, and prints per seed the held-out greedy accuracy before and after RL,
and the means over the first and the last ``WINDOW`` RL steps of the training accuracy, the
tool-call share, the valid-call rate and the accuracy of the episodes that call; then the
smallest rise of each. Writes ``bench/results/tool_learning_seeds.json``.

Usage: .venv/bin/python bench/tool_learning_seeds.py [--seeds 0 1 2 3 4] [--override k=v ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "rlvr"))

from tool_learning_budget import BUDGET, CURVES, WINDOW, run_budget  # noqa: E402

RESULTS = REPO / "bench" / "results" / "tool_learning_seeds.json"


def main() -> None:
    """Run the seeds, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--override", nargs="*", default=[], help="extra config overrides")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        t0 = time.process_time()
        with tempfile.TemporaryDirectory() as tmp:
            row = run_budget(Path(tmp), seed, args.override)
        row["cpu_seconds"] = time.process_time() - t0
        rows.append(row)
        curves = "  ".join(f"{k.split('/')[-1]} {a:.3f}->{b:.3f}" for k, (a, b) in
                           ((k, row[k]) for k in CURVES))
        print(f"seed {seed}: sft {row['sft_steps']} steps, held-out {row['warmup_accuracy']:.3f}"
              f" -> {row['final_accuracy']:.3f}  {curves}  {row['total_seconds']:.1f} s wall,"
              f" {row['cpu_seconds']:.1f} s CPU", flush=True)
    smallest = {k: min(r[k][1] - r[k][0] for r in rows) for k in CURVES}
    print("smallest rise (last - first window):",
          "  ".join(f"{k}: {v:+.3f}" for k, v in smallest.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "budget": BUDGET + args.override, "window": WINDOW, "machine": platform.processor()
        or platform.machine(), "seeds": rows, "smallest_rise": smallest}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
