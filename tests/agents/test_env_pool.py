"""The idle-env pool: per-key capacity, what is kept, closed or left alone."""

from __future__ import annotations

from rlvr.agents.env_pool import EnvPool
from rlvr.agents.episode_state import EpisodeState
from rlvr.agents.runner_config import EpisodeSpec


class FakeEnv:
    """Counts close() calls (an env object only; the pool never steps it)."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def state(key: str | None, env: FakeEnv, exc: BaseException | None = None) -> EpisodeState:
    return EpisodeState(spec=EpisodeSpec(env_id="x"), env_id="x", env=env, reuse_key=key,
                        exc=exc)


def test_key_depends_on_id_and_kwargs_and_is_none_without_reuse() -> None:
    pool = EnvPool(2)
    a = pool.key(EpisodeSpec(env_id="rlvr/Math-v0", env_kwargs={"split": "train"}))
    b = pool.key(EpisodeSpec(env_id="rlvr/Math-v0", env_kwargs={"split": "test"}))
    assert a is not None and b is not None and a != b
    assert EnvPool(0).key(EpisodeSpec(env_id="rlvr/Math-v0")) is None


def test_capacity_per_key_and_take_returns_what_was_given() -> None:
    pool = EnvPool(2)
    envs = [FakeEnv() for _ in range(3)]
    assert pool.give("k", envs[0]) and pool.give("k", envs[1])
    assert not pool.give("k", envs[2])  # full for this key
    assert pool.give("other", envs[2])
    assert pool.idle_count() == 3
    assert pool.take("k") in envs[:2] and pool.take("k") in envs[:2]
    assert pool.take("k") is None
    assert not pool.give(None, FakeEnv())  # no key: never kept


def test_release_now_keeps_closes_or_leaves_a_timed_out_env() -> None:
    pool = EnvPool(1)
    kept, extra, failed, hung = FakeEnv(), FakeEnv(), FakeEnv(), FakeEnv()
    pool.release_now([state("k", kept), state("k", extra), state("k", failed, ValueError()),
                      state("k", hung, TimeoutError()), "not a state"], keep=True)
    assert pool.idle_count() == 1 and kept.closed == 0
    assert extra.closed == 1 and failed.closed == 1  # over capacity / failed: closed
    assert hung.closed == 0  # its thread may still be in a call: never touched
    pool.close()
    assert kept.closed == 1 and pool.idle_count() == 0
