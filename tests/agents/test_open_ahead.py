"""Episodes opened ahead (``EpisodeRunner.open_ahead``) are the episodes played without it."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from agent_helpers import EchoToolEnv, RaisingEnv

from rlvr.agents.engine import SamplingParams
from rlvr.agents.errors import ChatTemplateError, RunnerConfigError
from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig

MATH = {"answer_format": "plain", "system_prompt": None, "source": "arithmetic",
        "source_kwargs": {"n_tasks": 50}}
CFG = RunnerConfig(max_turns=1, max_tokens_per_turn=6, max_response_tokens=6, seed=3,
                   reuse_envs=64, check_token_exact=True,
                   sampling=SamplingParams(temperature=1.0))


def _play(runner, runs, openings=None):
    """``arun`` of each ``(specs, group_size, seed)`` together, as the trainer's stream does."""
    ahead = openings or [None] * len(runs)

    async def go():
        return await asyncio.gather(*(runner.arun(specs, group_size=g, seed=seed, opened=o)
                                      for (specs, g, seed), o in zip(runs, ahead)))

    return asyncio.run(go())


def _key(traj):
    return (traj.prompt_ids, traj.response_ids, traj.rollout_logprobs, traj.token_level_scores,
            traj.finish_reason, traj.task_id, traj.group_id)


def _math_runs(step):
    return [([EpisodeSpec(env_id="rlvr/Math-v0", env_kwargs=MATH, seed=100 * step + j,
                          group_id=f"{step}/{j}")], 4, 1000 * step + j) for j in range(3)]


@pytest.fixture(scope="module")
def solo_engine(tiny_model, tiny_tokenizer):
    """An engine that decodes one request at a time: its numbers never depend on the batch.

    Opening ahead changes when requests reach the engine, so the two runs batch them
    differently, and a batched forward rounds a row's logits differently with the batch's
    shape (low bits; under load a seeded draw near a tie then picks another token). One
    request per forward takes the batching out of the comparison.
    """
    from rlvr.agents.hf.engine import TransformersEngine

    eng = TransformersEngine(tiny_model, tiny_tokenizer, max_batch_size=1)
    yield eng
    eng.close()


def test_opened_ahead_episodes_are_the_episodes_played_without(solo_engine, tiny_tokenizer):
    plain = EpisodeRunner(solo_engine, tiny_tokenizer, CFG)
    ahead = EpisodeRunner(solo_engine, tiny_tokenizer, CFG)
    try:
        for step in range(3):
            runs = _math_runs(step)
            expected = _play(plain, runs)
            openings = ahead.open_ahead([(specs, g) for specs, g, _ in runs])
            got = _play(ahead, runs, openings)
            assert [[_key(t) for t in g] for g in got] == [[_key(t) for t in g] for g in expected]
            assert all(o.used for o in openings)
        assert ahead._ahead.unused == []
        assert ahead._pool.idle_count() == 12  # reused, as without
    finally:
        plain.close()
        ahead.close()


def test_an_opening_runs_on_its_own_thread_without_the_env_threads(engine, tiny_tokenizer):
    seen: list[str] = []

    class Recorded(EchoToolEnv):
        def reset(self, *, seed=None, options=None):
            seen.append(threading.current_thread().name)
            return super().reset(seed=seed, options=options)

    runner = EpisodeRunner(engine, tiny_tokenizer, replace(CFG, reuse_envs=0))
    specs = [EpisodeSpec(env_factory=lambda: Recorded(n_turns=1), seed=i) for i in range(3)]
    try:
        (opening,) = runner.open_ahead([(specs, 2)])
        opening.job.settled.result(5)
        assert len(seen) == 6 and all(name.startswith("open-ahead") for name in seen)
        trajs = _play(runner, [(specs, 2, 0)], [opening])[0]
        assert all(t.finish_reason in ("stop", "length") for t in trajs)
        assert len(seen) == 6  # nothing reset again
    finally:
        runner.close()


