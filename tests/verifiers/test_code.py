"""rlvr.verifiers.code: test specs, the value codec, honest programs through the real sandbox."""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.verifiers.code import (
    AssertTests,
    CallTests,
    SandboxConfig,
    SandboxPool,
    StdioTests,
    protocol,
    run_tests,
    values_equal,
)
from rlvr.verifiers.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=2) as pool:
        yield pool


# ----------------------------------------------------------------------------- specs and args


def test_spec_validation_errors():
    with pytest.raises(InvalidArgumentError, match="entry_point must be a Python identifier"):
        AssertTests("def check(candidate):\n    pass\n", "not an id")
    with pytest.raises(InvalidArgumentError, match="must define check"):
        AssertTests("assert True\n", "f")
    with pytest.raises(InvalidArgumentError, match="does not parse"):
        AssertTests("def check(:\n", "f")
    with pytest.raises(InvalidArgumentError, match=r"StdioTests.cases\[0\] must be a"):
        StdioTests([("1", 2)])
    with pytest.raises(InvalidArgumentError, match="at least one case"):
        StdioTests([])
    with pytest.raises(InvalidArgumentError, match="CallTests.function must be"):
        CallTests("1f", [((), 1)])
    with pytest.raises(InvalidArgumentError, match=r"CallTests.cases must be a tuple or list"):
        CallTests("f", "abc")
    with pytest.raises(InvalidArgumentError,
                       match="^backend: unknown value 'docker'; allowed: auto, bwrap, unshare$"):
        SandboxConfig(backend="docker")
    with pytest.raises(InvalidArgumentError, match="^nproc must be > 0; got 0$") as err:
        SandboxConfig(nproc=0)
    assert err.value.key == "nproc"  # a loader re-raises it under the dotted key the user wrote


def test_specs_accept_lists_and_normalise_to_tuples():
    spec = CallTests("f", [[[1, 2], 3]])
    assert spec.cases == (((1, 2), 3),)
    assert StdioTests([["a", "b"]]).cases == (("a", "b"),)


def test_run_tests_argument_errors(pool):
    spec = CallTests("f", [((), 1)])
    with pytest.raises(InvalidArgumentError, match="program must be a str"):
        pool.run_tests(b"x", spec)
    with pytest.raises(InvalidArgumentError, match="tests must be AssertTests"):
        pool.run_tests("x", [((), 1)])
    with pytest.raises(InvalidArgumentError, match=r"timeout_s must be a number in \(0, 600"):
        pool.run_tests("x", spec, timeout_s=0)
    with pytest.raises(InvalidArgumentError, match="memory_mb must be an int >= 64"):
        pool.run_tests("x", spec, memory_mb=8)
    with pytest.raises(InvalidArgumentError, match=r"CallTests.cases\[0\] is not plain data"):
        CallTests("f", [((object(),), 1)])


def test_values_equal_semantics():
    assert values_equal((1, [2, 3]), [1, (2, 3)])
    assert values_equal(0.1 + 0.2, 0.3)
    assert values_equal(float("nan"), float("nan"))
    assert values_equal(2, 2.0)
    assert not values_equal(True, 1)
    assert not values_equal(1, True)
    assert not values_equal({1, 2}, [1, 2])
    assert not values_equal({"a": 1}, {"a": 2})
    assert not values_equal(1 / 3, 0.33)


# ----------------------------------------------------------------------------- codec and split


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    | st.binary(max_size=8) | st.complex_numbers(allow_nan=False),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    | st.frozensets(st.integers(), max_size=3),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(plain)
def test_codec_round_trips_plain_data(value):
    import json

    back = protocol.decode(json.loads(json.dumps(protocol.encode(value))))
    assert back == value
    assert type(back) is type(value)


def test_codec_refuses_anything_but_exact_builtin_types():
    class MyInt(int):
        pass

    for bad in (MyInt(1), object(), [1, MyInt(2)], {"a": lambda: 1}, range(3)):
        with pytest.raises(protocol.EncodeError, match="not plain data"):
            protocol.encode(bad)
    with pytest.raises(protocol.EncodeError, match="unexpected encoded value"):
        protocol.decode({"a": 1, "b": 2})
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(protocol.EncodeError, match="nested too deeply"):
        protocol.encode(deep)


