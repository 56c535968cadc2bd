"""Layer 5: ``StateGraph``, the one intermediate form that is run, drawn, analysed and tested.

A graph holds named states (each with an optional action and a one-line description), final
states, nested subgraphs and guarded transitions in declared order. ``flatten()`` turns nesting
into qualified names (``loop.discussion.turn``): the engine runs that flat form, the renderer
draws it with clusters (``drawing()`` is the plain ``Drawing`` that ``fsmchat.graph.render``
writes as DOT and Mermaid), and tests walk it, so all three see the same graph.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generic, Iterable, Sequence, TypeGuard, overload

from typing_extensions import TypeVar

from ..errors import GraphError
from ..models import RunResult
from .render import (Drawing, Edge, Node, Trace, distinct_names, mime_bundle, overlay, render, to_dot, to_html,
                     to_mermaid, to_svg)

if TYPE_CHECKING:
    import networkx as nx

# The context a graph's actions and guards read: ``StateGraph("g", context=ChatContext)`` is a
# ``StateGraph[ChatContext]``. Covariant, so ``StateGraph`` alone (``StateGraph[object]``) is "a graph
# over some context": what nests, forks and runs graphs of every context (the engine calls their
# steps with the run's context object; only building is checked against ``C``).
C = TypeVar("C", covariant=True, default=object)
K = TypeVar("K")  # a fork's child context: what its split makes and its join reads
Action = Callable[[C], object]  # ``action(ctx)``, sync or async: its return value is the step's payload
Guard = Callable[[C], bool]  # ``guard(ctx) -> bool``
Reason = Callable[[C], str]  # a final state's ``reason(ctx)``
# A fork state's work: ``split(ctx)`` -> [(branch index, child context, item index or None)], one per
# child run; ``join(ctx, [(child context, RunResult)])`` merges them (in that order) and returns the payload;
# then the most child runs at once (None: all).
Split = Callable[[C], Iterable[tuple[int, object, "int | None"]]]
Join = Callable[[C, list[tuple[Any, RunResult]]], object]  # type: ignore[explicit-any]  # a child context has the type its split made (``fork``'s K), which the stored form cannot name
Fork = tuple[Split[C], Join[C], "int | None"]


_NON_WORD = re.compile(r"\W+")


def state_names(labels: Sequence[str], reserved: Iterable[str] = (), prefix: str = "",
                fallback: str = "state") -> list[str]:
    """One valid, distinct state name per label, the one rule every graph builder uses: ``prefix``
    plus the label with each run of non-word characters (``.`` and ``|`` have meanings in state
    names) as one ``_``, none at either end (``fallback`` when nothing is left), made distinct by
    ``distinct_names``. Distinct labels never share a name."""
    return distinct_names([prefix + (_NON_WORD.sub("_", label).strip("_") or fallback) for label in labels], reserved)


def first_line(obj: object) -> str:
    doc = getattr(obj, "__doc__", None)
    # a one-line docstring (most actions' and guards') is what inspect.getdoc would make of it, without its work
    doc = doc.expandtabs() if isinstance(doc, str) and "\n" not in doc else inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""


def callable_name(fn: object) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "guard" if name == "<lambda>" else name


def is_awaitable(value: object) -> TypeGuard[Awaitable[object]]:
    """``inspect.isawaitable(value)``, typed as a guard: whether an action's result must be awaited."""
    if value is None or type(value) is str:  # what most sync actions return, answered without the ABC check
        return False
    return inspect.isawaitable(value)


