"""Layer 7: the one executor. ``GraphRun`` is one run of any ``StateGraph`` on a context object.

A step: the current state's action runs (once per visit), then an outgoing transition is chosen
(``step()``: the first guard that passes, in declared order; ``step(event)``: the first transition
labelled ``event`` whose guard passes), the pair of states is checked against the graph's legal
``(source, dest)`` pairs, the graph's ``transitions.Machine`` changes the run's state with its
public ``set_state``, and a ``TraceEvent`` goes to the trace, the observers and the checkpoint
recorder. Entering a final state records a terminal event and ends the run. An action may say
what its step did (``mark_replayable``: it can be done again from the last commit;
``mark_effects_pending``: tool calls are about to run): the recorder is handed that ``StepWork``
with the step's event and decides how the step is committed; the graph carries no such flags.

Patterns and flows are driven from the inside (``run_graph``: ``await step()`` until final); hub
channels from the outside (``fire(label)`` on each acknowledged invite, accepted text, close or
expiry). A fork state's branches (``parallel``, ``loop(parallel=True)``) are child ``GraphRun``s of
the same kind, whose events carry qualified names (``fork|1.state``; the ``k``-th item of a parallel
loop ``fork|1[k].state``, the renderer's scheme) and reach the parent's trace and observers; each
child commits to its own checkpoint lane, so a resume continues it instead of re-running it.

One state change per step from an explicit loop, never from inside a Machine callback (chained
triggers overflow the stack after ~62 turns). The engine picks the edge itself, so the Machine's
``Event.trigger`` would only re-check the source the engine already knows; the legal-pair check
catches the same engine bug. The engine knows nothing of agents, bids or turns.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import gc
import inspect
import threading
from time import perf_counter
from typing import Awaitable, Callable, Collection, Coroutine, Generic, Iterable, Iterator, NamedTuple, Protocol, \
    Sequence, TypeVar

from transitions import Machine

from .errors import FsmchatError, Interrupted, LimitReached, NoTransitionError, attach_result, limit_reached
from .graph.state_graph import Action, C, Fork, Guard, Reason, StateGraph, callable_name, is_awaitable
from .common.masking import redact, redact_chain
from .models import RunResult, StopReason, TraceEvent

T = TypeVar("T")
Observer = Callable[[TraceEvent], None]
DEFAULT_MAX_STEPS = 100_000


class SavedLane(Protocol):
    """What a checkpoint store holds for a branch run's lane, as the engine reads it to continue it."""

    @property
    def events(self) -> Sequence[TraceEvent]: ...

    @property
    def stop_reason(self) -> str | None: ...

    @property
    def finished(self) -> bool: ...


class RunRecorder(Protocol):
    """The checkpoint observer a run commits to (``fsmchat.store.writer.Recorder``), as the engine calls it."""

    @property
    def unsynced(self) -> Collection[object]:
        """Commits a store writes later, not yet durable (the engine awaits ``durable()`` when any)."""

    def __call__(self, ev: TraceEvent, work: StepWork | None = None) -> None: ...

    def finish(self, stop_reason: str) -> None: ...

    async def durable(self) -> None: ...

    def branch(self, key: str, ctx: object) -> tuple[RunRecorder, SavedLane | None]: ...


class _Edge(NamedTuple):
    """An outgoing transition as the engine takes it."""

    guard: Guard | None
    label: str
    dest: str


class _Step:
    """A flat state prepared for running: its action (sync or async), fork, outgoing transitions."""

    __slots__ = ("name", "action", "final", "reason", "out", "fork", "branches")

    def __init__(self, name: str, action: Action | None, final: bool, reason: str | Reason | None, out: list[_Edge],
                 fork: Fork | None, branches: list[StateGraph]):
        self.name = name
        self.action = action
        self.final = final
        self.reason = reason
        self.out = out
        self.fork = fork
        self.branches = branches


