"""Layer 15, shared: a run's events as they happen, for async code and for plain scripts.

``pattern.stream(task)`` returns a ``RunStream``: ``async for item in ...`` inside an event loop
(what ``stream`` always was; ``astream`` is the same, LangGraph's spelling) and ``for item in ...``
in a script or a notebook, where the run goes on an event loop of its own in a worker thread and
each item is handed over the moment it happens. Either way the items are the run's ``TraceEvent``s
and posted ``Message``s in order, then the ``RunResult``; leaving the loop early cancels the run.
"""
from __future__ import annotations

import asyncio
import collections
import queue
import threading
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

Start = Callable[[Callable[[Any], None]], Awaitable[Any]]  # given a sink for items, runs and returns the result


class RunStream:
    """One run's items (trace events, messages, then the ``RunResult``), iterable either way, once."""

    def __init__(self, start: Start, what: str = "stream"):
        self._start = start
        self._what = what
        self._used = False

    def _claim(self) -> None:
        if self._used:
            raise RuntimeError(f"{self._what}: this stream was already iterated; call stream(task) again for a new run")
        self._used = True

    def __aiter__(self) -> AsyncIterator[Any]:
        self._claim()
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[Any]:
        items = _Items()
        done = object()
        runner = asyncio.ensure_future(self._start(items.put))
        runner.add_done_callback(lambda _: items.put(done))
        try:
            while True:
                item = items.take() if items else await items.get()
                if item is done:
                    break
                yield item
            yield runner.result()
        finally:
            if not runner.done():
                runner.cancel()

    def __iter__(self) -> Iterator[Any]:
        self._claim()
        return self._iter()

    def _iter(self) -> Iterator[Any]:
        items: queue.SimpleQueue[Any] = queue.SimpleQueue()  # C-level put/get: one item per token
        done = object()
        box: dict[str, Any] = {}
        started = threading.Event()

        async def main() -> Any:
            box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
            started.set()
            return await self._start(items.put)

        def worker() -> None:
            try:
                box["result"] = asyncio.run(main())
            except BaseException as exc:  # handed to the iterating thread, raised there
                box["error"] = exc
            finally:
                started.set()
                items.put(done)

        thread = threading.Thread(target=worker, name="fsmchat-stream", daemon=True)
        thread.start()
        try:
            while True:
                item = items.get()
                if item is done:
                    break
                yield item
            if "error" in box:
                raise box["error"]
            yield box["result"]
        finally:
            if thread.is_alive():  # the caller left early (break, an error, Ctrl-C): cancel the run
                started.wait()
                if "task" in box:
                    box["loop"].call_soon_threadsafe(box["task"].cancel)
                thread.join()


class _Items:
    """The items of a run for its one reader on the same event loop (one per streamed token, so
    lighter than an ``asyncio.Queue``): a deque, and a future only while the reader waits on it empty."""

    __slots__ = ("items", "waiter")

    def __init__(self) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None

    def __bool__(self) -> bool:
        return bool(self.items)

    def put(self, item: Any) -> None:
        self.items.append(item)
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self) -> Any:
        return self.items.popleft()

    async def get(self) -> Any:
        while not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        return self.items.popleft()
