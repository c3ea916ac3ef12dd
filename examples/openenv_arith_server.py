"""An OpenEnv environment server of two-term additions, written with openenv-core 0.3.

``rlvr/OpenEnv-v0`` plays it (docs/environments.md has the commands)::

    python examples/openenv_arith_server.py --port 8000   # in a venv with openenv-core

Each episode (one WebSocket session) opens with a prompt such as ``12+7=``; the action's
``reply`` earns reward 1 when it is exactly the sum. ``reset`` takes ``seed`` (which problem),
``split`` (``"train"`` or ``"test"``: a problem is held out when a hash of its terms falls in
the last tenth, so the splits never share one), ``max_term`` (default 50) and ``attempts``
(default 1: a wrong reply with attempts left gets "Wrong." and the prompt again). The
observation also carries the ``answer``, which rlvr offers to the warm-up and to check-env's
probes only (``reference_field``), never to the model.
"""

from __future__ import annotations

import argparse
import hashlib
import random
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class ArithAction(Action):
    """The model's reply."""

    reply: str = Field(..., description="The reply: the sum, as digits")


class ArithObservation(Observation):
    """The prompt to show, and the reference answer (for warm-ups and checks)."""

    prompt: str = Field(default="", description="The text the model sees")
    answer: str = Field(default="", description="The sum (not shown to the model)")


def held_out(a: int, b: int) -> bool:
    """Whether the problem ``a+b`` belongs to the test split (a tenth of the problems)."""
    return hashlib.sha256(f"{a}+{b}".encode()).digest()[0] < 26


class ArithEnvironment(Environment):
    """Two-term additions; each session has its own instance."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        """Start with no problem (``reset`` draws one)."""
        super().__init__()
        self._state = State(step_count=0)
        self._problem = ""
        self._answer = ""
        self._attempts_left = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              split: str = "train", max_term: int = 50, attempts: int = 1,
              **kwargs: Any) -> ArithObservation:
        """Draw the problem of ``seed`` in ``split``."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        rng = random.Random(seed)
        while True:
            a, b = rng.randint(1, max_term), rng.randint(1, max_term)
            if held_out(a, b) == (split == "test"):
                break
        self._problem, self._answer = f"{a}+{b}=", str(a + b)
        self._attempts_left = attempts
        self._state = State(episode_id=episode_id, step_count=0)
        return ArithObservation(prompt=self._problem, answer=self._answer)

    def step(self, action: ArithAction, timeout_s: float | None = None,  # type: ignore[override]
             **kwargs: Any) -> ArithObservation:
        """Grade the reply: reward 1 and done when it is the sum."""
        self._state.step_count += 1
        self._attempts_left -= 1
        if action.reply.strip() == self._answer:
            return ArithObservation(done=True, reward=1.0, answer=self._answer)
        if self._attempts_left <= 0:
            return ArithObservation(done=True, reward=0.0, answer=self._answer)
        return ArithObservation(prompt=f"Wrong. {self._problem}", reward=0.0,
                                answer=self._answer)

    @property
    def state(self) -> State:
        """The episode's id and step count."""
        return self._state


def main() -> None:
    """Serve the environment on 127.0.0.1 with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-envs", type=int, default=512,
                        help="concurrent sessions (rlvr plays one per concurrent episode)")
    args = parser.parse_args()
    app = create_app(ArithEnvironment, ArithAction, ArithObservation, env_name="arith",
                     max_concurrent_envs=args.max_envs)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