class StepWork:
    """What a running step says about its own work, handed to the checkpoint recorder with the
    step's event (the engine reads neither field; ``fsmchat.store.writer.Recorder`` decides how the step
    is committed).

    Attributes:
        replayable: Everything the step did can be done again from the run's last commit (it only
            computed from the context, or made model calls whose replies the next steps post, or
            applied a person's answer that is asked again): ``mark_replayable()``.
        effects_pending: The step leaves work with effects outside the run about to happen (tool
            calls a model asked for): ``mark_effects_pending()``; it is committed before that work runs.
    """

    __slots__ = ("replayable", "effects_pending")

    def __init__(self) -> None:
        self.replayable = False
        self.effects_pending = False


WORK: contextvars.ContextVar[StepWork | None] = contextvars.ContextVar("fsmchat_step_work", default=None)
"""The ``StepWork`` of the step whose action is running (in this task), None outside one."""


def mark_replayable() -> None:
    """Say, from inside a state's action, that everything its step did can be done again from the
    run's last commit: a durable run (``commit="turn"``) may then commit the step together with the
    next one, and after a crash in between it simply runs it again. Outside an action it does nothing.

    Examples:
        >>> import asyncio
        >>> from fsmchat import StateGraph
        >>> from fsmchat.engine import GraphRun, mark_replayable
        >>> def choose(ctx):
        ...     mark_replayable()  # only reads the context
        ...     return "left"
        >>> g = StateGraph("g").state("choose", choose).final("done").edge("choose", "done")
        >>> seen = []  # what a recorder is handed: each event with its step's work
        >>> run = GraphRun(g, recorder=lambda ev, work=None: seen.append((ev.state, work and work.replayable)))
        >>> _ = asyncio.run(run.step())
        >>> seen
        [('choose', True), ('done', None)]
    """
    work = WORK.get()
    if work is not None:
        work.replayable = True


def mark_effects_pending() -> None:
    """Say, from inside a state's action, that its step leaves work with effects outside the run
    about to happen (the tool calls a model asked for): a durable run commits the step on its own,
    before that work runs, whatever else the step said. Outside an action it does nothing."""
    work = WORK.get()
    if work is not None:
        work.effects_pending = True


def machine_class() -> type[Machine]:
    """The ``transitions.Machine`` class every graph runs on (tests replace it with a recording
    subclass to check that every step goes through it)."""
    return Machine


class IllegalTransitionError(FsmchatError, RuntimeError):
    """The engine tried to move a run along a pair of states the graph has no transition for.

    The engine only moves along edges it picked from the current state's outgoing transitions, so
    this is a bug in fsmchat, never a user error; the message names both states."""


class RunnableGraph:
    """A validated, flattened graph, the set of its legal ``(source, dest)`` pairs and the
    ``transitions.Machine`` that moves each run's state."""

    def __init__(self, graph: StateGraph):
        flat = graph.flatten()
        self.graph = graph
        self.initial = flat.initial
        self.steps: dict[str, _Step] = {}
        for s in flat.states.values():
            out = [_Edge(t.guard, t.label, t.dest) for t in s.out]
            self.steps[s.name] = _Step(s.name, s.action, s.final, s.reason, out, s.fork, s.branches)
        self.legal = {(t.source, t.dest) for s in flat.states.values() for t in s.out}
        self.machine = shared_machine(machine_class(), tuple(self.steps), self.initial)

    def move(self, run: "GraphRun", dest: str) -> None:
        """Move ``run`` from its current state to ``dest`` with the Machine's ``set_state``, after
        checking that the graph has a transition between them."""
        if (run.state, dest) not in self.legal:
            raise IllegalTransitionError(f"graph {self.graph.name!r}: the engine tried to move from state "
                                         f"{run.state!r} to {dest!r}, which no transition joins (a bug in fsmchat)")
        self.machine.set_state(dest, run)


_MACHINES: dict[tuple[type[Machine], tuple[str, ...], str], Machine] = {}
MAX_MACHINES = 256  # distinct state lists kept (past it the table starts again)


