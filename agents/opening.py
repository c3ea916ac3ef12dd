"""Episodes opened ahead of their run: what ``EpisodeRunner.open_ahead`` hands its caller.

One ``open_ahead`` call is one ``OpenAheadJob``: a background thread opens its episodes one by
one (make or take an idle env, ``reset``, render the prompt), with no event loop and no trip
through the env threads: a plain loop costs a fraction of the coroutines an episode's opening
takes in ``arun``, so its Python barely competes with the update it runs beside. Each coming
``arun`` gets an ``Opening``: its slot of the job.

A reset that hangs: the run waiting for its opening gives up after ``env_step_timeout_s``, stops
the job (the call it is in is stopped as in ``rlvr.agents.env_calls``), fails the stuck episode with
``TimeoutError`` and opens the rest itself, as without ``open_ahead``.
"""

from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass, field
from typing import Any

from rlvr.agents.env_calls import EnvCallKilled, raise_in_thread


@dataclass(eq=False)
class OpenAheadJob:
    """The background work of one ``open_ahead`` call, shared by its ``Opening``s.

    Attributes:
        states: per run, per episode: its opened state, an exception to raise in its run, or
            None (not opened: its run opens it).
        current: ``(run, episode)`` being opened now, or None.
        stopped: a run gave up waiting; nothing more is opened or stored.
        settled: set when the job has ended or was stopped.
        lock: guards ``states``, ``current`` and ``stopped``.
        thread: the ident of the thread running the job (once it started).
    """

    states: list[list[Any]]
    current: tuple[int, int] | None = None
    stopped: bool = False
    settled: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: int | None = None

    def settle(self) -> None:
        """Mark the job settled (once); call with ``lock`` held."""
        if not self.settled.done():
            self.settled.set_result(None)

    def stop_unless_done(self) -> None:
        """Stop the job if it has not ended: the calls not yet made are left to their runs.

        The call it is in (a hung ``reset``) is stopped with ``EnvCallKilled``.
        """
        with self.lock:
            if not self.settled.done():
                self.stopped = True
                self.settle()
                if self.current is not None and self.thread is not None:
                    raise_in_thread(self.thread, EnvCallKilled)


@dataclass(eq=False)
class Opening:
    """The episodes of one coming ``arun``, opened ahead (``EpisodeRunner.open_ahead``).

    Attributes:
        specs: the specs the run will be given.
        group_size: its group size.
        job: the background work that opens them.
        slot: this run's index in ``job.states``.
        plan: the run's episodes (grouped specs) and their idle-env pool keys.
        used: played by ``arun`` or handed back (``discard``, ``close``).
    """

    specs: tuple[Any, ...]
    group_size: int
    job: OpenAheadJob
    slot: int
    plan: tuple[list[Any], list[str | None]]
    used: bool = False

    def taken(self) -> tuple[list[Any], int | None]:
        """This run's states as they stand, and which of its episodes is being opened now.

        The index is None when none of this run's is.
        """
        with self.job.lock:
            current = self.job.current
            return list(self.job.states[self.slot]), (
                current[1] if current is not None and current[0] == self.slot else None)
