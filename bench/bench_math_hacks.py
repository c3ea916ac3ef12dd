"""Count how rlvr/Math-v0 scores the math hack set (tests/verifiers/data/math_hacks.jsonl).

Usage:
    .venv/bin/python bench/bench_math_hacks.py [--out bench/results/math_hacks.json]

Each row is a response in one answer format (boxed, plain, auto) with its gold answer and the
label (should it score 1?). The rows are scored the way the env scores a response for its reward
(``MathEnv._verify``, which works on any version of the env), and the script prints the counts
the red team reported: wrong answers scored right, responses that raised, right answers scored
wrong, per class, with the rows of each.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "verifiers" / "data" / "math_hacks.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from rlvr.envs.math_env import MathEnv
    from rlvr.verifiers.math import warm_up

    warm_up()  # a sympy worker's start-up is not a check's time

    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    envs = {fmt: MathEnv(answer_format=fmt) for fmt in ("boxed", "plain", "auto")}
    outcome: dict[str, list[int]] = {"wrong_accepted": [], "crashed": [], "right_rejected": []}
    by_class: Counter[str] = Counter()
    slowest = (0.0, 0)
    for row in rows:
        start = time.perf_counter()
        try:
            verdict = envs[row["format"]]._verify(row["response"], {"answer": row["gold"]})
        except Exception:  # noqa: BLE001 - counting crashes is the point
            outcome["crashed"].append(row["id"])
            by_class[f"{row['class']}/crashed"] += 1
            continue
        finally:
            slowest = max(slowest, (time.perf_counter() - start, row["id"]))
        if verdict.passed and not row["expected"]:
            outcome["wrong_accepted"].append(row["id"])
            by_class[f"{row['class']}/wrong_accepted"] += 1
        elif not verdict.passed and row["expected"]:
            outcome["right_rejected"].append(row["id"])
            by_class[f"{row['class']}/right_rejected"] += 1
    wrong = sum(not r["expected"] for r in rows)
    print(f"{len(rows)} rows: {wrong} wrong answers, {len(rows) - wrong} right ones")
    for key, ids in outcome.items():
        print(f"{key:<16}{len(ids):>4}  rows {ids}")
    print(f"slowest check: {slowest[0]:.3f} s (row {slowest[1]})")
    for key, count in sorted(by_class.items()):
        print(f"  {key:<34}{count:>3}")
    if args.out:
        payload = {
            "command": "python bench/bench_math_hacks.py",
            "python": platform.python_version(),
            "rows": len(rows),
            "wrong_rows": wrong,
            "counts": {key: len(ids) for key, ids in outcome.items()},
            "ids": outcome,
            "by_class": dict(sorted(by_class.items())),
            "slowest_check_s": slowest[0],
            "slowest_row": slowest[1],
        }
        args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
