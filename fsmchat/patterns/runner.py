"""Layer 15, patterns: one run of a pattern, from its start (or its resume) to its ``RunResult``.

A ``Pattern`` is a declaration (its config, its graph, its context, its calls by speaker); a
``PatternRun`` is one run of it, the way ``fsmchat.engine.GraphRun`` is one run of a graph: it
takes the run's lease, starts or resumes the checkpoint (checking the stored fingerprint),
drives the engine, and fills the result. ``FailedRuns`` collects the failed runs of a block of
code for whoever asks (``fsmchat run`` does, so a script that ignores ``result.error`` still
exits non-zero).
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import hashlib
import json
from typing import Any, Callable, Iterator, Protocol, Sequence

from ..engine import run_graph
from ..errors import attach_result, result_of
from ..graph.render import drawing_data
from ..graph.state_graph import StateGraph
from ..limits import Limits, start_clock
from ..masking import redact
from ..models import MAX_MESSAGE_CHARS, Message, RunResult, StopReason
from ..speakers.agent import mask_secrets
from ..speakers.human import NotWaiting, check_input, pending_of, waiting_for
from ..speakers.llm import TOKENS
from ..speakers.providers import load_litellm
from ..speakers.tool_loop import loop_of
from ..store.checkpoint import (COMMIT_MODES, DEFAULT_COMMIT, RUN_META, Checkpointer, CheckpointMismatch, Lease,
                                Recorder, new_run_id)

Hook = Callable[..., Any]


class RunnablePattern(Protocol):
    """What a run reads from the pattern it runs (``Pattern`` has all of it)."""

    name: str
    factory: str | None
    limits: Limits | None
    approve_tools: bool
    verbose: bool

    @property
    def graph(self) -> StateGraph: ...

    def new_context(self, task: str) -> Any: ...

    def calls_by_speaker(self) -> list[tuple[Any, int]]: ...

    def output_of(self, ctx: Any) -> Any: ...

    def to_config(self) -> Any: ...

    def with_limits(self, limits: Limits | None = None, **kw: Any) -> Any: ...

    def fill_result(self, result: RunResult) -> RunResult: ...


def set_pending(result: RunResult) -> None:
    """``result.pending``: what an interrupted run waits for (its last event's request)."""
    if result.stop_reason == StopReason.INTERRUPTED and result.trace:
        result.pending = pending_of(result.trace[-1])


class FailedRuns:
    """The results of the runs that failed while ``watching()``.

    A run counts when it ends in the watching context, or on a worker thread a run started from it
    (``run_sync`` carries the context there).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.patterns.runner import FailedRuns
        >>> def critic(turn):
        ...     raise RuntimeError("the critic crashed")
        >>> failed = FailedRuns()
        >>> with failed.watching():
        ...     result = RoundRobinSwarm(agents=[critic]).execute("Ship it?")
        >>> [r.stop_reason for r in failed.results], result.stop_reason
        (['error'], 'error')
    """

    def __init__(self) -> None:
        self.results: list[RunResult] = []

    @contextlib.contextmanager
    def watching(self) -> Iterator["FailedRuns"]:
        """Collect the failed runs that end inside the ``with`` block."""
        token = WATCHING.set(self)
        try:
            yield self
        finally:
            WATCHING.reset(token)


WATCHING: contextvars.ContextVar[FailedRuns | None] = contextvars.ContextVar("fsmchat_failed_runs", default=None)


def run_finished(result: RunResult) -> None:
    """Every run's end (patterns and flows): a failed run goes to the ``FailedRuns`` watching, if
    any; a broken test double (``fsmchat_fatal``: an exhausted ``ScriptedModel``, a cassette miss)
    is raised, with the result attached, because it is never a run's outcome: a test that only
    checks the path must not pass."""
    error = result.error
    if error is None:
        return
    watcher = WATCHING.get()
    if watcher is not None:
        watcher.results.append(result)
    if getattr(error, "fsmchat_fatal", False):
        raise attach_result(error, result)


def fingerprint(pattern: RunnablePattern) -> dict[str, Any]:
    """What a checkpoint stores to recognise ``pattern`` on resume: the kind, the graph's
    structure (a hash of its states and edges, branches included), the speakers and their
    models, the limits and the output type."""
    flat = pattern.graph.flatten()
    shape: list[Any] = []
    todo = [("", flat)]
    while todo:
        prefix, f = todo.pop()
        shape.append([prefix, sorted(f.states), sorted((t.source, t.dest, t.label) for t in f.transitions)])
        todo += [(f"{prefix}{s.name}|{i}.", b.flatten()) for s in f.states.values()
                 for i, b in enumerate(s.branches, 1)]
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]
    speakers = [[getattr(s, "name", repr(s)), getattr(s, "model", None)] for s, _n in pattern.calls_by_speaker()]
    return {"pattern": type(pattern).__name__, "graph": digest, "speakers": speakers,
            "limits": pattern.limits.model_dump(mode="json") if pattern.limits is not None else None,
            "output_type": getattr(pattern, "output_type", "final")}