def shared_machine(cls: type[Machine], states: tuple[str, ...], initial: str) -> Machine:
    """The ``cls`` Machine over ``states``, one per process for each list of state names: with
    ``model=None`` no run is registered on it (no per-run set-up) and each ``set_state`` names the
    run it moves, so it holds nothing but the names, and the graphs of one shape (a pattern built
    anew per task) share it instead of building their own."""
    key = (cls, states, initial)
    machine = _MACHINES.get(key)
    if machine is None:
        if len(_MACHINES) >= MAX_MACHINES:
            _MACHINES.clear()
        machine = _MACHINES[key] = cls(model=None, states=list(states), initial=initial, auto_transitions=False,
                                       send_event=False)
    return machine


def runnable_graph(graph: StateGraph) -> RunnableGraph:
    """Validate a graph and build its machine, once per graph object (cached on it until it changes).

    ("Compile" means one thing in fsmchat: a pattern or flow compiles itself to a ``StateGraph``;
    the engine only *prepares* that graph to run.)"""
    runnable = graph.runnable
    if not isinstance(runnable, RunnableGraph):
        runnable = RunnableGraph(graph)
        graph.runnable = runnable
    return runnable


STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar("fsmchat_step", default=None)
"""The qualified name of the state whose action is running (in this task), None outside one."""


