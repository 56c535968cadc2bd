"""User code under the run's deadline: one way to call a callable speaker or a task's handler.

With no deadline the callable runs as it is (sync in the loop's thread, async awaited). With one,
an async callable is cancelled when the deadline passes and a sync one runs in a worker thread
that is abandoned at the deadline (Python cannot stop a thread); either way ``DeadlineExceeded``
is raised, and the engine then leaves the state through its drawn ``past_deadline`` edge.

Several calls at once (a GroupChat's bid round) go through ``gather_eager``: they run inline until
one waits; that one and the calls after it become tasks.
"""
from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import time
from collections.abc import Coroutine, Generator, Iterable
from typing import Any, Callable

from .errors import DeadlineExceeded
from .graph.state_graph import is_awaitable


async def call_within(fn: Callable[..., Any], *args: Any, deadline: float | None, what: str) -> Any:
    """``fn(*args)`` (awaited if it returns an awaitable), bounded by ``deadline`` (monotonic)."""
    if deadline is None:
        out = fn(*args)
        return await out if is_awaitable(out) else out
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded(f"{what} was not started: the run's deadline_s has passed")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        try:
            return await asyncio.wait_for(fn(*args), left)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"{what} was cancelled at the run's deadline_s") from None
    out = await _in_daemon_thread(fn, args, left, what)
    if inspect.isawaitable(out):
        try:
            return await asyncio.wait_for(out, max(deadline - time.monotonic(), 0.0))
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"{what} was cancelled at the run's deadline_s") from None
    return out


async def _in_daemon_thread(fn: Callable[..., Any], args: tuple[Any, ...], timeout: float, what: str) -> Any:
    """``fn(*args)`` in a daemon thread of its own (not the loop's executor, which ``asyncio.run``
    joins on exit), waited for at most ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

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
        raise DeadlineExceeded(f"{what} was still running at the run's deadline_s; it was abandoned in its "
                               "worker thread (a sync callable cannot be stopped)") from None


async def gather_eager(coros: Iterable[Coroutine[Any, Any, Any]]) -> list[Any]:
    """``asyncio.gather(*coros, return_exceptions=True)``, except that the coroutines first run
    inline, each in a copy of the caller's context as a task would, until one waits: one that
    finishes without waiting (a sync callable participant, a scripted model) costs no task and no
    trip through the event loop; the one that waits (a model request) goes on as a task from there,
    and the coroutines after it start as plain tasks (they are likely to wait too, and running one
    inline first only to wrap it costs more than a task). The first steps run in order, as
    gather's tasks would start; results and exceptions come back in order (``KeyboardInterrupt``
    and ``SystemExit`` propagate, as from a task)."""
    results: list[Any] = []
    waiting: list[tuple[int, asyncio.Future[Any]]] = []
    for i, coro in enumerate(coros):
        if waiting:
            results.append(None)
            waiting.append((i, asyncio.ensure_future(coro)))
            continue
        ctx = contextvars.copy_context()
        try:
            first = ctx.run(coro.send, None)
        except StopIteration as done:
            results.append(done.value)
        except (KeyboardInterrupt, SystemExit):
            coro.close()
            raise
        except BaseException as exc:  # returned, as gather(return_exceptions=True) returns it
            results.append(exc)
        else:
            results.append(None)
            waiting.append((i, ctx.run(asyncio.ensure_future, _Started(coro, first))))
    if waiting:
        got = await asyncio.gather(*(task for _, task in waiting), return_exceptions=True)
        for (i, _), out in zip(waiting, got):
            results[i] = out
    return results


class _Started(Coroutine[Any, Any, Any]):
    """A coroutine that ``gather_eager`` already stepped once, for a task to drive on: the task's
    first step hands over what the coroutine yielded (the future it waits on); every later
    step, ``throw`` (a cancellation) and ``close`` go to the coroutine itself."""

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any):
        self._coro, self._first, self._fresh = coro, first, True

    def send(self, value: Any) -> Any:
        if self._fresh:
            self._fresh = False
            return self._first
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._fresh = False
        return self._coro.throw(typ if val is None else val)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:  # tasks call send/throw; an ``await`` works too
        step: Callable[[Any], Any] = self.send
        arg: Any = None
        while True:
            try:
                out = step(arg)
            except StopIteration as stop:
                return stop.value
            try:
                arg, step = (yield out), self.send
            except BaseException as exc:
                arg, step = exc, self.throw