def test_a_programs_exception_is_reported_alike_by_host_and_tester():
    assert protocol.program_raised("MemoryError", "") == (
        "memory_limit", "the program raised MemoryError: ")
    status, msg = protocol.program_raised("ValueError", "x" * 1000)
    assert status == "runtime_error" and msg.startswith("the program raised ValueError: xx")
    assert len(msg) == 300


def test_split_check_marks_statements_that_use_the_candidate():
    code = (
        "def check(c):\n    import math\n    x = 3\n    assert c(x) == 9\n"
        "    for i in range(3):\n        assert c(i) == i * i\n    assert True\n"
    )
    param, statements = protocol.split_check(code)
    assert param == "c"
    # a statement that does not mention the candidate belongs to the test before it
    assert [t for t, _ in statements] == [False, False, True, True]
    assert statements[-1][1].endswith("\nassert True")
    assert protocol.test_labels(code) == ["assert c(x) == 9", "for i in range(3):"]
    assert protocol.split_check("def check(c):\n    return c(1) == 1\n") is None
    assert protocol.test_labels("def check(c):\n    return\n") == ["check"]


def test_split_check_from_many_threads_never_corrupts_the_parser():
    """CPython 3.11's ast.parse is not thread-safe: a collection that runs a Python finaliser in
    the middle of the AST-to-object conversion lets another thread parse, and one of them raises
    "SystemError: AST constructor recursion depth mismatch" (seen in CI from the verifier pool).
    Without the parse lock this fails within the first few parses on 3.11.7."""
    import sys
    import time

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            time.sleep(0)

    code = "def check(c):\n" + "".join(
        f"    assert c([{', '.join(map(str, range(40)))}]) == {k}\n" for k in range(60)
    )
    errors: list[BaseException] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def parse_many() -> None:
        for _ in range(40):
            for _ in range(50):
                Cycle()
            try:
                assert protocol.split_check(code) is not None
            except BaseException as exc:  # noqa: BLE001 - the failure is what is collected
                errors.append(exc)
                return

    try:
        threads = [threading.Thread(target=parse_many) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []


# ----------------------------------------------------------------------------- honest programs


SQUARE = "def sq(x):\n    return x * x\n"


def test_call_tests_score_is_fraction_passed(pool):
    spec = CallTests("sq", [((2,), 4), ((3,), 9), ((4,), 15), (("a",), None)])
    verdict = pool.run_tests(SQUARE, spec)
    assert verdict.score == 0.5
    assert not verdict.passed
    assert verdict.reason == "wrong_answer"
    statuses = [t["status"] for t in verdict.details["tests"]]
    assert statuses == ["passed", "passed", "wrong_answer", "runtime_error"]
    assert "expected 15, got 16" in verdict.details["tests"][2]["message"]
    assert "TypeError" in verdict.details["tests"][3]["message"]
    assert verdict.details["backend"] == "bwrap"


def test_call_tests_compare_rich_plain_data(pool):
    program = "def f(n):\n    return {'k': (n, [n / 3, {n}]), 'b': b'x', 'c': 1j}\n"
    spec = CallTests("f", [((3,), {"k": [3, (1.0, {3})], "b": b"x", "c": 1j})])
    assert pool.run_tests(program, spec).passed


def test_assert_tests_split_into_statements(pool):
    test_code = (
        "def check(candidate):\n    base = 10\n    assert candidate(1) == 1\n"
        "    assert candidate(base) == 100\n    assert candidate(3) == 10\n"
    )
    verdict = pool.run_tests(SQUARE, AssertTests(test_code, "sq"))
    assert [t["status"] for t in verdict.details["tests"]] == ["passed", "passed", "wrong_answer"]
    assert math.isclose(verdict.score, 2 / 3)
    assert verdict.details["tests"][1]["name"] == "assert candidate(base) == 100"


def test_assert_tests_use_trusted_helpers_and_expect_exceptions(pool):
    program = (
        "def helper(x):\n    return 3\n"  # the program's own helper is never used by the tests
        "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x + 1\n"
    )
    test_code = (
        "def check(candidate):\n    assert helper(candidate(1)) == 3\n"
        "    assert f(2) == 3\n"  # the entry point under its own name is the candidate
        "    try:\n        candidate(-1)\n        assert False\n"
        "    except ValueError as e:\n        assert 'negative' in str(e)\n"
    )
    tests = AssertTests(test_code, "f", helpers="def helper(x):\n    return x + 1\n")
    verdict = pool.run_tests(program, tests)
    assert verdict.passed, verdict.details["tests"]
    with pytest.raises(InvalidArgumentError, match="helper"):
        AssertTests(test_code, "f")  # a helper only the program could provide is refused


def test_assert_tests_whole_check_fallback(pool):
    test_code = "def check(candidate):\n    if candidate(2) != 4:\n        return\n    assert 0\n"
    verdict = pool.run_tests(SQUARE, AssertTests(test_code, "sq"))
    assert [t["name"] for t in verdict.details["tests"]] == ["check"]
    assert verdict.reason == "wrong_answer"


def test_assert_tests_setup_failure_fails_the_rest(pool):
    test_code = "def check(candidate):\n    x = 1 / 0\n    assert candidate(1) == 1\n"
    verdict = pool.run_tests(SQUARE, AssertTests(test_code, "sq"))
    assert verdict.details["tests"][0]["message"].startswith("ZeroDivisionError")


def test_stdio_tests(pool):
    program = "import sys\nn = int(sys.stdin.readline())\nprint(n * 2, '  ')\nprint()\n"
    spec = StdioTests([("2\n", "4\n"), ("5", "10"), ("1", "3"), ("x", "")])
    verdict = pool.run_tests(program, spec)
    statuses = [t["status"] for t in verdict.details["tests"]]
    assert statuses == ["passed", "passed", "wrong_answer", "runtime_error"]
    assert "ValueError" in verdict.details["stderr"]
    assert verdict.details["tests"][3]["message"] == "the program exited with status 1"


def test_stdio_large_input_not_read_and_exit_codes(pool):
    spec = StdioTests([("x" * (4 << 20), "hi")])
    assert pool.run_tests("print('hi')\n", spec).passed
    assert pool.run_tests("print('hi')\nraise SystemExit(3)\n", spec).reason == "runtime_error"
    assert pool.run_tests("import sys\nprint('hi')\nsys.exit(0)\n", spec).passed


def test_empty_stdin_gets_end_of_file_at_once(pool):
    # An empty payload used to leave the write end open: the program blocked until the timeout.
    program = "import sys\nprint(len(sys.stdin.read()))\n"
    verdict = pool.run_tests(program, StdioTests([("", "0")]), timeout_s=3)
    assert verdict.reason == "correct"
    assert verdict.details["elapsed_s"] < 1.5
    verdict = pool.run_tests("input()\n", StdioTests([("", "")]), timeout_s=3)
    assert verdict.reason == "runtime_error"
    assert "EOFError" in verdict.details["stderr"]
    assert verdict.details["elapsed_s"] < 1.5


def test_multi_line_stdin_is_read_to_the_end(pool):
    program = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"
    spec = StdioTests([("1\n2\n3\n", "6"), ("4\n5", "9"), ("\n".join(["7"] * 20000), "140000")])
    verdict = pool.run_tests(program, spec, timeout_s=5)
    assert [t["status"] for t in verdict.details["tests"]] == ["passed"] * 3


def test_call_and_assert_programs_see_an_empty_stdin(pool):
    program = "import sys\ndef f():\n    return input()\ndef g():\n    return sys.stdin.read()\n"
    verdict = pool.run_tests(program, CallTests("f", [((), "x")]), timeout_s=3)
    assert verdict.reason == "runtime_error"
    assert "EOFError" in verdict.details["tests"][0]["message"]
    assert verdict.details["elapsed_s"] < 1.5
    assert pool.run_tests(program, CallTests("g", [((), "")]), timeout_s=3).passed
    test_code = "def check(candidate):\n    assert candidate() == ''\n"
    assert pool.run_tests(program, AssertTests(test_code, "g"), timeout_s=3).passed


def test_empty_program_does_not_hang(pool):
    verdict = pool.run_tests("", CallTests("f", [((), 1)]), timeout_s=3)
    assert verdict.reason == "runtime_error"
    assert verdict.details["elapsed_s"] < 1.5
    assert pool.run_tests("", StdioTests([("", "")]), timeout_s=3).passed


def test_syntax_error_is_reported_for_every_mode(pool):
    for spec in (CallTests("f", [((), 1)]), StdioTests([("", "")]),
                 AssertTests("def check(c):\n    assert c() == 1\n", "f")):
        verdict = pool.run_tests("def f(:\n", spec)
        assert verdict.reason == "syntax_error"
        assert "SyntaxError" in verdict.details["tests"][0]["message"]


def test_memory_and_time_limits_are_per_call(pool):
    program = "def f():\n    return len(bytearray(200 * 2 ** 20))\n"
    spec = CallTests("f", [((), 200 * 2 ** 20)])
    assert pool.run_tests(program, spec, memory_mb=512).passed
    assert pool.run_tests(program, spec, memory_mb=128).reason == "memory_limit"
    sleepy = "import time\ndef f():\n    time.sleep(0.3)\n    return 1\n"
    assert pool.run_tests(sleepy, CallTests("f", [((), 1)]), timeout_s=2).passed
    assert pool.run_tests(sleepy, CallTests("f", [((), 1)]), timeout_s=0.1).reason == "timeout"


def test_stdout_is_captured_and_capped(pool):
    program = "print('hello')\ndef f():\n    print('in call')\n    return 1\n"
    verdict = pool.run_tests(program, CallTests("f", [((), 1)]))
    assert verdict.details["stdout"] == "hello\nin call\n"


def test_thread_safe_under_concurrency(pool):
    def one(i: int) -> bool:
        spec = CallTests("sq", [((i,), i * i)])
        return pool.run_tests(SQUARE, spec).passed

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(one, range(40)))


