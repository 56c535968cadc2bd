"""Layer 6, shared: what every pattern has in common, written once.

A pattern is configuration of the engine: it validates its config, compiles a ``StateGraph``
whose actions are small functions over a ``ChatContext``, and inherits the API
(``run``, ``arun``, ``execute``, ``aexecute``, ``run_batch``, ``stream``) from ``Pattern``.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

from ..engine import run_graph, run_sync
from ..errors import attach_result, result_of
from ..graph.state_graph import StateGraph
from ..models import Message, RunResult, TraceEvent, Transcript, format_output
from ..speakers.agent import SEED_ROLE, Speaker, Turn
from ..speakers.llm import CallStats


@dataclass
class ChatContext:
    """The typed context a pattern's actions and guards read and write."""

    task: str
    speakers: list[Speaker]
    transcript: Transcript = field(default_factory=Transcript)
    stats: CallStats = field(default_factory=CallStats)
    events: list[dict[str, Any]] = field(default_factory=list)  # notable facts (invalid bids, ...)
    turn: int = 0
    scratch: dict[str, Any] = field(default_factory=dict)  # pattern-specific working state

    def post(self, role: str, content: str, **metadata: Any) -> Message:
        return self.transcript.post(role, content, **metadata)

    def seed(self) -> Message:
        return self.post(SEED_ROLE, self.task)

    def turn_for(self, speaker: Speaker, instruction: str, kind: str = "reply", **kw: Any) -> Turn:
        return Turn(speaker.name, self.transcript.messages, instruction, kind, self.stats, **kw)  # type: ignore[arg-type]

    async def ask(self, speaker: Speaker, instruction: str, **kw: Any) -> str:
        """One reply from ``speaker`` on the shared conversation plus ``instruction``."""
        return await speaker.reply(self.turn_for(speaker, instruction, **kw))


def check_task(task: Any, what: str) -> str:
    if not isinstance(task, str) or not task.strip():
        raise ValueError(f"{what}.run(task): task must be a non-empty string, got {task!r}")
    return task


class Pattern:
    """Base of every conversation pattern: the compiled graph and the run API."""

    output_type: str = "final"
    verbose: bool = False
    name: str = "pattern"
    _graph: StateGraph | None = None

    # ---- what a pattern supplies ----
    def _compile(self) -> StateGraph:  # pragma: no cover - abstract
        raise NotImplementedError

    def _context(self, task: str) -> ChatContext:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_run(self, task: Any) -> None:
        """Run-time checks (before any model call)."""
        check_task(task, type(self).__name__)

    def _output_rows(self, ctx: ChatContext) -> list[Message]:
        return ctx.transcript.messages

    # ---- shared ----
    @property
    def graph(self) -> StateGraph:
        if self._graph is None:
            self._graph = self._compile().validate()
        return self._graph

    def _finish(self, result: RunResult) -> RunResult:
        ctx: ChatContext = result.context
        result.transcript = ctx.transcript.messages
        result.calls = ctx.stats.calls
        result.usage = dict(ctx.stats.usage)
        result.events = list(ctx.events)
        result.output = format_output(self._output_rows(ctx), self.output_type)
        return result

    def _print_post(self, msg: Message) -> None:
        from rich.console import Console
        from rich.panel import Panel

        score = msg.metadata.get("score")
        title = msg.role + (f"  (bid {score:.2f})" if isinstance(score, (int, float)) else "")
        Console().print(Panel(msg.content, title=title, title_align="left"))

    async def aexecute(self, task: str, *, observers: Sequence[Any] = (),
                       on_message: Sequence[Any] = ()) -> RunResult:
        """Run once and return the ``RunResult`` (path, trace, stop reason, transcript, calls)."""
        self._check_run(task)
        graph = self.graph
        ctx = self._context(task)
        for listener in on_message:
            ctx.transcript.listen(listener)
        if self.verbose:
            ctx.transcript.listen(self._print_post)
        try:
            result = await run_graph(graph, ctx, observers=observers)
        except asyncio.CancelledError as exc:
            partial = result_of(exc)
            if partial is not None:
                self._finish(partial)
            raise
        return self._finish(result)

    def execute(self, task: str) -> RunResult:
        return run_sync(lambda: self.aexecute(task))

    async def arun(self, task: str) -> Any:
        """Run once; return the output per ``output_type``. A failure is re-raised with the run's
        result (transcript so far) as ``exc.fsmchat_result``."""
        result = await self.aexecute(task)
        if result.error is not None:
            raise attach_result(result.error, result)
        return result.output

    def run(self, task: str, *args: Any, **kwargs: Any) -> Any:
        return run_sync(lambda: self.arun(task))

    async def arun_batch(self, tasks: Sequence[str], max_concurrency: int = 16) -> list[Any]:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        for t in tasks:
            self._check_run(t)
        gate = asyncio.Semaphore(max_concurrency)

        async def one(t: str) -> Any:
            async with gate:
                return await self.arun(t)

        return list(await asyncio.gather(*(one(t) for t in tasks)))

    def run_batch(self, tasks: Sequence[str], max_concurrency: int = 16) -> list[Any]:
        """One independent run per task, run concurrently (bounded); results in task order."""
        return run_sync(lambda: self.arun_batch(list(tasks), max_concurrency))

    async def stream(self, task: str) -> AsyncIterator[TraceEvent | Message | RunResult]:
        """Yield trace events and posted messages as they happen, then the final ``RunResult``."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = object()
        runner = asyncio.ensure_future(self.aexecute(task, observers=[queue.put_nowait],
                                                     on_message=[queue.put_nowait]))
        runner.add_done_callback(lambda _: queue.put_nowait(done))
        try:
            while True:
                item = await queue.get()
                if item is done:
                    break
                yield item
            yield runner.result()
        finally:
            if not runner.done():
                runner.cancel()
