"""The event loop kept between runs of episodes (``rlvr.agents.event_loop``)."""

import asyncio
import threading

import pytest

from rlvr.agents.event_loop import KeptLoop


async def current_loop():
    await asyncio.sleep(0)
    return asyncio.get_running_loop()


def test_runs_reuse_one_loop_until_closed():
    kept = KeptLoop()
    try:
        first, second = kept.run(current_loop()), kept.run(current_loop())
        assert first is second and not first.is_closed()
    finally:
        kept.close()
    assert first.is_closed()
    third = KeptLoop()
    try:
        assert third.run(current_loop()) is not first
    finally:
        third.close()


def test_a_failed_run_cancels_what_it_left_and_the_next_run_gets_a_fresh_loop():
    kept = KeptLoop()
    cancelled = []

    async def leaves_a_task_then_fails():
        async def forever():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        asyncio.ensure_future(forever())
        await asyncio.sleep(0)
        raise ValueError("boom")

    try:
        loop = kept.run(current_loop())
        with pytest.raises(ValueError, match="boom"):
            kept.run(leaves_a_task_then_fails())
        assert cancelled == [True] and loop.is_closed()
        assert kept.run(current_loop()) is not loop
    finally:
        kept.close()


def test_works_from_a_thread_that_already_runs_a_loop():
    kept = KeptLoop()

    async def outer():
        here = asyncio.get_running_loop()
        there = kept.run(current_loop())  # would be refused by run_until_complete here
        return here, there

    try:
        here, there = asyncio.run(outer())
        assert here is not there
    finally:
        kept.close()


def test_a_run_while_the_kept_loop_is_busy_gets_its_own_loop():
    kept = KeptLoop()
    started, release = threading.Event(), threading.Event()
    seen = {}

    async def slow():
        started.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait)
        return asyncio.get_running_loop()

    def other():
        started.wait()
        seen["other"] = kept.run(current_loop())
        release.set()

    thread = threading.Thread(target=other)
    thread.start()
    try:
        seen["slow"] = kept.run(slow())
        thread.join()
        assert seen["slow"] is not seen["other"]
        assert kept.run(current_loop()) is seen["slow"]  # the busy one was the kept one
    finally:
        kept.close()
