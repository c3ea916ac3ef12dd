"""Where a quickstart rollout's wall time goes, timed around the transformers engine's calls.

Builds the quickstart's trainer on a warm-started model (its ``sft_model``; no warm-up, no
evaluation), plays stage A (``EpisodeStream.collect``) for ``--rollouts`` steps after 3 warm-up
steps, and splits each rollout's wall time into: before the first prefill (env resets, each
episode's prompt, sampling params and request), the engine's forwards with their KV-cache
bookkeeping (``DecodeScheduler.prefill`` and ``decode_step`` minus sampling), per-row
sampling (``append_sampled``), the gaps between the engine's calls, and after the last forward
(env steps, trajectories), and counts the process's minor page faults per rollout (see
``rlvr.agents.hf.malloc_tuning``). Medians over the rollouts; as in training, each rollout's
episodes are
opened ahead (``rollout.open_ahead``) while the previous one would train, outside its time, and
the garbage collector is paused during the rollout (``rlvr.training.gc_control``).

    .venv/bin/python bench/bench_rollout_phases.py --sft runs/quickstart/sft_model [--forwards] \
        [config overrides, e.g. rollout.transformers.threads=2]

``--forwards`` alternates the engine's lean forward (``rlvr.agents.hf.lean_decoder``) and the
module's
own
forward rollout by rollout and prints one column each (nearly the same episodes: the two forwards'
logits differ by float rounding, ~4e-6 here).

Prints the table and writes ``bench/results/rollout_phases.json``. Timings on a shared machine
are noisy; compare the parts of one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import rlvr  # noqa: F401  # before torch: the OpenMP wait policy of `rlvr train`

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "quickstart.yaml"
RESULTS = REPO / "bench" / "results" / "rollout_phases.json"
PARTS = ("total", "before first prefill", "forwards + cache bookkeeping", "sampling",
         "gaps between engine calls", "after last forward")


def timed(marks: list[tuple[str, float, float]], kind: str, fn: Any) -> Any:
    """``fn`` recording ``(kind, start, end)`` of every call into ``marks``."""
    def wrapper(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            marks.append((kind, start, time.perf_counter()))
    return wrapper


def split(marks: list[tuple[str, float, float]], t0: float, t1: float) -> dict[str, float]:
    """One rollout's parts (seconds) from its engine-call marks."""
    forwards = [(a, b) for kind, a, b in marks if kind == "forward"]
    sampling = sum(b - a for kind, a, b in marks if kind == "sample")
    busy = sum(b - a for a, b in forwards)
    first, last = forwards[0][0], forwards[-1][1]
    return {"total": t1 - t0, "before first prefill": first - t0,
            "forwards + cache bookkeeping": busy - sampling, "sampling": sampling,
            "gaps between engine calls": (last - first) - busy, "after last forward": t1 - last}


def main() -> None:
    """Time the rollouts, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft", required=True, help="the quickstart's warm-started model dir")
    parser.add_argument("--rollouts", type=int, default=22)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--forwards", action="store_true",
                        help="alternate the lean and the module's forward, one column each")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. "
                        "rollout.transformers.threads=2")
    args = parser.parse_args()
    from rlvr.agents.hf.forwards import ModuleForward
    from rlvr.config import load_config
    from rlvr.trainer import Trainer
    from rlvr.training.gc_control import collections_paused, frozen_setup

    config = load_config(CONFIG, [
        f"model.path={args.sft}", "sft.enabled=false", "trainer.output_dir=/tmp/rollout_phases",
        "eval.every=0", "trainer.checkpoint_every=0", "trainer.progress=false",
        "trainer.tensorboard=false", "trainer.plot=false", "trainer.export_at_end=false",
        *args.overrides])
    trainer = Trainer(config, log=lambda *_: None)
    engine: Any = trainer.engine
    marks: list[tuple[str, float, float]] = []
    engine._scheduler.prefill = timed(marks, "forward", engine._scheduler.prefill)
    engine._scheduler.decode_step = timed(marks, "forward", engine._scheduler.decode_step)
    engine._scheduler.append_sampled = timed(marks, "sample", engine._scheduler.append_sampled)
    forwards = {"lean forward" if engine.lean else "module forward": engine._scheduler.fwd}
    if args.forwards:
        forwards["module forward"] = ModuleForward(engine.model)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in forwards}
    names = list(forwards)
    with contextlib.ExitStack() as stack:
        stack.callback(trainer.close)
        stack.enter_context(frozen_setup())  # as in training: the setup heap frozen
        for step in range(1, len(names) * args.rollouts + 4):
            name = names[step % len(names)]
            engine._scheduler.fwd = forwards[name]
            marks.clear()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            with trainer.engine_weights(), collections_paused():  # as in training
                trainer.stream.collect(step, step * config.rollout.prompts_per_step)
            if step > 3:  # the first rollouts warm caches and allocators up
                row = split(marks, t0, time.perf_counter())
                row["page faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
                rows[name].append(row)
            if config.rollout.open_ahead:  # as in training: opened while the update runs
                trainer.stream.open_ahead(step + 1, (step + 1) * config.rollout.prompts_per_step)
                for opening in trainer.stream._ahead[2] if trainer.stream._ahead else ():
                    opening.job.settled.result()
    medians = {name: {part: statistics.median(r[part] for r in rs)
                      for part in (*PARTS, "page faults")} for name, rs in rows.items()}
    episodes = config.rollout.prompts_per_step * config.rollout.group_size
    print(f"\nquickstart rollout of {episodes} episodes, medians of "
          f"{min(len(rs) for rs in rows.values())} per column (ms):")
    print("| part | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for part in PARTS:
        print(f"| {part} | " + " | ".join(f"{medians[n][part] * 1e3:.1f}" for n in names) + " |")
    print("| page faults (minor, per rollout) | "
          + " | ".join(f"{medians[n]['page faults']:.0f}" for n in names) + " |")
    args.out.write_text(json.dumps({
        "sft": str(args.sft), "rollouts": {n: len(rs) for n, rs in rows.items()},
        "episodes": episodes, "medians_s": medians, "machine": platform.processor(),
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
