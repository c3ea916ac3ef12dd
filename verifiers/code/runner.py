"""Host side of one program run: feed the sandbox, watch deadline and caps, judge, make a Verdict.

``timeout_s`` bounds the whole call (all tests together, plus spawning): when it passes, the
sandbox's zygote kills everything the program started (or, if the zygote does not answer within
0.5 s, the whole sandbox is destroyed), tests without a result score "timeout", and the call
returns. Reasons, in ``Verdict.reason`` (first failing test) and per test in
``details["tests"]``: "correct"/"passed", "wrong_answer", "runtime_error", "timeout",
"memory_limit", "syntax_error", "output_limit", "sandbox_error".

Everything that comes out of the sandbox is untrusted data: replies are capped
(``protocol.MAX_REPLY_BYTES``), decoding never raises out of :func:`run_spec`, a result that
arrives after the deadline is not judged, and every string in the verdict passes
:func:`~rlvr.verifiers.code.protocol.clean_text`.
"""

from __future__ import annotations

import math
import os
import select
import signal
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from rlvr.verifiers.code import protocol
from rlvr.verifiers.code.sandbox import Spawned, Worker, WorkerDied
from rlvr.verifiers.code.specs import (
    AssertTests,
    CallTests,
    StdioTests,
    TestSpec,
    normalize_output,
    values_equal,
)
from rlvr.verifiers.verdict import Verdict

TAIL_CHARS = 2000
_FRAMED = ("setup", "tester", "rpc")
STATUSES = frozenset({"passed", "wrong_answer", "runtime_error", "timeout", "memory_limit",
                      "syntax_error", "output_limit", "sandbox_error"})