def test_sandbox_survives_the_thread_that_started_it():
    with SandboxPool(size=1) as pool:
        spec = CallTests("sq", [((3,), 9)])
        thread = threading.Thread(target=lambda: pool.run_tests(SQUARE, spec))
        thread.start()
        thread.join()
        worker = pool._workers._idle[0]
        assert pool.run_tests(SQUARE, spec).passed
        assert pool._workers._idle[0] is worker
        assert worker.proc.poll() is None


def test_module_level_run_tests():
    assert run_tests(SQUARE, CallTests("sq", [((5,), 25)])).passed


def test_the_sandbox_is_sent_every_module_of_the_harness():
    # Inside, only what the bootstrap installs can be imported: one left out fails the start.
    import pkgutil

    from rlvr.verifiers.code import harness, sandbox

    sent = [module.__name__ for module in sandbox._SANDBOX_MODULES]
    wanted = {f"{harness.__name__}.{m.name}" for m in pkgutil.iter_modules(harness.__path__)}
    assert set(sent) == wanted | {harness.__name__, protocol.__name__}
    assert sent.index(harness.__name__) < min(sent.index(name) for name in wanted)


def test_broken_test_module_is_a_sandbox_error(pool):
    spec = AssertTests("import no_such_module\ndef check(c):\n    assert c(1)\n", "sq")
    verdict = pool.run_tests(SQUARE, spec)
    assert verdict.reason == "sandbox_error"
    assert "ModuleNotFoundError" in verdict.details["tests"][0]["message"]


def test_works_when_the_host_has_more_than_1024_open_files():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2100:
        pytest.skip("needs RLIMIT_NOFILE >= 2100")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2100), hard))
    hogs = [open(os.devnull) for _ in range(1100)]
    try:
        with SandboxPool(size=1) as pool:
            assert pool.run_tests(SQUARE, CallTests("sq", [((3,), 9)])).passed
            assert pool.run_tests("print(1)", StdioTests([("", "1")])).passed
    finally:
        for fh in hogs:
            fh.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_unusable_interpreter_raises_sandbox_unavailable():
    from rlvr.verifiers.errors import SandboxUnavailableError

    with SandboxPool(size=1, config=SandboxConfig(python="/nonexistent/python3")) as pool:
        with pytest.raises(SandboxUnavailableError, match=r"sandbox \(bwrap\) failed to start"):
            pool.run_tests(SQUARE, CallTests("sq", [((3,), 9)]))
