"""Helpers shared by the tests against real sglang servers (test_sglang_real, _router)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

SGLANG_PYTHON = os.environ.get("RLVR_SGLANG_PYTHON")


def require_venv(module: str) -> str:
    """The real sglang venv's python; skips (fails under ``RLVR_REQUIRE_SGLANG=1``) without it."""
    if SGLANG_PYTHON and Path(SGLANG_PYTHON).exists():
        return SGLANG_PYTHON
    reason = (f"real sglang venv absent (RLVR_SGLANG_PYTHON={SGLANG_PYTHON!r}): build it with "
              "`bash dev.sh setup-sglang` or run `bash dev.sh test`")
    if os.environ.get("RLVR_REQUIRE_SGLANG") == "1":
        pytest.fail(reason)
    print(f"\n[{module}] SKIPPED: {reason}")
    pytest.skip(reason)


async def many(engine, prompts, sampling):
    """Generate every prompt at once."""
    return await asyncio.gather(*(engine.generate(p, sampling) for p in prompts))


def generate_through_an_inflight_update(sg, weights, mode, prompts, sampling, wait_s=1.0):
    """Generate ``prompts`` on ``sg`` (version 0) and push ``weights`` as version 1 after
    ``wait_s``, while they run; ``(completions, seconds the update took)``."""
    sg.set_weight_version(0)
    results: list = []
    thread = threading.Thread(target=lambda: results.append(asyncio.run(
        many(sg, prompts, sampling))))
    thread.start()
    time.sleep(wait_s)
    t0 = time.perf_counter()
    sg.update_weights_in_flight(weights, 1, mode)
    seconds = time.perf_counter() - t0
    thread.join(300)
    assert results, "the requests never returned"
    return results[0], seconds