@dataclass
class TestOutcome:
    """One test's result as listed in ``Verdict.details["tests"]``."""

    index: int
    name: str
    status: str
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict form for ``details``."""
        return {"index": self.index, "name": self.name, "status": self.status,
                "message": self.message}


class _Channels:
    """Non-blocking I/O with one spawn's processes until a condition, the deadline or a cap."""

    def __init__(self, worker: Worker, spawned: Spawned, output_cap: int,
                 opened: list[_Channels]) -> None:
        self.worker, self.pids, self.cap = worker, spawned.pids, output_cap
        self.socks: dict[str, socket.socket] = {}
        self.fds: dict[str, int] = {}
        opened.append(self)  # closed by run_spec whatever happens
        for name, fd in spawned.fds.items():
            if name in _FRAMED:
                self.socks[name] = socket.socket(fileno=fd)
                self.socks[name].setblocking(False)
            else:
                os.set_blocking(fd, False)
                self.fds[name] = fd
        self.inbuf: dict[str, bytearray] = {n: bytearray() for n in self.socks}
        self.frames: dict[str, deque[Any]] = {n: deque() for n in self.socks}
        self.out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.written = {"stdout": 0, "stderr": 0}
        self.pending: dict[str, bytearray] = {}
        self.close_after: set[str] = set()
        self.eof: set[str] = set()
        self.exits: dict[str, int] = {}
        self.overflow: str | None = None
        self.timed_out = False

    def queue(self, name: str, data: bytes, close: bool = False) -> None:
        """Sends ``data`` on channel ``name`` while pumping; then shuts it for writing if asked."""
        self.pending.setdefault(name, bytearray()).extend(data)
        if close:
            self.close_after.add(name)

    def queue_frame(self, name: str, obj: Any) -> None:
        """Sends one length-prefixed JSON message (see :func:`protocol.send_msg`)."""
        import json

        body = json.dumps(obj, separators=(",", ":")).encode()
        self.queue(name, struct.pack("!I", len(body)) + body)

    def pump(self, until: Any, deadline: float) -> bool:
        """Moves data until ``until()`` holds (True) or the deadline passes or output overflows."""
        while True:
            self._take_events()
            if until():
                return True
            if self.overflow is not None:
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = True
                return False
            readers: dict[int, str] = {self.worker.fileno(): "ctl"}
            for name, sock in self.socks.items():
                if name not in self.eof:
                    readers[sock.fileno()] = name
            for name in ("stdout", "stderr"):
                if name in self.fds and name not in self.eof:
                    readers[self.fds[name]] = name
            # A channel to close counts as a writer even with nothing left to send, so that an
            # empty payload (stdin "", program "") still gets its end-of-file.
            writers = {self._fileno(n): n for n, buf in self.pending.items()
                       if buf or n in self.close_after}
            poller = select.poll()  # not select(): host fds may be numbered above 1024
            for fd in readers:
                poller.register(fd, select.POLLIN)
            for fd in writers:
                poller.register(fd, select.POLLOUT | (select.POLLIN if fd in readers else 0))
            for fd, mask in poller.poll(remaining * 1000):
                if fd in writers and mask & (select.POLLOUT | select.POLLERR | select.POLLHUP):
                    self._write(writers[fd])
                if fd in readers and mask & (select.POLLIN | select.POLLERR | select.POLLHUP):
                    self._read(readers[fd])

    def _fileno(self, name: str) -> int:
        return self.socks[name].fileno() if name in self.socks else self.fds[name]

    def _write(self, name: str) -> None:
        buf = self.pending[name]
        sent = 0
        try:
            if buf and name in self.socks:
                sent = self.socks[name].send(buf[: 1 << 16])
            elif buf:
                sent = os.write(self.fds[name], buf[: 1 << 16])
        except BlockingIOError:
            return
        except OSError:  # the reader is gone (EPIPE): drop the rest, still close our end
            buf.clear()
        del buf[:sent]
        if not buf and name in self.close_after:
            self.close_after.discard(name)
            if name in self.socks:
                try:
                    self.socks[name].shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            else:
                os.close(self.fds.pop(name))

    def _read(self, name: str) -> None:
        if name == "ctl":
            self.worker.read_event()
            return
        try:
            if name in self.socks:
                data = self.socks[name].recv(1 << 16)
            else:
                data = os.read(self.fds[name], 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.eof.add(name)
            return
        if name in self.socks:
            self._parse(name, data)
            return
        self.written[name] += len(data)
        buf = self.out[name]
        buf.extend(data)
        if len(buf) > 2 * TAIL_CHARS and name == "stderr":
            del buf[: len(buf) - 2 * TAIL_CHARS]
        if self.written[name] > self.cap:
            self.overflow = name

    def _parse(self, name: str, data: bytes) -> None:
        import json

        buf = self.inbuf[name]
        buf.extend(data)
        limit = protocol.MAX_REPLY_BYTES if name == "rpc" else protocol.MAX_MESSAGE_BYTES
        while len(buf) >= 4:
            (size,) = struct.unpack("!I", buf[:4])
            if size > limit:
                self.eof.add(name)
                buf.clear()
                return
            if len(buf) < 4 + size:
                return
            body = bytes(buf[4 : 4 + size])
            del buf[: 4 + size]
            try:
                self.frames[name].append(json.loads(body))
            except (ValueError, RecursionError, MemoryError):
                self.eof.add(name)
                return

    def _take_events(self) -> None:
        while self.worker.events:
            event = self.worker.events.popleft()
            if event.get("op") == "exit" and self.pids.get(event.get("role", "")) == event["pid"]:
                self.exits[event["role"]] = int(event["status"])

    def text(self, name: str) -> str:
        """Everything captured on stdout/stderr (stderr: only its tail)."""
        return self.out[name].decode("utf-8", errors="replace")

    def close(self) -> None:
        """Closes the host ends of every channel (again: a no-op)."""
        for sock in self.socks.values():
            sock.close()
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()


def describe_exit(status: int | None) -> str:
    """Human words for a wait status."""
    if status is None:
        return "the program did not exit"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"the program was killed by {name}"
    return f"the program exited with status {os.WEXITSTATUS(status)}"


def _status_for_exit(status: int | None, stderr: str) -> str:
    if status is not None and os.WIFSIGNALED(status):
        if os.WTERMSIG(status) == signal.SIGXCPU:
            return "timeout"
    if "MemoryError" in stderr[-500:]:
        return "memory_limit"
    return "runtime_error"


def _unfinished(ch: _Channels) -> tuple[str, str]:
    """Status and message for tests that got no result."""
    if ch.overflow is not None:
        return "output_limit", f"the program wrote more than {ch.cap} bytes to {ch.overflow}"
    if ch.timed_out:
        return "timeout", "the time limit was reached before this test finished"
    return "runtime_error", "the test harness stopped before this test finished"


def _compile_error(ch: _Channels) -> str | None:
    """The syntax error reported by the program's process, if any."""
    for frame in ch.frames.get("setup", ()):
        if isinstance(frame, dict) and frame.get("compiled") is False:
            return protocol.clean_text(frame.get("error"), 500)
    return None


def limits_for(timeout_s: float, memory_mb: int, config: Any) -> dict[str, Any]:
    """The rlimits the program's process sets on itself before running user code."""
    return {
        "cpu_s": math.ceil(timeout_s) + 1,
        "memory_bytes": memory_mb << 20,
        "nproc": config.nproc,
        "fsize_bytes": config.max_file_mb << 20,
        "nofile": config.max_open_files,
    }


def run_assert(worker: Worker, program: str, spec: AssertTests, deadline: float,
               limits: dict[str, Any], opened: list[_Channels]) -> list[TestOutcome]:
    """AssertTests: U runs the program, T runs the test code and reports each test."""
    labels = protocol.test_labels(spec.test_code)
    ch = _Channels(worker, worker.spawn("assert", limits, deadline - time.monotonic()),
                   worker.config.output_limit_bytes, opened)
    ch.queue("setup", program.encode("utf-8", errors="replace"), close=True)
    ch.queue_frame("tester", {"test_code": spec.test_code, "entry_point": spec.entry_point,
                             "helpers": spec.helpers})

    def finished() -> bool:
        frames = ch.frames["tester"]
        done = bool(frames) and frames[-1] == {"done": True}
        return done or "tester" in ch.eof or _compile_error(ch) is not None

    ch.pump(finished, deadline)
    error = _compile_error(ch)
    records = [f for f in ch.frames["tester"] if isinstance(f, dict) and "i" in f]
    outcomes: list[TestOutcome] = []
    for i, label in enumerate(labels):
        if error is not None:
            outcomes.append(TestOutcome(i, label, "syntax_error", error))
        elif i < len(records) and records[i].get("i") == i and records[i].get("status") in STATUSES:
            rec = records[i]
            outcomes.append(TestOutcome(i, label, rec["status"], str(rec.get("msg", ""))))
        else:
            outcomes.append(TestOutcome(i, label, *_unfinished(ch)))
    if any("program exited" in o.message for o in outcomes):
        ch.pump(lambda: "user" in ch.exits, min(deadline, time.monotonic() + 0.05))
        status = ch.exits.get("user")
        refined = _status_for_exit(status, ch.text("stderr"))
        for o in outcomes:
            if "program exited" in o.message and status is not None:
                o.status, o.message = refined, f"{o.message} ({describe_exit(status)})"
    return outcomes


def run_call(worker: Worker, program: str, spec: CallTests, deadline: float,
             limits: dict[str, Any], opened: list[_Channels]) -> list[TestOutcome]:
    """CallTests: the parent calls the function case by case and compares results itself."""
    requests = [{"name": spec.function, "args": protocol.encode(list(args)), "kwargs": {"d": []}}
                for args, _ in spec.cases]  # plain data: CallTests checked it
    ch = _Channels(worker, worker.spawn("call", limits, deadline - time.monotonic()),
                   worker.config.output_limit_bytes, opened)
    ch.queue("setup", program.encode("utf-8", errors="replace"), close=True)
    rpc = ch.frames["rpc"]
    ch.pump(lambda: bool(rpc) or "rpc" in ch.eof or _compile_error(ch) is not None, deadline)
    names = [f"{spec.function}{tuple(args)!r}"[:120] for args, _ in spec.cases]
    error = _compile_error(ch)
    if error is not None:
        return [TestOutcome(i, n, "syntax_error", error) for i, n in enumerate(names)]
    ready = rpc.popleft() if rpc else None
    if not isinstance(ready, dict) or not ready.get("ready"):
        status, msg = _unfinished(ch)
        if isinstance(ready, dict):
            status, msg = protocol.program_raised(str(ready.get("exc")), ready.get("msg"))
        elif status == "runtime_error":
            msg = "the program exited before its function could be called"
        return [TestOutcome(i, n, status, msg) for i, n in enumerate(names)]
    outcomes = []
    for i, (request, (_, expected)) in enumerate(zip(requests, spec.cases)):
        if ch.timed_out or ch.overflow or "rpc" in ch.eof:
            outcomes.append(TestOutcome(i, names[i], *_unfinished(ch)))
            continue
        ch.queue_frame("rpc", request)
        ch.pump(lambda: bool(rpc) or "rpc" in ch.eof, deadline)
        if time.monotonic() >= deadline:  # a late answer is not judged
            ch.timed_out = True
        if not rpc or ch.timed_out:
            outcomes.append(TestOutcome(i, names[i], *_unfinished(ch)))
            continue
        judged = _judge_reply(rpc.popleft(), expected)
        if time.monotonic() >= deadline:  # judging counts against the time limit too
            ch.timed_out = True
            judged = _unfinished(ch)
        outcomes.append(TestOutcome(i, names[i], *judged))
    return outcomes


def _judge_reply(reply: Any, expected: Any) -> tuple[str, str]:
    """Status and message for one reply of the program; never raises, whatever the reply."""
    try:
        return _judge(reply, expected)
    except Exception as exc:  # noqa: BLE001 - a reply is untrusted data
        return "wrong_answer", f"malformed reply ({type(exc).__name__})"


def _judge(reply: Any, expected: Any) -> tuple[str, str]:
    if not isinstance(reply, dict):
        return "wrong_answer", "malformed reply"
    if "ok" in reply:
        try:
            got = protocol.decode(reply["ok"])
        except (protocol.EncodeError, RecursionError) as exc:
            return "wrong_answer", f"malformed result: {exc}"[:300]
        if values_equal(got, expected):
            return "passed", ""
        return "wrong_answer", f"expected {expected!r}, got {got!r}"[:300]
    if "bad" in reply:
        return "wrong_answer", f"the result is not plain data: {reply['bad']}"[:300]
    return protocol.program_raised(str(reply.get("exc")), reply.get("msg"))


def run_stdio(worker: Worker, program: str, spec: StdioTests, deadline: float,
              limits: dict[str, Any], opened: list[_Channels]) -> list[TestOutcome]:
    """StdioTests: one fresh process per case (the sandbox is reset between cases)."""
    outcomes: list[TestOutcome] = []
    ch: _Channels | None = None
    for i, (stdin, expected) in enumerate(spec.cases):
        name = f"case {i}"
        if ch is not None:
            stop = ch.timed_out or ch.overflow is not None
            ch.close()
            if stop or not worker.reset(min(1.0, max(deadline - time.monotonic(), 0.05))):
                status, msg = _unfinished(ch) if stop else ("runtime_error", "sandbox disrupted")
                outcomes += [TestOutcome(j, f"case {j}", status, msg)
                             for j in range(i, len(spec.cases))]
                break
        ch = _Channels(worker, worker.spawn("stdio", limits, deadline - time.monotonic()),
                       worker.config.output_limit_bytes, opened)
        ch.queue("setup", program.encode("utf-8", errors="replace"), close=True)
        ch.queue("stdin", stdin.encode("utf-8", errors="replace"), close=True)
        exited = ch.pump(lambda c=ch: "user" in c.exits, deadline)
        if exited:  # drain what is already in the pipes; a leftover daemon may hold them open
            ch.pump(lambda c=ch: {"stdout", "stderr"} <= c.eof, time.monotonic() + 0.05)
            ch.timed_out = False
        error = _compile_error(ch)
        if error is not None:
            outcomes += [TestOutcome(j, f"case {j}", "syntax_error", error)
                         for j in range(i, len(spec.cases))]
            break
        outcomes.append(TestOutcome(i, name, *_judge_stdio(ch, exited, expected)))
    return outcomes


def _judge_stdio(ch: _Channels, exited: bool, expected: str) -> tuple[str, str]:
    if ch.overflow is not None or not exited:
        return _unfinished(ch)
    status = ch.exits["user"]
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        return _status_for_exit(status, ch.text("stderr")), describe_exit(status)
    got = normalize_output(ch.text("stdout"))
    if got == normalize_output(expected):
        return "passed", ""
    return "wrong_answer", f"expected {expected[:100]!r}, got {got[:100]!r}"


def run_spec(worker: Worker, program: str, tests: TestSpec, timeout_s: float,
             memory_mb: int) -> tuple[Verdict, bool]:
    """Runs ``program`` against ``tests`` on ``worker``; returns the verdict and worker health.

    Never raises because of what the program did: anything unexpected on the host side ends the
    run with "sandbox_error" (and the worker is replaced), and every channel is closed.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    limits = limits_for(timeout_s, memory_mb, worker.config)
    opened: list[_Channels] = []
    healthy = False
    ooms = worker.cgroup.oom_kills() if worker.cgroup is not None else 0
    try:
        if isinstance(tests, AssertTests):
            outcomes = run_assert(worker, program, tests, deadline, limits, opened)
        elif isinstance(tests, CallTests):
            outcomes = run_call(worker, program, tests, deadline, limits, opened)
        else:
            outcomes = run_stdio(worker, program, tests, deadline, limits, opened)
        healthy = True
    except (WorkerDied, OSError) as exc:
        status = "timeout" if time.monotonic() >= deadline else "runtime_error"
        outcomes = [TestOutcome(i, f"test {i}", status, f"the sandbox was disrupted: {exc}")
                    for i in range(_count(tests))]
    except Exception as exc:  # noqa: BLE001 - "never raises on bad programs"
        outcomes = [TestOutcome(i, f"test {i}", "sandbox_error",
                                f"the sandbox run failed: {type(exc).__name__}: {exc}")
                    for i in range(_count(tests))]
    finally:
        for ch in opened:
            ch.close()
    if worker.cgroup is not None and worker.cgroup.oom_kills() > ooms:
        # The sandbox's memory cgroup was full and the kernel killed one of its processes: the
        # program, or a child it forked (then the program often waits on it until the clock
        # ends the test, so a timeout after an OOM kill is the memory limit's doing too).
        for o in outcomes:
            if o.status in ("runtime_error", "timeout"):
                o.status = "memory_limit"
                o.message = f"{o.message} (the sandbox ran out of memory)"
    healthy = healthy and worker.reset(0.5)
    last = opened[-1] if opened else None
    details = {
        "tests": [o.as_dict() for o in outcomes],
        "stdout": last.text("stdout")[-TAIL_CHARS:] if last else "",
        "stderr": last.text("stderr")[-TAIL_CHARS:] if last else "",
        "elapsed_s": round(time.monotonic() - start, 4),
        "backend": worker.backend,
    }
    return make_verdict(outcomes, details), healthy


def _count(tests: TestSpec) -> int:
    if isinstance(tests, AssertTests):
        return len(protocol.test_labels(tests.test_code))
    return len(tests.cases)


def make_verdict(outcomes: list[TestOutcome], details: dict[str, Any]) -> Verdict:
    """Builds the Verdict: score = fraction passed, passed = all, reason = first failure.

    Every string that came out of the sandbox is cleaned first (see ``protocol.clean_text``).
    """
    for o in outcomes:
        o.name, o.message = protocol.clean_text(o.name), protocol.clean_text(o.message)
        if o.status not in STATUSES:
            o.status = "sandbox_error"
    details["tests"] = [o.as_dict() for o in outcomes]
    for key in ("stdout", "stderr"):
        if key in details:
            details[key] = protocol.clean_text(details[key])
    n_pass = sum(o.status == "passed" for o in outcomes)
    failed = [o for o in outcomes if o.status != "passed"]
    reason = "correct" if not failed else failed[0].status
    score = n_pass / len(outcomes) if outcomes else 0.0
    return Verdict(score=score, passed=bool(outcomes) and not failed, reason=reason,
                   details=details)
