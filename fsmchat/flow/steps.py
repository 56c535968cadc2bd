"""Workflow step kinds: ``Discussion`` and the combinators ``loop``, ``parallel``, ``route``,
``if_`` (``when``) and ``repeat``, each a ``Block`` that declares its kind and config form in its
class line and compiles itself (``compile``) into the flow's one graph; ``Task`` is the leaf step
(``fsmchat.flow.task``)."""
from __future__ import annotations

import copy
import re
from typing import Annotated, Any, Callable, ClassVar, Literal, Sequence, Union

from pydantic import Field

from ..checks import check_agents
from ..config import (REF, AgentSpec, AnyStep, CallableSpec, ConfigReader, ConfigSpec, ConfigWriter, HumanSpec,
                      jsonable, opt_ref)
from ..errors import ConfigError, bad_value
from ..graph.state_graph import StateGraph, state_names
from ..graph.turns import TurnOrder, add_turns
from ..models import StopReason
from ..speakers.agent import Agent
from ..speakers.human import Human
from ..speakers.tools import add_tool_loop
from ..statelog import AppendLog
from .compile import (UNKNOWN, Compiler, bound, bounded_exits, branch_reason, forked, halted, join_to, known_value,
                      may_write, named, run_task, split_into, task_calls)
from .context import FlowContext, compile_condition
from .pattern_step import as_step
from .task import Block, OnError, Task, TaskSpec, as_task, step_names

__all__ = ["Task", "as_task", "Block", "OnError", "Discussion", "Loop", "Parallel", "Route", "If", "Repeat", "loop",
           "parallel", "route", "if_", "when", "repeat", "ask_human"]

Step = AnyStep  # a flow step in a config: validated by its kind


def _steps(steps: Any, what: str) -> list[Any]:
    items = list(steps) if isinstance(steps, (list, tuple)) else [steps]
    if not items:
        raise ValueError(f"{what} needs at least one step")
    return [as_step(s) for s in items]  # a pattern wrapped; anything else type-checked now, before any call


_names = step_names


def _fn(f: Any) -> str:
    return getattr(f, "__name__", type(f).__name__)


# ---- Discussion: begin -> turn -> (turn | done); with until: begin -> turn -> check_until -> (turn | done)
class DiscussionSpec(ConfigSpec):
    owner: ClassVar[str] = "Discussion"
    kind: Literal["discussion"] = "discussion"
    agents: list[Annotated[Union[AgentSpec, CallableSpec, TaskSpec, HumanSpec], Field(discriminator="kind")]]
    rounds: int = 3
    until: Annotated[str | None, REF] = None
    select: Annotated[str | None, REF] = None
    name: str = "discussion"

    def build(self, r: ConfigReader) -> Discussion:
        return Discussion([a.build(r) for a in self.agents], rounds=self.rounds, name=self.name,
                          until=r.fn(self.until, f"Discussion {self.name!r} until"),
                          select=r.fn(self.select, f"Discussion {self.name!r} select"))


