"""Asynchronous RL vs the synchronous loop: steps/s and who waits for whom.

``--workload quickstart`` (the default: ``configs/quickstart.yaml``) or ``tool`` (the tool
quickstart, ``configs/tool_quickstart.yaml``: multi-turn calculator episodes). Warms the workload's
policy up once (or reuses ``--warm DIR``'s warm-up, made there on first use), then trains it from
that same policy for ``--steps`` RL steps at each ``rollout.max_staleness`` in ``--ks`` (one after
the other, the same seed), and prints per k: RL steps/s, the engine's and the learner's idle
fractions, the held-out accuracy before and after RL; the JSON adds the mean stage times
(``rollout_ms``, ``prepare_ms``, ``update_ms``, ``sync_ms``, ``step_ms``). k = 0 is today's loop
(its idle fractions come from the stage times: the engine idles outside ``time/rollout``, the
learner inside it); k >= 1 adds ``actor.tis_cap`` (decoupled PPO needs it) and reads the
``async/*`` metrics; ``--inflight`` runs each k >= 1 once per ``rollout.inflight_update`` given
(``off``, ``continue``, ``abort``) and adds the stale-token fraction, the in-flight updates and the
regenerated generations; ``cores_busy`` is the process's CPU time over the wall time of the RL
steps (2.0: both cores busy throughout), ``cpu_ms_<group>`` its CPU per step by thread
(``learner``: the main thread, ``engine``: the engine's worker, ``producer``, ``others``). Before
the table it prints where a k = 0 step's time goes (rollout vs prepare + update + sync, the shares
of ``time/step``) and the best speed-up an overlap of the two could give (one over the larger
share). Writes ``bench/results/bench_async.json`` (``--out``).

``--tool-latency S`` (tool workload) trains RL on ``examples/calculator_agent.py``'s agent with a
calculator that answers after S seconds: a tool behind a network, which costs wall time and no CPU.

Usage: .venv/bin/python bench/bench_async.py [--workload quickstart|tool] [--ks 0 1 2]
    [--inflight off continue abort] [--steps 40] [--warm DIR] [--tool-latency S]
    [--override k=v ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rlvr.config import load_config
from rlvr.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "bench_async.json"
WORKLOADS = {"quickstart": REPO / "configs" / "quickstart.yaml",
             "tool": REPO / "configs" / "tool_quickstart.yaml"}
QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.plot=false",
         "trainer.export_at_end=false", "trainer.checkpoint_every=0", "eval.every=0"]


def _mean(values: list[float]) -> float:
    return sum(values) / max(len(values), 1)


#: Threads by name: the learner trains on the main thread; the engine decodes on its worker.
GROUPS = {"MainThread": "learner", "TransformersEngine": "engine",
          "rlvr-async-rollout": "producer", "rlvr-inflight-weights": "producer"}


SLOW_ENV = "bench/SlowCalculator-v0"


def register_slow_calculator(latency: float) -> None:
    """``SLOW_ENV``: the tool quickstart's task as ``examples/calculator_agent.py``'s agent, whose
    calculator answers after ``latency`` seconds (a tool behind a network: wall time, no CPU)."""
    import asyncio

    from examples.calculator_agent import CALL, calculator
    from rlvr.envs import register_agent

    async def agent(client: Any, task: Any) -> str:
        messages, text = list(task.messages), ""
        for _ in range(3):
            reply = await client.chat.completions.create(model="policy", messages=messages)
            text = reply.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": text})
            calls = CALL.findall(text)
            if not calls:
                return text
            for body in calls:
                try:
                    arguments = json.loads(body)["arguments"]
                except (ValueError, KeyError, TypeError):
                    arguments = {}
                await asyncio.sleep(latency)
                messages.append({"role": "tool", "name": "calculator",
                                 "content": calculator(arguments)})
        return text

    register_agent(SLOW_ENV, agent, env="rlvr/CompactToolUse-v0")


def _thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of every thread of this process, by native id (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def run(k: int, out: Path, warm: Path, steps: int, extra: list[str],
        inflight: str = "off", config_path: Path = WORKLOADS["quickstart"]) -> dict[str, Any]:
    """Train ``steps`` steps at staleness ``k`` from the warm-up in ``warm``; the numbers."""
    overrides = QUIET + [f"model.path={warm}", "sft.enabled=false",
                         f"trainer.output_dir={out}", f"trainer.steps={steps}",
                         f"rollout.max_staleness={k}", *extra]
    if k:
        overrides += ["actor.tis_cap=2.0", f"rollout.inflight_update={inflight}"]
    config = load_config(config_path, overrides)
    trainer = Trainer(config, log=lambda *_: None)
    marks: list[tuple[float, float]] = []  # (wall, process CPU) at each logged step
    threads: list[dict[int, float]] = []  # CPU per thread at each logged step
    names: dict[int, str] = {}
    log_step = trainer.logger.log

    def log(step: int, metrics: Any) -> None:
        marks.append((time.perf_counter(), time.process_time()))
        threads.append(_thread_cpu())
        names.update({t.native_id: t.name for t in threading.enumerate() if t.native_id})
        log_step(step, metrics)

    trainer.logger.log = log  # type: ignore[method-assign]
    result = trainer.train()
    h = result.history
    # cores the process kept busy from the step-0 evaluation's log to the last step's
    (w0, c0), (w1, c1) = marks[0], marks[min(steps, len(marks) - 1)]
    cores_busy = (c1 - c0) / max(w1 - w0, 1e-9)
    # CPU ms per RL step by thread group (others: OpenMP workers, env and helper threads)
    t0, t1 = threads[0], threads[min(steps, len(threads) - 1)]
    cpu_ms = {"learner": 0.0, "engine": 0.0, "producer": 0.0, "others": 0.0}
    for tid, seconds in t1.items():
        group = GROUPS.get(names.get(tid, ""), "others")
        cpu_ms[group] += 1000 * (seconds - t0.get(tid, 0.0)) / steps
    if k:
        engine_idle = _mean([m["async/engine_idle_frac"] for m in h])
        learner_idle = _mean([m["async/learner_idle_frac"] for m in h])
        extra_metrics = {"staleness_mean": _mean([m["async/staleness_mean"] for m in h]),
                         "dropped": h[-1]["async/dropped_stale"] + h[-1]["async/dropped_untrained"],
                         "stale_token_frac": _mean([m["async/stale_token_frac"] for m in h]),
                         "inflight_updates": h[-1].get("async/inflight_updates", 0.0),
                         "regenerated": h[-1].get("async/regenerated", 0.0)}
    else:
        step_s = sum(m["time/step"] for m in h)
        rollout_s = sum(m["time/rollout"] for m in h)
        engine_idle, learner_idle = 1 - rollout_s / step_s, rollout_s / step_s
        extra_metrics = {"staleness_mean": 0.0, "dropped": 0.0, "stale_token_frac": 0.0,
                         "inflight_updates": 0.0, "regenerated": 0.0}
    learner_ms = {f"{stage}_ms": 1000 * _mean([m.get(f"time/{stage}", 0.0) for m in h])
                  for stage in ("rollout", "prepare", "update", "sync", "step")}
    return {"k": k, "inflight": inflight if k else "off", "steps": steps,
            "rl_seconds": result.rl_seconds, **learner_ms,
            "steps_per_s": steps / result.rl_seconds, "cores_busy": cores_busy,
            **{f"cpu_ms_{group}": ms for group, ms in cpu_ms.items()},
            "engine_idle": engine_idle,
            "learner_idle": learner_idle, "heldout_before": result.warmup_accuracy or 0.0,
            "heldout_after": result.final_accuracy or 0.0, **extra_metrics}


def main() -> None:
    """Warm up once, run every k, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="quickstart")
    parser.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2],
                        help="staleness bounds, run in this order (repeats allowed: 0 1 0 1)")
    parser.add_argument("--inflight", nargs="+", default=["off"],
                        choices=["off", "continue", "abort"],
                        help="rollout.inflight_update values to run at each k >= 1")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--override", nargs="*", default=[], help="extra config overrides")
    parser.add_argument("--tool-latency", type=float, default=None, metavar="SECONDS",
                        help="tool workload: RL on the calculator agent whose tool answers after"
                             " SECONDS (the warm-up stays the built-in env's)")
    parser.add_argument("--warm", type=Path, default=None,
                        help="keep the warm-up here: reused when DIR/sft_model exists")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    config_path = WORKLOADS[args.workload]
    rows: list[dict[str, Any]] = []
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        warm_dir = args.warm or Path(tmp) / "warm"
        warm_seconds = 0.0
        if not (warm_dir / "sft_model").is_dir():
            config = load_config(config_path,
                                 QUIET + [f"trainer.output_dir={warm_dir}", *args.override])
            t0 = time.perf_counter()
            Trainer(config, log=lambda *_: None).close()  # the warm-up runs in the constructor
            warm_seconds = time.perf_counter() - t0
        extra = list(args.override)
        if args.tool_latency is not None:
            if args.workload != "tool":
                parser.error("--tool-latency needs --workload tool")
            register_slow_calculator(args.tool_latency)
            extra.append(f"env.id={SLOW_ENV}")
        for k in args.ks:
            for mode in args.inflight if k else ["off"]:
                rows.append(run(k, Path(tmp) / f"{len(rows)}-k{k}-{mode}", warm_dir / "sft_model",
                                args.steps, extra, mode, config_path))
                print(json.dumps(rows[-1]), flush=True)
    for r in rows:
        if r["k"] == 0:  # where the synchronous step's time goes; the best overlap
            learner = r["prepare_ms"] + r["update_ms"] + r["sync_ms"]
            r["best_overlap"] = r["step_ms"] / max(r["rollout_ms"], learner)
            print(f"k = 0, per step: rollout {r['rollout_ms']:.0f} ms "
                  f"({100 * r['rollout_ms'] / r['step_ms']:.0f}%), prepare "
                  f"{r['prepare_ms']:.0f} + update {r['update_ms']:.0f} + sync "
                  f"{r['sync_ms']:.0f} ms ({100 * learner / r['step_ms']:.0f}%), step "
                  f"{r['step_ms']:.0f} ms: the best overlap gives {r['best_overlap']:.2f}x")
    base = rows[0]["steps_per_s"]
    print("| k | in flight | RL steps/s | vs first | engine idle | learner idle | staleness mean |"
          " stale tokens | in-flight updates | regenerated | dropped | cores busy |"
          " held-out before -> after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['k']} | {r['inflight']} | {r['steps_per_s']:.2f} | "
              f"{r['steps_per_s'] / base:.2f}x | "
              f"{100 * r['engine_idle']:.0f}% | {100 * r['learner_idle']:.0f}% | "
              f"{r['staleness_mean']:.2f} | {100 * r['stale_token_frac']:.0f}% | "
              f"{r['inflight_updates']:.0f} | {r['regenerated']:.0f} | {r['dropped']:.0f} | "
              f"{r['cores_busy']:.2f} | "
              f"{100 * r['heldout_before']:.1f}% -> {100 * r['heldout_after']:.1f}% |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "workload": args.workload, "tool_latency": args.tool_latency,
        "overrides": args.override, "steps": args.steps,
        "warmup_seconds": warm_seconds, "rows": rows,
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "load_at_start": load_at_start,
        "load_at_end": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }, indent=1))


if __name__ == "__main__":
    main()
