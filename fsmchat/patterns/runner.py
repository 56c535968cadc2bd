"""Layer 15, patterns: the run object, every way a pattern runs, from its arguments to its ``RunResult``.

A ``Pattern`` is a declaration (its config, its graph, its context, its calls by speaker) and
runs nothing itself; a ``PatternRun`` is one run of it, the way ``fsmchat.engine.GraphRun`` is one
run of a graph. It owns the run API (``run``, ``arun``, ``execute``, ``aexecute``, ``resume``,
``aresume``, ``stream``, ``astream``, ``run_batch``, ``arun_batch``, ``preflight``, ``check_task``,
``max_calls``) and the checks of their arguments, then takes the run's lease, starts or resumes
the checkpoint (checking the stored fingerprint), drives the engine, and fills the result. A
pattern reaches that API through ``RunMethod`` attributes: ``pattern.run`` is ``PatternRun(pattern).run``.
``FailedRuns`` collects the failed runs of a block of code for whoever asks (``fsmchat run`` does,
so a script that ignores ``result.error`` still exits non-zero).
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import hashlib
import json
from types import MethodType
from typing import (Any, AsyncIterator, Callable, Concatenate, Coroutine, Generic, Iterator, ParamSpec, Protocol,
                    Sequence, TypeVar, overload)

from ..checks import RUN_KEYWORDS, check_batch, check_hooks, check_keywords, check_run_id, check_token_hooks
from ..engine import batch_collector, run_graph, run_sync
from ..errors import ConfigTypeError, attach_result, result_of
from ..graph.render import drawing_data
from ..graph.state_graph import StateGraph
from ..limits import Limits, start_clock
from ..common.masking import redact
from ..models import MAX_MESSAGE_CHARS, Message, RunResult, StopReason, StreamItem, safe_text
from .progress import ProgressBar, progress_wanted
from ..speakers.agent import mask_secrets
from ..speakers.human import Human, NeedsCheckpoint, NotWaiting, check_input, pending_of, waiting_for
from ..speakers.llm import TOKENS
from ..speakers.providers import load_litellm
from ..speakers.tool_loop import loop_of
from ..speakers.tools import calls_per_turn
from ..store.checkpoint import (COMMIT_MODES, DEFAULT_COMMIT, RUN_META, Checkpointer, CheckpointMismatch, Lease,
                                Recorder, check_checkpoint, check_commit, check_resume, new_run_id)
from .streaming import RunStream

Hook = Callable[..., Any]
T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


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

    def check(self, task: Any, *, checkpointed: bool | None = None) -> None: ...

    @property
    def waits_for_people(self) -> list[str]: ...

    def max_calls(self, *, requests: bool = False) -> int: ...

    async def arun(self, task: str, **kw: Any) -> Any: ...


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


PARTIAL: contextvars.ContextVar[dict[int, RunResult] | None] = contextvars.ContextVar("fsmchat_partial", default=None)


def keep_partial(pattern: object) -> Callable[[RunResult], None]:
    """What a run of ``pattern`` does with its partial result when cancelled: it keeps it for the
    synchronous call around it (``PatternRun.sync``), which attaches it to the ``KeyboardInterrupt``."""
    kept = PARTIAL.get()

    def keep(partial: RunResult) -> None:
        if kept is not None:
            kept[id(pattern)] = partial

    return keep


class PatternRun:
    """The run object of ``pattern``: the run API and its checks, then one run, to its ``RunResult``.

    ``PatternRun(pattern)`` is what ``pattern.run``, ``pattern.execute``, ``pattern.stream``... call
    (``RunMethod``): it checks their arguments (the hooks, the checkpoint, the run id, the task,
    the pattern's own ``check``, the limits) before any model call, then hands the run to a fresh
    ``PatternRun`` with its checkpoint, which starts the task (``start``) or continues a
    checkpointed run (``resume_stored``) and drives the engine. A run checks what only the run
    knows (the stored fingerprint, the answer a waiting run gets).

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

    # ---- the run API (``pattern.run`` is ``PatternRun(pattern).run``: ``RunMethod``) ----
    async def aexecute(self, /, task: str, *, observers: Sequence[Any] = (), on_message: Sequence[Any] = (),
                       checkpoint: Checkpointer | None = None, run_id: str | None = None,
                       on_start: Sequence[Any] = (), on_token: Any = None, commit: str = DEFAULT_COMMIT) -> RunResult:
        """Run once and return the ``RunResult`` (path, trace, stop reason, transcript, calls).
        With ``checkpoint=`` every step is committed under ``run_id`` (a new id if None); the run
        holds the id's lease meanwhile, so a concurrent run of the same id gets ``RunInProgress``.
        ``commit`` says how (``"turn"``: a step that posted nothing and only did work that can be
        done again rides along with the next step's commit, so a GroupChat turn is one commit;
        ``"step"``: every step is its own commit); it is kept with the run, so its resumes and forks
        commit the same way.
        ``observers`` get each ``TraceEvent``, ``on_message`` each posted ``Message``, ``on_start``
        the run's context before its first step (a live display reads ``ctx.stats`` from it),
        ``on_token`` (a callable or a list of them) each ``TokenDelta`` of a reply and each
        ``BidDelta`` of a GroupChat bid's message as the model writes it, and a ``StreamRetry`` when a
        shown stream is asked again (the replies and bids then stream)."""
        owner = self.owner
        check_checkpoint(checkpoint, owner)
        check_commit(commit, owner, "checkpoint" if checkpoint is None else None)
        check_run_id(run_id, owner)
        observers, on_message, on_start = (check_hooks(observers, owner, "observers"),
                                           check_hooks(on_message, owner, "on_message"),
                                           check_hooks(on_start, owner, "on_start"))
        tokens = check_token_hooks(on_token, owner)
        self.pattern.check(task, checkpointed=checkpoint is not None)
        task, repaired = self.admit(task)
        self.check_waits(checkpoint)
        self.check_limits()
        run = PatternRun(self.pattern, checkpoint, run_id, on_cancel=keep_partial(self.pattern), on_token=tokens,
                         commit=commit)
        return await run.start(task, repaired, observers, on_message, on_start)

    async def aresume(self, /, run_id: str, checkpoint: Checkpointer, *, input: Any = None,
                      observers: Sequence[Any] = (), on_message: Sequence[Any] = (),
                      on_start: Sequence[Any] = (), on_token: Any = None) -> RunResult:
        """Continue a checkpointed run from its last committed state; a finished run's result is
        rebuilt from the checkpoint without calling any model. A run waiting for a person
        (``stop_reason="interrupted"``) continues with ``input``, their answer (``Approve()``,
        ``Edit(...)``, ``Reject(reason)``, ``Say(text)`` or a plain str), checked against what its
        interrupt point allows (``result.pending.allowed``; ``InputNotAllowed`` otherwise); without
        ``input`` its waiting result is returned and nothing runs. Refused, before anything is
        written, when the run was checkpointed by another pattern (``CheckpointMismatch``), is
        running elsewhere (``RunInProgress``), or got ``input`` without waiting (``NotWaiting``)."""
        owner = f"{self.owner}.resume"
        check_resume(run_id, checkpoint, owner)
        observers, on_message, on_start = (check_hooks(observers, owner, "observers"),
                                           check_hooks(on_message, owner, "on_message"),
                                           check_hooks(on_start, owner, "on_start"))
        tokens = check_token_hooks(on_token, owner)
        run = PatternRun(self.pattern, checkpoint, run_id, on_cancel=keep_partial(self.pattern), on_token=tokens)
        return await run.resume_stored(input, observers, on_message, on_start)

    def resume(self, /, run_id: str, checkpoint: Checkpointer, *, input: Any = None) -> RunResult:
        """Synchronous ``aresume`` (``input``: a waiting run's answer)."""
        return self.sync(lambda: self.aresume(run_id, checkpoint, input=input))

    def execute(self, /, task: str, **kw: Any) -> RunResult:
        """Run once (sync) and return the ``RunResult``; the keywords are ``aexecute``'s."""
        check_keywords(kw, RUN_KEYWORDS, f"{self.owner}.execute")
        return self.sync(lambda: self.aexecute(task, **kw))

    async def arun(self, /, task: str, **kw: Any) -> Any:
        """Run once; return the output per ``output_type``. A failure is re-raised with the run's
        result (transcript so far) as ``exc.fsmchat_result``."""
        check_keywords(kw, RUN_KEYWORDS, f"{self.owner}.arun")
        result = await self.aexecute(task, **kw)
        if result.error is not None:
            raise attach_result(result.error, result)
        return result.output

    def run(self, /, task: str, *args: Any, **kwargs: Any) -> Any:
        """Run once (sync); the keywords are ``aexecute``'s (``checkpoint=``, ``run_id=``, ...), checked
        like the constructor's (an unknown one is a ``ConfigTypeError``: ``chekpoint=`` gets "did you
        mean checkpoint?"). Positional arguments swarms forwards to each agent's ``run()`` have
        no meaning here and are ignored."""
        check_keywords(kwargs, RUN_KEYWORDS, f"{self.owner}.run")
        return self.sync(lambda: self.pattern.arun(task, **kwargs))  # a pattern may say what a run returns (a flow)

    def stream(self, /, task: str, *, tokens: bool = False) -> RunStream:
        """The run's trace events and posted messages as they happen, then the final ``RunResult``:
        ``async for item in pattern.stream(task)`` in async code, ``for item in pattern.stream(task)``
        in a script (the run then goes on an event loop the stream steps in your thread, paused
        while your loop body runs; in a notebook cell, on a loop of its own in a worker thread).
        Leaving the loop early cancels the run. With ``tokens=True`` the replies stream: each reply's ``TokenDelta``s
        come before its ``Message`` (and a ``StreamRetry`` when a shown stream is asked again). A
        GroupChat's bids stream too: each bidder's message as ``BidDelta``s while its ``respond``
        call's arguments arrive, before the round closes (the round is decided by the whole bids)."""
        if not isinstance(tokens, bool):
            raise ConfigTypeError(f"{self.owner}.stream: tokens={tokens!r} is invalid: True (the replies' "
                                  "token deltas too) or False (trace events and messages only)")
        return RunStream(lambda sink: self.aexecute(task, observers=[sink], on_message=[sink],
                                                    on_token=sink if tokens else None),
                         f"{self.owner}.stream")

    def astream(self, /, task: str, *, tokens: bool = False) -> AsyncIterator[StreamItem]:
        """``stream(task)`` as an async iterator (LangGraph's ``astream`` spelling)."""
        return aiter(self.stream(task, tokens=tokens))

    def preflight(self, /, tasks: Sequence[Any], *, credentials: bool = True) -> None:
        """Refuse a batch before any model call: each task (the checks ``run`` makes), the limits
        (a worst-case bound over ``max_model_calls``) and, with ``credentials``, the model keys the
        runs need (checked once, on the first task's context). ``fsmchat.patterns.distributed`` calls it."""
        for t in tasks:
            self.pattern.check(t)
        self.check_limits()
        if credentials and tasks:
            self.pattern.new_context(tasks[0]).stats.preflight()

    async def arun_batch(self, /, tasks: Sequence[str], max_concurrency: int = 16, *,
                         progress: bool | None = False) -> list[Any]:
        """``run_batch`` in async code (``progress``: as there, but off unless asked for)."""
        tasks = check_batch(tasks, max_concurrency, self.owner)
        for t in tasks:
            self.pattern.check(t)
        if tasks:  # missing keys: one error for the whole batch, before any run starts
            self.pattern.new_context(tasks[0]).stats.preflight()
        gate = asyncio.Semaphore(max_concurrency)
        bar = ProgressBar(len(tasks), progress, f"{self.owner} batch")

        async def one(t: str) -> Any:
            async with gate:
                try:
                    out = await self.pattern.arun(t)
                except BaseException:
                    bar.add(0, 1)
                    raise
                bar.add(1, 0)
                return out

        try:
            with batch_collector(len(tasks)):
                return list(await asyncio.gather(*(one(t) for t in tasks)))
        finally:
            bar.close()

    def run_batch(self, /, tasks: Sequence[str], max_concurrency: int = 16, *, executor: str = "local",
                  address: str | None = None, max_concurrency_per_worker: int | None = None,
                  checkpoint_dir: Any = None, progress: bool | None = None, commit: str = DEFAULT_COMMIT,
                  **options: Any) -> list[Any]:
        """One independent run per task, run concurrently (bounded); results in task order.

        ``progress``: a progress bar on stderr (done/total, failed, elapsed, ETA); by default shown
        when stderr is a terminal, ``progress=False`` hides it, ``True`` forces it.
        ``executor="ray"`` shards the tasks over Ray workers (``address=None`` starts a local Ray,
        ``"auto"``/``"ray://host:10001"`` joins a cluster), each running ``max_concurrency_per_worker``
        at once; a failed task's slot holds a ``TaskFailure`` instead of losing the batch. With
        ``checkpoint_dir`` every run is checkpointed (``commit``: how, as for ``aexecute``) and a
        re-run skips the finished ones. More options (``workers``, ``on_progress``, ...):
        ``fsmchat.patterns.distributed.execute_batch``."""
        tasks = check_batch(tasks, max_concurrency, self.owner)
        check_commit(commit, f"{self.owner}.run_batch", "checkpoint_dir" if checkpoint_dir is None else None)
        show = progress_wanted(progress)
        if executor == "local" and checkpoint_dir is None and address is None and not options:
            return self.sync(lambda: self.arun_batch(list(tasks), max_concurrency, progress=show))
        from . import distributed  # checkpointed and Ray batches only: a plain run never loads them

        return distributed.run_batch(self.pattern, tasks, executor=executor, address=address,
                                     checkpoint_dir=checkpoint_dir,
                                     max_concurrency_per_worker=max_concurrency_per_worker or max_concurrency,
                                     progress=show, commit=commit, **options)

    def max_calls(self, /, *, requests: bool = False) -> int:
        """The most model calls one run can make (worst case, from the pattern's limits); with
        ``requests=True`` the most HTTP requests, each model-backed agent's own ``num_retries``
        included (``max_model_calls`` caps requests). A turn of an agent with tools counts
        ``1 + max_tool_rounds`` calls (``fsmchat.speakers.tools.calls_per_turn``)."""
        return sum(n * calls_per_turn(s) * (1 + (getattr(s, "num_retries", 0) if requests and hasattr(s, "model") else 0))
                   for s, n in self.pattern.calls_by_speaker() if not isinstance(s, Human))

    def check_task(self, /, task: Any) -> tuple[str, int]:
        """Refuse ``task`` before a run starts, with the error a run of it would raise.

        The checks ``aexecute`` makes of the task before anything runs (one code path): a task of
        the pattern's kind (a non-empty string; a flow's ``_check_run`` also checks its declared
        variables) and no longer than ``max_message_chars`` (a message cap never cuts the user's own
        task). ``fsmchat serve`` calls it before it accepts a run, so a refused task is 422, never
        a 202 whose run then fails.

        Args:
            task: The task a run would start from.

        Returns:
            (the task as it enters the run, with lone surrogates repaired so it can be stored; how
            many were repaired).

        Raises:
            ValueError: The task is empty, not a string (a flow's is a ``TypeError``), or longer
                than ``max_message_chars``.

        Examples:
            >>> from fsmchat import RoundRobinSwarm
            >>> def echo(turn):
            ...     return "ok"
            >>> swarm = RoundRobinSwarm(agents=[echo]).with_limits(max_message_chars=50)
            >>> swarm.check_task("Plan the launch.")
            ('Plan the launch.', 0)
            >>> swarm.check_task("x" * 60)
            Traceback (most recent call last):
            ...
            ValueError: RoundRobinSwarm.run(task): the task has 60 characters, over max_message_chars=50; shorten it or raise the cap with with_limits(max_message_chars=...)
        """
        self.pattern.check(task)
        return self.admit(task)

    # ---- what the run API checks before any model call ----
    def admit(self, task: str) -> tuple[str, int]:
        """The task as it enters the run (lone surrogates repaired, so it can be stored; how many),
        refused when longer than ``max_message_chars``: a message cap never cuts the user's own task."""
        task, repaired = safe_text(task)
        if len(task) > self.max_message_chars:
            raise ValueError(f"{self.owner}.run(task): the task has {len(task)} characters, over "
                             f"max_message_chars={self.max_message_chars}; shorten it or raise the cap with "
                             f"with_limits(max_message_chars=...)")
        return task, repaired

    def check_waits(self, checkpoint: Checkpointer | None) -> None:
        """A run that may wait for a person must be checkpointed: refused now, before any call."""
        if checkpoint is None:
            waits = self.pattern.waits_for_people
            if waits:
                name = self.owner
                raise NeedsCheckpoint(f"{name}: checkpoint=None is invalid: this {name} waits for a person at "
                                      f"{', '.join(waits)} (the run stops there until resumed with their answer), "
                                      "so it must be checkpointed: pass checkpoint=SqliteCheckpointer('runs.db') "
                                      "(MemoryCheckpointer() in tests, where fsmchat.testing.answer() answers)")

    def check_limits(self) -> None:
        """A worst-case bound over ``max_model_calls`` is refused when ``refuse_over_bound`` says so."""
        lim = self.pattern.limits
        if lim is not None and lim.refuse_over_bound and lim.max_model_calls is not None:
            worst = self.pattern.max_calls()
            if worst > lim.max_model_calls:
                raise ValueError(f"{self.owner}: a run can make up to {worst} model calls, over "
                                 f"max_model_calls={lim.max_model_calls}; raise the budget or lower the limits "
                                 "(refuse_over_bound=True refuses such runs up front)")

    def sync(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``run_sync``, keeping the transcript so far on a Ctrl-C (KeyboardInterrupt)."""
        kept: dict[int, RunResult] = {}
        token = PARTIAL.set(kept)
        try:
            return run_sync(make)
        except KeyboardInterrupt as exc:
            partial = kept.get(id(self.pattern))
            if partial is not None:
                attach_result(exc, partial)
            raise
        finally:
            PARTIAL.reset(token)

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
    async def resume_stored(self, input: Any, observers: Sequence[Hook], on_message: Sequence[Hook],
                            on_start: Sequence[Hook]) -> RunResult:
        """Continue the checkpointed run from its last committed state (``Pattern.aresume`` says how)."""
        checkpoint, run_id = self.checkpoint, self.run_id
        assert checkpoint is not None and run_id is not None, "a resume needs the run's checkpoint and id"
        saved = checkpoint.load(run_id)
        self.check_fingerprint(saved.meta)
        self.commit = self.commit_of(saved.meta)
        forked = self.with_run_limits(saved.meta)
        if forked is not None:  # a fork changed the run's limits: a copy of the pattern runs with them
            return await forked.resume_stored(input, observers, on_message, on_start)
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


class RunMethod(Generic[P, R]):
    """A method of the run API as a pattern's attribute: ``pattern.run`` is ``PatternRun(pattern).run``.

    The run API is written once, on ``PatternRun``; ``Pattern`` names each of its spellings with one
    of these (``run = RunMethod(PatternRun.run)``), so a pattern declares its graph and runs nothing
    itself, and ``pattern.run(task)`` keeps its signature, its docstring and its types. On the
    class it is the ``PatternRun`` function (``help(GroupChat.run)``); a subclass may still define a
    method of the same name (a flow's ``arun`` returns its dict).

    Args:
        method: The ``PatternRun`` method (its ``self`` positional-only).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.patterns.runner import PatternRun
        >>> def echo(turn):
        ...     return "ok"
        >>> RoundRobinSwarm.run is PatternRun.run, RoundRobinSwarm(agents=[echo]).run("Hi.")
        (True, 'ok')
    """

    def __init__(self, method: Callable[Concatenate[PatternRun, P], R]) -> None:
        self.method = method

    @overload
    def __get__(self, pattern: None, owner: type) -> Callable[Concatenate[PatternRun, P], R]: ...

    @overload
    def __get__(self, pattern: RunnablePattern, owner: type) -> Callable[P, R]: ...

    def __get__(self, pattern: RunnablePattern | None,
                owner: type) -> Callable[Concatenate[PatternRun, P], R] | Callable[P, R]:
        if pattern is None:
            return self.method
        bound: Callable[P, R] = MethodType(self.method, PatternRun(pattern))
        return bound
