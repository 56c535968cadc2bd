"""The ``Discussion`` block: speakers take turns on one thread, ``begin -> turn -> (turn | done)``,
with a ``check_until`` state after each turn when it has an ``until``. Turns follow the one turn
order (``fsmchat.graph.turns``) unless ``select`` names each turn's speaker."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, Optional, Union

from pydantic import AfterValidator, Field, model_validator

from ...checks import Count, check_agents
from ...config.convert import AgentSpec, CallableSpec, ConfigReader, ConfigWriter, ContextSpec, HumanSpec, \
    context_spec
from ...engine import mark_replayable
from ...errors import ConfigError
from ...graph.state_graph import StateGraph
from ...graph.turns import TurnOrder, add_turns
from ...models import StopReason
from ...speakers.agent import Agent
from ...speakers.compaction import add_compaction, summarizers
from ...speakers.context import ACTIVE, LastMessages, Summarize, active_policy, check_context, scoped
from ...speakers.human import Human
from ...speakers.tool_loop import add_tool_loop
from ...store.statelog import AppendLog
from ..compile import Compiler, bounded_exits, named, run_task, task_calls
from ..context import FlowContext, LinesFrame
from ..declare import FUNCTION, REQUIRED, BlockConfig, Form
from ..task import Block, Task, TaskSpec, as_task, fn_name, step_names

# a speaker's config form: a participant's, or a Task's (derived from its model, so typed at run time)
SpeakerSpec: Any = Annotated[Union[AgentSpec, CallableSpec, TaskSpec, HumanSpec], Field(discriminator="kind")]


def _dump_speakers(w: ConfigWriter, v: object, what: str) -> list[object]:
    speakers = v if isinstance(v, list) else []  # the config's check made it a list
    return [a.to_spec(w) if isinstance(a, Task) else w.participant(a, what) for a in speakers]


def _load_speakers(r: ConfigReader, d: object, what: str) -> list[object]:
    specs = d if isinstance(d, list) else []  # its Form's data: a list of speaker specs
    return [a.build(r) for a in specs if isinstance(a, (AgentSpec, CallableSpec, TaskSpec, HumanSpec))]


SPEAKERS = Form(list[SpeakerSpec], _dump_speakers, _load_speakers, default=REQUIRED, label="speaker")
# the speakers' context policy: travels as a pattern's does (a ContextSpec)
CONTEXT = Form(Optional[ContextSpec], lambda w, v, what: None if v is None else context_spec(w, v, what),
               lambda r, d, what: d.build(r) if isinstance(d, ContextSpec) else None)


class DiscussionConfig(BlockConfig):
    """A Discussion's parameters, declared once (see ``Discussion``)."""

    agents: Annotated[Any, SPEAKERS] = None
    rounds: Annotated[int, Count(1, "full passes over the speakers")] = 3
    until: Annotated[Any, FUNCTION] = None
    select: Annotated[Any, FUNCTION] = None
    name: str = "discussion"
    context: Annotated[Any, CONTEXT, AfterValidator(lambda v: check_context(v, "Discussion"))] = None

    @model_validator(mode="after")
    def _check(self) -> "DiscussionConfig":
        name, until, select = self.name, self.until, self.select
        if not check_agents(self.agents, f"Discussion {name!r}"):
            raise ConfigError("Discussion needs at least one speaker; an empty discussion would run zero turns "
                              "and report success.")
        if until is not None and not callable(until):
            raise TypeError(f"Discussion until must be a callable (ctx) -> bool, got {type(until).__name__}")
        if select is not None and not callable(select):
            raise TypeError(f"Discussion select must be a callable (turn, ctx) -> speaker, got {type(select).__name__}")
        self.agents = list(self.agents)
        names = [as_task(a).name or "" for a in self.agents]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"Discussion {name!r}: agents={names!r} is invalid: {twice[0]!r} is listed more than "
                              "once; each speaker takes its turns in order (use rounds= for more turns, or "
                              "select= to let one speaker talk more often)")
        return self


@dataclass
class DiscussionFrame(LinesFrame):
    """A Discussion's working state in a run: turns taken, the lines so far, the topic, and (with
    ``until``) whether it was met after the last turn."""

    OPTIONAL = ("met",)
    t: int = 0
    lines: list[str] = field(default_factory=AppendLog)
    topic: object = None
    met: bool | None = None

    def __post_init__(self) -> None:
        if type(self.lines) is not AppendLog:  # restored from a checkpoint as a plain list
            self.lines = AppendLog(self.lines)


