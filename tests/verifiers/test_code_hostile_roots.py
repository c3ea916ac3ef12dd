"""Hostile programs aimed at the sandbox's design, one (or a few) per root cause: each passed or
escaped an earlier design, and each must now fail (or be contained) for the stated reason."""

from __future__ import annotations

import json
import os
import resource
import socket
import textwrap
import threading
import time
from pathlib import Path

import pytest
from test_code_helpers import wait_no_strays

from rlvr.verifiers.code import AssertTests, CallTests, SandboxPool, StdioTests, values_equal
from rlvr.verifiers.errors import InvalidArgumentError

EMPTY = CallTests("f", [((), [])])  # "f() lists what it managed to do": [] = the defence held
GOOD_F = "def f(x):\n    return x + 1\n"
F = CallTests("f", [((1,), 2), ((2,), 3)])


def p(src: str) -> str:
    return textwrap.dedent(src).strip("\n") + "\n"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=2) as pool:
        yield pool


def run(pool: SandboxPool, program: str, tests: object, timeout_s: float = 2.0,
        memory_mb: int = 256):
    start = time.monotonic()
    verdict = pool.run_tests(program, tests, timeout_s=timeout_s, memory_mb=memory_mb)
    assert time.monotonic() - start < timeout_s + 1.0
    assert wait_no_strays() == []
    return verdict


# ------------------------------------------------------------------ 1. inf equals every number


def test_non_finite_results_match_only_themselves(pool):
    program = "def add(*a):\n    return float('inf')\n"
    for expected in (3, 3.5, -1e300):
        verdict = run(pool, program, CallTests("add", [((1, 2), expected)]))
        assert verdict.reason == "wrong_answer", (expected, verdict.details["tests"])
    nan = "def add(*a):\n    return float('nan')\n"
    assert run(pool, nan, CallTests("add", [((1, 2), 3.0)])).reason == "wrong_answer"
    assert values_equal(float("inf"), float("inf"))
    assert not values_equal(float("-inf"), float("inf"))
    assert not values_equal(complex(float("inf"), 0), complex(1, 0))
    # an exact-integer answer is not matched by a float approximation (a float answer is)
    assert values_equal(3.0, 3) and not values_equal(3.0000001, 3)
    assert values_equal(3.0000001, 3.0) and values_equal(3, 3.0)
    assert not values_equal(10 ** 400, 1.0)  # never raises OverflowError


def test_inf_passes_none_of_the_shipped_call_tasks():
    tasks = Path(__file__).parents[2] / "envs" / "tasks" / "data" / "code_tasks.jsonl"
    rows = [json.loads(line) for line in tasks.read_text().splitlines() if line.strip()]
    calls = [r["tests"]["cases"] for r in rows if r["tests"]["kind"] == "call"]
    assert calls
    for value in (float("inf"), float("-inf"), float("nan")):
        fooled = [c for c in calls if all(values_equal(value, expected) for _, expected in c)]
        assert fooled == [], (value, fooled[:1])


# ------------------------------------------------------------------ 2. builtins shadowed


def test_program_names_never_shadow_the_testers_builtins(pool):
    program = p("""
        def abs(x):
            return 2
        def len(x):
            return 3
        def all(x):
            return True
        def sorted(x, *a, **k):
            return [1, 2, 3]
        def tuple(x):
            return (1,)
        def range(*a):
            return []
        def f(x):
            return 0
        """)
    tests = AssertTests(p("""
        def check(candidate):
            assert abs(candidate(-2)) == 2
            assert len(candidate([1, 2, 3])) == 3
            assert all(candidate(i) == i for i in [1, 2])
            assert sorted(candidate([3, 1, 2])) == [1, 2, 3]
            assert tuple(candidate((1,))) == (1,)
            for i in range(3):
                assert candidate(i) == i + 1
        """), "f")
    verdict = run(pool, program, tests)
    assert verdict.score == 0.0, verdict.details["tests"]


# ------------------------------------------------------------------ 3. dropped failing statements


