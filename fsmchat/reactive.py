"""Event-driven stepping of a ``StateGraph``: one graph instance moved by outside events.

``run_graph`` (the engine) drives a graph from the inside: it awaits a state's action and picks
the next transition by guards alone. Some graphs are driven from the outside instead: a network
channel moves when a participant acknowledges an invite, sends a text, closes it, or its TTL
runs out. ``Reactor`` is that mode on the same compiled ``transitions.Machine`` that
``compile_graph(graph)`` builds for the engine, so the picture, the analysis and the execution
still come from one ``StateGraph``:

- an event is a transition *label*: ``fire("text")`` takes the first outgoing transition of the
  current state whose label is ``"text"`` and whose guard (if any) passes, in declared order;
- it fires that transition's trigger on the machine, runs the destination state's action (sync
  only: events arrive one at a time and must be applied atomically), and appends a ``TraceEvent``;
- ``path`` and ``trace`` have ``RunResult``'s shape, so ``assert_trace_is_path(graph, reactor)``
  and ``graph.to_dot(trace=reactor)`` work on it.
"""
from __future__ import annotations

import inspect
import time
from typing import Any, Callable, Iterable

from .engine import CompiledGraph, compile_graph
from .errors import NoTransitionError
from .graph.state_graph import StateGraph, callable_name
from .models import TraceEvent

Observer = Callable[[TraceEvent], None]


class _ReactorModel:
    """The ``transitions`` model of one reactor: the machine writes ``state`` on it."""

    __slots__ = ("state", "__dict__")


class Reactor:
    """The current state of one instance of ``graph``, stepped by ``fire(label, payload)``.

    The initial state's action runs on construction (as the engine runs it when a run starts).
    Guards and actions receive ``context``, exactly as under ``run_graph``. On reaching a final
    state the reactor records a terminal trace event (like a finished run) and detaches from the
    shared machine; ``detach()`` does that early (e.g. when its owner shuts down).
    """

    def __init__(self, graph: StateGraph, context: Any = None, *, observers: Iterable[Observer] = (),
                 clock: Callable[[], float] = time.perf_counter):
        self.graph = graph
        self.context = context
        self.compiled: CompiledGraph = compile_graph(graph)
        for step in self.compiled.steps.values():
            if step.action is not None and step.is_async:
                raise TypeError(f"graph {graph.name!r}: state {step.name!r} has an async action "
                                f"({callable_name(step.action)}); a Reactor applies each event atomically and "
                                "runs actions synchronously; make it a plain function or run the graph with "
                                "run_graph")
        self.observers: list[Observer] = list(observers)
        self.path: list[str] = []
        self.trace: list[TraceEvent] = []
        self.last_result: Any = None  # what the latest entered state's action returned
        self._clock = clock
        self._t0 = clock()
        self._model = _ReactorModel()
        self._attached = True
        self.compiled.attach(self._model)
        self.last_result = self._enter(self.state)
        if self.finished:
            self._finish()

    # ---- reading ----
    @property
    def state(self) -> str:
        return self._model.state

    @property
    def finished(self) -> bool:
        """True once a final state is reached (no event is accepted any more)."""
        return self.compiled.steps[self.state].final

    @property
    def stop_reason(self) -> str | None:
        """As ``RunResult.stop_reason``: the final state's reason, else the last label, else its name."""
        if not self.finished:
            return None
        step = self.compiled.steps[self.state]
        last = next((e.trigger for e in reversed(self.trace) if e.trigger is not None), None)
        return step.reason or last or step.name

    @property
    def visited(self) -> list[str]:
        """Every state entered so far, the current one included."""
        return list(self.path) if self.finished else [*self.path, self.state]

    def labels(self) -> list[str]:
        """The event labels the current state has transitions for (declared order, no repeats)."""
        return list(dict.fromkeys(lbl for _, _, lbl, _ in self.compiled.steps[self.state].out))

    def _choose(self, label: str) -> tuple[Any, list[Any]]:
        candidates = [t for t in self.compiled.steps[self.state].out if t[2] == label]
        for t in candidates:
            guard = t[0]
            if guard is None or guard(self.context):
                return t, candidates
        return None, candidates

    def can_fire(self, label: str) -> bool:
        """Whether ``fire(label)`` would take a transition now (evaluates guards, changes nothing)."""
        if self.finished:
            return False
        return self._choose(label)[0] is not None

    # ---- stepping ----
    def fire(self, label: str, payload: Any = None) -> TraceEvent:
        """Take the first ``label`` transition of the current state whose guard passes.

        Raises ``NoTransitionError`` (and changes nothing) when there is none. If the destination's
        action raises, the transition has happened (the state is the destination) and the
        exception propagates.
        """
        source = self.state
        if self.finished:
            raise NoTransitionError(f"graph {self.graph.name!r}: cannot fire {label!r}: the instance is in the "
                                    f"final state {source!r}")
        chosen, candidates = self._choose(label)
        if chosen is None:
            if not candidates:
                accepted = ", ".join(repr(lbl) for lbl in self.labels()) or "nothing"
                raise NoTransitionError(f"graph {self.graph.name!r}: state {source!r} has no {label!r} "
                                        f"transition; it accepts {accepted}")
            guards = ", ".join(callable_name(t[0]) for t in candidates)
            raise NoTransitionError(f"graph {self.graph.name!r}: no {label!r} transition out of state {source!r} "
                                    f"passed its guard ({guards})")
        _guard, trigger, _label, dest = chosen
        getattr(self._model, trigger)()
        event = TraceEvent(len(self.path), source, label, self.state, self._clock() - self._t0, payload)
        self.path.append(source)
        self.trace.append(event)
        for observer in self.observers:
            observer(event)
        try:
            self.last_result = self._enter(self.state)
        finally:
            if self.finished:
                self._finish()
        return event

    def _enter(self, name: str) -> Any:
        action = self.compiled.steps[name].action
        if action is None:
            return None
        result = action(self.context)
        if inspect.isawaitable(result):  # a sync function that returned an awaitable: refuse loudly
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise TypeError(f"graph {self.graph.name!r}: the action of state {name!r} returned an awaitable; "
                            "a Reactor runs actions synchronously")
        return result

    def _finish(self) -> None:
        if self.path and self.path[-1] == self.state and self.trace[-1].dest is None:
            return
        event = TraceEvent(len(self.path), self.state, None, None, self._clock() - self._t0)
        self.path.append(self.state)
        self.trace.append(event)
        for observer in self.observers:
            observer(event)
        self.detach()

    def detach(self) -> None:
        """Remove this instance's model from the shared machine (idempotent)."""
        if self._attached:
            self._attached = False
            self.compiled.detach(self._model)

    def __repr__(self) -> str:
        return f"Reactor({self.graph.name!r}, state={self.state!r}, {len(self.trace)} events)"