def reached(edges: Iterable[tuple[str, str]], starts: Sequence[str]) -> set[str]:
    """Every node a path from ``starts`` along ``edges`` reaches, the starts included.

    Args:
        edges: ``(source, dest)`` pairs.
        starts: The nodes the paths start at.

    Returns:
        The nodes reached.

    Examples:
        >>> sorted(reached([("a", "b"), ("b", "c"), ("d", "a")], ["a"]))
        ['a', 'b', 'c']
    """
    nxt: dict[str, list[str]] = {}
    for a, b in edges:
        nxt.setdefault(a, []).append(b)
    seen, todo = set(starts), list(starts)
    while todo:
        for b in nxt.get(todo.pop(), ()):
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def forced_cycle(forced: dict[str, str], order: Sequence[str]) -> list[str]:
    """A cycle of forced moves (each state's only, unguarded transition), or ``[]`` if there is none.

    Args:
        forced: Each state that has a single unguarded transition -> that transition's destination.
        order: The states in declaration order: walks start in it, and the cycle found first is
            returned starting at its state declared first (a stable message).

    Returns:
        The cycle's states, in order.

    Examples:
        >>> forced_cycle({"a": "b", "b": "c", "c": "b"}, ["a", "b", "c"])
        ['b', 'c']
        >>> forced_cycle({"a": "b"}, ["a", "b"])
        []
    """
    done: set[str] = set()
    for start in order:
        walk: list[str] = []
        node: str | None = start
        while node is not None and node not in done and node not in walk:
            walk.append(node)
            node = forced.get(node)
        if node is not None and node in walk:
            cycle = walk[walk.index(node):]
            first = min(range(len(cycle)), key=lambda i: order.index(cycle[i]))
            return cycle[first:] + cycle[:first]
        done.update(walk)
    return []


@dataclass
class State(Generic[C]):
    """A declared state of a ``StateGraph``: its action, description and kind.

    Made by ``StateGraph.state``, ``final``, ``subgraph`` and ``fork``; read it from
    ``graph.states``.

    Attributes:
        name: The state's name in its graph (no ``.`` or ``|``).
        action: ``action(ctx)``, sync or async, run on entry; its return value is the step's payload.
        description: One line for diagrams (by default the action's docstring's first line).
        final: Whether a run ends on entering it.
        reason: A final state's stop reason: a string or ``reason(ctx)``.
        subgraph: The graph nested in this state, entered at its initial state.
        branches: A fork state's branch graphs, run as child runs.
        fork: A fork state's ``(split, join, max_concurrency)``.
        waits: The run may stop here for a person (drawn amber).

    Examples:
        >>> from fsmchat import StateGraph
        >>> def greet(ctx):
        ...     '''say hello'''
        >>> g = StateGraph("hello").state("greet", greet).final("done", reason="greeted")
        >>> g.states["greet"].description, g.states["done"].final, g.states["done"].reason
        ('say hello', True, 'greeted')
    """

    name: str
    action: Action[C] | None = None
    description: str = ""
    final: bool = False
    reason: str | Reason[C] | None = None  # stop reason when a run ends here
    subgraph: StateGraph | None = None  # nested graphs and branches may read any context
    branches: list[StateGraph] = field(default_factory=list)  # child runs of a fork state
    fork: Fork[C] | None = None  # (split, join) of a fork state
    waits: bool = False  # the run may stop here for a person (drawn in its own style)


@dataclass
class Transition(Generic[C]):
    """A declared transition: taken when ``guard(ctx)`` is true (or always, when unguarded).

    A state's transitions are tried in declared order; an unguarded one is the fallback, declared
    last. Made by ``StateGraph.edge``.

    Attributes:
        source: The state it leaves.
        dest: The state it enters.
        guard: ``guard(ctx) -> bool``, or None for an unguarded transition.
        label: Its label (by default the guard's name, else ``"next"``); the trace's ``trigger``.
        order: Its index among the graph's transitions (declaration order).

    Examples:
        >>> from fsmchat import StateGraph
        >>> def tired(ctx):
        ...     return True
        >>> g = StateGraph("g").state("work").final("rest").edge("work", "rest", when=tired)
        >>> t = g.transitions[0]
        >>> t.source, t.dest, t.label, t.guard_name
        ('work', 'rest', 'tired', 'tired')
    """

    source: str
    dest: str
    guard: Guard[C] | None = None
    label: str = ""
    order: int = 0

    @property
    def guard_name(self) -> str | None:
        """The guard's name as diagrams show it (``guard`` for a lambda), or None when unguarded."""
        return callable_name(self.guard) if self.guard is not None else None


