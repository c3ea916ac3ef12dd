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

With ``--native`` each seed's run is also followed by ``run_agent_from`` on
``examples/native_tools_agent.py`` (the calculator agent written with ``tools=`` /
``message.tool_calls``); the JSON (default ``bench/results/native_agent_learning_seeds.json``)
holds all.

With ``--arms`` each seed is warmed up once and RL runs from that same warm-up once per arm (an
arm is a space-separated list of overrides, ``""`` for none), so arms differ only in their RL:
``--arms "" "rollout.max_staleness=1 actor.tis_cap=2.0"`` compares the asynchronous mode with the
synchronous loop. ``--full`` runs the shipped tool quickstart (its warm-up, 8 x 8 RL steps, 200
held-out tasks; ``--override trainer.steps=N`` shortens it) instead of the test's budget. With
``--arms`` the JSON (default ``bench/results/tool_learning_arms.json``) holds one row per seed
and arm, with the held-out accuracy at every mid-run evaluation (``eval.every``).

Usage: .venv/bin/python bench/tool_learning_seeds.py [--seeds 0 1 2 3 4] [--override k=v ...]
       [--agent] [--native] [--full] [--arms OVERRIDES ...]
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
    NATIVE_AGENT,
    TOOL_CONFIG,
    WINDOW,
    _summary,
    run_agent_from,
    run_budget,
)
from trainer_helpers import QUIET  # noqa: E402

RESULTS = REPO / "bench" / "results" / "tool_learning_seeds.json"
AGENT_RESULTS = REPO / "bench" / "results" / "agent_learning_from_warmup_seeds.json"
NATIVE_RESULTS = REPO / "bench" / "results" / "native_agent_learning_seeds.json"
ARMS_RESULTS = REPO / "bench" / "results" / "tool_learning_arms.json"
#: ``--full``: the shipped tool quickstart without mid-run evaluations or checkpoints.
FULL = ["eval.every=0", "eval.show_episodes=0", "trainer.checkpoint_every=0"]


def run_arms(tmp: Path, seed: int, base: list[str], arms: list[str]) -> list[dict]:
    """Warm up once with ``base``, then RL from that warm-up once per arm; a row per arm."""
    from rlvr.config import load_config
    from rlvr.trainer import Trainer, train

    common = QUIET + base + [f"trainer.seed={seed}"]
    t0, cpu = time.perf_counter(), time.process_time()
    warm = Trainer(load_config(TOOL_CONFIG, common + [f"trainer.output_dir={tmp / 'warm'}"]),
                   log=lambda *_: None)
    sft_steps = warm.sft.steps if warm.sft is not None else 0
    warm.close()
    warm_s, warm_cpu = time.perf_counter() - t0, time.process_time() - cpu
    rows = []
    for i, arm in enumerate(arms):
        cpu = time.process_time()
        config = load_config(TOOL_CONFIG, common + [
            f"model.path={tmp / 'warm' / 'sft_model'}", "sft.enabled=false",
            f"trainer.output_dir={tmp / f'arm{i}'}", *arm.split()])
        result = train(config, log=lambda *_: None)
        row = _summary(result, seed)
        row["heldout_by_step"] = {int(m["step"]): m["eval/accuracy"] for m in result.history
                                  if m.get("eval/accuracy") is not None}
        row.update(arm=arm, sft_steps=sft_steps, warmup_seconds=warm_s,
                   warmup_cpu_seconds=warm_cpu, cpu_seconds=time.process_time() - cpu,
                   gain=row["final_accuracy"] - row["warmup_accuracy"])
        rows.append(row)
        _print(f"seed {seed} arm {arm!r}", row)
    return rows


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
    parser.add_argument("--native", action="store_true",
                        help="also run the native-tools agent from each warm-up")
    parser.add_argument("--full", action="store_true",
                        help="the shipped tool quickstart instead of the learning test's budget")
    parser.add_argument("--arms", nargs="+", default=None, metavar="OVERRIDES",
                        help="warm up once per seed, then RL once per arm from that warm-up")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    base = (FULL if args.full else BUDGET) + args.override
    if args.arms is not None:
        main_arms(args, base)
        return
    out = args.out or (NATIVE_RESULTS if args.native else AGENT_RESULTS if args.agent
                       else RESULTS)
    rows, agent_rows, native_rows = [], [], []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.process_time()
            row = run_budget(Path(tmp), seed, args.override) if not args.full else \
                run_arms(Path(tmp), seed, base, [""])[0]
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
            if args.native:
                t0 = time.process_time()
                native = run_agent_from(Path(tmp) / "sft_model", Path(tmp) / "native", seed,
                                        args.override, agent=NATIVE_AGENT)
                native["cpu_seconds"] = time.process_time() - t0
                native_rows.append(native)
                _print(f"seed {seed} native", native)
    smallest = {k: min(r[k][1] - r[k][0] for r in rows) for k in CURVES}
    print("smallest rise (last - first window):",
          "  ".join(f"{k}: {v:+.3f}" for k, v in smallest.items()))
    report = {"budget": base, "window": WINDOW, "machine":
              platform.processor() or platform.machine(), "seeds": rows,
              "smallest_rise": smallest}
    if args.agent:
        agent_smallest = {k: min(r[k][1] - r[k][0] for r in agent_rows) for k in CURVES}
        print("agent: smallest rise (last - first window):",
              "  ".join(f"{k}: {v:+.3f}" for k, v in agent_smallest.items()))
        report.update(agent=AGENT, agent_seeds=agent_rows, agent_smallest_rise=agent_smallest)
    if args.native:
        native_smallest = {k: min(r[k][1] - r[k][0] for r in native_rows) for k in CURVES}
        print("native: smallest rise (last - first window):",
              "  ".join(f"{k}: {v:+.3f}" for k, v in native_smallest.items()))
        report.update(native=NATIVE_AGENT, native_seeds=native_rows,
                      native_smallest_rise=native_smallest)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")



def main_arms(args: argparse.Namespace, base: list[str]) -> None:
    """``--arms``: per seed one warm-up, RL per arm; the held-out gains per arm, the JSON."""
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            rows += run_arms(Path(tmp), seed, base, args.arms)
    print("| seed | held-out before | " + " | ".join(f"during / after ({a or 'base'})"
                                                  for a in args.arms)
          + " |")
    print("|---|---|" + "---|" * len(args.arms))
    for seed in args.seeds:
        mine = [r for r in rows if r["seed"] == seed]
        print(f"| {seed} | {100 * mine[0]['warmup_accuracy']:.1f}% | " + " | ".join(
            " / ".join(f"{100 * a:.1f}%" for a in r["heldout_by_step"].values())
            + f" / {100 * r['final_accuracy']:.1f}% ({100 * r['gain']:+.1f})" for r in mine) + " |")
    for arm in args.arms:
        gains = [r["gain"] for r in rows if r["arm"] == arm]
        print(f"mean gain ({arm or 'base'}): {100 * sum(gains) / len(gains):+.1f} points")
    out = args.out or ARMS_RESULTS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"base": base, "arms": args.arms, "window": WINDOW, "machine":
                               platform.processor() or platform.machine(), "seeds": rows},
                              indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