class Discussion(Block, kind="discussion", config=DiscussionConfig, owner="Discussion"):
    """A flow step where speakers take turns on one thread, compiled to ``begin -> turn -> (turn | done)``.

    Each round every speaker speaks once, in order, unless ``select`` chooses; ``until`` is checked
    after every turn (drawn as a ``check_until`` state).

    The attributes below are also the constructor's parameters, in this order
    (``DiscussionConfig`` declares and validates them).

    Attributes:
        agents (list): The speakers: agents, callables ``(turn) -> str``, ``Task``s or ``Human``s, each once.
        rounds (int): Full passes over the speakers (at most, with ``until``).
        until (Callable | None): ``until(ctx) -> bool``, checked after every turn; true ends the discussion.
        select (Callable | None): ``select(turn, ctx)`` returns the speaker of turn ``turn`` (one of ``agents``).
        name (str): The step's name (its states are ``<name>.turn``, ...).
        context: The speakers' context policy, as a pattern's (``fsmchat.speakers.context``):
            ``"full"`` (every turn so far), ``LastMessages(n)`` (the topic and the last ``n`` turns) or
            ``Summarize(agent=..., keep_last=k, at=0.8)`` (a drawn ``compact_turn`` state); an agent's
            own ``context`` takes precedence. None: each agent's own, else ``"full"``.

    Args:
        *args: The attributes above by position (``agents``, ``rounds``, ...).
        **kwargs: The attributes above by name.

    Raises:
        ValueError: No speakers, or ``rounds`` below 1 (a ``ConfigError``).
        TypeError: ``until`` or ``select`` is not callable, or ``rounds`` is not an int (a ``ConfigTypeError``).
        ConfigError: A speaker is listed twice, or ``context`` is not a context policy.

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


    config: DiscussionConfig

    @cached_property
    def tasks(self) -> list[Task]:
        """Each speaker as a ``Task``, in order."""
        return [as_task(a) for a in self.config.agents]

    def _repr_fields(self) -> list[str]:
        until, select = self.config.until, self.config.select
        return [f"speakers={step_names(self.tasks)!r}", f"rounds={self.config.rounds}"] + \
            ([f"until={fn_name(until)}"] if until is not None else []) + \
            ([f"select={fn_name(select)}"] if select is not None else []) + \
            ([f"context={self.config.context!r}"] if self.config.context is not None else [])

    def task_for(self, speaker: object) -> Task:
        """Return the step of one of this discussion's speakers (what ``select`` returned).

        Args:
            speaker: One of ``agents`` (or its ``Task``, or an agent of the same name).

        Raises:
            ValueError: ``speaker`` is not one of the discussion's speakers.
        """
        for a, t in zip(self.config.agents, self.tasks):
            if speaker is a or speaker is t:
                return t
        for t in self.tasks:  # a selector may return an equal-named agent copy
            if isinstance(speaker, (Agent, Task, Human)) and speaker.name == t.name:
                return t
        names = [t.name for t in self.tasks]
        raise ValueError(f"Discussion {self.config.name!r} select() returned {speaker!r}, which is not one of its "
                         f"speakers {names}")

    def children(self) -> list[object]:
        """The steps this block holds, in declaration order."""
        return []

    def own_tasks(self) -> list[Task]:
        """The tasks this block runs itself (not those of the steps it holds)."""
        return list(self.tasks)

    def compacted_agents(self) -> list[Agent]:
        """The speakers' agents: the ``turn`` state draws a compaction when one follows ``Summarize``."""
        return [t.agent for t in self.tasks if t.agent is not None]

    def writes(self, var: str) -> bool:
        """Whether this block itself sets variable ``var`` (its own output variables)."""
        return var == "discussion_transcript"

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, object]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        per_turn = [task_calls(t, requests) for t in self.tasks]
        # a selector may pick the costliest speaker on every one of the rounds x speakers turns
        rounds = int(self.config.rounds)
        spoken = rounds * (len(per_turn) * max(per_turn) if self.config.select is not None else sum(per_turn))
        # with a Summarize speaker, each turn may first compact the conversation (one call of its writer)
        writers = summarizers(self.compacted_agents(), self.config.context)
        if not writers:
            return spoken
        per_compaction = 1 + (writers[0].agent.num_retries if requests and hasattr(writers[0].agent, "model") else 0)
        return spoken + rounds * len(per_turn) * per_compaction

    def compile(self, c: Compiler, g: StateGraph[FlowContext], state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        g.subgraph(state, self.graph(c), f"Discussion: {self.config.rounds} round(s) of "
                                         f"{', '.join(t.name or '' for t in self.tasks)}")

    def graph(self, c: Compiler) -> StateGraph:
        """This discussion's subgraph: ``begin -> turn -> (turn | done)``, ``check_until`` with ``until``."""
        d, cfg = self, self.config
        key, order = c.key(), TurnOrder(len(d.tasks), cfg.rounds)

        def frame(ctx: FlowContext) -> DiscussionFrame:
            return ctx.frame(key, DiscussionFrame)

        def begin(ctx: FlowContext) -> None:
            """start a fresh transcript"""
            f = ctx.frames[key] = DiscussionFrame(topic=ctx.previous_result if ctx.previous_result is not None
                                                  else ctx.input)
            ctx.join_lines("discussion_transcript", key, f.lines)

        async def turn(ctx: FlowContext) -> str:
            """the scheduled speaker talks"""
            f = frame(ctx)
            t = f.t
            task = d.task_for(cfg.select(t, ctx)) if cfg.select is not None else d.tasks[order.speaker(t)]
            prompt = None
            if task.agent is not None or task.person is not None:
                topic = ctx.fill(task.action, f"Discussion {cfg.name!r} speaker {task.name!r}") \
                    if task.action is not None else f.topic
                lines, summary = f.lines, None
                active = ACTIVE.get()  # set while the turn runs under the step's policy or a compaction
                policy = active_policy(task.agent) if task.agent is not None else "full"
                if isinstance(policy, LastMessages):  # the topic and the last n turns
                    lines = f.lines[-policy.n:]
                elif active is not None and active.summary is not None and isinstance(policy, Summarize):
                    # the summary stands for the turns it covers: the lines posted after it are kept
                    kept = min(max(len(ctx.transcript.view()) - active.summary.upto, 0), len(f.lines))
                    lines, summary = f.lines[len(f.lines) - kept:], active.summary.text
                prompt = discussion_prompt(task.name or "", topic, lines, ctx.previous_result, summary,
                                           latest=len(lines) < len(f.lines))
            status, out = await run_task(task, ctx, prompt, record_as=task.name)
            f.t = t + 1
            if status in ("completed", "stopped"):
                line = f"{task.name}: {out}"
                f.lines.append(line)
                ctx.join_lines("discussion_transcript", key, f.lines, line)
            return f"{task.name}: {status}"

        def check_until(ctx: FlowContext) -> bool | None:
            """until(ctx) after every turn"""
            f = frame(ctx)
            if ctx.halted:
                f.met = False
                return None
            assert cfg.until is not None
            try:
                met = bool(cfg.until(ctx))
            except Exception as exc:
                raise ValueError(f"Discussion until() raised {type(exc).__name__}: {exc}. It is checked after "
                                 "every turn, so a failing condition would run the full round budget.") from exc
            f.met = met
            mark_replayable()  # computed from the context: committed with the next turn
            return met

        def turns_left(ctx: FlowContext) -> bool:
            return order.left(frame(ctx).t)

        def met(ctx: FlowContext) -> bool:
            return bool(frame(ctx).met)

        named(turns_left, "turns_left", f"fewer than {cfg.rounds} x {order.n} turns")
        g = StateGraph(cfg.name, description=f"Discussion {cfg.name}")
        people = [t.person.name for t in d.tasks if t.person is not None]
        g.state("begin", begin)
        g.state("turn", turn, "the scheduled speaker talks" + (f" (waits for {', '.join(people)}: a person's "
                                                                "turn takes their message)" if people else ""),
                waits=bool(people))
        g.edge("begin", "turn")
        if cfg.until is not None:
            g.state("check_until", check_until)
        g.final("done")
        add_tool_loop(g, "turn", d.compacted_agents())
        add_compaction(g, "turn", d.compacted_agents(), cfg.context, head=0)  # a flow's transcript has no task row
        if isinstance(cfg.context, LastMessages):  # the turn's calls read it, as a pattern's (``context.fit``)
            g.states["turn"].action = scoped(g.states["turn"].action, cfg.context)
        return add_turns(g, [("turn", "check_until") if cfg.until is not None else "turn"],
                         exits=bounded_exits(met if cfg.until is not None else None), more=turns_left,
                         exhausted=("done", StopReason.ROUNDS))


def discussion_prompt(name: str, topic: object, lines: list[str], previous: object, summary: str | None = None,
                      latest: bool = False) -> str:
    """What an agent speaker is asked on its Discussion turn (with ``summary``: a compaction's
    summary of the earlier turns, then the turns since; ``latest``: earlier turns are left out)."""
    parts = [str(topic) if topic is not None else ""]
    if summary is not None:
        parts.append("Summary of the discussion so far:\n" + summary)
    if lines:
        parts.append(("Latest turns:\n" if summary is not None or latest else "Discussion so far:\n") + "\n".join(lines))
    parts.append(f"You are {name}. " + ("Respond to the latest turn and move the discussion forward."
                                         if lines or summary is not None else "Open the discussion."))
    return "\n\n".join(p for p in parts if p)
