"""Episodes opened ahead of their run: ``OpenAhead``, behind ``EpisodeRunner.open_ahead``.

``OpenAhead`` owns a background thread of its own. One ``open_ahead`` call is one
``OpenAheadJob``: that thread opens its episodes one by one (make or take an idle env, ``reset``,
render the prompt: the runner's ``open_episode``), with no event loop and no trip through the
env threads: a plain loop costs a fraction of the coroutines an episode's opening takes in
``arun``, so its Python barely competes with the update it runs beside. Each coming ``arun``
gets an ``Opening``: its slot of the job, which it takes back with ``OpenAhead.take``.

A reset that hangs: the run waiting for its opening gives up after ``env_step_timeout_s``, stops
the job (the call it is in is stopped as in ``rlvr.agents.env_calls``), fails the stuck episode with
``TimeoutError`` and opens the rest itself, as without ``open_ahead``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.agents.env_calls import EnvCallKilled, EnvThreads, raise_in_thread
from rlvr.agents.errors import RunnerConfigError

#: A run's episodes (grouped specs) and each one's idle-env pool key.
Plan = tuple[list[Any], list[str | None]]


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


class OpenAhead:
    """Opens the episodes of coming runs on a background thread of its own.

    Args:
        release: ``EnvPool.release_now``: keeps opened episodes' envs idle or closes them.
        timeout_s: how long a run waits for its opening (``env_step_timeout_s``).
    """

    def __init__(self, release: Callable[[Sequence[Any], bool], None], timeout_s: float
                 ) -> None:
        self._release = release
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._thread: EnvThreads | None = None  # a daemon thread: a hung reset never blocks exit
        self.unused: list[Opening] = []

    def open(self, runs: Sequence[tuple[Sequence[Any], int]], plans: Sequence[Plan],
             open_episode: Callable[[int, Any, str | None], Any]) -> list[Opening]:
        """Start opening ``runs`` (``(specs, group_size)`` each, planned as ``plans``).

        ``open_episode(index, spec, key)`` opens one episode in the calling thread (the
        runner's ``open_episode``, inline); it raises only an agent error (or
        ``EnvCallKilled`` when stopped): an env's error fails its episode.
        """
        job = OpenAheadJob([[None] * len(grouped) for grouped, _ in plans])
        if self._thread is None:
            self._thread = EnvThreads(1, "open-ahead")
        openings = [Opening(tuple(specs), g, job, j, plan)
                    for j, ((specs, g), plan) in enumerate(zip(runs, plans))]
        with self._lock:
            self.unused.extend(openings)
        self._thread.submit(self._open_all, list(plans), job, open_episode)
        return openings

    async def take(self, opening: Opening, specs: Sequence[Any], group_size: int
                   ) -> tuple[list[Any], int | None]:
        """The run's opened states (None: left for the run to open), once the job has them.

        Waits at most ``timeout_s``; then the job is stopped and the index of the episode stuck
        in its call comes back too (its run fails it with ``TimeoutError``), else None.

        Raises:
            RunnerConfigError: ``opening`` was used before, or made for other specs.
            Exception: the agent error an episode's opening raised (it stops the run).
        """
        same = opening.group_size == group_size and len(opening.specs) == len(specs) and all(
            a is b or a == b for a, b in zip(opening.specs, specs))
        if not self._claim(opening):
            raise RunnerConfigError("this Opening was already used (or discarded)")
        if not opening.job.settled.done():  # (a trainer's openings are done by now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(opening.job.settled)),
                                       self._timeout_s)
        opening.job.stop_unless_done()
        row, stuck = opening.taken()
        if not same:
            self._release(row, True)
            raise RunnerConfigError("arun(opened=...) was given an Opening made for other specs "
                                    "or another group_size")
        errors = [s for s in row if isinstance(s, BaseException)]
        if errors:  # an agent error while opening stops the run, as it would in arun
            self._release(row, True)
            raise errors[0]
        return row, stuck

    def discard(self, openings: Sequence[Opening]) -> None:
        """Hand back openings that will not be played: their envs go idle or are closed."""
        for opening in openings:
            if self._claim(opening):
                self._release(self._settled_states(opening), True)

    def close(self) -> None:
        """Close the envs of the openings never used and stop the thread."""
        with self._lock:
            unused, self.unused = self.unused, []
        for opening in unused:
            opening.used = True
            self._release(self._settled_states(opening), False)
        if self._thread is not None:
            self._thread.close()
            self._thread = None

    def _claim(self, opening: Opening) -> bool:
        """Mark ``opening`` used; False when it already was."""
        with self._lock:
            if opening.used:
                return False
            opening.used = True
            if opening in self.unused:
                self.unused.remove(opening)
            return True

    def _settled_states(self, opening: Opening) -> list[Any]:
        """``opening``'s states once its job has them (stopping it after the timeout)."""
        with contextlib.suppress(concurrent.futures.TimeoutError):
            opening.job.settled.result(self._timeout_s)
        opening.job.stop_unless_done()
        return opening.taken()[0]

    def _open_all(self, plans: list[Plan], job: OpenAheadJob,
                  open_episode: Callable[[int, Any, str | None], Any]) -> None:
        """The thread's work: open the job's episodes one by one, until done or stopped."""
        job.thread = threading.get_ident()
        try:
            for run, (grouped, keys) in enumerate(plans):
                for i, (spec, key) in enumerate(zip(grouped, keys)):
                    with job.lock:
                        if job.stopped:
                            return
                        job.current = (run, i)
                    out: Any
                    try:
                        out = open_episode(i, spec, key)
                    except BaseException as exc:  # an agent error: raised in the run
                        out = exc
                    with job.lock:
                        job.current = None
                        stored = not job.stopped
                        if stored:
                            job.states[run][i] = out
                    if not stored:  # its run gave up waiting and opens the rest itself
                        self._release([out], False)
                        return
        finally:
            with job.lock:
                job.current = None
                job.settle()
                raise_in_thread(job.thread, None)  # a stop sent as the call returned
