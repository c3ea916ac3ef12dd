"""Benchmark: rlvr.verifiers.math vs HuggingFace math-verify on the two labelled answer sets.

Usage:
    .venv/bin/python bench/bench_math.py [--repeats 3] [--sets labelled natural]
                                         [--out bench/results/math.json]

Both graders see the same rows and must reproduce the hand-written label. The sets, in
tests/verifiers/data/:

- ``labelled`` (math_labelled.jsonl): written together with the checker; the tests require 100%.
- ``natural`` (math_natural.jsonl, from make_math_natural.py): answers as models write them
  (LaTeX-only and bare-expression responses, complex numbers, hedges, success claims), written
  before the checker was tuned and not tuned against since: an honest held-out measure.

Two modes:

- ``response``: the whole model response (answer extraction + comparison);
- ``answer``: only the predicted answer string (``verify_answer``: comparison and the guard
  against restated questions, no extraction), which isolates equivalence
  checking from extraction formats that math-verify does not read (``\fbox``, ``####``,
  "Answer: <latex>" outside ``$...$``).

Reported: accuracy (overall and per category) and pairs per second (wall clock, one thread, best
of --repeats passes; our parse cache is cleared before every pass so that it cannot help).
math-verify is called as its README shows, ``verify(gold, answer)`` (gold first) with default
configs: ``gold = parse("$" + gold + "$")``, ``answer = parse(response)`` or
``parse("$" + answer + "$")``. Its timeouts use SIGALRM, so it only works in the main thread (this
script runs there). Timings are noisy when other jobs share the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "tests" / "verifiers" / "data"
SETS = {"labelled": DATA_DIR / "math_labelled.jsonl", "natural": DATA_DIR / "math_natural.jsonl"}


def load_rows(name: str) -> list[dict[str, Any]]:
    with SETS[name].open() as f:
        return [json.loads(line) for line in f if line.strip()]


Judge = Callable[[dict[str, Any]], bool]


def ours(mode: str) -> Judge:
    from rlvr.verifiers.math import verify, verify_answer, warm_up

    warm_up()
    if mode == "response":
        return lambda row: verify(row["response"], row["gold"]).passed
    return lambda row: verify_answer(row["answer"], row["gold"]).passed


def math_verify(mode: str) -> Judge:
    from math_verify import parse, verify

    def judge(row: dict[str, Any]) -> bool:
        gold = parse(f"${row['gold']}$") or parse(row["gold"])
        text = row["response"] if mode == "response" else f"${row['answer']}$"
        return bool(verify(gold, parse(text)))

    return judge


def run(judge: Judge, rows: list[dict[str, Any]], repeats: int) -> dict:
    from rlvr.verifiers.math import grader

    best = float("inf")
    outcomes: list[bool] = []
    for _ in range(repeats):
        grader.clear_cache()  # here and in the idle workers, where the decisions run
        start = time.perf_counter()
        outcomes = [judge(r) for r in rows]
        best = min(best, time.perf_counter() - start)
    correct = [o == r["expected"] for o, r in zip(outcomes, rows)]
    by_category: dict[str, list[bool]] = defaultdict(list)
    for ok, row in zip(correct, rows):
        by_category[row["category"]].append(ok)
    return {
        "accuracy": sum(correct) / len(rows),
        "pairs_per_s": len(rows) / best,
        "seconds_per_pass": best,
        "by_category": {k: sum(v) / len(v) for k, v in sorted(by_category.items())},
        "errors": [r["id"] for ok, r in zip(correct, rows) if not ok],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sets", nargs="+", choices=sorted(SETS), default=list(SETS))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "math.json")
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    for name in args.sets:
        all_rows = load_rows(name)
        for mode in ("response", "answer"):
            rows = [r for r in all_rows if mode == "response" or r["answer"] is not None]
            key = f"{name}/{mode}"
            results[key] = {
                "rows": len(rows),
                "rlvr.verifiers.math": run(ours(mode), rows, args.repeats),
                "math-verify": run(math_verify(mode), rows, args.repeats),
            }
            print_table(key, rows, results[key])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": f"python bench/bench_math.py --repeats {args.repeats} "
                   f"--sets {' '.join(args.sets)}",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "results": results,
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


def print_table(mode: str, rows: list[dict[str, Any]], result: dict[str, Any]) -> None:
    names = ("rlvr.verifiers.math", "math-verify")
    falses = sum(not r["expected"] for r in rows)
    print(f"\n== {mode} ({len(rows)} labelled pairs, {falses} expected False) ==")
    print(f"{'category':<18}{'rlvr.verifiers.math':>16}{'math-verify':>14}")
    for category in sorted(result[names[0]]["by_category"]):
        line = "".join(f"{result[n]['by_category'][category]:>15.1%}" for n in names)
        print(f"{category:<18}{line}")
    print("-" * 48)
    for key, fmt in (("accuracy", "{:>15.1%}"), ("pairs_per_s", "{:>15.0f}")):
        print(f"{key:<18}" + "".join(fmt.format(result[n][key]) for n in names))
    for name in names:
        wrong = result[name]["errors"]
        print(f"{name} disagrees with the label on {len(wrong)} rows: {wrong[:30]}")


if __name__ == "__main__":
    main()