class GraphRun(Generic[C]):
    """One run of ``graph`` against ``context``: its current state, path and trace.

    ``await step(event=None)`` makes one step; ``run()`` steps until a final state and returns the
    ``RunResult``; ``fire(event)`` is the synchronous step of event-driven graphs whose actions are
    plain functions (hub channels). Every pattern, flow and channel runs on this class.

    Args:
        graph: The graph to run (validated and its machine built on first use, then cached on it).
        context: The object every action and guard is called with.
        observers: Callables given each ``TraceEvent`` as it happens.
        recorder: The checkpoint observer (``fsmchat.store.checkpoint.Recorder``), or None: called with
            each event and its step's ``StepWork`` (None for the event of a stop).
        start: Resume here: the state to enter first (qualified names are accepted in a branch run).
        history: The earlier events of a resumed run, the start of its path and trace.
        prefix: Qualifies a branch run's state names (``par|1.``).
        clock: The clock of the events' ``t`` (seconds).
        max_steps: The most steps before the run ends with ``stop_reason="max_steps"``.
        parent: The run this branch run belongs to (its events reach the parent's trace too).

    Raises:
        ValueError: ``start`` is not a state of the graph.
        GraphError: The graph does not validate.

    Examples:
        Driven from the inside, by guards:

        >>> import asyncio
        >>> from fsmchat import GraphRun, StateGraph
        >>> hello = StateGraph("hello").state("greet", lambda ctx: f"hi {ctx}").final("done").edge("greet", "done")
        >>> async def first_step():
        ...     run = GraphRun(hello, "Ada")
        ...     event = await run.step()
        ...     return event.state, event.trigger, event.dest, event.payload
        >>> asyncio.run(first_step())
        ('greet', 'next', 'done', 'hi Ada')

        Driven from the outside, by events:

        >>> door = (StateGraph("door").state("closed").state("opened").final("gone")
        ...         .edge("closed", "opened", label="push").edge("opened", "gone", label="walk"))
        >>> run = GraphRun(door)
        >>> run.labels(), run.can_fire("walk")
        (['push'], False)
        >>> _ = run.fire("push"), run.fire("walk")
        >>> run.finished, run.stop_reason, run.path
        (True, 'walk', ['closed', 'opened', 'gone'])
    """

    def __init__(self, graph: StateGraph[C], context: C | None = None, *, observers: Iterable[Observer] = (),
                 recorder: RunRecorder | None = None, start: str | None = None,
                 history: Iterable[TraceEvent] | None = None,
                 prefix: str = "", clock: Callable[[], float] = perf_counter, max_steps: int = DEFAULT_MAX_STEPS,
                 parent: "GraphRun | None" = None):
        self.graph = graph
        self.context = context
        self.runnable = runnable_graph(graph)
        self.observers = list(observers)
        self.recorder = recorder
        self.prefix = prefix
        self.clock = clock
        self._t0 = clock()
        self.trace: list[TraceEvent] = list(history or ())
        self.path: list[str] = [e.state for e in self.trace]
        if start is not None:
            start = start[len(prefix):] if prefix and start.startswith(prefix) else start
            if start not in self.runnable.steps:
                raise ValueError(f"graph {graph.name!r}: cannot resume at {start!r}: no such state")
        self.state = start if start is not None else self.runnable.initial
        self.entered = False  # has the current state's action run in this visit?
        self.work = StepWork()  # what this visit's action says about its work (for the recorder)
        self.payload: object = None  # what it returned
        self.error: BaseException | None = None
        self.stop_reason: StopReason | str | None = None
        self.max_steps = max_steps
        self.parent = parent
        if self.runnable.steps[self.state].final:
            self._end()

    # ---- reading ----
    @property
    def finished(self) -> bool:
        """Whether the run has ended (it has a stop reason)."""
        return self.stop_reason is not None

    @property
    def qualified(self) -> str:
        """The current state's name as traces spell it (with the branch prefix)."""
        return self.prefix + self.state

    @property
    def visited(self) -> list[str]:
        """Every state entered so far, the current one included."""
        return list(self.path) if self.finished else [*self.path, self.qualified]

    def labels(self) -> list[str]:
        """The event labels the current state has transitions for (declared order, no repeats)."""
        return list(dict.fromkeys(e.label for e in self.runnable.steps[self.state].out))

    def can_fire(self, event: str) -> bool:
        """Return whether ``fire(event)`` would take a transition now (evaluates guards, changes nothing).

        Args:
            event: A transition label.
        """
        return not self.finished and self._choose(event, None) is not None

    def result(self) -> RunResult:
        """Return the run so far as a ``RunResult`` (``stop_reason="running"`` until it ends)."""
        return RunResult(self.path, self.trace, self.stop_reason or StopReason.RUNNING, self.context, self.error,
                         graph=self.graph)

    # ---- stepping ----
    async def step(self, event: str | None = None, payload: object = None) -> TraceEvent:
        """Run the current state's action (once per visit), then take one transition.

        An action that raises ``LimitReached`` ends the state through the edge it names (e.g. the
        drawn ``past_deadline``), when the state has one.

        Args:
            event: None to take the first transition whose guard passes, in declared order; a
                label to take the first transition with that label whose guard passes.
            payload: The step's payload when given (else what the action returned).

        Returns:
            The step's ``TraceEvent``.

        Raises:
            NoTransitionError: The run has ended, or no transition could be taken.
        """
        if self.finished:
            raise NoTransitionError(f"graph {self.graph.name!r}: the run already ended in {self.qualified!r}")
        if len(self.path) >= self.max_steps:
            raise _MaxSteps()
        forced = None
        if not self.entered:
            st = self.runnable.steps[self.state]
            self.entered, self.work = True, StepWork()
            try:
                await self._enter(st)
            except LimitReached as exc:
                forced = self._limit_edge(exc)
            except Exception as exc:
                hit = limit_reached(exc)
                if hit is None:
                    raise
                forced = self._limit_edge(hit, exc)
        choice = forced or self._choose(event, payload)
        if choice is None:
            raise NoTransitionError(self._no_choice(event))
        return self._advance(choice, self.payload if payload is None else payload)

    def fire(self, event: str, payload: object = None) -> TraceEvent:
        """Take the first ``event`` transition whose guard passes, then run the new state's action.

        The synchronous step of an event-driven run (hub channels): actions must be plain
        functions. If the new state's action raises, the transition has happened.

        Args:
            event: The transition label.
            payload: The step's payload.

        Returns:
            The step's ``TraceEvent``.

        Raises:
            NoTransitionError: No ``event`` transition can be taken now (nothing changed).
        """
        if self.finished:
            raise NoTransitionError(f"graph {self.graph.name!r}: cannot fire {event!r}: the run is in the final "
                                    f"state {self.qualified!r}")
        self.enter_sync()
        choice = self._choose(event, payload)
        if choice is None:
            raise NoTransitionError(self._no_choice(event))
        ev = self._advance(choice, payload)
        self.enter_sync()
        return ev

    def enter_sync(self) -> object:
        """Run the current state's action now, synchronously (event-driven graphs), and return its result.

        Raises:
            TypeError: The action is async (an event-driven run applies each event atomically).
        """
        if self.entered or self.finished:
            return self.payload
        st = self.runnable.steps[self.state]
        self.entered, self.work = True, StepWork()
        if st.action is None:
            self.payload = None
            return None
        working = WORK.set(self.work)
        try:
            out = st.action(self.context)
        finally:
            WORK.reset(working)
        if inspect.isawaitable(out):  # refuse loudly: an event is applied atomically
            close = getattr(out, "close", None)
            if close is not None:
                close()
            raise TypeError(f"graph {self.graph.name!r}: the action of state {self.state!r} "
                            f"({callable_name(st.action)}) is async; an event-driven run applies each event "
                            "atomically, so its actions must be plain functions (or drive it with step())")
        self.payload = out
        return out

    async def _enter(self, st: _Step) -> None:
        """Run the state's action (sync or async) or its fork, keeping what it returned as the payload."""
        if st.fork is not None:
            self.payload = await self._fork(st, st.fork)
        elif st.action is None:
            self.payload = None
        else:
            entered = STEP.set(self.qualified)  # a streamed reply's tokens name the state they are written in
            working = WORK.set(self.work)
            try:
                out = st.action(self.context)
                self.payload = (await out) if is_awaitable(out) else out
            finally:
                WORK.reset(working)
                STEP.reset(entered)

    def _choose(self, event: str | None, payload: object) -> _Edge | None:
        for edge in self.runnable.steps[self.state].out:
            if (event is None or edge.label == event) and (edge.guard is None or edge.guard(self.context)):
                return edge
        return None

    def _limit_edge(self, hit: LimitReached, exc: BaseException | None = None) -> _Edge:
        for edge in self.runnable.steps[self.state].out:
            if edge.label == hit.take_edge:
                self.payload = f"{type(hit).__name__}: {hit}"
                return edge
        raise exc or hit  # no such edge drawn here: the run ends with the error

    def _no_choice(self, event: str | None) -> str:
        st = self.runnable.steps[self.state]
        where = f"graph {self.graph.name!r}"
        if event is None:
            return (f"no transition out of state {self.qualified!r} matched: every guard "
                    f"({', '.join(e.label for e in st.out)}) was false; add an unguarded fallback transition")
        candidates = [e for e in st.out if e.label == event]
        if not candidates:
            accepted = ", ".join(repr(lbl) for lbl in self.labels()) or "nothing"
            return f"{where}: state {self.qualified!r} has no {event!r} transition; it accepts {accepted}"
        guards = ", ".join(callable_name(e.guard) for e in candidates)
        return f"{where}: no {event!r} transition out of state {self.qualified!r} passed its guard ({guards})"

    def _advance(self, edge: _Edge, payload: object) -> TraceEvent:
        source = self.state
        self.runnable.move(self, edge.dest)  # the Machine sets self.state
        self.entered, self.payload = False, None
        ev = TraceEvent(len(self.path), self.prefix + source, edge.label, self.prefix + self.state,
                        self.clock() - self._t0, payload)
        self.path.append(ev.state)
        self._record(ev, self.work)
        if self.runnable.steps[self.state].final:
            self._end()
        return ev

    def _end(self) -> None:
        st = self.runnable.steps[self.state]
        reason = st.reason(self.context) if callable(st.reason) else st.reason
        last = next((e.trigger for e in reversed(self.trace) if e.trigger is not None and e.dest is not None
                     and "|" not in e.state[len(self.prefix):]), None)  # its own edge, not a branch's
        self.stop_reason = StopReason.of(reason or last or self.state)
        self.path.append(self.qualified)
        self._record(TraceEvent(len(self.path) - 1, self.qualified, None, None, self.clock() - self._t0))

    def _record(self, ev: TraceEvent, work: StepWork | None = None) -> None:
        """Trace ``ev``, hand it to the recorder with its step's ``work`` (None: a stop), tell the observers."""
        self.trace.append(ev)
        if self.recorder is not None:
            self.recorder(ev, work)
        if self.observers or self.parent is not None:
            self._relay(ev)

    def _relay(self, ev: TraceEvent) -> None:
        """Tell the observers (a branch's event also lands in every enclosing run's trace)."""
        for o in self.observers:
            o(ev)
        if self.parent is not None:
            self.parent.trace.append(ev)
            self.parent._relay(ev)

    # ---- running to the end ----
    async def run(self) -> RunResult:
        """Step until a final state and return the ``RunResult``.

        An exception in an action or guard ends the run with ``stop_reason="error"`` and the
        exception on ``result.error``; a cancellation ends it with ``"cancelled"`` and the
        ``CancelledError`` is re-raised (asyncio semantics) carrying the result as
        ``exc.fsmchat_result``. Either way the context, and so the transcript, is intact. An action
        that raises ``Interrupted`` ends the run with ``"interrupted"`` (its request as the last
        event's payload); a resume enters that state again.
        """
        # a cancel() asked for during a step that never waited (instant participants) is taken at
        # the next step boundary, as it would be at a model call (Task.cancelling: Python 3.11+)
        cancelling = getattr(asyncio.current_task(), "cancelling", None)
        try:
            while self.stop_reason is None:
                await self.step()
                if self.recorder is not None and self.recorder.unsynced:  # a store that commits on its own thread
                    await self.recorder.durable()
                if cancelling is not None and cancelling():
                    await asyncio.sleep(0)  # the task delivers the pending CancelledError here
        except Interrupted as exc:  # an action waits for an answer: stop here, resumably
            self._stop_with(StopReason.INTERRUPTED, exc.request)
        except _MaxSteps:
            self.stop_reason = StopReason.MAX_STEPS
            self._record(TraceEvent(len(self.path), self.qualified, StopReason.MAX_STEPS.value, None,
                                    self.clock() - self._t0))
            self.path.append(self.qualified)
        except asyncio.CancelledError as exc:
            self._stop_with(StopReason.CANCELLED, None)
            self._close()
            raise attach_result(exc, self.result())
        except Exception as exc:  # an action, guard or the machine failed: keep everything so far
            redact_chain(exc)  # secrets masked in the error, its chain, and the stop event stored from it
            self._stop_with(StopReason.ERROR, redact(f"{type(exc).__name__}: {exc}"))
            self.error = exc
        self._close()
        if self.recorder is not None and self.recorder.unsynced:
            try:
                await self.recorder.durable()
            except Exception as exc:
                self.error = self.error or exc
                self.stop_reason = StopReason.ERROR
        return self.result()

    def _stop_with(self, reason: StopReason, payload: object) -> None:
        """End the run here for ``reason``, its last event labelled with it (carrying ``payload``)."""
        self.stop_reason = reason
        self.path.append(self.qualified)
        ev = TraceEvent(len(self.path) - 1, self.qualified, reason.value, None, self.clock() - self._t0, payload)
        self.trace.append(ev)
        try:  # a failing store must not lose the result of a run that is already failing
            if self.recorder is not None:
                self.recorder(ev)
        except Exception as store_exc:
            self.error = self.error or store_exc
        self._relay(ev)

    def _close(self) -> None:
        if self.recorder is not None:
            try:
                self.recorder.finish(self.stop_reason or StopReason.ERROR)
            except Exception as exc:
                if self.error is None:
                    self.error = exc
                    self.stop_reason = StopReason.ERROR

    # ---- forks: branches as child runs ----
    async def _fork(self, st: _Step, fork: Fork) -> object:
        """Run the fork state's branches as child runs, concurrently (at most ``limit`` at once,
        started in order: 1 runs them one after another), then join them.

        ``split(ctx)`` gives ``(branch index, child context, item index or None)`` per child run;
        ``join(ctx, [(child context, RunResult)])`` merges them in that order."""
        split, join, limit = fork
        at = len(self.path)  # this visit's step number: names the children's checkpoint lanes
        runs: list[tuple[object, GraphRun | None, RunResult | None]] = []  # (context, child run, or its result)
        for index, child_ctx, item in split(self.context):
            name = f"{self.prefix}{st.name}|{index + 1}" + (f"[{item}]" if item is not None else "")
            recorder, saved = (self.recorder.branch(f"{at}:{name}", child_ctx) if self.recorder is not None
                               else (None, None))
            history = [e for e in saved.events if e.dest is not None] if saved is not None else None
            if saved is not None and saved.finished:
                runs.append((child_ctx, None, RunResult([e.state for e in saved.events], list(saved.events),
                                                        saved.stop_reason or StopReason.DONE, child_ctx)))
                continue
            child = GraphRun(st.branches[index], child_ctx, recorder=recorder, prefix=name + ".",
                             start=history[-1].dest if history else None, history=history, clock=self.clock,
                             max_steps=self.max_steps, parent=self)
            runs.append((child_ctx, child, None))
        pending = [c.run() for _, c, done in runs if c is not None]
        if limit is not None:
            gate = asyncio.Semaphore(limit)  # waiters acquire in arrival order: the children start in order

            async def gated(run: Awaitable[RunResult]) -> RunResult:
                async with gate:
                    return await run
            pending = [gated(p) for p in pending]
        finished = iter(await asyncio.gather(*pending))
        results = [(ctx, done if done is not None else next(finished)) for ctx, _c, done in runs]
        return join(self.context, results)


