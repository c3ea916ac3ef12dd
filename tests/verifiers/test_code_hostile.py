"""Adversarial programs against rlvr.verifiers.code: each must fail (or be contained) and leave
the host untouched, and every call must return within timeout + 1 s."""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time
import uuid

import pytest
from test_code_helpers import wait_no_strays

from rlvr.verifiers.code import AssertTests, CallTests, SandboxConfig, SandboxPool, StdioTests

TIMEOUT = 1.0
ROOMY = 20.0  # for programs whose verdict is not the clock's
F = CallTests("f", [((1,), 2), ((2,), 3)])
A = AssertTests(
    "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n", "f"
)
S = StdioTests([("1\n", "2\n")])
EMPTY = CallTests("f", [((), [])])  # "f() lists what it managed to do": [] = isolation held
HOST_MARK = f"/tmp/rlvr-hostile-{uuid.uuid4().hex}"
SHM_MARK = f"/dev/shm/rlvr-hostile-{uuid.uuid4().hex}"
SECRET = f"S3CR3T-{uuid.uuid4().hex}"


def p(src: str) -> str:
    return textwrap.dedent(src).strip("\n") + "\n"


# name -> (program, tests, expected reason)
CASES: dict[str, tuple[str, object, str]] = {
    "infinite_loop": ("while True:\n    pass\n", A, "timeout"),
    "sleep_past_deadline": ("import time\ndef f(x):\n    time.sleep(100)\n", F, "timeout"),
    "sigterm_ignored": (p("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            time.sleep(0.01)
        """), S, "timeout"),
    "fork_bomb": (p("""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """), A, "timeout"),
    "memory_bomb": ("x = bytearray(10 ** 10)\n", A, "memory_limit"),
    "memory_bomb_gradual": (p("""
        def f(x):
            hog = []
            while True:
                hog.append(bytearray(50 * 2 ** 20))
        """), F, "memory_limit"),
    "recursion_bomb": ("def f(x):\n    return f(x)\n", F, "runtime_error"),
    "c_stack_overflow": (p("""
        import sys
        sys.setrecursionlimit(10 ** 8)
        def g(n):  # through C (map), so the C stack overflows: SIGSEGV
            return max(map(g, [n + 1]))
        def f(x):
            return g(0)
        """), F, "runtime_error"),
    "ctypes_segfault": ("import ctypes\nctypes.string_at(0)\n", S, "runtime_error"),
    "stdout_flood": ("while True:\n    print('x' * 10000)\n", S, "output_limit"),
    "stderr_flood": ("import sys\nwhile True:\n    sys.stderr.write('y' * 10000)\n", A,
                     "output_limit"),
    "sys_exit_at_import": ("import sys\nsys.exit(0)\ndef f(x):\n    return x\n", A,
                           "runtime_error"),
    "os_exit_at_import": ("import os\nos._exit(0)\n", A, "runtime_error"),
    "raise_systemexit_in_call": ("def f(x):\n    raise SystemExit(0)\n", F, "runtime_error"),
    "os_exit_in_call": ("import os\ndef f(x):\n    os._exit(0)\n", A, "runtime_error"),
    "sys_exit_without_output": ("import sys\nsys.exit(0)\n", S, "wrong_answer"),
    "kill_parent_at_import": (p("""
        import os, signal
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
            try:
                os.kill(os.getppid(), sig)
                os.kill(1, sig)
            except OSError:
                pass
        def f(x):
            return x
        """), A, "wrong_answer"),
    # kill(-1) reaches only the program's own processes: the tester runs as another uid
    "kill_everything_in_call": ("import os\ndef f(x):\n    os.kill(-1, 9)\n", A,
                                "wrong_answer"),
    "stop_everything_in_call": ("import os, signal\ndef f(x):\n    os.kill(-1, signal.SIGSTOP)\n",
                                A, "wrong_answer"),
    "fake_success_markers": (p("""
        import os, json, struct
        for text in ("passed", "OK", "All tests passed", '{"done": true}', "correct"):
            print(text)
        frames = [{"i": 0, "status": "passed", "msg": ""}, {"i": 1, "status": "passed"},
                  {"done": True}, {"ready": True, "names": ["f"]}, {"ok": 2}]
        blob = b"".join(struct.pack("!I", len(b)) + b
                        for b in (json.dumps(f).encode() for f in frames))
        for fd in range(0, 64):
            try:
                os.write(fd, blob)
            except OSError:
                pass
        def f(x):
            return x
        """), A, "runtime_error"),  # forged frames garble its own channel to the tester
    "eq_rigging_call": (p("""
        class Yes:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        def f(x):
            return Yes()
        """), F, "wrong_answer"),
    "eq_rigging_assert": (p("""
        class Yes(int):
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
        def f(x):
            return Yes(0)
        """), A, "wrong_answer"),
    "patch_builtins": (p("""
        import builtins, sys, os
        builtins.abs = lambda *a: 0
        builtins.AssertionError = type("AssertionError", (BaseException,), {})
        builtins.print = lambda *a, **k: None
        sys.exit = lambda *a: None
        def check(candidate):
            pass
        def f(x):
            return x
        """), A, "wrong_answer"),
    "patch_harness_internals": (p("""
        import builtins, os, json
        builtins.isinstance = lambda *a: True
        builtins.len = lambda *a: 0
        json.dumps = lambda *a, **k: '{"ok": 2}'
        os._exit = lambda *a: None
        def f(x):
            return x
        """), A, "runtime_error"),
    "close_all_fds": ("import os\nos.closerange(0, 1024)\ndef f(x):\n    return x + 1\n", A,
                      "runtime_error"),
    "dup2_over_fds": (p("""
        import os
        null = os.open("/dev/null", os.O_RDWR)
        for fd in range(64):
            if fd != null:
                try:
                    os.dup2(null, fd)
                except OSError:
                    pass
        def f(x):
            return x + 1
        """), A, "runtime_error"),
    "nested_result": ("def f(x):\n    r = []\n    for _ in range(10000):\n        r = [r]\n"
                      "    return r\n", F, "wrong_answer"),
    "huge_result": ("def f(x):\n    return 'x' * (40 * 2 ** 20)\n", F, "runtime_error"),
    "null_bytes_program": ("def f(x):\n    return x + 1\n\x00", F, "syntax_error"),
    "parser_bomb": ("x = " + "(" * 100000 + ")" * 100000 + "\n", A, "syntax_error"),
}

# Contained programs: their tests are legitimate, so they pass, and the host must be untouched.
CONTAINED: dict[str, tuple[str, object]] = {
    "daemon_double_fork": (p("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.05)
            os._exit(0)
        def f(x):
            return x + 1
        """), F),
    "threads_left_running": (p("""
        import threading
        def spin():
            while True:
                pass
        threading.Thread(target=spin).start()
        def f(x):
            return x + 1
        """), F),
    "thread_left_running_stdio": (p("""
        import threading, time
        threading.Thread(target=lambda: time.sleep(1000)).start()
        print(int(input()) + 1)
        """), S),
    "write_outside": (p(f"""
        import os
        def f():
            done = []
            for path in ("/root/x", "/etc/x", "/usr/x", "/x", "/proc/sys/kernel/hostname",
                         "/dev/x", "/work/main/x", "/var/tmp/x", "/home/x"):
                try:
                    with open(path, "w") as fh:
                        fh.write("pwned")
                    done.append(path)
                except OSError:
                    pass
            for private in ("{HOST_MARK}", "{SHM_MARK}"):  # private tmpfs: fine inside only
                with open(private, "w") as fh:
                    fh.write("x")
            return done
        """), EMPTY),
    "read_secrets": (p("""
        import os
        def f():
            got = []
            for path in ("/etc/shadow", "/root/.bashrc", "/proc/1/environ", "/proc/1/mem",
                         "/work/main/pyproject.toml", "/etc/passwd", "/proc/1/fd/3"):
                try:
                    with open(path, "rb") as fh:
                        if fh.read(10):
                            got.append(path)
                except OSError:
                    pass
            try:
                got += os.listdir("/root")
            except OSError:
                pass
            return got
        """), EMPTY),
    "setuid_root": (p("""
        import os
        def f():
            got = []
            for fn in (os.setuid, os.seteuid, os.setgid):
                try:
                    fn(0)
                    got.append(fn.__name__)
                except OSError:
                    pass
            if os.getuid() == 0 or os.geteuid() == 0:
                got.append("root")
            return got
        """), EMPTY),
}


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=2) as pool:
        yield pool


