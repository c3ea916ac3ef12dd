"""Idle envs kept for reuse between episodes, keyed by env id and constructor arguments.

Making an env can cost more than an episode (a sandbox pool, a dataset load), so the runner keeps
up to ``capacity`` idle envs per key and hands one to the next episode of the same env. The pool
is safe to use from any thread (the runner's loop, its env threads and its open-ahead thread).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from rlvr.agents.episode_state import EpisodeState, close_quietly
from rlvr.agents.runner_config import EpisodeSpec


class EnvPool:
    """Up to ``capacity`` idle envs per key; ``capacity`` 0 keeps none (every env is closed).

    Args:
        capacity: idle envs kept per key (``RunnerConfig.reuse_envs``).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._idle: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def key(self, spec: EpisodeSpec) -> str | None:
        """The pool key of ``spec``'s env (None when its envs are not reused)."""
        if not self.capacity or spec.env_id is None:
            return None
        return json.dumps([spec.env_id, spec.env_kwargs], sort_keys=True, default=str)

    def take(self, key: str | None) -> Any:
        """An idle env for ``key`` (removed from the pool), or None."""
        with self._lock:
            idle = self._idle.get(key) if key is not None else None
            return idle.pop() if idle else None

    def give(self, key: str | None, env: Any) -> bool:
        """Keep ``env`` for reuse under ``key``; False when it cannot be kept (pool full)."""
        with self._lock:
            idle = self._idle.setdefault(key, []) if key is not None else None
            if idle is None or env is None or len(idle) >= self.capacity:
                return False
            idle.append(env)
            return True

    def release_now(self, states: Iterable[Any], keep: bool) -> None:
        """Keep opened episodes' envs idle (``keep``) or close them, from any thread.

        An env stuck in a timed-out call is neither kept nor closed (its thread still runs).
        """
        for state in states:
            if not isinstance(state, EpisodeState) or state.env is None:
                continue
            if keep and state.exc is None and self.give(state.reuse_key, state.env):
                continue
            if not isinstance(state.exc, TimeoutError):
                close_quietly(state.env)

    def idle_count(self) -> int:
        """Idle envs held, over all keys."""
        with self._lock:
            return sum(len(envs) for envs in self._idle.values())

    def close(self) -> None:
        """Close every idle env and empty the pool."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for env in (e for envs in idle.values() for e in envs):
            close_quietly(env)