def print_post(msg: Message) -> None:
    """A posted message as ``verbose=True`` shows it: a panel titled with its role (and bid)."""
    from rich.console import Console
    from rich.panel import Panel

    score = msg.metadata.get("score")
    title = msg.role + (f"  (bid {score:.2f})" if isinstance(score, (int, float)) else "")
    Console().print(Panel(msg.content, title=title, title_align="left"))


def token_sink(hooks: Sequence[Hook]) -> Callable[[Any], None]:
    """One callable handing each token item to every hook, in order (the hook itself when there is one)."""
    if len(hooks) == 1:
        return hooks[0]

    def sink(item: Any) -> None:
        for hook in hooks:
            hook(item)

    return sink


class PatternRun:
    """One run of ``pattern``: ``start`` a task or ``resume`` a checkpointed run, then drive the
    engine to the ``RunResult``. The pattern's arguments are checked before (``Pattern.aexecute``,
    ``Pattern.aresume``); a run checks what only the run knows (the stored fingerprint, the
    answer a waiting run gets).

    Args:
        pattern: The pattern to run.
        checkpoint: Where every step is committed (None: not checkpointed).
        run_id: The run's id under ``checkpoint`` (a new one if None).
        started_as: The fingerprint of the pattern that started the run, when ``pattern`` is a
            copy of it with the limits a fork stored (else ``pattern``'s own).
        on_cancel: Given the partial result when the run is cancelled (a Ctrl-C keeps it).
        on_token: The hooks each streamed reply's deltas go to (``fsmchat.speakers.llm.TOKENS``;
            empty: the replies stream to an enclosing run's hooks, if any).
        commit: How a new checkpointed run batches its commits (``fsmchat.store.writer.COMMIT_MODES``,
            checked by the caller), kept in the run's metadata; a resume reads the run's own.
    """

    def __init__(self, pattern: RunnablePattern, checkpoint: Checkpointer | None = None, run_id: str | None = None,
                 *, started_as: dict[str, Any] | None = None,
                 on_cancel: Callable[[RunResult], None] | None = None, on_token: Sequence[Hook] = (),
                 commit: str = DEFAULT_COMMIT) -> None:
        self.pattern = pattern
        self.checkpoint = checkpoint
        self.run_id = run_id if run_id is not None or checkpoint is None else new_run_id()
        self.started_as = started_as
        self.on_cancel = on_cancel
        self.on_token = on_token
        self.commit = commit
        self.owner = type(pattern).__name__

    @property
    def max_message_chars(self) -> int:
        limits = self.pattern.limits
        return limits.max_message_chars if limits is not None else MAX_MESSAGE_CHARS

    # ---- start ----
    async def start(self, task: str, repaired: int, observers: Sequence[Hook], on_message: Sequence[Hook],
                    on_start: Sequence[Hook]) -> RunResult:
        """Run ``task`` (checked and admitted: ``repaired`` lone surrogates were replaced) from its
        first state, holding the run's lease when checkpointed."""
        lease = Lease(self.checkpoint, self.run_id) if self.checkpoint is not None and self.run_id else None
        meta = None
        try:
            if self.checkpoint is not None:  # what a resume checks and the viewer shows; a plain run needs none
                meta = {"pattern": self.owner, "name": self.pattern.name, "task": task,
                        "factory": self.pattern.factory, "fingerprint": fingerprint(self.pattern),
                        "commit": self.commit,
                        **self.viewer_meta(), **(RUN_META.get() or {})}
            ctx = self.pattern.new_context(task)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        if repaired:
            ctx.events.append({"event": "text_repaired", "role": "task", "replaced": repaired})
        return await self.drive(ctx, observers, on_message, meta, lease=lease, on_start=on_start)

    def viewer_meta(self) -> dict[str, Any]:
        """What a checkpoint keeps at run start for the run viewer (``fsmchat ui``, ``fsmchat report``):
        the graph as drawing data, and the config (``to_config``: secrets left out) or why there is none."""
        out: dict[str, Any] = {"graph": drawing_data(self.pattern.graph.drawing())}
        try:
            out["config"] = mask_secrets(self.pattern.to_config().model_dump(mode="json"))  # header values too
        except Exception as exc:  # a lambda, a closure, a speaker with no config: the run goes on without it
            out["config_missing"] = redact(f"{type(exc).__name__}: {exc}")
        return out

    # ---- resume ----
    async def resume(self, input: Any, observers: Sequence[Hook], on_message: Sequence[Hook],
                     on_start: Sequence[Hook]) -> RunResult:
        """Continue the checkpointed run from its last committed state (``Pattern.aresume`` says how)."""
        checkpoint, run_id = self.checkpoint, self.run_id
        assert checkpoint is not None and run_id is not None, "a resume needs the run's checkpoint and id"
        saved = checkpoint.load(run_id)
        self.check_fingerprint(saved.meta)
        self.commit = self.commit_of(saved.meta)
        forked = self.with_run_limits(saved.meta)
        if forked is not None:  # a fork changed the run's limits: a copy of the pattern runs with them
            return await forked.resume(input, observers, on_message, on_start)
        answer = self.answer_for(saved, input)
        if saved.finished or (saved.stop_reason == StopReason.INTERRUPTED and answer is None):
            return self.rebuild(saved)
        lease = Lease(checkpoint, run_id)
        try:
            saved = checkpoint.load(run_id)  # under the lease: what the last owner committed
            if saved.finished:
                lease.release()
                return self.rebuild(saved)
            answer = self.answer_for(saved, input)
            ctx = self.restored(saved)
            if answer is not None:
                ctx.people.give(*answer)
        except BaseException:
            lease.release()
            raise
        return await self.drive(ctx, observers, on_message, None, saved, lease, on_start)

    def check_fingerprint(self, meta: dict[str, Any]) -> None:
        """Refuse (``CheckpointMismatch``, nothing written) a run another pattern checkpointed."""
        stored = meta.get("fingerprint")
        if stored is None:  # checkpointed before fingerprints existed
            return
        now = json.loads(json.dumps(self.started_as or fingerprint(self.pattern)))
        diffs = [f"{k}: stored {stored.get(k)!r}, now {now.get(k)!r}" for k in now if stored.get(k) != now.get(k)]
        if diffs:
            raise CheckpointMismatch(f"run {self.run_id!r} was checkpointed by a different "
                                     f"{meta.get('pattern', 'pattern')} than the {self.owner} resuming it; " +
                                     "; ".join(diffs) + ". Resume it with the pattern that started it (nothing was "
                                     "written)")

    def commit_of(self, meta: dict[str, Any]) -> str:
        """The commit mode the run was started with (a run stored before modes existed: the default,
        ``"turn"``, what it was written with); ``CheckpointMismatch`` for a stored value no mode has."""
        mode = meta.get("commit", DEFAULT_COMMIT)
        if not isinstance(mode, str) or mode not in COMMIT_MODES:
            raise CheckpointMismatch(f"run {self.run_id!r} stores commit={mode!r}, which is no commit mode of this "
                                     f"fsmchat ({', '.join(map(repr, COMMIT_MODES))}); nothing was written")
        return mode

    def with_run_limits(self, meta: dict[str, Any]) -> "PatternRun | None":
        """This run on a copy of the pattern with the limits ``fsmchat.fork(edit={"limits": ...})``
        stored with the run (None: the run has none, or the pattern already has them). The copy is
        checked against the run as the pattern that started it."""
        limits, mine = meta.get("limits"), self.pattern.limits
        if limits is None or (mine is not None and mine.model_dump(mode="json") == limits):
            return None
        if not isinstance(limits, dict):
            raise CheckpointMismatch(f"the run's stored limits {limits!r} are not a dict of Limits fields")
        twin = copy.copy(self.pattern).with_limits(Limits(**limits))
        return PatternRun(twin, self.checkpoint, self.run_id, started_as=self.started_as or fingerprint(self.pattern),
                          on_cancel=self.on_cancel, on_token=self.on_token, commit=self.commit)

    def answer_for(self, saved: Any, input: Any) -> Any:
        """(what the run waits for, the checked answer), None without ``input``; ``NotWaiting`` for
        an answer to a run that waits for nobody."""
        pending = waiting_for(saved)
        if pending is None and saved.stop_reason is None and saved.events:  # cut between its interrupt's commit
            pending = pending_of(saved.events[-1])  # and its end: it waits all the same
        if input is None:
            return None
        if pending is None:
            raise NotWaiting(f"{self.owner}.resume: input={input!r} was given, but run {self.run_id!r} does not "
                             f"wait for a person (stop reason {saved.stop_reason!r}); resume it without input")
        return pending, check_input(pending, input)

    def restored(self, saved: Any) -> Any:
        """A fresh context set back to the checkpoint's messages and working state."""
        ctx = self.pattern.new_context(saved.meta["task"])
        ctx.transcript.restore(saved.messages)
        if saved.state is not None:
            ctx.restore(saved.state)
        return ctx

    def rebuild(self, saved: Any) -> RunResult:
        """A finished (or waiting) run's result, from the checkpoint alone: no model is called."""
        ctx = self.restored(saved)
        # the path as it was walked: a step an interruption cut (dest None, then run again on the
        # resume) is not part of it; the final state's record is
        last = len(saved.events) - 1
        trace = [e for i, e in enumerate(saved.events) if e.dest is not None or i == last]
        result = RunResult([e.state for e in trace], trace, saved.stop_reason or StopReason.DONE, ctx,
                           graph=self.pattern.graph)
        result.run_id = self.run_id
        return self.finish(result)

    # ---- the run ----
    async def drive(self, ctx: Any, observers: Sequence[Hook], on_message: Sequence[Hook],
                    meta: dict[str, Any] | None, saved: Any = None, lease: Lease | None = None,
                    on_start: Sequence[Hook] = ()) -> RunResult:
        """Run the graph on ``ctx`` (fresh, or restored from ``saved``), committing to the checkpoint
        under ``lease`` (the run's hold on its id; released when the run ends)."""
        pattern, checkpoint, run_id = self.pattern, self.checkpoint, self.run_id
        graph = pattern.graph
        sink = TOKENS.set(token_sink(self.on_token) if self.on_token else TOKENS.get())  # a nested run: its parent's
        try:  # the lease is given back however this ends, a refused start (an id already used) included
            await load_litellm(ctx.stats.roster)  # before the clock: the import is not the run's time
            start_clock(pattern.limits, ctx.stats)
            loop = loop_of(ctx)
            loop.approve_all = pattern.approve_tools
            if saved is not None:  # a resume: tool sources whose tools changed are refused before any model call
                await loop.check_sources([s for s, _ in pattern.calls_by_speaker()])
            ctx.transcript.max_chars = self.max_message_chars
            for hook in on_start:
                hook(ctx)
            for listener in on_message:
                ctx.transcript.listen(listener)
            if pattern.verbose:
                ctx.transcript.listen(print_post)
            recorder = None
            if checkpoint is not None:
                assert run_id is not None and lease is not None
                recorder = Recorder(checkpoint, run_id, ctx.transcript, ctx.snapshot, len(ctx.transcript), lease,
                                    len(saved.events) if saved is not None else 0, self.commit)
                if saved is None:
                    recorder.start(meta or {})
                ctx.stats.before_request = lease.check  # no request is sent once another owner took the run
            history = [e for e in saved.events if e.dest is not None] if saved is not None else None
            start = history[-1].dest if history else None
            result = await run_graph(graph, ctx, observers=observers, recorder=recorder, start=start,
                                     history=history)
        except asyncio.CancelledError as exc:
            partial = result_of(exc)
            if partial is not None:
                partial.run_id = run_id
                self.finish(partial)
                if self.on_cancel is not None:
                    self.on_cancel(partial)
            raise
        finally:
            try:
                await loop_of(ctx).close()  # the run's tool sources stop however it ends
            finally:
                TOKENS.reset(sink)
                if lease is not None:
                    lease.release()
        result.run_id = run_id
        return self.finish(result)

    def finish(self, result: RunResult) -> RunResult:
        """The ended run's ``result``, filled by the pattern (``fill_result``), with what a waiting
        run waits for; a failed run is reported to whoever watches (``FailedRuns``)."""
        result = self.pattern.fill_result(result)
        set_pending(result)
        run_finished(result)
        return result
