"""EnvCalls: batched env calls off the event loop, with the semantics of one pool job per call."""

import asyncio
import json
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.agents.env_calls import EnvCalls
from rlvr.agents.episode import jsonable


def _gather(calls, *coros):
    async def go():
        return await asyncio.gather(*coros, return_exceptions=True)

    try:
        return asyncio.run(go())
    finally:
        calls.close()


def test_results_and_exceptions_reach_their_own_callers_off_the_loop_thread():
    calls = EnvCalls(workers=4, timeout_s=5.0)
    loop_thread = threading.get_ident()
    ran_on = []

    def work(i):
        ran_on.append(threading.get_ident())
        if i % 3 == 0:
            raise ValueError(f"env {i} broke")
        return i * i

    out = _gather(calls, *(calls.call(work, i) for i in range(30)))
    for i, value in enumerate(out):
        if i % 3 == 0:
            assert isinstance(value, ValueError) and str(value) == f"env {i} broke"
        else:
            assert value == i * i
    assert loop_thread not in ran_on


def test_quick_calls_share_one_job_and_one_hand_back():
    calls = EnvCalls(workers=8, timeout_s=5.0)
    threads = set()

    def quick(i):
        threads.add(threading.get_ident())
        return i

    async def go():
        await calls.call(quick, -1)  # learns that calls are quick
        threads.clear()
        loop = asyncio.get_running_loop()
        wakeups = 0
        original = loop.call_soon_threadsafe

        def counting(*args, **kwargs):
            nonlocal wakeups
            wakeups += 1
            return original(*args, **kwargs)

        loop.call_soon_threadsafe = counting
        out = await asyncio.gather(*(calls.call(quick, i) for i in range(64)))
        return out, wakeups

    try:
        out, wakeups = asyncio.run(go())
    finally:
        calls.close()
    assert out == list(range(64))
    assert len(threads) == 1 and wakeups == 1


def test_slow_calls_run_concurrently_on_up_to_workers_threads():
    calls = EnvCalls(workers=4, timeout_s=5.0)
    start = time.perf_counter()
    out = _gather(calls, *(calls.call(time.sleep, 0.2) for _ in range(8)))
    elapsed = time.perf_counter() - start
    assert out == [None] * 8
    assert elapsed < 1.2  # 8 x 0.2 s on 4 threads: 0.4 s, never 1.6 s one after another


def test_a_call_past_its_deadline_times_out_and_the_others_still_finish():
    calls = EnvCalls(workers=2, timeout_s=0.3)

    def hang():
        time.sleep(1.0)

    out = _gather(calls, calls.call(hang), *(calls.call(lambda i=i: i) for i in range(5)))
    assert isinstance(out[0], TimeoutError)
    assert "env_step_timeout_s=0.3" in str(out[0])
    assert [o for o in out[1:] if not isinstance(o, BaseException)]  # some finished in time


def test_a_cancelled_caller_does_not_break_the_batch():
    calls = EnvCalls(workers=1, timeout_s=5.0)

    async def go():
        first = asyncio.ensure_future(calls.call(time.sleep, 0.1))
        second = asyncio.ensure_future(calls.call(lambda: "ok"))
        await asyncio.sleep(0)
        first.cancel()
        return await second

    try:
        assert asyncio.run(go()) == "ok"
    finally:
        calls.close()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_jsonable_equals_the_json_round_trip(value):
    assert jsonable(value) == json.loads(json.dumps(value, default=str))


def test_jsonable_stringifies_unknown_objects_like_the_round_trip():
    class Odd:
        def __str__(self):
            return "odd!"

    value = {"a": [Odd(), (1, 2.5)], "b": {3: None}}
    assert jsonable(value) == json.loads(json.dumps(value, default=str))
    assert jsonable(value)["a"][0] == "odd!"


@pytest.mark.parametrize("value", [float("inf"), [float("-inf")], {"x": True}])
def test_jsonable_specials(value):
    assert jsonable(value) == json.loads(json.dumps(value, default=str))


