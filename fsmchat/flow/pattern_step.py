"""A pattern run as a flow step: ``AgentFlow(steps=[GroupChat(agents=[...]), summarizer])``.

The pattern's own graph is nested in the flow's graph, as a Discussion's is: its states are the
step's (``group_chat.bid``), drawn as a cluster, traced, checkpointed and checked like any other,
between a ``begin`` state and a ``done`` final state. Its final states become states of their own
where the pattern's output becomes the step's (``group_chat.stop -> group_chat.done``).

What it runs on, decided once:

- **The task** is the previous step's output, or the flow's input when the pattern is the first step.
- **Its own conversation.** The pattern runs on its own context (``pattern._context(task)``), so its
  rules hold exactly as in a run of its own (GroupChat's ``max_loops`` counts its messages, the task
  first). Every message it posts is also posted to the flow's transcript, except its task (message
  1: the previous output is there already). Its calls, usage, budget and deadline are the flow's
  (one ``CallStats``), so are its events and the answers of people in the loop.
- **Its output** (per the pattern's ``output_type``; a list or dict as JSON text) is the step's
  output: the next step's previous output and the step's record, which also holds the pattern's
  stop reason (``{"name": "group_chat", "output": ..., "status": "completed", "stop_reason": "lull"}``).
- **Its name** is the pattern's ``name`` when you set one, else its kind (``group_chat``).
- **Its config** is the pattern's own (``kind="group_chat"``) in the flow's ``steps``; its worst
  case counts in ``flow.max_calls()``; a resume continues it from its last committed state.

A pattern with limits of its own is refused (a flow's limits cover its steps: ``flow.with_limits``),
so is an ``AgentFlow`` (put its steps in the flow) and a pattern whose graph forks.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Callable

from ..config.convert import ConfigWriter, PatternSpec, pattern_config
from ..errors import ConfigError
from ..graph.state_graph import Guard, StateGraph, is_awaitable, state_names
from ..models import SEED_ROLE, Message, StopReason
from ..patterns.base import ChatContext, Pattern
from ..speakers.agent import Agent
from ..speakers.human import Human
from .compile import Compiler
from .context import FlowContext, Frame
from .task import Block, Task, as_task

_SHARED = ("events", "stats", "people")  # the flow's own, stored with the flow's state


@dataclass
class PatternStepFrame(Frame):
    """A pattern step's working state in a run: its task, where its messages start in the flow's
    transcript, its task message (kept out of the flow's transcript), the label of the edge that
    may end it, and the pattern's own state after its last step."""

    task: str = ""
    start: int = 0
    seed: dict[str, object] | None = None
    via: str | None = None
    saved: dict[str, object] = field(default_factory=dict)


class PatternStep(Block):
    """A pattern run as a flow step, its graph nested in the flow's (see the module doc).

    A pattern in a flow's steps (or a combinator's) is wrapped in one: ``AgentFlow(steps=[chat])``
    holds ``PatternStep(chat)``.

    Args:
        pattern: The pattern (any ``Pattern`` but ``AgentFlow``, without limits of its own).

    Raises:
        ConfigError: An ``AgentFlow``, a pattern with limits, or one whose graph has fork states.

    Examples:
        >>> from fsmchat import AgentFlow, RoundRobinSwarm
        >>> def pro(turn):
        ...     return "Ship it."
        >>> def con(turn):
        ...     return "Wait a week."
        >>> def verdict(ctx):
        ...     return f"verdict on: {ctx.previous_output}"
        >>> flow = AgentFlow(steps=[RoundRobinSwarm(agents=[pro, con]), verdict])
        >>> flow.config.steps[0]
        PatternStep('round_robin', pattern=RoundRobinSwarm)
        >>> result = flow.execute("Release today?")
        >>> result.path
        ['round_robin.begin', 'round_robin.seed', 'round_robin.pro', 'round_robin.con', 'round_robin.stop', 'round_robin.done', 'verdict', 'end']
        >>> [(m.role, m.content) for m in result.transcript]
        [('pro', 'Ship it.'), ('con', 'Wait a week.'), ('verdict', 'verdict on: Wait a week.')]
        >>> result.output["steps"][0]
        {'name': 'round_robin', 'output': 'Wait a week.', 'status': 'completed', 'stop_reason': 'max_loops'}
    """

    def __init__(self, pattern: Pattern):
        if not isinstance(pattern, Pattern):
            raise ConfigError(f"PatternStep: pattern={pattern!r:.80} is invalid: a pattern such as GroupChat(...)")
        self.pattern = pattern
        self._refuse()

    @property
    def name(self) -> str:  # type: ignore[override]  # Block's class attribute, computed for a pattern
        """The pattern's ``name`` when set, else its kind (``group_chat``)."""
        p, model = self.pattern, type(self.pattern).Config
        field = model.model_fields.get("name") if model is not None else None
        if field is not None and isinstance(p.name, str) and p.name and p.name != field.default:
            return p.name
        return type(p).kind or type(p).__name__

    def _refuse(self) -> None:
        """A pattern that cannot run as a step, refused by name (checked again when compiled)."""
        p, what = self.pattern, f"{type(self.pattern).__name__} as a flow step"
        if type(p).kind == "flow":
            raise ConfigError(f"{what}: a flow cannot be a step of a flow; put its steps in this flow (a list of "
                              "steps runs in order; repeat, if_ and loop nest them)")
        if p.limits is not None:
            raise ConfigError(f"{what}: its limits ({p.limits!r:.80}) do not apply inside a flow; set them on the "
                              "flow (flow.with_limits(...)), which counts the pattern's calls")

    def _repr_fields(self) -> list[str]:
        return [f"pattern={type(self.pattern).__name__}"]

    # ---- what the flow asks a step kind ----
    def to_spec(self, w: ConfigWriter) -> PatternSpec:
        """This step as its config form: the pattern's own (its kind's ``Spec``)."""
        return pattern_config(self.pattern, w)

    def children(self) -> list[object]:
        """The steps this block holds, in declaration order (none: the pattern is one step)."""
        return []

    def own_tasks(self) -> list[Task]:
        """The pattern's agents and people, as tasks (the flow's roster and its person checks read them)."""
        return [as_task(s) for s in _speakers(self.pattern) if isinstance(s, (Agent, Human))]

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, object]) -> int:
        """The most model calls one run of this block can make: the pattern's ``max_calls``."""
        return self.pattern.max_calls(requests=requests)

    def compile(self, c: Compiler, g: StateGraph[FlowContext], state: str) -> None:
        """Declare this block as ``state`` of ``g``: the pattern's graph, nested."""
        self._refuse()
        names = [getattr(s, "name", "?") for s in _speakers(self.pattern)]
        g.subgraph(state, self.graph(c), f"{type(self.pattern).__name__} of {', '.join(names)} on the previous "
                                         "output")

    def graph(self, c: Compiler) -> StateGraph:
        """The pattern's graph on the flow's context: ``begin`` -> its states -> its finals -> ``done``."""
        step, pattern, key = self, self.pattern, c.key()
        inner = pattern.graph
        flat = inner.flatten()
        if any(s.fork is not None for s in flat.states.values()):
            raise ConfigError(f"{type(pattern).__name__} as a flow step: its graph has fork states, which cannot "
                              "be nested in a flow")
        begin_name, done_name = state_names(["begin", "done"], reserved=inner.states)

        def live(ctx: FlowContext) -> ChatContext:
            pctx = ctx.nested.get(key)
            return pctx if pctx is not None else restored(ctx)

        def share(ctx: FlowContext, pctx: ChatContext) -> ChatContext:
            """The pattern's context on the flow's stats, events and people; its posts mirrored."""
            pctx.stats, pctx.events, pctx.people = ctx.stats, ctx.events, ctx.people
            pctx.transcript.events, pctx.transcript.max_chars = ctx.events, ctx.transcript.max_chars

            def mirror(msg: Message) -> None:
                frame = ctx.frame(key, PatternStepFrame)
                if len(pctx.transcript) == 1 and msg.role == SEED_ROLE and msg.content == frame.task:
                    frame.seed = msg.row()  # its task: the flow has it already
                else:
                    ctx.transcript.post(msg.role, msg.content, **msg.metadata)

            pctx.transcript.listen(mirror)
            ctx.nested[key] = pctx
            return pctx

        def restored(ctx: FlowContext) -> ChatContext:
            """After a resume: the pattern's context from its frame and the flow's transcript."""
            frame = ctx.frame(key, PatternStepFrame)
            pctx = pattern.new_context(frame.task)
            rows = [Message(**frame.seed)] if frame.seed is not None else []
            pctx.transcript.restore(rows + ctx.transcript.since(frame.start))
            pctx.restore({**frame.saved, "events": [], "stats": pctx.stats.to_state()})
            return share(ctx, pctx)

        def saved(pctx: ChatContext) -> dict[str, object]:
            return {k: v for k, v in pctx.snapshot().items() if k not in _SHARED}

        def begin(ctx: FlowContext) -> None:
            """the task: the previous output, or the flow's input"""
            task = ctx.input if ctx.previous_result is None else str(ctx.previous_result)
            pctx = pattern.new_context(task)
            ctx.frames[key] = PatternStepFrame(task=task, start=len(ctx.transcript), saved=saved(pctx))
            share(ctx, pctx)

        def on_pattern(fn: Callable[..., object] | None, fallback: str | None) -> Callable[[FlowContext], object]:
            """``fn`` run on the pattern's context; remembers the label of the state's fallback edge (the
            stop reason if no guard passes and it leads to a final state) and the pattern's state after."""
            async def action(ctx: FlowContext) -> object:
                pctx = live(ctx)
                ctx.frame(key, PatternStepFrame).via = fallback
                out = None if fn is None else fn(pctx)
                out = (await out) if is_awaitable(out) else out
                ctx.frame(key, PatternStepFrame).saved = saved(pctx)
                return out
            return functools.update_wrapper(action, fn) if fn is not None else action

        def guarded(fn: Guard[ChatContext], label: str | None) -> Guard[FlowContext]:
            """``fn`` on the pattern's context; remembers ``label`` when it passes."""
            def guard(ctx: FlowContext) -> bool:
                ok = bool(fn(live(ctx)))
                if ok:
                    ctx.frame(key, PatternStepFrame).via = label
                return ok
            return functools.update_wrapper(guard, fn)

        def finish(final: str, reason: object) -> Callable[[FlowContext], str]:
            def ended(ctx: FlowContext) -> str:
                """the pattern's output becomes the step's"""
                pctx, frame = live(ctx), ctx.frame(key, PatternStepFrame)
                why = reason(pctx) if callable(reason) else reason
                stop = str(StopReason.of(str(why or frame.via or final)))
                out = pattern.output_of(pctx)
                text = ctx.transcript.admit(step.name, out if isinstance(out, str) else json.dumps(out,
                                                                                                  ensure_ascii=False))
                ctx.previous_result = text
                ctx.steps.append({"name": step.name, "output": text, "status": "completed", "stop_reason": stop})
                del ctx.frames[key]
                ctx.nested.pop(key, None)
                return stop
            return ended

        g = StateGraph(inner.name, description=inner.description)
        g.state(begin_name, begin)
        for name, s in inner.states.items():
            if s.final:
                g.state(name, finish(name, s.reason), s.description or "the pattern's output becomes the step's")
            elif s.subgraph is not None:
                raise ConfigError(f"{type(pattern).__name__} as a flow step: state {name!r} nests a graph, which "
                                  "a pattern step does not support")
            else:
                g.state(name, on_pattern(s.action, _label(_fallback(inner, name))), s.description, waits=s.waits)
        g.final(done_name)
        g.edge(begin_name, inner.initial)
        for t in inner.transitions:
            g.edge(t.source, t.dest, when=guarded(t.guard, _label(t.label)) if t.guard is not None else None,
                   label=t.label)
        for name, s in inner.states.items():
            if s.final:
                g.edge(name, done_name)
        return g