class Discussion(Block, kind="discussion", spec=DiscussionSpec):
    """A flow step where speakers take turns on one thread, compiled to ``begin -> turn -> (turn | done)``.

    Each round every speaker speaks once, in order, unless ``select`` chooses; ``until`` is checked
    after every turn (drawn as a ``check_until`` state).

    Args:
        agents: The speakers: agents, callables ``(turn) -> str``, ``Task``s or ``Human``s, each once.
        rounds: Full passes over the speakers (at most, with ``until``).
        until: ``until(ctx) -> bool``, checked after every turn; true ends the discussion.
        select: ``select(turn, ctx)`` returns the speaker of turn ``turn`` (one of ``agents``).
        name: The step's name (its states are ``<name>.turn``, ...).

    Raises:
        ValueError: No speakers, or ``rounds`` below 1.
        TypeError: ``until`` or ``select`` is not callable.
        ConfigError: A speaker is listed twice.

    Examples:
        >>> from fsmchat import AgentFlow, Discussion
        >>> def alice(turn):
        ...     return "Cats."
        >>> def bob(turn):
        ...     return "Dogs."
        >>> talk = Discussion([alice, bob], rounds=2)
        >>> talk
        Discussion('discussion', speakers=['alice', 'bob'], rounds=2)
        >>> result = AgentFlow(steps=[talk]).execute("Which pet?")
        >>> result.path
        ['discussion.begin', 'discussion.turn', 'discussion.turn', 'discussion.turn', 'discussion.turn', 'discussion.done', 'end']
        >>> [m.content for m in result.transcript]
        ['Cats.', 'Dogs.', 'Cats.', 'Dogs.']
    """

    def __init__(self, agents: Sequence[Any] | None = None, rounds: int = 3, until: Callable[[Any], bool] | None = None,
                 select: Callable[[int, Any], Any] | None = None, name: str = "discussion"):
        if not check_agents(agents, f"Discussion {name!r}"):
            raise ValueError("Discussion needs at least one speaker; an empty discussion would run zero turns "
                             "and report success.")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError("Discussion rounds must be >= 1.")
        if until is not None and not callable(until):
            raise TypeError(f"Discussion until must be a callable (ctx) -> bool, got {type(until).__name__}")
        if select is not None and not callable(select):
            raise TypeError(f"Discussion select must be a callable (turn, ctx) -> speaker, got {type(select).__name__}")
        self.agents = list(agents or [])
        self.tasks = [as_task(a) for a in self.agents]
        names = [t.name or "" for t in self.tasks]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"Discussion {name!r}: agents={names!r} is invalid: {twice[0]!r} is listed more than "
                              "once; each speaker takes its turns in order (use rounds= for more turns, or "
                              "select= to let one speaker talk more often)")
        self.rounds, self.until, self.select, self.name = rounds, until, select, name

    def _repr_fields(self) -> list[str]:
        return [f"speakers={_names(self.tasks)!r}", f"rounds={self.rounds}"] + \
            ([f"until={_fn(self.until)}"] if self.until is not None else []) + \
            ([f"select={_fn(self.select)}"] if self.select is not None else [])

    def task_for(self, speaker: Any) -> Task:
        """Return the step of one of this discussion's speakers (what ``select`` returned).

        Args:
            speaker: One of ``agents`` (or its ``Task``, or an agent of the same name).

        Raises:
            ValueError: ``speaker`` is not one of the discussion's speakers.
        """
        for a, t in zip(self.agents, self.tasks):
            if speaker is a or speaker is t:
                return t
        for t in self.tasks:  # a selector may return an equal-named agent copy
            if isinstance(speaker, (Agent, Task, Human)) and speaker.name == t.name:
                return t
        names = [t.name for t in self.tasks]
        raise ValueError(f"Discussion {self.name!r} select() returned {speaker!r}, which is not one of its "
                         f"speakers {names}")

    def to_spec(self, w: ConfigWriter) -> DiscussionSpec:
        """This step as its config form (a ``DiscussionSpec``; see ``Block.to_spec``)."""
        members = [a.to_spec(w) if isinstance(a, Task) else w.participant(a, f"Discussion {self.name!r} speaker")
                   for a in self.agents]
        return DiscussionSpec(agents=members, rounds=self.rounds, name=self.name,
                              until=opt_ref(self.until, f"Discussion {self.name!r} until"),
                              select=opt_ref(self.select, f"Discussion {self.name!r} select"))

    def children(self) -> list[Any]:
        """The steps this block holds, in declaration order."""
        return []

    def own_tasks(self) -> list[Task]:
        """The tasks this block runs itself (not those of the steps it holds)."""
        return list(self.tasks)

    def writes(self, var: str) -> bool:
        """Whether this block itself sets variable ``var`` (its own output variables)."""
        return var == "discussion_transcript"

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, Any]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        per_turn = [task_calls(t, requests) for t in self.tasks]
        # a selector may pick the costliest speaker on every one of the rounds x speakers turns
        return self.rounds * (len(per_turn) * max(per_turn) if self.select is not None else sum(per_turn))

    def compile(self, c: Compiler, g: StateGraph, state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        g.subgraph(state, self.graph(c), f"Discussion: {self.rounds} round(s) of "
                                         f"{', '.join(t.name or '' for t in self.tasks)}")

    def graph(self, c: Compiler) -> StateGraph:
        """This discussion's subgraph: ``begin -> turn -> (turn | done)``, ``check_until`` with ``until``."""
        d = self
        key, order = c.key(), TurnOrder(len(d.tasks), d.rounds)

        def begin(ctx: FlowContext) -> None:
            """start a fresh transcript"""
            ctx.frames[key] = {"t": 0, "lines": AppendLog(), "topic": ctx.previous_result if ctx.previous_result
                               is not None else ctx.input}
            ctx.join_lines("discussion_transcript", key)

        async def turn(ctx: FlowContext) -> str:
            """the scheduled speaker talks"""
            f = ctx.frames[key]
            t = f["t"]
            task = d.task_for(d.select(t, ctx)) if d.select is not None else d.tasks[order.speaker(t)]
            prompt = None
            if task.agent is not None or task.person is not None:
                topic = ctx.render(task.action) if task.action is not None else f["topic"]
                prompt = discussion_prompt(task.name or "", topic, f["lines"], ctx.previous_result)
            status, out = await run_task(task, ctx, prompt, record_as=task.name)
            f["t"] = t + 1
            if status in ("completed", "stopped"):
                line = f"{task.name}: {out}"
                lines = f["lines"]
                if type(lines) is not AppendLog:  # restored from a checkpoint as a plain list
                    lines = f["lines"] = AppendLog(lines)
                lines.append(line)
                ctx.join_lines("discussion_transcript", key, line)
            return f"{task.name}: {status}"

        def check_until(ctx: FlowContext) -> bool | None:
            """until(ctx) after every turn"""
            if ctx.halted:
                ctx.frames[key]["met"] = False
                return None
            assert d.until is not None
            try:
                met = bool(d.until(ctx))
            except Exception as exc:
                raise ValueError(f"Discussion until() raised {type(exc).__name__}: {exc}. It is checked after "
                                 "every turn, so a failing condition would run the full round budget.") from exc
            ctx.frames[key]["met"] = met
            return met

        def turns_left(ctx: FlowContext) -> bool:
            return order.left(ctx.frames[key]["t"])

        named(turns_left, "turns_left", f"fewer than {d.rounds} x {order.n} turns")
        g = StateGraph(d.name, description=f"Discussion {d.name}")
        people = [t.person.name for t in d.tasks if t.person is not None]
        g.state("begin", begin)
        g.state("turn", turn, "the scheduled speaker talks" + (f" (waits for {', '.join(people)}: a person's "
                                                                "turn takes their message)" if people else ""),
                waits=bool(people))
        g.edge("begin", "turn")
        if d.until is not None:
            g.state("check_until", check_until, pure=True)  # committed with the next turn: one commit per turn
        g.final("done")
        add_tool_loop(g, "turn", [t.agent for t in d.tasks if t.agent is not None])
        return add_turns(g, [("turn", "check_until") if d.until is not None else "turn"],
                         exits=bounded_exits(key, until=d.until is not None), more=turns_left,
                         exhausted=("done", StopReason.ROUNDS))


def discussion_prompt(name: str, topic: Any, lines: list[str], previous: Any) -> str:
    """What an agent speaker is asked on its Discussion turn."""
    parts = [str(topic) if topic is not None else ""]
    if lines:
        parts.append("Discussion so far:\n" + "\n".join(lines))
    parts.append(f"You are {name}. " + ("Respond to the latest turn and move the discussion forward."
                                         if lines else "Open the discussion."))
    return "\n\n".join(p for p in parts if p)


# ---- loop: begin -> next -> (body -> next | done); parallel: a fork with one child run per item
class LoopSpec(ConfigSpec):
    kind: Literal["loop"] = "loop"
    steps: list[Step]
    over: str | list[Any] = "items"  # a variable's name, or a literal list
    var_name: str = "item"
    parallel: bool = False
    name: str = "loop"
    max_items: int | None = Field(default=None, ge=0)

    def build(self, r: ConfigReader) -> Loop:
        return loop(steps=r.steps(self.steps), over=self.over, var_name=self.var_name, parallel=self.parallel,
                    name=self.name, max_items=self.max_items)


class Loop(Block, kind="loop", spec=LoopSpec):
    def __init__(self, steps: Any, over: str | Sequence[Any] = "items", var_name: str = "item", parallel: bool = False,
                 name: str = "loop", max_items: int | None = None):
        if isinstance(over, (list, tuple)):
            over = list(over)  # a literal list, fixed when the flow is built
        elif not isinstance(over, str) or not over:
            raise ValueError(f"loop over= must name a variable holding a list, or be a list, got {over!r}")
        if not isinstance(var_name, str) or not var_name.isidentifier():
            raise bad_value("loop", "var_name", var_name, "a variable name such as 'item' (set to each item, "
                            "read as {{item}})", type_error=not isinstance(var_name, str))
        if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 0):
            raise bad_value("loop", "max_items", max_items, "an int >= 0: the most items the loop accepts (a longer "
                            "list is refused when the loop starts); it bounds max_calls()",
                            type_error=not isinstance(max_items, int))
        self.steps, self.over, self.var_name = _steps(steps, "loop"), over, var_name
        self.parallel, self.name, self.max_items = bool(parallel), name, max_items

    def _repr_fields(self) -> list[str]:
        return [f"over={self.over!r}", *super()._repr_fields()] + (["parallel=True"] if self.parallel else []) + \
            ([f"max_items={self.max_items}"] if self.max_items is not None else [])

    @property
    def forks(self) -> bool:  # type: ignore[override]  # Block's class attribute, computed for a loop
        return self.parallel

    def to_spec(self, w: ConfigWriter) -> LoopSpec:
        """This step as its config form (a ``LoopSpec``; see ``Block.to_spec``)."""
        over = self.over if isinstance(self.over, str) else jsonable(self.over, f"loop {self.name!r} over")
        return LoopSpec(steps=w.steps(self.steps), over=over, var_name=self.var_name, parallel=self.parallel,
                        name=self.name, max_items=self.max_items)

    def writes(self, var: str) -> bool:
        """Whether this block itself sets variable ``var`` (its own output variables)."""
        return var in (self.var_name, "loop_index", "loop_outputs")

    def check_run(self, variables: dict[str, Any]) -> None:
        """Refuse a run whose declared ``variables`` this block cannot use (before any call)."""
        if not isinstance(self.over, str):
            return  # a literal list
        items = variables.get(self.over)
        if items is not None and not isinstance(items, (list, tuple)):
            raise ConfigError(f"AgentFlow: loop over={self.over!r} is invalid: expected a list, the variable "
                              f"holds a {type(items).__name__} (for a dict, loop over list(d.items()) or "
                              "list(d))")

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, Any]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        if isinstance(self.over, list):
            if may_write(self.steps, self.var_name):
                drop = {k: v for k, v in known.items() if k != self.var_name}
                return sum(bound(self.steps, items, requests, drop) for _ in self.over)
            return sum(bound(self.steps, items, requests, {**known, self.var_name: x}) for x in self.over)
        n = items.get(self.over, self.max_items)
        if n is None:
            raise ValueError(f"max_calls: loop {self.name!r} iterates over {self.over!r}, a list only known when it "
                             f"runs; declare loop(..., max_items=N) (a longer list is then refused when the "
                             f"loop starts) or give its length: max_calls({self.over}=N)")
        return n * bound(self.steps, items, requests, known)

    def compile(self, c: Compiler, g: StateGraph, state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        if self.parallel:
            body = c.sequence(self.steps, f"{state}_body", reason=branch_reason)
            g.fork(state, [body], *self.fork_parts(), f"each {self.var_name} in {over_text(self)}, concurrently")
        else:
            g.subgraph(state, self.graph(c), f"each {self.var_name} in {over_text(self)}")

    def graph(self, c: Compiler) -> StateGraph:
        lp = self
        key = c.key()

        def begin(ctx: FlowContext) -> int:
            """read the list to iterate"""
            items = loop_items(ctx, lp)
            ctx.frames[key] = {"i": -1, "items": items}
            return len(items)

        def next_item(ctx: FlowContext) -> Any:
            """set item and loop_index"""
            f = ctx.frames[key]
            f["i"] += 1
            if f["i"] < len(f["items"]):
                ctx.variables[lp.var_name] = f["items"][f["i"]]
                ctx.variables["loop_index"] = f["i"]
                return f["i"]
            return None

        def has_item(ctx: FlowContext) -> bool:
            """items left"""
            f = ctx.frames[key]
            return bool(f["i"] < len(f["items"]))

        def end(ctx: FlowContext) -> None:
            """unset item and loop_index (they are scoped to the loop)"""
            ctx.variables.pop(lp.var_name, None)
            ctx.variables.pop("loop_index", None)

        g = StateGraph(lp.name, description=f"loop over {over_text(lp)}")
        g.state("begin", begin).state("next", next_item)
        g.subgraph("body", c.sequence(lp.steps, "body"), "")
        g.state("end", end)
        g.final("done")
        g.edge("begin", "next")
        g.edge("next", "body", when=has_item)
        g.edge("next", "end", label="exhausted")
        g.edge("body", "end", when=halted, label="halt")
        g.edge("body", "next")
        g.edge("end", "done")
        return g

    def fork_parts(self) -> tuple[Callable[[FlowContext], Any], Callable[..., Any]]:
        lp = self

        def split_items(ctx: FlowContext) -> list[tuple[int, FlowContext, int]]:
            """one child run of the body per item, with item and loop_index set"""
            children = []
            for i, item in enumerate(loop_items(ctx, lp)):
                child = ctx.child()
                child.variables[lp.var_name], child.variables["loop_index"] = item, i
                children.append((0, forked(child), i))
            return children

        join = join_to("loop_outputs", unset=(lp.var_name, "loop_index"))
        return split_items, join


def over_text(lp: Loop) -> str:
    """How a loop's list is named in the diagram: the variable, a short literal list of plain
    values as written, or a literal list's length."""
    if isinstance(lp.over, str):
        return lp.over
    shown = repr(lp.over)
    plain = all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in lp.over)
    return shown if plain and len(shown) <= 60 else f"a list of {len(lp.over)}"


