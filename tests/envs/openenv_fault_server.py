"""An OpenEnv server whose sessions misbehave on request (rlvr/OpenEnv-v0's tests).

``reset(fault=...)`` picks what ``step`` does: ``"none"`` (reward 1 for ``"ok"``), ``"raises"``
(the environment raises: the server sends an error reply), ``"bad_observation"`` (the text field
is a number), ``"big_reward"`` (reward 5), ``"slow"`` (sleeps 8 s), ``"exit"`` (the process dies),
``"done_at_reset"`` (``reset`` already ends the episode).

    python tests/envs/openenv_fault_server.py --port 8000
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class FaultAction(Action):
    """The model's text."""

    text: str = Field(...)
    note: str = Field(default="")


class FaultObservation(Observation):
    """Two string fields (so rlvr must be told which one to show)."""

    text: str = Field(default="")
    hint: str = Field(default="")


class BadObservation(Observation):
    """What a broken server sends: ``text`` is not a string."""

    text: int = 7


class FaultEnvironment(Environment):
    """Misbehaves in the way ``reset(fault=...)`` asks."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        """No fault until reset."""
        super().__init__()
        self.fault = "none"

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              fault: str = "none", **kwargs: Any) -> FaultObservation:
        """Open with ``"say ok (seed N)"``."""
        self.fault = fault
        return FaultObservation(text=f"say ok (seed {seed})", done=fault == "done_at_reset")

    def step(self, action: FaultAction, timeout_s: float | None = None,  # type: ignore[override]
             **kwargs: Any) -> Observation:
        """Grade, or misbehave."""
        if self.fault == "raises":
            raise RuntimeError("the environment broke")
        if self.fault == "exit":
            os._exit(1)
        if self.fault == "slow":
            time.sleep(8)
        if self.fault == "bad_observation":
            return BadObservation()
        reward = 5.0 if self.fault == "big_reward" else float(action.text.strip() == "ok")
        return FaultObservation(text="", done=True, reward=reward)

    @property
    def state(self) -> State:
        """Nothing to report."""
        return State()


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=64)
    args = parser.parse_args()
    app = create_app(FaultEnvironment, FaultAction, FaultObservation,
                     max_concurrent_envs=args.max_sessions)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
