"""User code under the run's deadline: one way to call a callable speaker or a task's handler.

With no deadline the callable runs as it is (sync in the loop's thread, async awaited). With one,
an async callable is cancelled when the deadline passes and a sync one runs in a worker thread
that is abandoned at the deadline (Python cannot stop a thread); either way ``DeadlineExceeded``
is raised, and the engine then leaves the state through its drawn ``past_deadline`` edge.
"""
from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Callable

from ..errors import DeadlineExceeded
from ..graph.state_graph import is_awaitable


async def call_within(fn: Callable[..., object], *args: object, deadline: float | None, what: str,
                      limit: str = "the run's deadline_s") -> object:
    """``fn(*args)`` (awaited if it returns an awaitable), bounded by ``deadline`` (monotonic);
    ``limit`` names what set that deadline, for the error (a tool's own ``Tool(timeout_s=2)``)."""
    if deadline is None:
        out = fn(*args)
        return await out if is_awaitable(out) else out
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded(f"{what} was not started: {limit} has passed")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        started = fn(*args)
        assert is_awaitable(started), "a coroutine function's call is awaitable"
        try:
            return await asyncio.wait_for(started, left)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"{what} was cancelled at {limit}") from None
    out = await _in_daemon_thread(fn, args, left, what, limit)
    if inspect.isawaitable(out):
        try:
            return await asyncio.wait_for(out, max(deadline - time.monotonic(), 0.0))
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"{what} was cancelled at {limit}") from None
    return out


async def _in_daemon_thread(fn: Callable[..., object], args: tuple[object, ...], timeout: float, what: str,
                            limit: str) -> object:
    """``fn(*args)`` in a daemon thread of its own (not the loop's executor, which ``asyncio.run``
    joins on exit), waited for at most ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[object] = loop.create_future()

    def settle(ok: bool, value: object) -> None:
        if not future.done():
            if ok:
                future.set_result(value)
            elif isinstance(value, BaseException):
                future.set_exception(value)

    def work() -> None:
        try:
            value, ok = fn(*args), True
        except BaseException as exc:  # handed to the waiting coroutine
            value, ok = exc, False
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop has closed: the result is dropped, as documented
            pass

    threading.Thread(target=work, name=f"fsmchat-callable-{what}", daemon=True).start()
    try:
        return await asyncio.wait_for(future, timeout)
    except asyncio.TimeoutError:
        raise DeadlineExceeded(f"{what} was still running at {limit}; it was abandoned in its "
                               "worker thread (a sync callable cannot be stopped)") from None