def loop_items(ctx: FlowContext, lp: Loop) -> list[Any]:
    """The items a loop iterates this run (refused when not a list, or over its ``max_items``)."""
    over = lp.over
    if isinstance(over, list):
        return copy.deepcopy(over)  # a literal list: the same items every run
    try:
        items = ctx.lookup(over)
    except KeyError:
        raise ValueError(f"loop over={over!r}: no such variable; variables are {sorted(ctx.variables)}") from None
    if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
        raise ValueError(f"loop over={over!r}: expected a list, got {type(items).__name__}"
                         + (" (loop over list(d.items()) or list(d) instead)" if isinstance(items, dict) else ""))
    items = list(items)
    cap = lp.max_items
    if cap is not None and len(items) > cap:
        raise ValueError(f"loop {lp.name!r}: {over!r} holds {len(items)} items, over its max_items={cap} "
                         "(the bound max_calls() promised)")
    return items


# ---- parallel: a fork state, one child run per step, joined in declaration order
class ParallelSpec(ConfigSpec):
    kind: Literal["parallel"] = "parallel"
    steps: list[Step]
    name: str = "parallel"
    max_concurrency: int | None = Field(default=None, ge=1)

    def build(self, r: ConfigReader) -> Parallel:
        return parallel(r.steps(self.steps), name=self.name, max_concurrency=self.max_concurrency)