def test_an_env_error_while_opening_ends_only_its_episode(engine, tiny_tokenizer):
    runner = EpisodeRunner(engine, tiny_tokenizer, replace(CFG, reuse_envs=0))
    specs = [EpisodeSpec(env_factory=lambda: RaisingEnv(fail_at=0), seed=1),
             EpisodeSpec(env_factory=lambda: EchoToolEnv(n_turns=1), seed=2)]
    try:
        openings = runner.open_ahead([(specs, 1)])
        failed, ok = _play(runner, [(specs, 1, 0)], openings)[0]
    finally:
        runner.close()
    assert failed.finish_reason == "error" and "reset exploded" in failed.outcome.error
    assert failed.prompt_ids == [tiny_tokenizer.pad_token_id] and failed.response_ids == []
    assert ok.finish_reason in ("stop", "length") and ok.response_ids


def test_a_hung_reset_times_out_its_episode_and_the_run_opens_the_rest(engine,
                                                                          tiny_tokenizer):
    release = threading.Event()
    closed: list[int] = []

    class Hanging(EchoToolEnv):
        def reset(self, *, seed=None, options=None):
            if seed == 1:
                release.wait(10)
            return super().reset(seed=seed, options=options)

        def close(self):
            closed.append(1)

    cfg = replace(CFG, reuse_envs=0, env_step_timeout_s=0.3)
    runner = EpisodeRunner(engine, tiny_tokenizer, cfg)
    specs = [EpisodeSpec(env_factory=lambda: Hanging(n_turns=1), seed=s) for s in range(3)]
    try:
        openings = runner.open_ahead([(specs, 1)])
        start = time.monotonic()
        first, hung, last = _play(runner, [(specs, 1, 0)], openings)[0]
        assert time.monotonic() - start < 3
        assert hung.finish_reason == "timeout" and "TimeoutError" in hung.outcome.error
        assert first.finish_reason != "error" and last.finish_reason != "error"
        assert openings[0].job.stopped
        before = len(closed)
        release.set()  # the stuck reset ends: the job closes the env it opened too late
        deadline = time.monotonic() + 5
        while len(closed) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(closed) == before + 1
    finally:
        release.set()
        runner.close()


def test_an_opening_is_for_its_own_specs_and_used_once(engine, tiny_tokenizer):
    runner = EpisodeRunner(engine, tiny_tokenizer, CFG)
    runs = _math_runs(0)
    try:
        openings = runner.open_ahead([(specs, g) for specs, g, _ in runs])
        with pytest.raises(RunnerConfigError, match="made for other specs"):
            _play(runner, [runs[1]], [openings[0]])
        with pytest.raises(RunnerConfigError, match="already used"):
            _play(runner, [runs[0]], [openings[0]])
        runner.discard(openings[1:])
        assert all(o.used for o in openings) and runner._ahead.unused == []
        assert runner._pool.idle_count() == 12  # all handed back idle
    finally:
        runner.close()


def test_close_releases_openings_never_played(engine, tiny_tokenizer):
    closed: list[Any] = []

    class Counted(EchoToolEnv):
        def close(self):
            closed.append(self)

    runner = EpisodeRunner(engine, tiny_tokenizer, replace(CFG, reuse_envs=0))
    specs = [EpisodeSpec(env_factory=lambda: Counted(n_turns=1), seed=i) for i in range(4)]
    runner.open_ahead([(specs, 2)])
    runner.close()
    assert len(closed) == len({id(e) for e in closed}) == 8


def test_an_agent_error_while_opening_stops_the_run(engine, tiny_tokenizer, monkeypatch):
    runner = EpisodeRunner(engine, tiny_tokenizer, replace(CFG, reuse_envs=0))

    def broken(*_: Any) -> list[int]:
        raise ChatTemplateError("the template is not prefix-stable")

    monkeypatch.setattr(runner.renderer, "prompt_ids", broken)
    specs = [EpisodeSpec(env_factory=lambda: EchoToolEnv(n_turns=1), seed=1)]
    try:
        openings = runner.open_ahead([(specs, 2)])
        with pytest.raises(ChatTemplateError, match="prefix-stable"):
            _play(runner, [(specs, 2, 0)], openings)
    finally:
        runner.close()