class _MaxSteps(FsmchatError):
    """The run reached ``max_steps`` (ends it with stop reason ``max_steps``)."""


async def run_graph(graph: StateGraph, context: object, *, max_steps: int = DEFAULT_MAX_STEPS,
                    observers: Iterable[Observer] = (), start: str | None = None,
                    history: list[TraceEvent] | None = None, recorder: RunRecorder | None = None) -> RunResult:
    """Run ``graph`` against ``context`` until a final state and return the ``RunResult``.

    An error in an action or guard does not raise: it ends the run with ``stop_reason="error"``
    (see ``GraphRun.run``).

    Args:
        graph: The graph to run.
        context: The object every action and guard is called with.
        max_steps: The most steps before the run ends with ``stop_reason="max_steps"``.
        observers: Callables given each ``TraceEvent`` as it happens.
        start: Resume here: the state to enter first.
        history: The earlier events of a resumed run.
        recorder: The checkpoint observer, or None.

    Examples:
        >>> import asyncio
        >>> from fsmchat import run_graph
        >>> from fsmchat import StateGraph
        >>> def add(ctx):
        ...     ctx["n"] += 1
        ...     return ctx["n"]
        >>> def more(ctx):
        ...     return ctx["n"] < 3
        >>> counter = StateGraph("count").state("add", add).final("done").edge("add", "add", when=more).edge("add", "done")
        >>> result = asyncio.run(run_graph(counter, {"n": 0}))
        >>> result.path, result.stop_reason, [e.payload for e in result.trace]
        (['add', 'add', 'add', 'done'], 'next', [1, 2, 3, None])
    """
    return await GraphRun(graph, context, observers=observers, recorder=recorder, start=start,
                          history=history, max_steps=max_steps).run()


