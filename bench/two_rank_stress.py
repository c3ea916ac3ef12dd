"""Two-rank ``rlvr train`` runs, repeated beside busy processes: how many end cleanly.

A rank that dies at exit (a C++ ``std::terminate``, SIGABRT: "terminate called without an
active exception") shows up only now and then, and more often when other processes compete for
the cores. This starts ``--busy`` spinning processes (``while True: pass``), then runs the
two-rank gloo run of ``tests/rlvr/test_trainer.py::test_two_gloo_ranks_follow_the_one_rank_curve``
(``torchrun --nproc_per_node=2 -m rlvr.cli train``, 3 steps from a small warmed-up tiny model)
``--runs`` times in a row, and prints one line per run (exit status, seconds, the first error of
a failed run) and the count of passes. A run passes when torchrun exits with 0 and rank 0 wrote
the 3 steps' metrics.

``--core-dumps DIR`` lets the ranks write core files into DIR (``ulimit -c unlimited``; the
kernel's ``core_pattern`` must be a relative name such as ``core``): ``gdb python CORE`` then
shows the native stack of the thread that aborted.

Usage: .venv/bin/python bench/two_rank_stress.py [--runs 20] [--busy 2] [--steps 3]
    [--work DIR] [--core-dumps DIR] [--out bench/results/two_rank_stress.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "rlvr"))

from trainer_helpers import QUIET, SMALL_MODEL  # noqa: E402

from rlvr.config import load_config  # noqa: E402
from rlvr.config.loader import dump_config  # noqa: E402
from rlvr.metrics import read_jsonl  # noqa: E402


def warm_model(work: Path) -> Path:
    """The warmed-up small model of ``test_trainer.py``'s ``warm_model`` fixture (made once)."""
    out = work / "warm"
    if not (out / "sft_model" / "config.json").exists():
        from rlvr.trainer import train

        config = load_config(REPO / "configs" / "quickstart.yaml", SMALL_MODEL + QUIET + [
            f"trainer.output_dir={out}", "trainer.steps=1", "sft.max_steps=60", "sft.lr=3e-3",
            "sft.eval_every=0", "sft.target_accuracy=null", "sft.eval_tasks=8", "eval.tasks=8",
            "rollout.prompts_per_step=2", "rollout.group_size=2", "trainer.overwrite=true",
        ])
        train(config, log=lambda *_: None)
    return out / "sft_model"


def run_config(model: Path, out: Path, steps: int) -> Path:
    """The two-rank test's config (``run_overrides`` of ``test_trainer.py``), written to YAML."""
    config = load_config(REPO / "configs" / "quickstart.yaml", [
        f"model.path={model}", "sft.enabled=false", f"trainer.output_dir={out}",
        "env.kwargs.format_reward=0.5", "rollout.prompts_per_step=4", "rollout.group_size=4",
        "actor.optim.lr=3e-3", "actor.optim.schedule=constant", "actor.micro_batch_size=8",
        "eval.tasks=8", "eval.every=0", f"trainer.steps={steps}", "trainer.overwrite=true",
        *QUIET,
    ])
    path = out.with_suffix(".yaml")
    dump_config(config, path)
    return path


def first_error(text: str, lines: int = 12) -> str:
    """The first error report of a rank in ``text`` (a C++ abort, a fatal signal, a traceback).

    torchrun's own traceback (it only reports that a worker failed) is the fallback.
    """
    rows = text.splitlines()
    for marks in (r"terminate called|Fatal Python error|Signal \d+ \(SIG",
                  r"^\[rank\d\]:.*(Traceback|Error)", r"Traceback \(most recent call last\)"):
        first = next((i for i, line in enumerate(rows) if re.search(marks, line)), None)
        if first is not None:
            return "\n".join(rows[first:first + lines])
    return ""


def one_run(config: Path, out: Path, steps: int, core_dir: Path | None,
            timeout: float) -> dict:
    """One ``torchrun`` launch; its exit status, seconds, metrics steps and first error."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")

    def limits() -> None:
        if core_dir is not None:
            resource.setrlimit(resource.RLIMIT_CORE,
                               (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "rlvr.cli", "train", str(config)],
        cwd=core_dir or REPO, env=dict(env, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=limits)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output += f"\n[two_rank_stress] timed out after {timeout} s"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    seconds = time.monotonic() - start
    metrics = out / "metrics.jsonl"
    logged = sorted({r["step"] for r in read_jsonl(metrics) if "reward/mean" in r}) \
        if metrics.exists() else []
    ok = proc.returncode == 0 and logged == list(range(1, steps + 1))
    return {"rc": proc.returncode, "seconds": round(seconds, 1), "steps": logged, "ok": ok,
            "error": "" if ok else (first_error(output) or output[-1500:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--busy", type=int, default=2, help="spinning processes beside the runs")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=400.0, help="seconds per run")
    parser.add_argument("--work", type=Path, default=None,
                        help="keeps the warm model between invocations (default: a temp dir)")
    parser.add_argument("--core-dumps", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" /
                        "two_rank_stress.json")
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="two_rank_stress_"))
    work.mkdir(parents=True, exist_ok=True)
    model = warm_model(work)
    if args.core_dumps is not None:
        args.core_dumps.mkdir(parents=True, exist_ok=True)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.busy)]
    results = []
    try:
        for i in range(args.runs):
            out = work / f"run{i}"
            config = run_config(model, out, args.steps)
            result = one_run(config, out, args.steps, args.core_dumps, args.timeout)
            results.append(result)
            status = "pass" if result["ok"] else f"FAIL (exit {result['rc']})"
            print(f"run {i + 1}/{args.runs}: {status} in {result['seconds']} s", flush=True)
            if not result["ok"]:
                print("  " + result["error"].replace("\n", "\n  "), flush=True)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    passes = sum(r["ok"] for r in results)
    print(f"{passes}/{len(results)} two-rank runs passed beside {args.busy} busy processes "
          f"({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "runs": len(results), "passes": passes, "busy": args.busy, "steps": args.steps,
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "results": results}, indent=1) + "\n")
    sys.exit(0 if passes == len(results) else 1)


if __name__ == "__main__":
    main()