@dataclass
class FlatState:
    """A state of the flattened graph, under its qualified name, with its outgoing transitions.

    In the flat form a nested state is named by its path (``loop.discussion.turn``) and a nested
    graph's final states take on the enclosing state's transitions. It is what the engine runs, so
    its steps are typed over ``object``: the run's context, whatever graph they came from.

    Attributes:
        name: The qualified name.
        action: The state's action, or None.
        description: One line for diagrams.
        final: Whether a run ends on entering it.
        reason: A final state's stop reason (a string or ``reason(ctx)``).
        cluster: The enclosing subgraph states, outermost first (diagrams draw them as clusters).
        out: Its outgoing transitions, in declared order, destinations qualified.
        branches: A fork state's branch graphs.
        fork: A fork state's ``(split, join, max_concurrency)``.
        waits: The run may stop here for a person.

    Examples:
        >>> from fsmchat import StateGraph
        >>> inner = StateGraph("review").state("read").final("done").edge("read", "done")
        >>> g = StateGraph("g").subgraph("review", inner).final("stop").edge("review", "stop")
        >>> s = g.flatten().states["review.done"]
        >>> s.cluster, [(t.source, t.dest) for t in s.out]
        (('review',), [('review.done', 'stop')])
    """

    name: str
    action: Action | None
    description: str
    final: bool
    reason: str | Reason | None
    cluster: tuple[str, ...]  # enclosing subgraph states, outermost first
    out: list[Transition] = field(default_factory=list)
    branches: list[StateGraph] = field(default_factory=list)
    fork: Fork | None = None
    waits: bool = False


@dataclass
class FlatGraph:
    """A graph with its nesting inlined: what the engine runs and the renderer draws.

    Made by ``StateGraph.flatten`` (which validates first).

    Attributes:
        name: The graph's name.
        initial: The qualified name of the state a run starts in.
        states: Qualified name -> ``FlatState``, in declaration order.
        clusters: Subgraph path (outermost first) -> its description.

    Examples:
        >>> from fsmchat import StateGraph
        >>> inner = StateGraph("review").state("read").final("done").edge("read", "done")
        >>> flat = StateGraph("g").subgraph("review", inner).final("stop").edge("review", "stop").flatten()
        >>> flat.initial, list(flat.states), flat.clusters
        ('review.read', ['review.read', 'review.done', 'stop'], {('review',): 'review'})
    """

    name: str
    initial: str
    states: dict[str, FlatState]
    clusters: dict[tuple[str, ...], str]  # cluster path -> description

    @property
    def transitions(self) -> list[Transition]:
        """Every state's outgoing transitions, state by state."""
        return [t for s in self.states.values() for t in s.out]