@pytest.mark.parametrize("body", [
    "r = candidate(2)\n    assert r == 3\n",
    "f = candidate\n    assert f(1) == 2\n    assert f(2) == 3\n",
    "assert candidate(1) == 2\n    r = candidate(2)\n    assert r == 3\n",
])
def test_statements_after_a_test_cannot_fail_silently(pool, body):
    tests = AssertTests(f"def check(candidate):\n    {body}", "f")
    for program in ("", "def f(x):\n    return None\n"):
        verdict = run(pool, program, tests)
        assert verdict.score == 0.0, verdict.details["tests"]
    assert run(pool, GOOD_F, tests).passed


def test_in_place_tests_are_refused():
    with pytest.raises(InvalidArgumentError, match="in-place"):
        AssertTests("def check(candidate):\n    xs = [3, 1]\n    candidate(xs)\n"
                    "    assert xs == [1, 3]\n", "f")
    with pytest.raises(InvalidArgumentError, match="in-place"):
        AssertTests("def check(candidate):\n    g = candidate\n    xs = [3, 1]\n    g(xs)\n"
                    "    assert xs == [1, 3]\n", "f")
    # a bare call whose argument is not read again is fine (it tests that nothing raises),
    # and so is one that expects an exception
    AssertTests("def check(candidate):\n    candidate([1])\n    assert candidate([]) == 0\n", "f")
    AssertTests("def check(candidate):\n    xs = [-1]\n    try:\n        candidate(xs)\n"
                "        assert False\n    except ValueError:\n        pass\n"
                "    assert candidate(xs[1:]) == 0\n", "f")


# ------------------------------------------------------------------ 4. StopIteration


def test_program_exceptions_cannot_end_the_tests_iteration(pool):
    program = "def f(x):\n    raise StopIteration\n"
    tests = AssertTests("def check(candidate):\n    assert all(map(candidate, [1, 2, 3]))\n", "f")
    verdict = run(pool, program, tests)
    assert verdict.reason == "runtime_error", verdict.details["tests"]
    assert "StopIteration" in verdict.details["tests"][0]["message"]
    expects = AssertTests(p("""
        def check(candidate):
            try:
                candidate(-1)
                raise AssertionError("no error")
            except ValueError:
                pass
        """), "f")
    assert run(pool, "def f(x):\n    raise ValueError(x)\n", expects).passed


# ------------------------------------------------------------------ 5-7. IPC and keyrings


IPC_PROBE = p("""
    import ctypes, errno
    libc = ctypes.CDLL(None, use_errno=True)
    IPC_CREAT = 0o1000
    def attempts():
        yield "shmget", lambda: libc.shmget(0x5EED, 4096, IPC_CREAT | 0o666)
        yield "msgget", lambda: libc.msgget(0x5EED, IPC_CREAT | 0o666)
        yield "semget", lambda: libc.semget(0x5EED, 1, IPC_CREAT | 0o666)
        yield "mq_open", lambda: libc.mq_open(b"/rlvr", 0o100 | 2, 0o666, None)
        yield "add_key", lambda: libc.syscall(248, b"user", b"rlvr", b"x", 1, -4)  # user keyring
        yield "keyctl", lambda: libc.syscall(250, 0, -4, 1)  # KEYCTL_GET_KEYRING_ID
    def f():
        return [name for name, call in attempts() if call() >= 0]
    """)


def test_ipc_objects_and_keyrings_are_refused(pool):
    verdict = run(pool, IPC_PROBE, EMPTY)
    assert verdict.passed, verdict.details["tests"]


def test_no_answer_crosses_runs_on_one_worker():
    writer = p("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        def f():
            sid = libc.shmget(0x5EED, 4096, 0o1000 | 0o666)
            if sid >= 0:
                ctypes.memmove(libc.shmat(sid, None, 0), b"answer=42", 9)
            return []
        """)
    reader = p("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        def f():
            sid = libc.shmget(0x5EED, 4096, 0)
            return [] if sid < 0 else [ctypes.string_at(libc.shmat(sid, None, 0), 9).decode()]
        """)
    with SandboxPool(size=1) as one:  # both runs land on the same warm worker
        assert run(one, writer, EMPTY).passed
        verdict = run(one, reader, EMPTY)
        assert verdict.passed, verdict.details["tests"]


# ------------------------------------------------------------------ 8. the zygote and the tester


