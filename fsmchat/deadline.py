"""User code under the run's deadline: one way to call a callable speaker or a task's handler.

With no deadline the callable runs as it is (sync in the loop's thread, async awaited). With one,
an async callable is cancelled when the deadline passes and a sync one runs in a worker thread
that is abandoned at the deadline (Python cannot stop a thread); either way ``DeadlineExceeded``
is raised, and the engine then leaves the state through its drawn ``past_deadline`` edge.
"""
from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable

from .errors import DeadlineExceeded


async def call_within(fn: Callable[..., Any], *args: Any, deadline: float | None, what: str) -> Any:
    """``fn(*args)`` (awaited if it returns an awaitable), bounded by ``deadline`` (monotonic)."""
    if deadline is None:
        out = fn(*args)
        return await out if inspect.isawaitable(out) else out
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded(f"{what} was not started: the run's deadline_s has passed")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        try:
            return await asyncio.wait_for(fn(*args), left)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"{what} was cancelled at the run's deadline_s") from None
    worker = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    done, _ = await asyncio.wait({worker}, timeout=left)
    if not done:  # the thread keeps running; its result, if any, is dropped
        worker.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise DeadlineExceeded(f"{what} was still running at the run's deadline_s; it was abandoned in its "
                               "worker thread (a sync callable cannot be stopped)")
    out = worker.result()
    if inspect.isawaitable(out):
        left = deadline - time.monotonic()
        try:
            return await asyncio.wait_for(out, max(left, 0.0))
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"{what} was cancelled at the run's deadline_s") from None
    return out
