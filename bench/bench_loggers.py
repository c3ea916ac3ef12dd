"""Per-step cost of each logger (trainer.loggers) on the quickstart, side by side.

Trains ``configs/quickstart.yaml`` (without its supervised warm-up: the loggers do not see it)
for ``--steps`` RL steps once per logger set, in one process, one after the other, with the
same seed: ``jsonl`` alone (the floor), ``+tensorboard`` (today's default), ``+mlflow`` (its
embedded sqlite store in the run folder) and ``+wandb`` (offline). It times every call the
trainer makes into the loggers (``MetricsLogger.log``/``log_table``), the loggers' start (built
with the trainer) and their close (curves, artifacts, the exported model, the summary), and
prints per set: the mean time in the loggers per RL step, its share of the mean step time, the
start and close seconds. The in-call times are what the loggers cost; the step times of
different sets differ by the machine's noise as well. Writes ``bench/results/loggers.json``.

The mlflow and wandb sets need the packages: ``PYTHONPATH=$(bash dev.sh setup-trackers)``.

Usage: .venv/bin/python bench/bench_loggers.py [--steps 6] [--sets jsonl tensorboard mlflow wandb]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rlvr.config import load_config
from rlvr.metrics import MetricsLogger
from rlvr.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
SETS = {"jsonl": ["jsonl"], "tensorboard": ["jsonl", "tensorboard"],
        "mlflow": ["jsonl", "mlflow"], "wandb": ["jsonl", "wandb"]}


def measure(name: str, steps: int, every: int, work: Path) -> dict[str, Any]:
    """Train once with the logger set ``name``; the time spent in its loggers."""
    spent: dict[str, float] = {"log": 0.0, "close": 0.0}
    calls = {"log": 0}
    originals = {m: getattr(MetricsLogger, m) for m in ("log", "log_table", "close")}

    def timed(method: str, bucket: str) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return originals[method](self, *args, **kwargs)
            finally:
                spent[bucket] += time.perf_counter() - t0
                if method == "log":
                    calls["log"] += 1
        return wrapper

    out = work / name
    config = load_config(ROOT / "configs" / "quickstart.yaml", [
        "sft.enabled=false", f"trainer.steps={steps}", f"eval.every={every}", "eval.tasks=64",
        "trainer.progress=false", "trainer.checkpoint_every=0", f"trainer.output_dir={out}",
        f"trainer.loggers=[{','.join(SETS[name])}]"])
    original_init = MetricsLogger.__init__
    start = {"s": 0.0}

    def timed_init(self: Any, *args: Any, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        original_init(self, *args, **kwargs)
        start["s"] = time.perf_counter() - t0

    MetricsLogger.__init__ = timed_init  # type: ignore[method-assign]
    MetricsLogger.log = timed("log", "log")  # type: ignore[method-assign]
    MetricsLogger.log_table = timed("log_table", "log")  # type: ignore[method-assign]
    MetricsLogger.close = timed("close", "close")  # type: ignore[method-assign]
    try:
        result = Trainer(config, log=lambda *_: None).train()
    finally:
        MetricsLogger.__init__ = original_init  # type: ignore[method-assign]
        for method, fn in originals.items():
            setattr(MetricsLogger, method, fn)
    step_s = statistics.mean(h["time/step"] for h in result.history)
    per_step = spent["log"] / max(calls["log"], 1)
    return {"set": name, "loggers": SETS[name], "steps": steps, "eval_every": every,
            "step_s": step_s, "logger_s_per_step": per_step,
            "logger_share_of_step": per_step / step_s, "start_s": start["s"],
            "close_s": spent["close"], "failed": result.failed_loggers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--every", type=int, default=3, help="eval.every (episode tables)")
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "loggers.json"))
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-loggers-") as work:
        for name in args.sets:
            rows.append(measure(name, args.steps, args.every, Path(work)))
            r = rows[-1]
            ms = 1000 * r["logger_s_per_step"]
            print(f"{name:12s} step {r['step_s']:.3f} s | in loggers {ms:8.1f} ms/step "
                  f"({100 * r['logger_share_of_step']:.2f}%) | start {r['start_s']:.1f} s | "
                  f"close {r['close_s']:.1f} s | failed {r['failed']}", flush=True)
    Path(args.out).write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": platform.platform(),
        "cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