class StateGraph(Generic[C]):
    """A state graph over a context of type ``C``, built fluently: the one form that is run, drawn, analysed and tested.

    Declare states (``state``, ``final``, ``subgraph``, ``fork``) and transitions (``edge``);
    each builder method returns the graph. The first declared state is the initial one unless
    ``initial=`` says otherwise. ``validate`` checks the graph (every state reachable, a final
    state reachable from each, no unguarded transition before a guarded one, no endless cycle);
    the engine runs it (``fsmchat.run``), ``render`` draws it.

    Args:
        name: The graph's name (diagrams' title, file names).
        context: The type of the context its actions and guards read: ``StateGraph("g",
            context=ChatContext)`` is a ``StateGraph[ChatContext]``, and a type checker refuses an
            action, guard, stop reason or fork split written for another context (at run time it
            is documentation only). Without it the graph is a ``StateGraph[Any]``, whose steps may
            read any context.
        description: One line describing the graph (diagrams' title).
        initial: The state a run starts in, when not the first declared.

    Examples:
        >>> from fsmchat import StateGraph
        >>> def knock(ctx):
        ...     ctx["knocks"] += 1
        >>> def answered(ctx):
        ...     return ctx["knocks"] >= 2
        >>> door = (StateGraph("door", description="knock until someone answers")
        ...         .state("knock", knock, "knock once")
        ...         .final("open", reason="answered")
        ...         .edge("knock", "open", when=answered)
        ...         .edge("knock", "knock", label="again"))
        >>> from fsmchat import run
        >>> result = run(door, {"knocks": 0})
        >>> result.path, result.stop_reason
        (['knock', 'knock', 'open'], 'answered')
        >>> door
        StateGraph('door', 2 states (1 final), 2 transitions, initial 'knock')
    """

    @overload
    def __init__(self: StateGraph[Any], name: str, *, context: None = None,  # type: ignore[explicit-any]  # no context= given: its steps may read any context (untyped functions and lambdas included)
                 description: str = "", initial: str | None = None): ...

    @overload
    def __init__(self, name: str, *, context: type[C], description: str = "", initial: str | None = None): ...

    def __init__(self, name: str, *, context: type[C] | None = None, description: str = "",
                 initial: str | None = None):
        self.name = name
        self.context = context
        self.description = description
        self._initial = initial
        self.states: dict[str, State[C]] = {}
        self.transitions: list[Transition[C]] = []
        self._runnable: object = None
        self._flat: FlatGraph | None = None

    @property
    def runnable(self) -> object:
        """The engine's prepared form: flat states and their machine (set by ``fsmchat.engine.runnable_graph``; reset on any change)."""
        return self._runnable

    @runnable.setter
    def runnable(self, value: object) -> None:
        self._runnable = value

    # ---- building ----
    def _add(self, state: State[C]) -> StateGraph[C]:
        if not state.name or "." in state.name or "|" in state.name:
            raise GraphError(f"graph {self.name!r}: state name {state.name!r} must be non-empty and "
                             "contain no '.' or '|' (dots join nested names, '|' names branch runs)")
        if state.name in self.states:
            raise GraphError(f"graph {self.name!r}: state {state.name!r} is declared twice")
        self.states[state.name] = state
        self._runnable = self._flat = None
        return self

    def state(self, name: str, action: Action[C] | None = None, description: str | None = None, *,
              waits: bool = False) -> "StateGraph[C]":
        """Declare a state whose ``action(ctx)`` (sync or async) runs when the state is entered.

        How a durable run commits the state's steps is not part of the graph: the run's ``commit=``
        option decides, with what the action says about its step at run time
        (``fsmchat.engine.mark_replayable``).

        Args:
            name: The state's name (non-empty, no ``.`` or ``|``, not declared before).
            action: ``action(ctx)``, run once per visit; its return value is the step's payload.
            description: One line for diagrams; by default the action's docstring's first line.
            waits: The run may stop in this state for a person (its action raises ``Interrupted``
                until it has their answer); diagrams draw it in the waiting style.

        Returns:
            The graph.

        Raises:
            GraphError: The name is empty, holds ``.`` or ``|``, or is taken.
        """
        desc = description if description is not None else (first_line(action) if action else "")
        return self._add(State(name, action, desc, waits=waits))

    def fork(self, name: str, branches: Sequence[StateGraph], split: Callable[[C], Iterable[tuple[int, K, int | None]]],
             join: Callable[[C, list[tuple[K, RunResult]]], object], description: str = "",
             max_concurrency: int | None = None) -> StateGraph[C]:
        """Declare a fork state, whose branches run as concurrent child runs of the same run.

        Branch states are named ``<fork>|<n>.<state>`` (``<fork>|<n>[<item>].<state>``) in traces,
        as the renderer draws them; ``parallel`` and ``loop(parallel=True)`` compile to this.

        Args:
            name: The fork state's name.
            branches: The branch graphs.
            split: ``split(ctx)`` -> ``[(branch index, child context, item index or None)]``, one
                tuple per child run (a branch may run once per item).
            join: ``join(ctx, [(child context, RunResult)])`` merges the child runs, in ``split``
                order; its return value is the step's payload.
            description: One line for diagrams.
            max_concurrency: The most child runs at once (None: all); they start in ``split`` order,
                so 1 runs them one after another.

        Returns:
            The graph.
        """
        return self._add(State(name, None, description, branches=list(branches),
                               fork=(split, join, max_concurrency)))

    def final(self, name: str, description: str = "", reason: str | Reason[C] | None = None) -> StateGraph[C]:
        """Declare a final state: a run that enters it ends.

        Args:
            name: The state's name.
            description: One line for diagrams.
            reason: The run's stop reason when it ends here: a string or ``reason(ctx)``; by
                default the label of the transition that entered it.

        Returns:
            The graph.
        """
        return self._add(State(name, None, description, final=True, reason=reason))

    def subgraph(self, name: str, graph: StateGraph, description: str | None = None) -> StateGraph[C]:
        """Declare a state whose body is another graph, entered at its initial state.

        The nested graph's final states take on this state's outgoing transitions; diagrams draw
        it as a cluster, traces name its states ``<name>.<state>``.

        Args:
            name: The state's name.
            graph: The nested graph.
            description: The cluster's label; by default the nested graph's description.

        Returns:
            The graph.
        """
        return self._add(State(name, None, description if description is not None else graph.description,
                               subgraph=graph))

    def edge(self, source: str, dest: str, when: Guard[C] | None = None, label: str | None = None) -> StateGraph[C]:
        """Declare a transition; a state's transitions are tried in declared order.

        Args:
            source: The state it leaves.
            dest: The state it enters.
            when: The guard, ``when(ctx) -> bool``; None declares the unguarded fallback (at most
                one per state, declared last).
            label: Its label (the trace's ``trigger``, ``GraphRun.fire``'s event); by default the
                guard's name, else ``"next"``.

        Returns:
            The graph.
        """
        lbl = label or (callable_name(when) if when is not None else "next")
        self.transitions.append(Transition(source, dest, when, lbl, len(self.transitions)))
        self._runnable = self._flat = None
        return self

    @property
    def initial(self) -> str:
        """The state a run starts in: ``initial=`` if given, else the first declared state."""
        if self._initial is not None:
            return self._initial
        if not self.states:
            raise GraphError(f"graph {self.name!r} has no states; declare at least an initial and a final state")
        return next(iter(self.states))

    @initial.setter
    def initial(self, name: str) -> None:
        self._initial = name
        self.changed()

    def changed(self) -> StateGraph[C]:
        """Drop the cached flat and runnable forms (rebuilt on next use) and return the graph. The
        building methods call it; a transform that replaces ``transitions``, or edits a nested
        graph in place (which the graphs around it cannot see), calls it on each graph it changed."""
        self._runnable = self._flat = None
        return self

    def outgoing(self, name: str) -> list[Transition[C]]:
        """Return the transitions leaving state ``name``, in declared order.

        Args:
            name: A state of this graph (not qualified).
        """
        return [t for t in self.transitions if t.source == name]

    def _out_by_state(self) -> dict[str, list[Transition[C]]]:
        """``outgoing`` of every state that has transitions, in one pass (a state without any is absent)."""
        outs: dict[str, list[Transition[C]]] = {}
        for t in self.transitions:
            outs.setdefault(t.source, []).append(t)
        return outs

    # ---- analysis ----
    def to_networkx(self) -> nx.MultiDiGraph:
        """Return this level of the graph as a networkx ``MultiDiGraph`` (node and edge data attached)."""
        import networkx as nx  # imported on use: it is a third of fsmchat's cold start otherwise

        g = nx.MultiDiGraph(name=self.name)
        for s in self.states.values():
            g.add_node(s.name, final=s.final, description=s.description, subgraph=s.subgraph is not None)
        for t in self.transitions:
            g.add_edge(t.source, t.dest, key=t.order, label=t.label, guard=t.guard_name)
        return g

    def validate(self) -> StateGraph[C]:
        """Check the graph (and nested ones) and return it.

        Every state is reachable from the initial one, a final state is reachable from every
        state, every transition names declared states, at most one transition per state is
        unguarded and it is declared last, and no cycle of unguarded transitions traps a run.

        Returns:
            The graph.

        Raises:
            GraphError: The first problem found, naming the state(s) at fault and the fix.
        """
        where = f"graph {self.name!r}"
        if not self.states:
            raise GraphError(f"{where} has no states; declare at least an initial and a final state")
        initial = self.initial
        if initial not in self.states:
            raise GraphError(f"{where}: initial state {initial!r} is not declared")
        for t in self.transitions:
            for end in (t.source, t.dest):
                if end not in self.states:
                    raise GraphError(f"{where}: transition {t.source!r} -> {t.dest!r} ({t.label}) names the "
                                     f"undeclared state {end!r}; declared states: {', '.join(self.states)}")
            if self.states[t.source].final:
                raise GraphError(f"{where}: final state {t.source!r} has an outgoing transition to {t.dest!r}; "
                                 "a run ends on entering a final state")
        if not any(s.final for s in self.states.values()):
            raise GraphError(f"{where} has no final state; declare one with .final(name)")
        outs = self._out_by_state()
        for s in self.states.values():
            out = outs.get(s.name, [])
            if not s.final and not out:
                raise GraphError(f"{where}: state {s.name!r} is not final and has no outgoing transition; "
                                 "add an edge from it or declare it with .final()")
            unguarded = [t for t in out if t.guard is None]
            if len(unguarded) > 1:
                raise GraphError(f"{where}: state {s.name!r} has {len(unguarded)} unguarded transitions "
                                 f"(to {', '.join(repr(t.dest) for t in unguarded)}); at most one may be "
                                 "unguarded, as the fallback declared last")
            if unguarded and out[-1] is not unguarded[0]:
                dead = out[out.index(unguarded[0]) + 1:]
                raise GraphError(f"{where}: state {s.name!r}: the unguarded transition to "
                                 f"{unguarded[0].dest!r} is declared before "
                                 f"{', '.join(repr(t.dest) for t in dead)}, which can then never fire; "
                                 "declare guarded transitions first and the unguarded fallback last")
            if s.subgraph is not None:
                if s.subgraph is self:
                    raise GraphError(f"{where}: state {s.name!r} nests its own graph")
                s.subgraph.validate()
            for b in s.branches:
                b.validate()
        edges = [(t.source, t.dest) for t in self.transitions]
        seen = reached(edges, [initial])
        unreachable = [n for n in self.states if n not in seen]
        if unreachable:
            raise GraphError(f"{where}: state(s) {', '.join(map(repr, unreachable))} cannot be reached from "
                             f"the initial state {initial!r}")
        forced = {name: out[0].dest for name, out in outs.items() if len(out) == 1 and out[0].guard is None}
        cycle = forced_cycle(forced, list(self.states))
        if cycle:
            loop = " -> ".join(map(repr, cycle + cycle[:1]))
            raise GraphError(f"{where}: cycle {loop} has no guarded exit, so a run entering it never "
                             "ends; guard one of its transitions (e.g. with a turn counter) and add an exit")
        reaches_final = reached([(b, a) for a, b in edges], [n for n, s in self.states.items() if s.final])
        stuck = [n for n in self.states if n not in reaches_final]
        if stuck:
            raise GraphError(f"{where}: no final state can be reached from {', '.join(map(repr, stuck))}; "
                             "add a transition towards a final state")
        return self

    # ---- flattening (what the engine runs and the renderer draws) ----
    def flatten(self) -> FlatGraph:
        """Return the graph with nested subgraphs inlined under qualified names (validated first).

        A subgraph's final states take on the enclosing state's outgoing transitions. The result is
        cached until the graph changes.
        """
        if self._flat is None:
            self.validate()
            states: dict[str, FlatState] = {}
            clusters: dict[tuple[str, ...], str] = {}
            initial = self._inline(self, "", (), states, clusters, None)
            self._flat = FlatGraph(self.name, initial, states, clusters)
        return self._flat

    @staticmethod
    def _entry(graph: StateGraph, prefix: str) -> str:
        s = graph.states[graph.initial]
        name = prefix + s.name
        return StateGraph._entry(s.subgraph, name + ".") if s.subgraph is not None else name

    @staticmethod
    def _inline(graph: StateGraph, prefix: str, cluster: tuple[str, ...],
                states: dict[str, FlatState], clusters: dict[tuple[str, ...], str],
                exits: list[Transition] | None) -> str:
        """Inline ``graph`` under ``prefix``; ``exits`` are the enclosing state's outgoing transitions
        (already qualified) that this graph's final states take on. Returns the entry state."""
        outs = graph._out_by_state()
        for s in graph.states.values():
            q = prefix + s.name
            out = [Transition(q, StateGraph._target(graph, t.dest, prefix), t.guard, t.label, t.order)
                   for t in outs.get(s.name, ())]
            if s.subgraph is not None:
                sub_cluster = cluster + (q,)
                clusters[sub_cluster] = s.description or s.subgraph.name
                StateGraph._inline(s.subgraph, q + ".", sub_cluster, states, clusters, out)
                continue
            if s.final and exits is not None:
                states[q] = FlatState(q, None, s.description, False, None, cluster,
                                      [Transition(q, t.dest, t.guard, t.label, t.order) for t in exits])
            else:
                states[q] = FlatState(q, s.action, s.description, s.final, s.reason, cluster, out, s.branches,
                                      s.fork, s.waits)
        return StateGraph._entry(graph, prefix)

    @staticmethod
    def _target(graph: StateGraph, dest: str, prefix: str) -> str:
        s = graph.states[dest]
        return StateGraph._entry(s.subgraph, prefix + dest + ".") if s.subgraph is not None else prefix + dest

    # ---- drawing (the plain Drawing that fsmchat.graph.render writes as DOT, Mermaid, SVG) ----
    def drawing(self, trace: Trace = None) -> Drawing:
        """Return the plain drawing of this graph: flattened, branch runs nested in their fork
        state's group, ``trace`` (a ``RunResult`` or trace list) overlaid when given."""
        flat = self.flatten()
        d = Drawing(self.name, self.description or self.name, flat.initial)

        def level(fg: FlatGraph, prefix: str, base: tuple[str, ...], top: bool) -> None:
            for cpath, desc in fg.clusters.items():
                short = _short(cpath[-1])
                label = short if desc in ("", short) else f"{short}\n{desc}"
                d.groups[base + tuple(prefix + c for c in cpath)] = label
            joins: dict[str, str] = {}
            for s in fg.states.values():
                q, group = prefix + s.name, base + tuple(prefix + c for c in s.cluster)
                d.nodes.append(Node(q, _short(s.name) + (f"\n{s.description}" if s.description else ""), group,
                                    final=s.final, waits=s.waits))
                if not s.branches:
                    continue
                joins[s.name] = join = f"{q}|join"
                d.nodes.append(Node(join, "join", group, join=True))
                for i, b in enumerate(s.branches, 1):
                    bid = f"{q}|{i}"
                    bf = b.flatten()
                    d.groups[group + (bid,)] = f"{_short(s.name)} branch {i}: {bf.name}"
                    level(bf, bid + ".", group + (bid,), False)
                    entry = f"{bid}.{bf.initial}"
                    d.edges.append(Edge(q, entry, "fork", "fork", origin=q))
                    d.edges.extend(Edge(f"{bid}.{f.name}", join, "join", "join", origin=f"{bid}.{f.name}")
                                   for f in bf.states.values() if f.final)
            for t in fg.transitions:
                out = fg.states[t.source].out
                kind = ("guarded" if t.guard is not None else
                        "fallback" if any(o.guard is not None for o in out) else "always")
                text = "" if (t.guard is None and t.label == "next") else edge_text(t)
                d.edges.append(Edge(joins.get(t.source, prefix + t.source), prefix + t.dest, text, kind,
                                    stop=top and fg.states[t.dest].final, origin=prefix + t.source, label=t.label))

        level(flat, "", (), True)
        return overlay(d, trace) if trace is not None else d

    def to_dot(self, trace: Trace = None) -> str:
        """Return the graph as DOT text (``fsmchat.graph.render.to_dot``).

        Args:
            trace: A ``RunResult`` (or trace list) to overlay: visited states, edge hit counts.
        """
        return to_dot(self, trace)

    def to_mermaid(self, trace: Trace = None) -> str:
        """Return the graph as Mermaid ``stateDiagram-v2`` text (``fsmchat.graph.render.to_mermaid``).

        Args:
            trace: A ``RunResult`` (or trace list) to overlay.
        """
        return to_mermaid(self, trace)

    def render(self, path: str, trace: Trace = None) -> str:
        """Write the graph to ``path`` in the format its suffix names (``fsmchat.graph.render.render``).

        Args:
            path: ``.svg``, ``.png``, ``.pdf`` (these need Graphviz), ``.dot``/``.gv`` or ``.mmd``.
            trace: A ``RunResult`` (or trace list) to overlay.

        Returns:
            The path written.
        """
        return render(self, path, trace)

    def to_svg(self, trace: Trace = None) -> str:
        """Return the graph as SVG text (needs Graphviz's ``dot``).

        Args:
            trace: A ``RunResult`` (or trace list) to overlay.
        """
        return to_svg(self, trace)

    def to_html(self, trace: Trace = None) -> str:
        """Return an HTML fragment: the SVG inline, or the Mermaid text when Graphviz is missing.

        Args:
            trace: A ``RunResult`` (or trace list) to overlay.
        """
        return to_html(self, trace)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        """Jupyter shows the graph as SVG (Mermaid text when Graphviz is missing)."""
        return {**mime_bundle(self), "text/plain": repr(self)}

    def __repr__(self) -> str:
        final = sum(s.final for s in self.states.values())
        return (f"StateGraph({self.name!r}, {len(self.states)} states ({final} final), "
                f"{len(self.transitions)} transitions, initial {self.initial if self.states else None!r})")


def edge_text(t: Transition) -> str:
    """A transition's label as drawn: ``[guard]``, ``label [guard]``, or the plain label."""
    g = t.guard_name
    if g is None:
        return t.label
    return f"[{g}]" if t.label == g else f"{t.label} [{g}]"


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def branch_graph(graph: StateGraph, branch: str) -> FlatGraph:
    """The flattened graph a branch run (``"par|1"``, ``"each|1[0]"``, ``"par|1.inner|2"``) runs."""
    flat = graph.flatten()
    rest = branch
    while rest:
        head, sep, rest = rest.partition("|")
        index, _, rest = rest.partition(".")
        if sep != "|" or not index:
            raise GraphError(f"graph {graph.name!r}: {branch!r} is not a branch id (fork|n or fork|n[item])")
        n = int(index.partition("[")[0])
        state = flat.states.get(head)
        if state is None or not 1 <= n <= len(state.branches):
            raise GraphError(f"graph {graph.name!r}: {branch!r} names no branch of a fork state")
        flat = state.branches[n - 1].flatten()
    return flat
