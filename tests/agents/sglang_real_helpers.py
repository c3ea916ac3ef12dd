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


QUICKSTART = Path(__file__).parents[2] / "configs" / "quickstart.yaml"


def short_run_overrides(model_path, out, url, steps):
    """Overrides of ``QUICKSTART`` for a short quiet run on the sglang server at ``url``: no
    warm-up, 4 prompts x 4, no mid-run evaluation, a constant learning rate, the sync guard at
    the float32 level. Later overrides win, so a test appends what it changes."""
    return [
        f"model.path={model_path}", "sft.enabled=false", f"trainer.output_dir={out}",
        f"trainer.steps={steps}", "trainer.progress=false", "trainer.tensorboard=false",
        "trainer.plot=false", "trainer.export_at_end=false", "trainer.checkpoint_every=0",
        "rollout.prompts_per_step=4", "rollout.group_size=4", "eval.tasks=8",
        "eval.every=0", "actor.optim.lr=3e-3", "actor.optim.schedule=constant",
        "rollout.engine=sglang", f"rollout.sglang.url={url}",
        "rollout.sglang.allow_unseeded=true", "rollout.max_logprob_diff=1e-4",
    ]


def assert_every_episode_trained_once(trainer, history, steps, episodes_per_step=16):
    """An asynchronous run's accounting: every episode started was trained once, none dropped,
    no row staler than 1, and the first step (played by the starting weights) passed the sync
    guard at the float32 level."""
    producer = trainer.rollout.producer
    assert producer is not None and producer.accounted
    assert producer.trained == steps * episodes_per_step
    assert dict(producer.dropped) == {"stale": 0, "untrained": 0}
    assert all(m["async/staleness_max"] <= 1.0 for m in history)
    assert history[0]["rollout/logprob_diff"] < 1e-4


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