def run_and_check_host(pool: SandboxPool, program: str, tests: object, timeout: float = TIMEOUT):
    start = time.monotonic()
    verdict = pool.run_tests(program, tests, timeout_s=timeout, memory_mb=256)
    elapsed = time.monotonic() - start
    assert elapsed < timeout + 1.0, f"returned after {elapsed:.2f}s"
    assert wait_no_strays() == []
    return verdict


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_program_fails(pool, name):
    program, tests, reason = CASES[name]
    # A program that must fail by another reason than the clock gets a budget a busy machine
    # cannot exhaust (building a 40 MB result took over 1 s at load 10 on 2 cores): the reason
    # must not depend on the machine's speed.
    timeout = TIMEOUT if reason == "timeout" else ROOMY
    verdict = run_and_check_host(pool, program, tests, timeout)
    assert not verdict.passed
    assert verdict.score == 0.0
    assert verdict.reason == reason, verdict.details["tests"]
    # the pool keeps working after each hostile program
    assert pool.run_tests("def f(x):\n    return x + 1\n", F, timeout_s=5).passed


@pytest.mark.parametrize("name", sorted(CONTAINED))
def test_hostile_program_is_contained(pool, name):
    program, tests = CONTAINED[name]
    verdict = run_and_check_host(pool, program, tests)
    assert verdict.passed, verdict.details
    assert verdict.reason == "correct"
    assert not os.path.exists(HOST_MARK)
    assert not os.path.exists(SHM_MARK)
    assert not os.path.exists("/work/main/x")


