"""The quickstart learning test's run over seeds (not a test): where its thresholds come from.

Runs ``tests/rlvr/quickstart_budget.run_quickstart`` (the shipped quickstart as its learning test
trains it) for each seed, one after the other, and prints per seed the warm-up's steps, the
held-out greedy accuracy before and after RL, the mean training reward of the first and last
``FIRST_LAST`` steps and the times; then the smallest held-out gain and reward rise beside the
test's thresholds. Writes ``bench/results/quickstart_seeds.json``.

With ``--lora`` each seed's run is followed by ``run_lora_from`` (the LoRA learning test's run:
the same RL from that run's warm-up, training a rank-16 adapter), and its row is printed under the
full run's; the JSON (default ``bench/results/quickstart_seeds_lora_from_warmup.json``) holds both.

Usage: .venv/bin/python bench/quickstart_seeds.py [--seeds 0 1 2 3 4] [--override k=v ...] [--lora]
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

from quickstart_budget import (  # noqa: E402
    FIRST_LAST,
    LORA,
    LORA_MIN_HELD_OUT_GAIN,
    LORA_MIN_REWARD_RISE,
    MIN_HELD_OUT_GAIN,
    MIN_REWARD_RISE,
    OVERRIDES,
    run_lora_from,
    run_quickstart,
)

RESULTS = REPO / "bench" / "results" / "quickstart_seeds.json"
LORA_RESULTS = REPO / "bench" / "results" / "quickstart_seeds_lora_from_warmup.json"


def _print_row(label: str, row: dict) -> None:
    print(f"| {label} | {row['sft_steps']} | {100 * row['warmup_accuracy']:.1f}% -> "
          f"{100 * row['final_accuracy']:.1f}% ({100 * row['gain']:+.1f}) | "
          f"{row['reward_first']:.3f} -> {row['reward_last']:.3f} ({row['rise']:+.3f}) | "
          f"{row['warmup_seconds']:.1f} | {row['rl_seconds']:.1f} | "
          f"{row['total_seconds']:.1f} | {row['cpu_seconds']:.1f} |", flush=True)


def _finish(row: dict, cpu_start: float) -> dict:
    row["gain"] = row["final_accuracy"] - row["warmup_accuracy"]
    row["rise"] = row["reward_last"] - row["reward_first"]
    row["cpu_seconds"] = time.process_time() - cpu_start
    return row


def main() -> None:
    """Run the seeds, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--override", nargs="*", default=[], help="extra config overrides")
    parser.add_argument("--lora", action="store_true",
                        help="also run the LoRA learning test's run from each seed's warm-up")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or (LORA_RESULTS if args.lora else RESULTS)
    rows, lora_rows = [], []
    print("| seed | warm-up steps | held-out before -> after (gain) | train reward first -> last "
          f"{FIRST_LAST} steps (rise) | warm-up s | RL s | whole s | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            cpu = time.process_time()
            row = _finish(run_quickstart(Path(tmp), seed, args.override), cpu)
            rows.append(row)
            _print_row(str(seed), row)
            if args.lora:
                cpu = time.process_time()
                lora = _finish(run_lora_from(Path(tmp) / "sft_model", Path(tmp) / "lora", seed,
                                             args.override), cpu)
                lora_rows.append(lora)
                _print_row(f"{seed} LoRA", lora)
    gain, rise = min(r["gain"] for r in rows), min(r["rise"] for r in rows)
    print(f"smallest held-out gain {100 * gain:+.1f} points (test: >= "
          f"{100 * MIN_HELD_OUT_GAIN:+.1f}); smallest reward rise {rise:+.3f} (test: >= "
          f"{MIN_REWARD_RISE:+.3f})")
    report = {"overrides": OVERRIDES + args.override, "first_last": FIRST_LAST,
              "machine": platform.processor() or platform.machine(), "seeds": rows,
              "smallest_gain": gain, "smallest_rise": rise}
    if args.lora:
        lgain, lrise = min(r["gain"] for r in lora_rows), min(r["rise"] for r in lora_rows)
        print(f"LoRA: smallest held-out gain {100 * lgain:+.1f} points (test: >= "
              f"{100 * LORA_MIN_HELD_OUT_GAIN:+.1f}); smallest reward rise {lrise:+.3f} "
              f"(test: >= {LORA_MIN_REWARD_RISE:+.3f})")
        report.update(lora_overrides=LORA, lora_seeds=lora_rows, lora_smallest_gain=lgain,
                      lora_smallest_rise=lrise)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
