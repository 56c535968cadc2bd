"""Layer 4: the one executor. It runs any ``StateGraph`` against a context object.

Per step: enter a state, await its action, try the outgoing guards in declared order, fire the
chosen transition on a ``transitions.Machine``, append a trace event, tell the observers. The
loop is an explicit ``async`` loop that fires exactly one trigger per step (never from inside a
callback: chained triggers overflow the stack after ~62 turns, and ``AsyncMachine`` costs ~7x
more per trigger). It knows nothing of agents, bids or turns.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from time import perf_counter
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from .errors import NoTransitionError, attach_result
from .graph.state_graph import StateGraph
from .models import RunResult, TraceEvent

T = TypeVar("T")
Observer = Callable[[TraceEvent], None]
DEFAULT_MAX_STEPS = 100_000


class _Step:
    """A flat state prepared for running: its action (sync or async) and outgoing transitions."""

    __slots__ = ("name", "action", "is_async", "final", "reason", "out")

    def __init__(self, name: str, action: Any, final: bool, reason: str | None,
                 out: list[tuple[Any, str, str, str]]):
        self.name = name
        self.action = action
        self.is_async = action is not None and inspect.iscoroutinefunction(action)
        self.final = final
        self.reason = reason
        self.out = out  # (guard, trigger method name, label, dest)


class CompiledGraph:
    """A validated, flattened graph and the ``transitions.Machine`` that holds each run's state."""

    def __init__(self, graph: StateGraph):
        flat = graph.flatten()
        self.graph = graph
        self.initial = flat.initial
        self.steps: dict[str, _Step] = {}
        machine_transitions = []
        for s in flat.states.values():
            out = []
            for t in s.out:
                trig = f"_fsm_t{len(machine_transitions)}"
                machine_transitions.append({"trigger": trig, "source": t.source, "dest": t.dest})
                out.append((t.guard, trig, t.label, t.dest))
            self.steps[s.name] = _Step(s.name, s.action, s.final, s.reason, out)
        from transitions import Machine  # imported on first compile, not at `import fsmchat`

        self.machine = Machine(model=None, states=list(self.steps), transitions=machine_transitions,
                               initial=self.initial, auto_transitions=False, send_event=False,
                               ignore_invalid_triggers=False)
        self._lock = threading.Lock()

    def attach(self, runner: Any) -> None:
        with self._lock:
            self.machine.add_model(runner, initial=self.initial)

    def detach(self, runner: Any) -> None:
        with self._lock:
            self.machine.remove_model(runner)


def compile_graph(graph: StateGraph) -> CompiledGraph:
    """Validate and compile once per graph object (cached on it)."""
    if graph._compiled is None:
        graph._compiled = CompiledGraph(graph)
    return graph._compiled


class _Runner:
    """The ``transitions`` model of one run: the machine writes ``state`` on it."""

    __slots__ = ("state", "__dict__")


async def run_graph(graph: StateGraph, context: Any, *, max_steps: int = DEFAULT_MAX_STEPS,
                    observers: Iterable[Observer] = (), start: str | None = None,
                    history: list[TraceEvent] | None = None) -> RunResult:
    """Run ``graph`` against ``context`` until a final state; never raises for action errors.

    An exception in an action or guard ends the run with ``stop_reason="error"`` and the
    exception on ``result.error``. A cancellation ends it with ``"cancelled"``; the
    ``CancelledError`` is re-raised (asyncio semantics) carrying the result as
    ``exc.fsmchat_result``. Either way the context, and so the transcript, is intact.

    ``start`` and ``history`` resume a run: enter ``start`` (a declared state) with the earlier
    transitions as the beginning of the path and trace.
    """
    cg = compile_graph(graph)
    obs = list(observers)
    runner = _Runner()
    cg.attach(runner)
    if start is not None and start != cg.initial:
        runner.state = start  # resume point (the machine accepts any declared state)
    trace: list[TraceEvent] = list(history or ())
    path: list[str] = [e.state for e in trace]
    t0 = perf_counter()
    steps = cg.steps
    state = runner.state
    stop_reason = "max_steps"
    error: BaseException | None = None

    def record(ev: TraceEvent) -> None:
        trace.append(ev)
        for o in obs:
            o(ev)

    try:
        while True:
            st = steps[state]
            path.append(state)
            n = len(path) - 1
            if st.final:
                reason = st.reason(context) if callable(st.reason) else st.reason
                stop_reason = reason or (trace[-1].trigger if trace else None) or state
                record(TraceEvent(n, state, None, None, perf_counter() - t0))
                break
            if n >= max_steps:
                record(TraceEvent(n, state, "max_steps", None, perf_counter() - t0))
                break
            action = st.action
            if action is None:
                payload = None
            elif st.is_async:
                payload = await action(context)
            else:
                payload = action(context)
                if inspect.isawaitable(payload):
                    payload = await payload
            for guard, trig, label, _dest in st.out:
                if guard is None or guard(context):
                    break
            else:
                raise NoTransitionError(f"no transition out of state {state!r} matched: every guard "
                                        f"({', '.join(lbl for _, _, lbl, _ in st.out)}) was false; "
                                        "add an unguarded fallback transition")
            getattr(runner, trig)()
            state = runner.state
            record(TraceEvent(n, st.name, label, state, perf_counter() - t0, payload))
    except asyncio.CancelledError as exc:
        record(TraceEvent(len(path) - 1, state, "cancelled", None, perf_counter() - t0))
        result = RunResult(path, trace, "cancelled", context, exc)
        cg.detach(runner)
        raise attach_result(exc, result)
    except Exception as exc:  # an action, guard or the machine failed: keep everything so far
        error = exc
        stop_reason = "error"
        record(TraceEvent(len(path) - 1, state, "error", None, perf_counter() - t0,
                          f"{type(exc).__name__}: {exc}"))
    cg.detach(runner)
    return RunResult(path, trace, stop_reason, context, error)


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, also inside a running loop (Jupyter).

    With no loop in this thread it uses ``asyncio.run``; inside one, it runs the coroutine on a
    fresh loop in a worker thread and waits for it.
    """
    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if not running:  # outside the except block, so run errors carry no stray exception context
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsmchat-run") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def run(graph: StateGraph, context: Any, **kw: Any) -> RunResult:
    """Synchronous ``run_graph``."""
    return run_sync(lambda: run_graph(graph, context, **kw))
