"""Interrupts compiled into the graph: ``interrupt_before=[states]`` / ``interrupt_after=[states]``
insert a drawn wait state before (after) each named state, in the graph level that holds it
(qualified names reach nested states: ``loop.body.review``). The run stops in a wait state until a
person answers; the wait state's outgoing edges then route on the answer, so the diagram shows
where a person is asked and what each answer does. Patterns and flows supply the wait state's
action and exits (``WaitPoint``); this module only rewires the graph and checks the names.
"""
from __future__ import annotations

import difflib
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from ..engine import mark_replayable
from ..errors import ConfigError, bad_value
from ..graph.state_graph import Guard, StateGraph, Transition, state_names
from ..models import StopReason
from ..speakers.human import USER, Input, Reject, Say, request
from .context import ChatContext
from .run_context import RunContext

C = TypeVar("C")

TARGET = "<target>"  # in WaitPoint.exits: the interrupted state (before) / its old exits (after)


@dataclass
class WaitPoint:
    """A wait state's work: ``action(ctx)`` asks (or applies the answer), then ``exits`` are tried in
    order: ``(dest, guard, label)``; ``dest`` may be ``TARGET`` (the interrupted state, for ``before``),
    ``"<final>"`` (the level's final state) or a state name. For ``after``, the interrupted state's
    own exits follow."""

    action: Callable[[Any], object]  # a function of the context of whichever pattern or flow holds the point
    exits: list[tuple[str, Guard[Any] | None, str]]
    description: str


PointFor = Callable[[str, str, StateGraph], WaitPoint]  # (where: before|after, qualified name, level) -> point


def check_names(value: object, field: str, owner: str) -> tuple[str, ...]:
    """``interrupt_before``/``interrupt_after`` as a tuple of state names (None: none)."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) and x for x in items):
        raise bad_value(owner, field, value, "a list of state names (qualified for nested states, e.g. "
                        "'loop.body.review')", type_error=True)
    return tuple(dict.fromkeys(items))


def targets(graph: StateGraph) -> list[str]:
    """Every state an interrupt may name: the non-final states of every nested level (qualified), in
    declaration order. States inside a fork's branches are not among them: a
    branch runs as a child of its fork state, which cannot stop half-way."""
    out: list[str] = []

    def walk(g: StateGraph, prefix: str) -> None:
        for s in g.states.values():
            if s.final:
                continue
            out.append(prefix + s.name)
            if s.subgraph is not None:
                walk(s.subgraph, prefix + s.name + ".")
    walk(graph, "")
    return out


def level_of(graph: StateGraph, qualified: str) -> tuple[StateGraph, str]:
    g = graph
    *outer, local = qualified.split(".")
    for part in outer:
        sub = g.states[part].subgraph
        if sub is None:
            raise ConfigError(f"{qualified!r}: {part!r} is not a state with a nested graph")
        g = sub
    return g, local


def check_targets(graph: StateGraph, before: Sequence[str], after: Sequence[str], owner: str) -> None:
    """Refuse a name that is not an interruptible state, listing the valid ones."""
    valid = targets(graph)
    for field, names in (("interrupt_before", before), ("interrupt_after", after)):
        for n in names:
            if n not in valid:
                close = difflib.get_close_matches(n, valid, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"{owner}: {field}={list(names)!r} is invalid: {n!r} is not a state of its graph"
                                  f"{hint}; interruptible states (qualified when nested; final states and states "
                                  f"inside parallel branches cannot be): {', '.join(valid) or 'none'}")


def _final_of(g: StateGraph) -> str:
    return next(n for n, s in g.states.items() if s.final)


def _dest(g: StateGraph, dest: str, target: str) -> str:
    return target if dest == TARGET else _final_of(g) if dest == "<final>" else dest


def answered(action: Callable[[C], object]) -> Callable[[C], object]:
    """``action`` as a wait state's: once it returns (it had the person's answer), its step says it is
    replayable, so a durable run commits the answer together with the step after it (the answer
    and what it leads to land at once; a crash before that commit leaves the run waiting, and the
    answer is given again). A step that stops to wait, or posts, is committed at once anyway."""
    if inspect.iscoroutinefunction(action):
        async def async_wait(ctx: C) -> object:
            out = await action(ctx)
            mark_replayable()
            return out
        return functools.update_wrapper(async_wait, action)

    def wait(ctx: C) -> object:
        out = action(ctx)
        mark_replayable()
        return out
    return functools.update_wrapper(wait, action)


def insert_before(g: StateGraph, target: str, wait: str, point: WaitPoint) -> str:
    """A wait state ``wait`` that every edge into ``target`` (in level ``g``) now enters first."""
    wait = state_names([wait], g.states)[0]
    first = g.initial == target
    g.state(wait, answered(point.action), point.description, waits=True)
    if first:
        g.initial = wait
    g.transitions = [Transition(t.source, wait if t.dest == target else t.dest, t.guard, t.label, t.order)
                     for t in g.transitions]
    for dest, guard, label in point.exits:
        g.edge(wait, _dest(g, dest, target), guard, label)
    return wait


def insert_after(g: StateGraph, target: str, wait: str, point: WaitPoint) -> str:
    """A wait state ``wait`` between ``target`` and its exits: the point's exits are tried first (one
    whose guard the target already has, a flow step's ``[halted]``, is not repeated), then the
    target's own, so they route on the context as the person left it."""
    wait = state_names([wait], g.states)[0]
    g.state(wait, answered(point.action), point.description, waits=True)
    moved = [t for t in g.transitions if t.source == target]
    g.transitions = [t for t in g.transitions if t.source != target]
    g.edge(target, wait)
    for dest, guard, label in point.exits:
        if not any(t.guard is guard for t in moved):
            g.edge(wait, _dest(g, dest, target), guard, label)
    for t in moved:
        g.edge(wait, t.dest, t.guard, t.label)
    return wait