def test_zygote_and_tester_cannot_be_tampered_with(pool):
    program = p("""
        import os, resource
        def f():
            got = []
            me = os.getpid()
            for pid in range(1, 400):  # /proc may hide them: try every low pid of the namespace
                if pid == me:
                    continue
                for name, act in (
                    ("renice", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)),
                    ("idle", lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))),
                    ("prlimit", lambda: resource.prlimit(pid, resource.RLIMIT_NPROC, (1, 1))),
                    ("kill", lambda: os.kill(pid, 0)),
                ):
                    try:
                        act()
                        got.append(f"{name} {pid}")
                    except OSError:
                        pass
            return got
        """)
    tests = AssertTests("def check(candidate):\n    assert candidate() == []\n", "f")
    verdict = run(pool, program, tests)
    assert verdict.passed, verdict.details["tests"]
    for _ in range(2):  # every worker still runs an innocent program
        assert run(pool, GOOD_F, F).passed


# ------------------------------------------------------------------ 9. per-sandbox process limits


def test_one_sandbox_cannot_take_another_sandboxes_processes(pool):
    hog = p("""
        import threading, time
        threading.stack_size(1 << 18)  # threads, not memory, run out first
        def f():
            n = 0
            try:
                while True:
                    threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
                    n += 1
            except RuntimeError:
                pass
            time.sleep(2.0)
            return []
        """)
    victim = p("""
        import threading
        def f():
            t = threading.Thread(target=lambda: None)
            t.start()
            t.join()
            return []
        """)
    warm = [threading.Thread(target=pool.run_tests, args=(GOOD_F, F)) for _ in range(2)]
    for t in warm:  # both workers started: the hog's start-up does not eat into its head start
        t.start()
    for t in warm:
        t.join()
    hogger = threading.Thread(target=pool.run_tests, args=(hog, EMPTY), kwargs={"timeout_s": 5})
    hogger.start()
    time.sleep(1.2)  # the hog holds its whole quota now
    verdict = pool.run_tests(victim, EMPTY, timeout_s=3)
    hogger.join()
    assert verdict.passed, verdict.details
    assert wait_no_strays() == []


# ------------------------------------------------------------------ 10. host-side decoding


@pytest.mark.parametrize("reply", [
    {"ok": {"c": []}},                # IndexError in the decoder
    {"ok": {"c": [10 ** 400, 0]}},    # OverflowError
    {"ok": {"d": [[1]]}},
    {"ok": {"s": [[1]]}},             # unhashable
    {"exc": {"x": 1}},
    [1, 2],
    {"ok": {"b": "zz"}},
])
def test_malformed_replies_never_raise_or_leak(pool, reply):
    body = json.dumps(reply)
    program = p(f"""
        import os, struct
        def f(x):
            body = {body!r}.encode()
            os.write(4, struct.pack("!I", len(body)) + body)
            os._exit(0)
        """)
    before = len(os.listdir("/proc/self/fd"))
    verdict = run(pool, program, F)
    assert not verdict.passed
    assert verdict.reason in ("wrong_answer", "runtime_error"), verdict.details["tests"]
    assert len(os.listdir("/proc/self/fd")) <= before


def test_huge_reply_is_refused_cheaply(pool):
    program = p("""
        import os, struct
        def f(x):
            body = b"[" + b"[]," * (4 << 20) + b"[]]"  # 12 MB: 4 M lists once decoded
            os.write(4, struct.pack("!I", len(body)))
            os.write(4, body)
            os._exit(0)
        """)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    verdict = run(pool, program, CallTests("f", [((1,), 2)]), timeout_s=3)
    assert not verdict.passed
    assert time.monotonic() - start < 2.5
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert grown_mb < 100, f"the host grew by {grown_mb:.0f} MB decoding one reply"


# ------------------------------------------------------------------ 11. tester memory


def test_tester_has_a_memory_limit(pool):
    tests = AssertTests(p("""
        def check(candidate):
            hog = bytearray(700 << 20)
            assert candidate(1) == 2 and len(hog) > 0
        """), "f")
    verdict = run(pool, GOOD_F, tests, memory_mb=128)
    assert not verdict.passed
    assert "MemoryError" in verdict.details["tests"][0]["message"]