_GC_LOCK = threading.Lock()


class _BatchGC:
    running = 0  # batches running in this process
    thresholds = gc.get_threshold()  # what to restore after the last
    froze = False  # the first froze what was alive (nothing was frozen before): the last unfreezes


BATCH_GC_MIN_RUNS = 64  # smaller batches leave the collector alone
BATCH_GC_THRESHOLD = (50_000, 20, 100)


@contextlib.contextmanager
def batch_collector(runs: int) -> Iterator[None]:
    """Tune the garbage collector while a large batch runs, then restore it: the objects alive
    before the batch (modules, graphs, their machines) are frozen out of the collector's scans
    (``gc.freeze``) and generation 0 is collected every 50,000 allocations instead of 700, which
    the thousands of short-lived messages and trace events of a batch otherwise trigger over and
    over (bench/scale.py: GC time 0.45 -> 0.07 s for 1,000 chats). Nested or concurrent batches
    share one tuning; the last to finish restores the thresholds and unfreezes, unless something
    else had frozen objects before the batch (fsmchat does after litellm's import:
    ``fsmchat.speakers.llm.keep_out_of_collections``): that freeze is left as it was."""
    if runs < BATCH_GC_MIN_RUNS:
        yield
        return
    with _GC_LOCK:
        if _BatchGC.running == 0:
            _BatchGC.thresholds = gc.get_threshold()
            _BatchGC.froze = gc.get_freeze_count() == 0
            if _BatchGC.froze:
                gc.freeze()
            gc.set_threshold(*BATCH_GC_THRESHOLD)
        _BatchGC.running += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _BatchGC.running -= 1
            if _BatchGC.running == 0:
                gc.set_threshold(*_BatchGC.thresholds)
                if _BatchGC.froze:
                    gc.unfreeze()