def add_interrupts(graph: StateGraph, before: Sequence[str], after: Sequence[str], point_for: PointFor,
                   owner: str) -> StateGraph:
    """Insert the wait states (in place) and return the graph; unknown names are refused first."""
    check_targets(graph, before, after, owner)
    for q in before:
        g, local = level_of(graph, q)
        insert_before(g, local, f"before_{local}", point_for("before", q, g))
    for q in after:
        g, local = level_of(graph, q)
        insert_after(g, local, f"after_{local}", point_for("after", q, g))
    return graph.changed()


# ---- the generic point of a conversation pattern (ChatContext) ----
def rejected(ctx: RunContext) -> bool:
    """the person rejected going on"""
    return bool(ctx.people.verdict == "reject")


def stop_state(g: StateGraph) -> str:
    """The level's final state a rejection ends the run in (``stopped``, reason "stopped"), made once."""
    for n, s in g.states.items():
        if s.final and s.reason == StopReason.STOPPED:
            return n
    name = state_names(["stopped"], g.states)[0]
    g.final(name, "stop: a person rejected going on", reason=StopReason.STOPPED)
    return name


def chat_point(where: str, qualified: str, g: StateGraph) -> WaitPoint:
    """A person approves going on before/after a state of a conversation pattern: ``Approve`` goes
    on, ``Say`` posts their message (as ``User``) and goes on, ``Reject`` stops the run ("stopped")."""
    short = qualified.rsplit(".", 1)[-1]
    allowed = {"approve": f"go on ({'run' if where == 'before' else 'leave'} {short})",
               "say": f"post your message (as {USER!r}), then go on",
               "reject": "stop the run here (stop reason 'stopped')"}

    def review(ctx: ChatContext) -> str:
        answer: Input = ctx.people.ask(request(where, f"{where} {qualified}: go on?", allowed,
                                        proposed={"next" if where == "before" else "done": qualified}))
        ctx.people.verdict = answer.kind
        if isinstance(answer, Say):
            ctx.post(USER, answer.text, by="person")
        elif isinstance(answer, Reject):
            ctx.events.append({"event": "rejected", "state": qualified, "reason": answer.reason})
        return answer.kind

    review.__name__ = f"ask_{where}_{qualified.replace('.', '_')}"
    exits: list[tuple[str, Guard[ChatContext] | None, str]] = [(stop_state(g), rejected, "rejected")]
    if where == "before":
        exits.append((TARGET, None, "approved"))
    return WaitPoint(review, exits, f"waits for a person: go on {where} {short}? (approve, say or reject)")
