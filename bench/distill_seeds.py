"""The distillation learning test's run over seeds (not a test): where its thresholds come from.

Runs ``tests/rlvr/distill_budget.distill_run`` (a short warm-up makes the teacher, a fresh
student is distilled from it) for each seed and prints the per-token reverse KL and the
teacher's logprob of the student's tokens over the first and last steps, their ratio and the
time. Writes ``bench/results/distill_seeds.json``.

Usage: .venv/bin/python bench/distill_seeds.py [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "rlvr"))

from distill_budget import MAX_KL_RATIO, distill_run  # noqa: E402

RESULTS = REPO / "bench" / "results" / "distill_seeds.json"


def main() -> None:
    """Run the seeds, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    print("| seed | reverse KL first -> last (ratio) | teacher logprob first -> last | s |")
    print("|---|---|---|---|")
    for seed in args.seeds:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            row = distill_run(Path(tmp), seed)
        row |= {"seed": seed, "seconds": time.perf_counter() - start,
                "ratio": row["kl_last"] / row["kl_first"]}
        rows.append(row)
        print(f"| {seed} | {row['kl_first']:.3f} -> {row['kl_last']:.3f} ({row['ratio']:.2f}) | "
              f"{row['teacher_lp_first']:.3f} -> {row['teacher_lp_last']:.3f} | "
              f"{row['seconds']:.0f} |", flush=True)
    print(f"largest ratio {max(r['ratio'] for r in rows):.2f}; the test asks <= {MAX_KL_RATIO}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