def run_sync(make: Callable[[], Coroutine[object, object, T]]) -> T:
    """Run a coroutine to completion from sync code, also inside a running loop (Jupyter).

    With no loop in this thread it uses ``asyncio.run``; inside one, it runs the coroutine on a
    fresh loop in a worker thread and waits for it. A Ctrl-C while waiting cancels that run (so it
    ends through its cancellation path, keeping what it has) before the KeyboardInterrupt goes on.

    Args:
        make: A zero-argument callable returning the coroutine (called in the thread that runs it).

    Returns:
        What the coroutine returned.

    Examples:
        >>> from fsmchat import run_sync
        >>> async def answer():
        ...     return 42
        >>> run_sync(answer)
        42
    """
    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if not running:  # outside the except block, so run errors carry no stray exception context
        return asyncio.run(make())
    lock = threading.Lock()  # orders a Ctrl-C's cancel against the worker's start
    box: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[T]]] = []  # the worker's loop and task, once started
    stop: list[bool] = []  # a Ctrl-C came: the run is cancelled as soon as it exists

    def worker() -> T:
        loop = asyncio.new_event_loop()
        try:
            task = loop.create_task(make())
            with lock:
                box.append((loop, task))
                if stop:
                    task.cancel()
            return loop.run_until_complete(task)
        finally:
            with lock:  # no cancel reaches a closed loop
                box.clear()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsmchat-run") as pool:
        try:  # the submit too: a Ctrl-C may arrive before the wait starts, while the run already goes
            future = pool.submit(contextvars.copy_context().run, worker)  # the caller's context vars go along
            return future.result()
        except BaseException:  # interrupted (KeyboardInterrupt), or the run failed: cancel it if it still goes
            with lock:
                stop.append(True)
                for loop, task in box:
                    loop.call_soon_threadsafe(task.cancel)
            raise  # leaving the pool waits for the worker, which ends through its cancellation path


