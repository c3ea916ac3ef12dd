"""The quickstart learning test's run over seeds (not a test): where its thresholds come from.

Runs ``tests/rlvr/quickstart_budget.run_quickstart`` (the shipped quickstart as its learning test
trains it) for each seed, one after the other, and prints per seed the warm-up's steps, the
held-out greedy accuracy before and after RL, the mean training reward of the first and last
``FIRST_LAST`` steps and the times; then the smallest held-out gain and reward rise beside the
test's thresholds. Writes ``bench/results/quickstart_seeds.json``.

Usage: .venv/bin/python bench/quickstart_seeds.py [--seeds 0 1 2 3 4] [--override k=v ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "rlvr"))

from quickstart_budget import (  # noqa: E402
    FIRST_LAST,
    MIN_HELD_OUT_GAIN,
    MIN_REWARD_RISE,
    OVERRIDES,
    run_quickstart,
)

RESULTS = REPO / "bench" / "results" / "quickstart_seeds.json"


def main() -> None:
    """Run the seeds, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--override", nargs="*", default=[], help="extra config overrides")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    print("| seed | warm-up steps | held-out before -> after (gain) | train reward first -> last "
          f"{FIRST_LAST} steps (rise) | warm-up s | RL s | whole s |")
    print("|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            row = run_quickstart(Path(tmp), seed, args.override)
        row["gain"] = row["final_accuracy"] - row["warmup_accuracy"]
        row["rise"] = row["reward_last"] - row["reward_first"]
        rows.append(row)
        print(f"| {seed} | {row['sft_steps']} | {100 * row['warmup_accuracy']:.1f}% -> "
              f"{100 * row['final_accuracy']:.1f}% ({100 * row['gain']:+.1f}) | "
              f"{row['reward_first']:.3f} -> {row['reward_last']:.3f} ({row['rise']:+.3f}) | "
              f"{row['warmup_seconds']:.1f} | {row['rl_seconds']:.1f} | "
              f"{row['total_seconds']:.1f} |", flush=True)
    gain, rise = min(r["gain"] for r in rows), min(r["rise"] for r in rows)
    print(f"smallest held-out gain {100 * gain:+.1f} points (test: >= "
          f"{100 * MIN_HELD_OUT_GAIN:+.1f}); smallest reward rise {rise:+.3f} (test: >= "
          f"{MIN_REWARD_RISE:+.3f})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "overrides": OVERRIDES + args.override, "first_last": FIRST_LAST,
        "machine": platform.processor() or platform.machine(), "seeds": rows,
        "smallest_gain": gain, "smallest_rise": rise}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
