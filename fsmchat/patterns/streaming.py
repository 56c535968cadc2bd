"""Layer 15, shared: a run's events as they happen, for async code and for plain scripts.

``pattern.stream(task)`` returns a ``RunStream``: ``async for item in ...`` inside an event loop
(what ``stream`` always was; ``astream`` is the same, LangGraph's spelling) and ``for item in ...``
in a script, where the run goes on an event loop the stream owns, stepped in the caller's thread
until the next item is there (no thread, no hand-over). Where a loop already runs in the calling
thread (a notebook cell), ``for`` puts the run on a loop of its own in a worker thread and hands
each item over the moment it happens. Either way the items are the run's ``TraceEvent``s and
posted ``Message``s in order, then the ``RunResult``; leaving the loop early cancels the run.
"""
from __future__ import annotations

import asyncio
import collections
import queue
import signal
import threading
from enum import Enum
from types import FrameType
from typing import AsyncIterator, Awaitable, Callable, Iterator

from ..errors import attach_result, result_of
from ..models import RunResult, StreamItem

Start = Callable[[Callable[[StreamItem], None]], Awaitable[RunResult]]  # given a sink for items, runs and returns the result


class _End(Enum):
    DONE = 0  # put after a run's last item: the stream is over


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

    def __aiter__(self) -> AsyncIterator[StreamItem]:
        self._claim()
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[StreamItem]:
        items = _Items()
        done = _End.DONE
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

    def __iter__(self) -> Iterator[StreamItem]:
        self._claim()
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a script: the run steps in this thread
            return self._iter_here()
        return self._iter_worker()  # a notebook cell: this thread's loop is busy running the caller

    def _iter_here(self) -> Iterator[StreamItem]:
        """No loop runs in this thread: the run goes on a loop this generator owns, stepped in the
        caller's thread until the next item is there (each step hands over all that one pass of the
        loop made: a reply's pieces come in bursts). A Ctrl-C while the loop steps cancels the run,
        which ends through its cancellation path; then the KeyboardInterrupt goes on, carrying the
        partial result (``result_of``). A Ctrl-C in the loop's body, a break or an error there
        closes this generator, which cancels the run the same way."""
        loop = asyncio.new_event_loop()
        items: collections.deque[StreamItem | _End] = collections.deque()
        done = _End.DONE
        wake = True  # an item stops the loop's run_forever (not once the run is over)

        def put(item: StreamItem | _End) -> None:
            items.append(item)
            if wake:
                loop.stop()  # the current pass of the loop ends, then run_forever returns

        try:
            runner = asyncio.ensure_future(self._start(put), loop=loop)
        except BaseException:  # the run could not even start: nothing else owns the loop
            loop.close()
            raise
        runner.add_done_callback(lambda _: put(done))
        ctrl_c = _CtrlC(loop, runner)
        interrupt: KeyboardInterrupt | None = None
        try:
            while True:
                while not items:
                    ctrl_c.stepping = True
                    try:
                        loop.run_forever()
                    finally:
                        ctrl_c.stepping = False
                    if ctrl_c.pressed:
                        interrupt = KeyboardInterrupt()
                        raise interrupt
                item = items.popleft()
                if item is done:
                    break
                yield item
            yield runner.result()
        finally:
            try:
                if not runner.done():  # the caller left early (break, an error, Ctrl-C): cancel the run
                    runner.cancel()
                    while not runner.done():
                        loop.run_forever()
                wake = False
                if interrupt is not None:
                    attach_result(interrupt, _outcome(runner))
                elif not runner.cancelled():
                    runner.exception()  # retrieved: a run that failed after the caller left logs nothing
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                ctrl_c.restore()
                loop.close()

    def _iter_worker(self) -> Iterator[StreamItem]:
        """A loop runs in this thread (a notebook cell, async code iterating with ``for``): the run
        goes on an event loop of its own in a worker thread, each item handed over the moment it
        happens; leaving early cancels the run there."""
        items: queue.SimpleQueue[StreamItem | _End] = queue.SimpleQueue()  # C-level put/get: one item per token
        done = _End.DONE
        running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[object]]] = []  # the run's loop and task
        ran: list[RunResult] = []  # the run's result, once it is over
        failed: list[BaseException] = []  # or what it raised, handed to the iterating thread and raised there
        started = threading.Event()

        async def main() -> RunResult:
            task = asyncio.current_task()
            if task is not None:  # always, in a coroutine asyncio.run runs
                running.append((asyncio.get_running_loop(), task))
            started.set()
            return await self._start(items.put)

        def worker() -> None:
            try:
                ran.append(asyncio.run(main()))
            except BaseException as exc:  # handed to the iterating thread, raised there
                failed.append(exc)
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
            if failed:
                raise failed[0]
            yield ran[0]
        finally:
            if thread.is_alive():  # the caller left early (break, an error, Ctrl-C): cancel the run
                started.wait()
                for loop, task in running:
                    loop.call_soon_threadsafe(task.cancel)
                thread.join()


class _CtrlC:
    """Ctrl-C for a run stepped in the main thread, as ``asyncio.run`` takes it: while the loop
    steps, the first one cancels the run (its cancellation path keeps the transcript so far) and
    the stream raises KeyboardInterrupt once the run is over; in the loop's body, or a second
    time, it is Python's own. Installed only over Python's own handler, in the main thread."""

    __slots__ = ("loop", "runner", "stepping", "pressed", "installed")

    def __init__(self, loop: asyncio.AbstractEventLoop, runner: asyncio.Future[RunResult]):
        self.loop, self.runner = loop, runner
        self.stepping = self.pressed = False
        self.installed = (threading.current_thread() is threading.main_thread()
                          and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if self.installed:
            signal.signal(signal.SIGINT, self.handle)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.stepping or self.pressed:
            signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt here
        self.pressed = True
        self.loop.call_soon_threadsafe(self.runner.cancel)  # wakes the loop if it waits on its selector

    def restore(self) -> None:
        if (self.installed and threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) == self.handle):
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _outcome(runner: asyncio.Future[RunResult]) -> object:
    """What an ended run leaves: its result, or the partial result its error or cancellation carries."""
    try:
        return runner.result()
    except BaseException as exc:  # the CancelledError a cancelled run raised carries its partial result
        return result_of(exc)


class _Items:
    """The items of a run for its one reader on the same event loop (one per streamed token, so
    lighter than an ``asyncio.Queue``): a deque, and a future only while the reader waits on it empty."""

    __slots__ = ("items", "waiter")

    def __init__(self) -> None:
        self.items: collections.deque[StreamItem | _End] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None

    def __bool__(self) -> bool:
        return bool(self.items)

    def put(self, item: StreamItem | _End) -> None:
        self.items.append(item)
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self) -> StreamItem | _End:
        return self.items.popleft()

    async def get(self) -> StreamItem | _End:
        while not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        return self.items.popleft()
