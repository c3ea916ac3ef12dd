"""The tool-learning test's budget over seeds (not a test): where its thresholds come from.

Runs ``tests/rlvr/tool_learning_budget.run_budget`` (the budget the learning test trains) for each
seed, one after the other, and prints per seed the held-out greedy accuracy before and after RL,
and the means over the first and the last ``WINDOW`` RL steps of the training accuracy, the
tool-call share, the valid-call rate and the accuracy of the episodes that call; then the
smallest rise of each. Writes ``bench/results/tool_learning_seeds.json``.

With ``--agent`` each seed's run is followed by ``run_agent_from`` (the gateway learning test's
run: the same RL from that warm-up, the calculator played by ``examples/calculator_agent.py``
through the gateway); the JSON (default ``bench/results/agent_learning_from_warmup_seeds.json``)
holds both.

Usage: .venv/bin/python bench/tool_learning_seeds.py [--seeds 0 1 2 3 4] [--override k=v ...]
       [--agent]
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

from tool_learning_budget import (  # noqa: E402
    AGENT,
    BUDGET,
    CURVES,
    WINDOW,
    run_agent_from,
    run_budget,
)

RESULTS = REPO / "bench" / "results" / "tool_learning_seeds.json"
AGENT_RESULTS = REPO / "bench" / "results" / "agent_learning_from_warmup_seeds.json"


def _print(label: str, row: dict) -> None:
    curves = "  ".join(f"{k.split('/')[-1]} {a:.3f}->{b:.3f}" for k, (a, b) in
                       ((k, row[k]) for k in CURVES))
    print(f"{label}: sft {row['sft_steps']} steps, held-out {row['warmup_accuracy']:.3f}"
          f" -> {row['final_accuracy']:.3f}  {curves}  prefix breaks {row['prefix_breaks']}"
          f"  {row['total_seconds']:.1f} s wall ({row['rl_seconds']:.1f} s RL),"
          f" {row['cpu_seconds']:.1f} s CPU", flush=True)


def main() -> None:
    """Run the seeds, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--override", nargs="*", default=[], help="extra config overrides")
    parser.add_argument("--agent", action="store_true",
                        help="also run the gateway learning test's agent run from each warm-up")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or (AGENT_RESULTS if args.agent else RESULTS)
    rows, agent_rows = [], []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.process_time()
            row = run_budget(Path(tmp), seed, args.override)
            row["cpu_seconds"] = time.process_time() - t0
            rows.append(row)
            _print(f"seed {seed}", row)
            if args.agent:
                t0 = time.process_time()
                agent = run_agent_from(Path(tmp) / "sft_model", Path(tmp) / "agent", seed,
                                       args.override)
                agent["cpu_seconds"] = time.process_time() - t0
                agent_rows.append(agent)
                _print(f"seed {seed} agent", agent)
    smallest = {k: min(r[k][1] - r[k][0] for r in rows) for k in CURVES}
    print("smallest rise (last - first window):",
          "  ".join(f"{k}: {v:+.3f}" for k, v in smallest.items()))
    report = {"budget": BUDGET + args.override, "window": WINDOW, "machine":
              platform.processor() or platform.machine(), "seeds": rows,
              "smallest_rise": smallest}
    if args.agent:
        agent_smallest = {k: min(r[k][1] - r[k][0] for r in agent_rows) for k in CURVES}
        print("agent: smallest rise (last - first window):",
              "  ".join(f"{k}: {v:+.3f}" for k, v in agent_smallest.items()))
        report.update(agent=AGENT, agent_seeds=agent_rows, agent_smallest_rise=agent_smallest)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