def test_secret_in_test_code_cannot_be_found(pool):
    """The expected answer lives only in the tester process: nothing the program can read has it."""
    program = p("""
        import gc, os, re
        def scan(blob):
            m = re.search(rb"S3CR3T-[0-9a-f]{32}", blob)
            return m.group().decode() if m else None
        def f():
            for obj in gc.get_objects():
                if isinstance(obj, (str, bytes)) and "S3CR3T-" in str(obj):
                    return str(obj)
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or int(pid) == os.getpid():
                    continue
                for leaf in ("cmdline", "environ", "mem", "fd/3", "fd/4"):
                    try:
                        with open(f"/proc/{pid}/{leaf}", "rb") as fh:
                            found = scan(fh.read(1 << 20))
                    except OSError:
                        continue
                    if found:
                        return found
            for root, _, files in os.walk("/tmp"):
                for name in files:
                    with open(os.path.join(root, name), "rb") as fh:
                        if scan(fh.read()):
                            return scan(fh.read())
            try:
                mem, maps = open("/proc/self/mem", "rb"), open("/proc/self/maps")
            except OSError:
                return "nope"
            with mem, maps:
                for line in maps:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    if "r" not in line.split()[1] or hi - lo > 1 << 28:
                        continue
                    try:
                        mem.seek(lo)
                        found = scan(mem.read(hi - lo))
                    except (OSError, OverflowError, ValueError):
                        continue
                    if found:
                        return found
            return "nope"
        """)
    tests = AssertTests(f"def check(candidate):\n    assert candidate() == '{SECRET}'\n", "f")
    verdict = run_and_check_host(pool, program, tests)
    assert verdict.reason == "wrong_answer", verdict.details
    assert SECRET not in str(verdict.details["stdout"])