class Parallel(Block, kind="parallel", spec=ParallelSpec):
    forks = True

    def __init__(self, steps: Sequence[Any], name: str = "parallel", max_concurrency: int | None = None):
        if max_concurrency is not None and (isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int)
                                            or max_concurrency < 1):
            raise bad_value("parallel", "max_concurrency", max_concurrency, "an int >= 1, the most branches "
                            "running at once (1: one after another, in order), or None for all",
                            type_error=not isinstance(max_concurrency, int))
        self.steps, self.name = _steps(list(steps), "parallel"), name
        self.max_concurrency = max_concurrency

    def to_spec(self, w: ConfigWriter) -> ParallelSpec:
        """This step as its config form (a ``ParallelSpec``; see ``Block.to_spec``)."""
        return ParallelSpec(steps=w.steps(self.steps), name=self.name, max_concurrency=self.max_concurrency)

    def writes(self, var: str) -> bool:
        """Whether this block itself sets variable ``var`` (its own output variables)."""
        return var == "parallel_outputs"

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, Any]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        return sum(bound([x], items, requests, known) for x in self.steps)

    def compile(self, c: Compiler, g: StateGraph, state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        branches = [c.sequence([s], f"{state}_{i + 1}", reason=branch_reason) for i, s in enumerate(self.steps)]
        limit = self.max_concurrency
        how = "concurrently" if limit is None or limit >= len(branches) else \
            "one after another" if limit == 1 else f"at most {limit} at once"
        g.fork(state, branches, split_into(len(branches)), join_to("parallel_outputs"),
               f"{len(branches)} branches {how}", max_concurrency=limit)


# ---- route: decide -> (route_<key> | default | done)
class RouteSpec(ConfigSpec):
    kind: Literal["route"] = "route"
    routes: dict[str, list[Step]]
    default: list[Step] = Field(default_factory=list)
    name: str = "route"
    on: str | None = None

    def build(self, r: ConfigReader) -> Route:
        return route({k: r.steps(v) for k, v in self.routes.items()}, default=r.steps(self.default) or None,
                     name=self.name, on=self.on)


class Route(Block, kind="route", spec=RouteSpec):
    def __init__(self, routes: dict[str, Any], default: Any = None, name: str = "route", on: str | None = None):
        if not isinstance(routes, dict) or not routes:
            raise ValueError("route needs routes={'key': [steps], ...} with at least one key")
        for k in routes:
            if not isinstance(k, str) or not k.strip():
                raise bad_value("route", "routes key", k, "a non-empty string, matched as a whole word in the "
                                "previous output", type_error=not isinstance(k, str))
        if on is not None and (not isinstance(on, str) or not all(p.isidentifier() for p in on.split("."))):
            raise bad_value("route", "on", on, "a variable name such as 'phase' (or 'phase.name'), whose value is "
                            "compared exactly with the keys", type_error=not isinstance(on, str))
        self.routes = {k: _steps(v, f"route {k!r}") for k, v in routes.items()}
        self.default = _steps(default, "route default") if default else []
        self.name, self.on = name, on

    def _repr_fields(self) -> list[str]:
        return [f"routes={list(self.routes)!r}"] + ([f"default={_names(self.default)!r}"] if self.default else [])

    def says(self, key: str, text: Any) -> bool:
        """Whether ``key`` appears as a whole word in ``text`` (case-insensitive)."""
        return re.search(rf"\b{re.escape(key)}\b", str(text or ""), re.IGNORECASE) is not None

    def value(self, ctx: Any) -> Any:
        """What the route looks at: the variable ``on`` (None when unset), else the previous output."""
        if self.on is None:
            return ctx.previous_result
        try:
            return ctx.lookup(self.on)
        except KeyError:
            return None

    def matches(self, key: str, value: Any) -> bool:
        """With ``on``: the value equals ``key`` exactly (case-sensitive); else ``key`` is said in it."""
        return (value is not None and str(value) == key) if self.on is not None else self.says(key, value)

    def decide(self, ctx: Any) -> str | None:
        """match a key in the previous output (or, with on=, equal to that variable)"""
        value = self.value(ctx)
        key = next((k for k in self.routes if self.matches(k, value)), None)
        if key is None:
            seen = {"value": str(value)[:200], "on": self.on} if self.on is not None else \
                {"previous_output": str(value)[:200]}
            ctx.events.append({"event": "route_no_match", "route": self.name, "keys": list(self.routes),
                               "default": bool(self.default), **seen,
                               "note": "no key matched; " + ("the default steps run" if self.default else
                                                             "no default, so the route runs no step")})
        return key

    def to_spec(self, w: ConfigWriter) -> RouteSpec:
        """This step as its config form (a ``RouteSpec``; see ``Block.to_spec``)."""
        return RouteSpec(routes={k: w.steps(v) for k, v in self.routes.items()}, default=w.steps(self.default),
                         name=self.name, on=self.on)

    def children(self) -> list[Any]:
        """The steps this block holds, in declaration order."""
        return [x for v in self.routes.values() for x in v] + self.default

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, Any]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        value = known_value(known, self.on) if self.on is not None else UNKNOWN
        if value is not UNKNOWN:  # the variable is known (a loop over a literal list): only its branch counts
            key = next((k for k in self.routes if self.matches(k, value)), None)
            return bound(self.routes[key] if key is not None else self.default, items, requests, known)
        return max([bound(v, items, requests, known) for v in self.routes.values()]
                   + [bound(self.default, items, requests, known)])

    def compile(self, c: Compiler, g: StateGraph, state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        g.subgraph(state, self.graph(c), "first key said in the previous output" if self.on is None
                   else f"the key equal to {self.on}")

    def graph(self, c: Compiler) -> StateGraph:
        r = self
        g = StateGraph(r.name, description="route")
        g.state("decide", r.decide, "match a key in the previous output" if r.on is None else f"look up {r.on}")
        states = list(zip(r.routes, state_names(list(r.routes), reserved=["decide", "default", "done"],
                                                 prefix="to_", fallback="route")))
        for k, st in states:
            g.subgraph(st, c.sequence(r.routes[k], st), f"route {k!r}")
        if r.default:
            g.subgraph("default", c.sequence(r.default, "default"), "no key matched")
        g.final("done")
        for k, st in states:
            def matches(ctx: FlowContext, k: str = k) -> bool:
                return r.matches(k, r.value(ctx))

            key = st.removeprefix("to_")  # the key as its state names it: distinct keys, distinct labels
            g.edge("decide", st, when=named(matches, f"says_{key}" if r.on is None else f"{r.on}_is_{key}",
                                            f"previous output says {k!r}" if r.on is None else f"{r.on} == {k!r}"))
        g.edge("decide", "default" if r.default else "done", label="no_match")
        for _, st in states:
            g.edge(st, "done")
        if r.default:
            g.edge("default", "done")
        return g


# ---- if_: check -> (then | else | done)
class IfSpec(ConfigSpec):
    """``condition`` is an import path, ``expression`` a condition string such as ``"{{x}} > 1"``."""

    owner: ClassVar[str] = "if_"
    kind: Literal["if"] = "if"
    condition: Annotated[str | None, REF] = None
    expression: str | None = None
    then_steps: list[Step]
    else_steps: list[Step] = Field(default_factory=list)
    name: str = "if"

    def build(self, r: ConfigReader) -> If:
        cond = self.expression if self.expression is not None else \
            r.trust.callable(self.condition or "", f"if_ {self.name!r} condition")
        return if_(cond, r.steps(self.then_steps), r.steps(self.else_steps) or None, name=self.name)


class If(Block, kind="if", spec=IfSpec):
    def __init__(self, condition: Any, then_steps: Any, else_steps: Any = None, name: str = "if"):
        self.condition = compile_condition(condition, "if_ condition")
        self.then_steps = _steps(then_steps, "if_ then_steps")
        self.else_steps = _steps(else_steps, "if_ else_steps") if else_steps else []
        self.name = name

    def _repr_fields(self) -> list[str]:
        return [f"condition={_fn(self.condition)}", f"then={_names(self.then_steps)!r}"] + \
            ([f"else={_names(self.else_steps)!r}"] if self.else_steps else [])

    def to_spec(self, w: ConfigWriter) -> IfSpec:
        """This step as its config form (a ``IfSpec``; see ``Block.to_spec``)."""
        cond, expr = w.condition(self.condition, f"if_ {self.name!r} condition")
        return IfSpec(condition=cond, expression=expr, then_steps=w.steps(self.then_steps),
                      else_steps=w.steps(self.else_steps), name=self.name)

    def children(self) -> list[Any]:
        """The steps this block holds, in declaration order."""
        return self.then_steps + self.else_steps

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, Any]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        return max(bound(self.then_steps, items, requests, known), bound(self.else_steps, items, requests, known))

    def compile(self, c: Compiler, g: StateGraph, state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        g.subgraph(state, self.graph(c), f"if {self.condition.__doc__ or self.condition.__name__}")

    def graph(self, c: Compiler) -> StateGraph:
        g = StateGraph(self.name, description="if")
        g.state("check", None, self.condition.__doc__ or self.condition.__name__)
        g.subgraph("then", c.sequence(self.then_steps, "then"), "")
        if self.else_steps:
            g.subgraph("else", c.sequence(self.else_steps, "else"), "")
        g.final("done")
        g.edge("check", "then", when=self.condition)
        g.edge("check", "else" if self.else_steps else "done", label="otherwise")
        g.edge("then", "done")
        if self.else_steps:
            g.edge("else", "done")
        return g


# ---- repeat: begin -> body -> check -> (body | done)
class RepeatSpec(ConfigSpec):
    owner: ClassVar[str] = "repeat"
    kind: Literal["repeat"] = "repeat"
    steps: list[Step]
    until: Annotated[str | None, REF] = None
    until_expression: str | None = None
    max_iterations: int = 10
    name: str = "repeat"

    def build(self, r: ConfigReader) -> Repeat:
        until = self.until_expression if self.until_expression is not None else \
            r.fn(self.until, f"repeat {self.name!r} until")
        return repeat(r.steps(self.steps), until=until, max_iterations=self.max_iterations, name=self.name)


class Repeat(Block, kind="repeat", spec=RepeatSpec):
    def __init__(self, step: Any, until: Any = None, max_iterations: int = 10, name: str = "repeat"):
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError(f"repeat max_iterations must be an int >= 1, got {max_iterations!r}")
        self.steps = _steps(step, "repeat")
        self.until = compile_condition(until, "repeat until") if until is not None else None
        self.max_iterations, self.name = max_iterations, name

    def _repr_fields(self) -> list[str]:
        return [*super()._repr_fields(), f"max_iterations={self.max_iterations}"] + \
            ([f"until={_fn(self.until)}"] if self.until is not None else [])

    def to_spec(self, w: ConfigWriter) -> RepeatSpec:
        """This step as its config form (a ``RepeatSpec``; see ``Block.to_spec``)."""
        until, expr = w.condition(self.until, f"repeat {self.name!r} until") if self.until is not None \
            else (None, None)
        return RepeatSpec(steps=w.steps(self.steps), until=until, until_expression=expr,
                          max_iterations=self.max_iterations, name=self.name)

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, Any]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        return self.max_iterations * bound(self.steps, items, requests, known)

    def compile(self, c: Compiler, g: StateGraph, state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        g.subgraph(state, self.graph(c), f"until {getattr(self.until, '__name__', 'max')}, "
                                         f"at most {self.max_iterations}x")

    def graph(self, c: Compiler) -> StateGraph:
        rp = self
        key = c.key()

        def begin(ctx: FlowContext) -> None:
            """reset the iteration count"""
            ctx.frames[key] = {"n": 0, "met": False}

        def check(ctx: FlowContext) -> int:
            """count a pass, evaluate until"""
            f = ctx.frames[key]
            f["n"] += 1
            f["met"] = bool(rp.until(ctx)) if rp.until is not None and not ctx.halted else False
            return int(f["n"])

        def iterations_left(ctx: FlowContext) -> bool:
            return bool(ctx.frames[key]["n"] < rp.max_iterations)

        named(iterations_left, "iterations_left", f"fewer than {rp.max_iterations} passes")
        g = StateGraph(rp.name, description="repeat")
        g.state("begin", begin)
        g.subgraph("body", c.sequence(rp.steps, "body"), "")
        g.state("check", check)
        g.final("done")
        g.edge("begin", "body")
        return add_turns(g, [("body", "check")], exits=bounded_exits(key, until=rp.until is not None),
                         more=iterations_left, exhausted=("done", "max_iterations"))


def loop(step: Any = None, over: str | Sequence[Any] = "items", var_name: str = "item", parallel: bool = False,
         steps: Any = None, name: str = "loop", max_items: int | None = None) -> Loop:
    """Run the body once per item of a list, with the item in a variable.

    ``var_name`` and ``loop_index`` are set on each pass and unset after the loop.

    Args:
        step: The body: a step or a list of steps.
        over: The variable holding the list, or the list itself (fixed when the flow is built,
            e.g. ``list(range(1, R + 1))`` for numbered rounds): ``max_calls()`` then counts each
            pass with its item known, so a ``route(on=var_name)`` in the body costs only its branch.
        var_name: The variable each item is set in.
        parallel: Run the passes concurrently, as branch runs on copies of the variables.
        steps: The body, when given by this name instead of ``step``.
        name: The step's name.
        max_items: The most items the loop accepts (a longer list is refused when the loop starts),
            so ``max_calls()`` can be computed without knowing the list.

    Returns:
        The loop step.

    Raises:
        ValueError: ``over`` is neither a variable name nor a list, or the body is empty.
        ConfigError: A bad ``var_name`` or ``max_items``.

    Examples:
        >>> from fsmchat import AgentFlow, loop
        >>> def draft(ctx):
        ...     return f"a draft on {ctx.variables['item']}"
        >>> flow = AgentFlow(steps=[loop(draft, over="topics")], variables={"topics": ["cats", "dogs"]})
        >>> [s["output"] for s in flow.run("Write.")["steps"]]
        ['a draft on cats', 'a draft on dogs']
    """
    return Loop(steps if steps is not None else step, over, var_name, parallel, name, max_items)


def parallel(steps: Sequence[Any], name: str = "parallel", max_concurrency: int | None = None) -> Parallel:
    """Run steps concurrently, as branch runs on copies of the variables.

    Their writes are merged in declaration order and their outputs collected in the list variable
    ``parallel_outputs``; the step's output is the outputs joined by blank lines.

    Args:
        steps: The branches, one step each.
        name: The step's name (branch states are traced as ``<name>|<n>.<state>``).
        max_concurrency: The most branches running at once (None: all); they start in declaration
            order, so 1 is a sequential fan-out with a fixed call order (each branch still sees
            the variables as they were at the fork).

    Returns:
        The parallel step.

    Raises:
        ValueError: No steps.
        ConfigError: A bad ``max_concurrency``.

    Examples:
        >>> from fsmchat import AgentFlow, parallel
        >>> def pro(ctx):
        ...     return "yes"
        >>> def con(ctx):
        ...     return "no"
        >>> AgentFlow(steps=[parallel([pro, con])]).run("Ship it?")["variables"]
        {'parallel_outputs': ['yes', 'no']}
    """
    return Parallel(steps, name, max_concurrency)


def route(routes: dict[str, Any], default: Any = None, name: str = "route", on: str | None = None) -> Route:
    """Run the steps of the first route whose key matches; no match runs ``default`` (or nothing).

    A key matches when it appears as a whole word in the previous output (case-insensitive), or,
    with ``on``, when it equals that variable's value exactly.

    Args:
        routes: Key -> the steps to run.
        default: The steps to run when no key matches.
        name: The step's name.
        on: A variable to compare the keys with, exactly (case-sensitive; a dotted name reads into
            a dict, ``on="phase.name"``).

    Returns:
        The route step.

    Raises:
        ValueError: No routes.
        ConfigError: An empty key, or a bad ``on``.

    Examples:
        >>> from fsmchat import AgentFlow, route
        >>> def triage(ctx):
        ...     return "this is a bug report"
        >>> def fix(ctx):
        ...     return "fixing it"
        >>> def thank(ctx):
        ...     return "thanks"
        >>> AgentFlow(steps=[triage, route({"bug": [fix], "question": [thank]})]).run("Crash on save")["output"]
        'fixing it'
    """
    return Route(routes, default, name, on)


def if_(condition: Any, then_steps: Any, else_steps: Any = None, name: str = "if") -> If:
    """Run ``then_steps`` when the condition holds, else ``else_steps``; ``when`` is the same function.

    Args:
        condition: ``condition(ctx) -> bool``, or an expression such as ``"{{score}} >= 70"``.
        then_steps: The steps to run when it holds.
        else_steps: The steps to run otherwise (none when None).
        name: The step's name.

    Returns:
        The step.

    Raises:
        ConfigError: The condition is neither callable nor a valid expression.

    Examples:
        >>> from fsmchat import AgentFlow, if_
        >>> def publish(ctx):
        ...     return "published"
        >>> def revise(ctx):
        ...     return "back to the author"
        >>> AgentFlow(steps=[if_("{{score}} >= 70", [publish], [revise])], variables={"score": 80}).run("go")["output"]
        'published'
    """
    return If(condition, then_steps, else_steps, name)


when = if_


def repeat(step: Any, until: Any = None, max_iterations: int = 10, name: str = "repeat") -> Repeat:
    """Run ``step`` until ``until`` holds, checked after each pass, at most ``max_iterations`` times.

    Args:
        step: The body: a step or a list of steps.
        until: ``until(ctx) -> bool`` or an expression; None runs ``max_iterations`` passes.
        max_iterations: The most passes.
        name: The step's name.

    Returns:
        The repeat step.

    Raises:
        ValueError: ``max_iterations`` is not an int >= 1.

    Examples:
        >>> from fsmchat import AgentFlow, repeat
        >>> def polish(ctx):
        ...     ctx.variables["passes"] = ctx.variables.get("passes", 0) + 1
        ...     return f"pass {ctx.variables['passes']}"
        >>> def good_enough(ctx):
        ...     return ctx.variables["passes"] >= 3
        >>> AgentFlow(steps=[repeat(polish, until=good_enough, max_iterations=5)]).run("go")["output"]
        'pass 3'
    """
    return Repeat(step, until, max_iterations, name)


def ask_human(prompt: str, save_as: str | None = None, *, name: str = "ask_human", person: str = "User",
              post: bool = False) -> Task:
    """Return a step that asks a person a question and stops the run until they answer.

    The flow needs a checkpoint; it goes on with ``resume(run_id, checkpoint, input="answer")``.
    The answer is the step's output (the next previous output); ``Reject(reason)`` stops the flow
    instead (status ``"stopped"``).

    Args:
        prompt: The question (``{{var}}`` templating).
        save_as: Also store the answer in this variable.
        name: The step's name (and the answer's role when posted).
        person: Who is asked (shown in ``result.pending``).
        post: Post the answer to the flow's transcript.

    Raises:
        ConfigError: An empty prompt.

    Examples:
        >>> from fsmchat import AgentFlow, MemoryCheckpointer, ask_human
        >>> flow, store = AgentFlow(steps=[ask_human("Which topic?", save_as="topic")]), MemoryCheckpointer()
        >>> result = flow.execute("Plan the talk.", checkpoint=store, run_id="talk")
        >>> result.output["status"], result.pending.prompt
        ('waiting', 'Which topic?')
        >>> flow.resume("talk", store, input="cats").output["variables"]
        {'topic': 'cats'}
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise bad_value("ask_human", "prompt", prompt, "the question for the person, a non-empty string",
                        type_error=not isinstance(prompt, str))
    return Task(person=Human(person), name=name, action=prompt, save_as=save_as, post=post)
