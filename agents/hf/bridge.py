"""From asyncio callers to the transformers engine's worker thread, and completions back.

``await generate(...)`` stages its request and returns when its completion is ready; the event
loop is never blocked (the forwards run in the worker thread), so env steps and other coroutines
keep running. Requests staged in the same event-loop iteration are handed to the worker
together (one release per loop iteration: ``loop.call_soon`` after every coroutine ready in it
has staged its own), so requests issued together are prefilled together. Completions go back to
each caller's own loop, one callback per loop for all of its requests (one wake-up of that
loop, not one per request); a caller that cancelled, or whose loop closed, is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterable

from rlvr.agents.engine import Completion
from rlvr.agents.hf.scheduler import Request


class LoopBridge:
    """Staged and pending requests, guarded by one condition the worker waits on.

    Args:
        start_worker: called (holding ``cond``) whenever a request is staged, so a worker
            thread runs.
    """

    def __init__(self, start_worker: Callable[[], None]) -> None:
        self.start_worker = start_worker
        self.cond = threading.Condition()
        self.pending: deque[Request] = deque()
        """Requests handed to the worker, not yet admitted into the batch."""
        self.staged: list[Request] = []
        """Requests of this loop iteration, handed over at its end."""
        self.releasing: set[asyncio.AbstractEventLoop] = set()
        """Loops with a release queued."""

    async def submit(self, req: Request) -> Completion:
        """Stage ``req`` (on its own loop) and wait for its completion."""
        loop = req.loop
        with self.cond:
            self.staged.append(req)
            self.start_worker()
            first = loop not in self.releasing
            self.releasing.add(loop)
        if first:
            loop.call_soon(self.release_staged, loop)
        return await req.future

    def release_staged(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand this loop iteration's staged requests to the worker."""
        with self.cond:
            self.releasing.discard(loop)
            self.pending.extend(self.staged)
            self.staged.clear()
            self.cond.notify_all()

    def deliver(self, done: Iterable[Request], versioned: bool) -> None:
        """Resolve the futures of finished requests on their own event loops (thread-safe).

        Args:
            done: the finished requests (their lists are never appended to again).
            versioned: completions report per-token versions.
        """
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Completion],
                                                             Completion]]] = {}
        for req in done:
            completion = Completion(req.token_ids, req.logprobs, req.finish_reason or "abort",
                                    versions=req.versions if versioned else None,
                                    regenerated=req.regenerated)
            by_loop.setdefault(req.loop, []).append((req.future, completion))
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the caller's loop is already closed
                loop.call_soon_threadsafe(_resolve_all, items)

    @staticmethod
    def fail(req: Request, exc: BaseException) -> None:
        """Raise ``exc`` in ``req``'s caller (unless it is done already)."""
        def reject() -> None:
            if not req.future.done():
                req.future.set_exception(exc)

        with contextlib.suppress(RuntimeError):
            req.loop.call_soon_threadsafe(reject)


def _resolve_all(items: list[tuple[asyncio.Future[Completion], Completion]]) -> None:
    """Set each future's result unless it is done already (e.g. cancelled by its caller)."""
    for fut, completion in items:
        if not fut.done():
            fut.set_result(completion)