def _speakers(pattern: Pattern) -> list[object]:
    """The pattern's participants, each once, in order."""
    found: dict[int, object] = {}
    for s, _n in pattern.calls_by_speaker():
        found.setdefault(id(s), s)
    return list(found.values())


def _fallback(g: StateGraph, state: str) -> str | None:
    """The label of ``state``'s unguarded edge when it leads to a final state."""
    out = [t for t in g.outgoing(state) if t.guard is None]
    return out[0].label if out and g.states[out[0].dest].final else None


def _label(label: object) -> str | None:
    return None if label is None else str(label)


def as_step(step: object) -> object:
    """A flow step as the flow holds it: a pattern wrapped in a ``PatternStep``; a ``Block``, an
    Agent, a ``Human``, a ``Task`` or a callable as it is (anything else refused by type, now)."""
    if isinstance(step, Pattern):
        return PatternStep(step)
    if not isinstance(step, Block):
        as_task(step)
    return step


def step_list(steps: object, what: str) -> list[object]:
    """A block's steps as it holds them: at least one, a pattern wrapped (``as_step``), anything
    else type-checked now, before any call."""
    items = list(steps) if isinstance(steps, (list, tuple)) else [steps]
    if not items:
        raise ConfigError(f"{what} needs at least one step")
    return [as_step(s) for s in items]