def test_quick_calls_batched_behind_a_hung_call_still_finish_in_time():
    """Calls known to be quick run as one job; when one of them hangs (a sandbox stuck past
    the timeout), another thread takes the calls queued behind it: they finish, only the hung
    one times out."""
    calls = EnvCalls(workers=2, timeout_s=0.3)
    release = threading.Event()

    def quick(i):
        return i

    def hung():
        release.wait(2.0)
        return "late"

    async def go():
        await calls.call(quick, -1)  # learns that calls are quick: the next flush is one job
        start = time.monotonic()
        out = await asyncio.gather(calls.call(hung), *(calls.call(quick, i) for i in range(5)),
                                   return_exceptions=True)
        return out, time.monotonic() - start

    try:
        (first, *rest), took = asyncio.run(go())
    finally:
        release.set()
        calls.close()
    assert isinstance(first, TimeoutError)
    assert rest == [0, 1, 2, 3, 4]
    assert took < 1.0


def test_results_finished_before_a_slow_call_reach_their_callers_before_it_ends():
    """One job runs a quick call then a slow one: the quick call's caller gets its result while
    the slow call still runs (not when the job ends)."""
    calls = EnvCalls(workers=1, timeout_s=5.0)
    release = threading.Event()

    def slow():
        release.wait(2.0)
        return "slow"

    async def go():
        await calls.call(lambda: None)  # learns that calls are quick: one job for the next flush
        start = time.monotonic()
        quick = asyncio.ensure_future(calls.call(lambda: "quick"))
        late = asyncio.ensure_future(calls.call(slow))
        got = await quick
        took = time.monotonic() - start
        release.set()
        return got, took, await late

    try:
        got, took, late = asyncio.run(go())
    finally:
        release.set()
        calls.close()
    assert (got, late) == ("quick", "slow")
    assert took < 0.5


def test_a_spinning_call_past_its_deadline_is_stopped_for_real():
    """A verifier spinning in Python (swallowing ``Exception``) stops at its deadline: its
    caller gets an ``EnvCallTimeout`` ("timeout") and the thread no longer burns the CPU."""
    from rlvr.agents.env_calls import EnvCallTimeout

    calls = EnvCalls(workers=2, timeout_s=0.2)
    spins = [0]

    def spin():
        while True:
            try:
                spins[0] += 1
            except Exception:  # an env's broad handler must not keep it alive
                pass

    async def go():
        got = await asyncio.gather(calls.call(spin), return_exceptions=True)
        await asyncio.sleep(0.3)  # the stop lands
        return got

    try:
        [out] = asyncio.run(go())
        before = spins[0]
        time.sleep(0.2)
        assert spins[0] == before  # the spinning thread ended
    finally:
        calls.close()
    assert isinstance(out, EnvCallTimeout) and isinstance(out, TimeoutError)


def test_a_thread_stuck_in_c_is_replaced_and_later_calls_still_run():
    calls = EnvCalls(workers=1, timeout_s=0.2)
    release = threading.Event()

    async def go():
        first = await asyncio.gather(calls.call(release.wait, 5.0), return_exceptions=True)
        return first, await calls.call(lambda: "next")

    try:
        (first,), nxt = asyncio.run(go())
    finally:
        release.set()
        calls.close()
    assert isinstance(first[0] if isinstance(first, list) else first, TimeoutError)
    assert nxt == "next"


def test_the_process_exits_when_an_env_call_hangs_forever(tmp_path):
    """A step stuck in C code (``time.sleep``) cannot be stopped, but it no longer keeps the
    interpreter alive after the run: the env threads are daemons."""
    import subprocess
    import sys

    script = tmp_path / "hang.py"
    script.write_text(
        "import asyncio, time\n"
        "from rlvr.agents.env_calls import EnvCalls\n"
        "calls = EnvCalls(workers=2, timeout_s=0.2)\n"
        "async def go():\n"
        "    try:\n"
        "        await calls.call(time.sleep, 600)\n"
        "    except TimeoutError:\n"
        "        print('timed out', flush=True)\n"
        "asyncio.run(go())\n"
        "calls.close()\n"
    )
    import os

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=30, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "timed out" in proc.stdout
