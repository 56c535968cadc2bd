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
        self.machine = _machine_class()(model=None, states=list(self.steps), transitions=machine_transitions,
                               initial=self.initial, auto_transitions=False, send_event=False,
                               ignore_invalid_triggers=False)
        self._lock = threading.Lock()
        self.events = self.machine.events  # trigger name -> transitions Event

    def fire(self, trigger: str, runner: Any) -> None:
        """Fire one trigger for ``runner`` (any object with a ``state``; no registration needed)."""
        self.events[trigger].trigger(runner)

    def attach(self, runner: Any) -> None:
        with self._lock:
            self.machine.add_model(runner, initial=self.initial)

    def detach(self, runner: Any) -> None:
        with self._lock:
            self.machine.remove_model(runner)


_MACHINE: Any = None


def _machine_class() -> Any:
    """``transitions.Machine`` with lean Transition/Event classes, built on first compile.

    fsmchat registers no transitions-level callbacks or conditions (guards are tried by the
    engine, in declared order) and no state callbacks, and its machines have no event queue; so a
    transition is only ``set_state``, and an event need not pass through ``Machine._process``. A
    step costs ~4 us instead of ~9 (docs/benchmarks.md), and transitions still checks the source
    state and raises MachineError for a trigger fired from the wrong state.
    """
    global _MACHINE
    if _MACHINE is None:
        from transitions import Event, Machine, Transition
        from transitions.core import EventData

        class LeanTransition(Transition):
            def execute(self, event_data: Any) -> bool:
                # no state callbacks either: State.exit/enter would only loop over empty lists
                event_data.machine.set_state(self.dest, event_data.model)
                return True

        class LeanEvent(Event):
            def trigger(self, model: Any, *args: Any, **kwargs: Any) -> Any:
                return self._trigger(EventData(None, self, self.machine, model, args=args, kwargs=kwargs))

        class LeanMachine(Machine):
            transition_cls = LeanTransition
            event_cls = LeanEvent

        _MACHINE = LeanMachine
    return _MACHINE


def compile_graph(graph: StateGraph) -> CompiledGraph:
    """Validate and compile once per graph object (cached on it)."""
    if graph._compiled is None:
        graph._compiled = CompiledGraph(graph)
    return graph._compiled


class _Runner:
    """The ``transitions`` model of one run: the machine reads and writes its ``state``."""

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
    runner.state = start if start is not None else cg.initial  # a resume enters any declared state
    fire = cg.fire
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
            fire(trig, runner)
            state = runner.state
            record(TraceEvent(n, st.name, label, state, perf_counter() - t0, payload))
    except asyncio.CancelledError as exc:
        record(TraceEvent(len(path) - 1, state, "cancelled", None, perf_counter() - t0))
        result = RunResult(path, trace, "cancelled", context, exc)
        raise attach_result(exc, result)
    except Exception as exc:  # an action, guard or the machine failed: keep everything so far
        error = exc
        stop_reason = "error"
        record(TraceEvent(len(path) - 1, state, "error", None, perf_counter() - t0,
                          f"{type(exc).__name__}: {exc}"))
    return RunResult(path, trace, stop_reason, context, error)


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, also inside a running loop (Jupyter).

    With no loop in this thread it uses ``asyncio.run``; inside one, it runs the coroutine on a
    fresh loop in a worker thread and waits for it. A Ctrl-C while waiting cancels that run (so it
    ends through its cancellation path, keeping what it has) before the KeyboardInterrupt goes on.
    """
    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if not running:  # outside the except block, so run errors carry no stray exception context
        return asyncio.run(make())
    box: dict[str, Any] = {}
    started = threading.Event()

    def worker() -> T:
        loop = asyncio.new_event_loop()
        try:
            box["loop"], box["task"] = loop, loop.create_task(make())
            started.set()
            return loop.run_until_complete(box["task"])
        finally:
            started.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsmchat-run") as pool:
        future = pool.submit(worker)
        try:
            return future.result()
        except BaseException:
            if not future.done():  # interrupted while waiting (KeyboardInterrupt): cancel the run
                started.wait()
                if "task" in box:
                    box["loop"].call_soon_threadsafe(box["task"].cancel)
                concurrent.futures.wait([future])
            raise


def run(graph: StateGraph, context: Any, **kw: Any) -> RunResult:
    """Synchronous ``run_graph``."""
    return run_sync(lambda: run_graph(graph, context, **kw))
