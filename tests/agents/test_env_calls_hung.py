"""Hung env calls never take the env threads of healthy ones: only the call that hung times out."""

from __future__ import annotations

import asyncio
import time

from rlvr.agents.env_calls import EnvCalls, EnvCallTimeout


def _hang() -> None:
    time.sleep(30)  # blocked in C: only giving the thread up frees its place


def _work(i: int) -> int:
    time.sleep(0.05)  # a sandbox-like call, also blocked in C while it runs
    return i


def test_healthy_calls_beside_hung_ones_finish_in_time():
    """Two workers, both taken by hung calls: healthy calls issued with them and after them
    used to wait behind them until their own limit, and time out too."""
    calls = EnvCalls(workers=2, timeout_s=2.0)

    async def go():
        first = [calls.call(_hang), calls.call(_hang)] + [calls.call(_work, i) for i in range(6)]
        early = asyncio.gather(*first, return_exceptions=True)
        await asyncio.sleep(1.0)  # a later flush: the hung calls still hold their threads
        later = await asyncio.gather(*(calls.call(_work, 10 + i) for i in range(6)),
                                     return_exceptions=True)
        return await early, later

    start = time.monotonic()
    try:
        early, later = asyncio.run(go())
    finally:
        calls.close()
    assert all(isinstance(x, EnvCallTimeout) for x in early[:2])  # charged to the hung ones
    assert early[2:] == list(range(6))
    assert later == list(range(10, 16))
    assert time.monotonic() - start < 5


def test_workers_still_bound_calls_that_are_not_hung():
    calls = EnvCalls(workers=2, timeout_s=60.0)
    running, most = 0, 0

    def counted(i: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        time.sleep(0.2)
        running -= 1
        return i

    async def go():
        return await asyncio.gather(*(calls.call(counted, i) for i in range(8)))

    try:
        assert asyncio.run(go()) == list(range(8))
    finally:
        calls.close()
    assert most <= 2
