"""Playing checker episodes: reset, then the same action(s) each turn until the episode ends.

Every call is validated against the contract (:mod:`rlvr.envs.check.contract`) and timed; an
exception raised by ``step`` ends the episode and is recorded, never propagated.

Every ``reset`` and ``step`` runs in a daemon thread with a deadline (``call_timeout_s``). A call
past it is recorded as a hang (``Session.hung``, the ``hangs`` rule); the env is not called
again (its state is unknown and the call may still be running), so later episodes end at once
with ``episode.error`` starting ``not played:``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from rlvr.envs.base import Message
from rlvr.envs.check.contract import Violations, check_after_end, validate_reset, validate_step
from rlvr.verifiers import Verdict

__all__ = ["NOT_PLAYED", "CallHung", "Episode", "Session", "StepRecord", "call_within"]

NOT_PLAYED = "not played:"
"""How ``Episode.error`` starts for an episode skipped because the env hung before."""


class CallHung(Exception):
    """An env call did not return within its deadline."""


def call_within(timeout_s: float | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a daemon thread; raise :class:`CallHung` when it takes over ``timeout_s``.

    The thread is left running when it hangs (Python cannot stop it); being a daemon thread, it
    does not keep the process alive. An exception ``fn`` raises is raised here.
    """
    if timeout_s is None:
        return fn(*args)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name="rlvr-check-env-call", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise CallHung(f"did not return within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


@dataclass
class StepRecord:
    """One ``step`` call.

    Attributes:
        action: the action played.
        messages: the env's new messages.
        reward: the step reward (NaN when it was not a number).
        terminated: as returned.
        truncated: as returned.
        info: as returned.
        seconds: wall-clock time of the call.
    """

    action: str
    messages: list[Message]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    seconds: float

    @property
    def span_reward(self) -> float:
        """The sum of the step's reward-span values."""
        total = 0.0
        for span in self.info.get("reward_spans") or []:
            try:
                total += float(span[2])
            except (TypeError, ValueError, IndexError):
                continue
        return total


@dataclass
class Episode:
    """One checker episode.

    Attributes:
        opening: the messages ``reset`` returned.
        reset_info: the info ``reset`` returned.
        steps: the steps played, in order.
        error: ``"ExceptionType: message"`` when ``reset`` or ``step`` raised, else None.
        ended: whether the episode terminated or truncated.
    """

    opening: list[Message] = field(default_factory=list)
    reset_info: dict[str, Any] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    error: str | None = None
    ended: bool = False

    @property
    def total_reward(self) -> float:
        """Rewards plus reward-span values over the episode."""
        return sum(s.reward + s.span_reward for s in self.steps)

    @property
    def verdict(self) -> Verdict | None:
        """The last Verdict the env reported, if any."""
        for step in reversed(self.steps):
            verdict = step.info.get("verdict")
            if isinstance(verdict, Verdict):
                return verdict
        return None

    @property
    def passed(self) -> bool:
        """Whether the last verdict passed."""
        verdict = self.verdict
        return verdict is not None and verdict.passed

    @property
    def truncated(self) -> bool:
        """Whether the episode ended by truncation."""
        return bool(self.steps) and self.steps[-1].truncated

    @property
    def slowest_step_s(self) -> float:
        """The longest step, in seconds (0 without steps)."""
        return max((s.seconds for s in self.steps), default=0.0)

    def fingerprint(self) -> list[Any]:
        """What must repeat under the same seed: opening messages, then each step's outcome."""
        record: list[Any] = [repr(self.opening)]
        for step in self.steps:
            verdict = step.info.get("verdict")
            reward = "nan" if step.reward != step.reward else step.reward  # NaN == NaN here
            record.append([
                repr(step.messages), reward, step.terminated, step.truncated,
                (verdict.score, verdict.passed, verdict.reason) if isinstance(verdict, Verdict)
                else None,
            ])
        return record


class Session:
    """Plays episodes on one env, collecting contract violations across all of them.

    Args:
        env: the env under test.
        seed: the reset seed of every episode (the same task each time).
        max_steps: an episode still running after this many steps is cut off (recorded as
            not ended).
        call_timeout_s: the deadline of each ``reset``/``step`` call (None: no deadline).
    """

    def __init__(self, env: gymnasium.Env, *, seed: int = 0, max_steps: int = 32,
                 call_timeout_s: float | None = None) -> None:
        self.env = env
        self.call_timeout_s = call_timeout_s
        self.hung: str | None = None  # the call that hung, "step() ... did not return ..."
        self.seed = seed
        self.max_steps = max_steps
        self.violations: Violations = {}
        self.after_end_checked = False
        self.resets_ok = 0  # episodes whose reset gave a usable opening
        self.steps_ok = 0  # steps that returned a usable value
        self.first_error: str | None = None  # the first reset/step error, "method: what"

    def play(
        self,
        actions: Sequence[str] | str,
        *,
        seed: int | None = None,
        max_steps: int | None = None,
    ) -> Episode:
        """Reset, then play ``actions`` in turn (cycled; a str repeats) until the episode ends."""
        cycle = [actions] if isinstance(actions, str) else list(actions)
        episode = Episode()
        if self.hung is not None:
            episode.error = f"{NOT_PLAYED} the env hung before ({self.hung})"
            return episode
        task_seed = self.seed if seed is None else seed
        try:
            result = call_within(self.call_timeout_s, lambda: self.env.reset(seed=task_seed))
        except CallHung as hung:
            return self._hang(episode, f"reset(seed={task_seed}) {hung}")
        except Exception as exc:
            episode.error = f"reset raised {type(exc).__name__}: {exc}"
            self.violations.setdefault("reset", []).append(episode.error)
            self.first_error = self.first_error or f"reset(): {type(exc).__name__}: {exc}"
            return episode
        if not validate_reset(self.env, result, self.violations):
            episode.error = "reset returned an unusable value"
            self.first_error = self.first_error or "reset(): returned an unusable value"
            return episode
        self.resets_ok += 1
        episode.opening, episode.reset_info = result
        previous: tuple[Any, Any] = result
        for turn in range(self.max_steps if max_steps is None else max_steps):
            action = cycle[turn % len(cycle)]
            start = time.perf_counter()
            try:
                out = call_within(self.call_timeout_s, self.env.step, action)
            except CallHung as hung:
                return self._hang(episode, f"step({action[:40]!r}) (seed {task_seed}) {hung}")
            except Exception as exc:
                episode.error = f"{type(exc).__name__}: {str(exc)[:200]}"
                self.violations.setdefault("raises", []).append(
                    f"action {action[:40]!r}: step raised {episode.error}")
                self.first_error = self.first_error or f"step(): {episode.error}"
                return episode
            seconds = time.perf_counter() - start
            if not validate_step(self.env, action, out, previous, self.violations):
                episode.error = "step returned an unusable value"
                self.first_error = self.first_error or "step(): returned an unusable value"
                return episode
            self.steps_ok += 1
            messages, reward, terminated, truncated, info = out
            number = float(reward) if isinstance(reward, int | float) else float("nan")
            episode.steps.append(
                StepRecord(action, messages, number, terminated, truncated, info, seconds))
            previous = (messages, info)
            if terminated or truncated:
                episode.ended = True
                if not self.after_end_checked:
                    self.after_end_checked = True
                    try:
                        call_within(self.call_timeout_s, check_after_end, self.env,
                                    self.violations)
                    except CallHung as hung:
                        return self._hang(episode, f"step() after the end {hung}")
                return episode
        return episode

    def _hang(self, episode: Episode, what: str) -> Episode:
        """Record a call past its deadline; the env is not called again."""
        self.hung = what
        episode.error = what
        self.violations.setdefault("hangs", []).append(what)
        self.first_error = self.first_error or what
        return episode

    def opening_user_text(self) -> str:
        """The user messages of a fresh episode's opening, joined (what a copier would echo)."""
        episode = self.play([], max_steps=0)
        return "\n".join(m.get("content", "") for m in episode.opening
                         if isinstance(m, dict) and m.get("role") == "user")