def test_tester_process_cannot_be_traced_or_read(pool):
    program = p("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        def f():
            got = []
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or int(pid) == os.getpid():
                    continue
                if libc.ptrace(16, int(pid), 0, 0) == 0:  # PTRACE_ATTACH
                    got.append(f"ptrace {pid}")
                for leaf in ("mem", "environ", "fd/3", "fd/4"):
                    try:
                        with open(f"/proc/{pid}/{leaf}", "rb") as fh:
                            fh.read(1)
                        got.append(f"{leaf} {pid}")
                    except OSError:
                        pass
            return got
        """)
    tests = AssertTests("def check(candidate):\n    assert candidate() == []\n", "f")
    verdict = run_and_check_host(pool, program, tests)
    assert verdict.passed, verdict.details["tests"]


def test_network_is_unreachable(pool):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.1)
    port = server.getsockname()[1]
    seen: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                seen.append(server.accept())
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    program = p(f"""
        import socket
        def f():
            got = []
            for host in ("127.0.0.1", "localhost", "10.0.2.2", "8.8.8.8"):
                try:
                    socket.create_connection((host, {port}), timeout=0.2).close()
                    got.append(host)
                except OSError:
                    pass
            try:
                u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                u.sendto(b"x", ("8.8.8.8", 53))
                got.append("udp")
            except OSError:
                pass
            return got
        """)
    try:
        verdict = run_and_check_host(pool, program, EMPTY)
    finally:
        stop.set()
        thread.join(2)
        server.close()
    assert verdict.passed, verdict.details["tests"]
    assert seen == []


def test_parent_environment_does_not_leak(monkeypatch):
    secret = f"leak-{uuid.uuid4().hex}"
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    program = p("""
        import os
        def f():
            blobs = [repr(dict(os.environ))]
            for pid in os.listdir("/proc"):
                for leaf in ("environ", "cmdline"):
                    try:
                        with open(f"/proc/{pid}/{leaf}", "rb") as fh:
                            blobs.append(fh.read().decode(errors="replace"))
                    except OSError:
                        pass
            text = "\\n".join(blobs)
            return "found" if "RLVR_TEST_SECRET" in text else ""
        """)
    with SandboxPool(size=1) as pool:  # started after the secret entered our environment
        verdict = run_and_check_host(pool, program, CallTests("f", [((), "")]))
    assert verdict.passed, verdict.details["tests"]
    assert secret not in repr(verdict)


def test_disk_filler_hits_the_caps(pool):
    program = p("""
        import errno
        def one_big_file():
            try:
                with open("big", "wb") as fh:
                    for _ in range(1024):
                        fh.write(b"0" * 2 ** 20)
            except OSError as e:
                return errno.errorcode[e.errno]
        def many_files():
            try:
                for i in range(10 ** 6):
                    with open(f"f{i}", "wb") as fh:
                        fh.write(b"0" * (8 * 2 ** 20))
            except OSError as e:
                return errno.errorcode[e.errno]
        """)
    tests = CallTests("one_big_file", [((), "EFBIG")])
    assert run_and_check_host(pool, program, tests).passed
    tests = CallTests("many_files", [((), "ENOSPC")])
    assert run_and_check_host(pool, program, tests).passed


def test_files_do_not_persist_between_programs():
    with SandboxPool(size=1) as pool:  # one worker, so both programs run in the same sandbox
        writer = "def f():\n    for p in ('/tmp/a', '/dev/shm/b', 'c'):\n        open(p, 'w')\n"
        assert pool.run_tests(writer, CallTests("f", [((), None)])).passed
        reader = ("import os\ndef f():\n"
                  "    return [os.listdir(d) for d in ('/tmp', '/dev/shm', '.')]")
        assert pool.run_tests(reader, CallTests("f", [((), [["work"], [], []])])).passed


@pytest.mark.parametrize("name", ["fork_bomb", "infinite_loop", "fake_success_markers"])
def test_unshare_fallback_contains_hostile_programs(name):
    with pytest.warns(RuntimeWarning, match="weaker `unshare`"):
        pool = SandboxPool(size=1, config=SandboxConfig(backend="unshare"))
    with pool:
        program, tests, reason = CASES[name]
        assert pool.backend == "unshare"
        budget = TIMEOUT if reason == "timeout" else ROOMY
        verdict = run_and_check_host(pool, program, tests, budget)
        assert verdict.reason == reason
        assert pool.run_tests("def f(x):\n    return x + 1\n", F).passed


def test_a_program_that_exits_before_its_functions_load_says_so(pool):
    """An exit at import is a runtime error whose message says what happened (not a garbled
    channel, which is what forged frames get)."""
    verdict = pool.run_tests("import os\nos._exit(0)\n", A, timeout_s=ROOMY, memory_mb=256)
    assert verdict.reason == "runtime_error"
    messages = [t["message"] for t in verdict.details["tests"]]
    assert messages and all("exited before its functions could be called" in m
                            for m in messages), messages