# ------------------------------------------------------------------ 12. text from the sandbox


@pytest.mark.parametrize("tests", [
    CallTests("f", [((1,), 2)]),
    AssertTests("def check(candidate):\n    assert candidate(1) == 2\n", "f"),
    StdioTests([("", "2\n")]),
])
def test_strings_from_the_sandbox_are_clean(pool, tests):
    program = p("""
        import sys
        sys.stdout.buffer.write(b"out\\xff\\x00\\x1b[2J")
        sys.stdout.flush()
        sys.stderr.buffer.write(b"err\\xed\\xa0\\x80")
        """)
    bad = 'raise ValueError("bad\\ud800\\x00")\n'
    program += bad if isinstance(tests, StdioTests) else "def f(x):\n    " + bad
    verdict = run(pool, program, tests)
    assert not verdict.passed
    text = json.dumps(verdict.details, ensure_ascii=False)
    text.encode("utf-8")  # no lone surrogate left
    assert "\\u0000" not in text and "\\u001b" not in text  # how json writes NUL and ESC


# ------------------------------------------------------------------ 13. posture


def posture_probe() -> str:
    """A program whose f() lists the posture checks it got through."""
    host_boot_id = open("/proc/sys/kernel/random/boot_id").read().strip()
    return p(f"""
        import ctypes, os, socket
        libc = ctypes.CDLL(None, use_errno=True)
        def f():
            got = []
            for flag in (0x10000000, 0x20000000 | 0x10000000, 0x40000000):  # NEWUSER, NEWPID..
                if libc.unshare(flag) == 0:
                    got.append(f"unshare {{flag:#x}}")
            try:
                if {host_boot_id!r} in open("/proc/sys/kernel/random/boot_id").read():
                    got.append("boot_id")
            except OSError:
                pass
            if socket.gethostname() == {socket.gethostname()!r}:
                got.append("hostname")
            others = [x for x in os.listdir("/proc") if x.isdigit() and int(x) != os.getpid()]
            for pid in others:
                try:
                    open(f"/proc/{{pid}}/sched").read()
                    got.append(f"sched {{pid}}")
                except OSError:
                    pass
            return got
        """)


def test_posture_namespaces_host_identity_and_other_processes(pool):
    tests = AssertTests("def check(candidate):\n    assert candidate() == []\n", "f")
    verdict = run(pool, posture_probe(), tests)
    assert verdict.passed, verdict.details["tests"]


def test_deep_directory_tree_does_not_cost_the_worker():
    program = p("""
        import os
        def f():
            for _ in range(1200):
                os.mkdir("d")
                os.chdir("d")
            os.chmod(".", 0)
            return []
        """)
    with SandboxPool(size=1) as one:
        assert run(one, GOOD_F, F).passed
        worker = one._workers._idle[0]
        assert run(one, program, EMPTY, timeout_s=5).passed
        assert one._workers._idle == [worker]  # the same worker, not a replacement
        reader = "import os\ndef f():\n    return [os.listdir('/tmp'), os.listdir('.')]\n"
        assert run(one, reader, CallTests("f", [((), [["work"], []])])).passed


# ------------------------------------------------------------------ 14. the python tool


def test_python_tool_has_a_pool_of_its_own():
    from rlvr.envs import tools
    from rlvr.verifiers.code import default_pool

    assert tools.tool_pool() is not default_pool()
    assert tools.tool_pool() is tools.tool_pool()
    assert tools.run_python("print(6 * 7)") == "42\n"


# ------------------------------------------------------------------ the unshare fallback too


def test_unshare_fallback_has_the_same_filter_and_posture():
    from rlvr.verifiers.code import SandboxConfig

    with pytest.warns(RuntimeWarning, match="weaker `unshare`"):
        fallback = SandboxPool(size=1, config=SandboxConfig(backend="unshare"))
    with fallback:
        assert run(fallback, IPC_PROBE, EMPTY).passed
        tests = AssertTests("def check(candidate):\n    assert candidate() == []\n", "f")
        verdict = run(fallback, posture_probe(), tests)
        assert verdict.passed, verdict.details["tests"]