def run(graph: StateGraph, context: object, *, max_steps: int = DEFAULT_MAX_STEPS, observers: Iterable[Observer] = (),
        start: str | None = None, history: list[TraceEvent] | None = None,
        recorder: RunRecorder | None = None) -> RunResult:
    """Run ``graph`` against ``context`` from sync code: ``run_graph`` through ``run_sync``.

    Args:
        graph: The graph to run.
        context: The object every action and guard is called with.
        max_steps: The most steps before the run ends with ``stop_reason="max_steps"``.
        observers: Callables given each ``TraceEvent`` as it happens.
        start: Resume here: the state to enter first.
        history: The earlier events of a resumed run.
        recorder: The checkpoint observer, or None.

    Examples:
        >>> from fsmchat import StateGraph, run
        >>> hello = StateGraph("hello").state("greet", lambda ctx: f"hi {ctx}").final("done").edge("greet", "done")
        >>> run(hello, "Ada").trace[0].payload
        'hi Ada'
        >>> def boom(ctx):
        ...     raise ValueError("no")
        >>> result = run(StateGraph("b").state("x", boom).final("y").edge("x", "y"), None)
        >>> result.stop_reason, result.error
        ('error', ValueError('no'))
    """
    return run_sync(lambda: run_graph(graph, context, max_steps=max_steps, observers=observers, start=start,
                                      history=history, recorder=recorder))
