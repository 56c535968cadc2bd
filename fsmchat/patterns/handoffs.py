"""``Handoffs`` (OpenAI's Swarm and Agents SDK, AutoGen's ``Swarm``, ``langgraph-swarm``): the
active agent speaks until it hands the conversation to another, as a state graph.

    seed -> <start> -[transfer_to_<b>]-> <b> -[transfer_to_<c>]-> <c> ...
    <agent> -> stop [until | livelock | max_turns | answered]

One state per participant; each handoff an agent may make (``Agent(handoffs=[...])``) is an edge
between the two states, labelled with its tool, ``transfer_to_<name>``. A handoff is a tool call
in the speaking block (``fsmchat.speakers.handoff``): it ends the speaker's turn and makes the
target active; the active agent is the graph's current state and the pattern's stored state, so a
resume or a fork continues with it. A reply without a handoff ends the run with ``"answered"``
(the Agents SDK's final output), or, with ``on_reply="continue"``, the same agent speaks again
(AutoGen's Swarm). A handoff to a person (a ``Human`` participant) is a wait point: the run stops
(``"interrupted"``) until their answer comes; it goes back to the agent that handed over, or to
the agent the answer names first (``"@tech my router is down"``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, Sequence

from pydantic import AfterValidator, Field, model_validator

from ..checks import Count, check_agents
from ..config.convert import ContextField, FunctionField, Speakers
from ..errors import ConfigError
from ..graph.state_graph import StateGraph, reached, state_names
from ..models import StopReason
from ..speakers.agent import Agent, Speaker, check_roster, conversation_view
from ..speakers.context import check_context
from ..speakers.handoff import Handoff, handoffs_of
from ..speakers.human import Human
from .base import ChatContext, OutputType, Pattern, PatternConfig, PatternState, people_in, speaker_states
from .next_speaker import livelocked, named_guard, turns_used, until_met


def handoffs_roster(agents: object) -> list[Speaker]:
    """At least two participants, unique names, one of them an agent."""
    if not check_agents(agents, "Handoffs") or not isinstance(agents, (list, tuple)) or len(agents) < 2:
        raise ConfigError("Handoffs needs at least two participants (the agents that hand the conversation on)")
    if all(isinstance(a, Human) for a in agents):
        raise ConfigError("Handoffs needs at least one Agent besides its Human participants")
    return check_roster(agents, "Handoffs")


class HandoffsConfig(PatternConfig):
    """Handoffs' parameters, declared once: validated before any model call.

    Attributes:
        participants: The agents (and people) of the conversation; each agent's ``handoffs`` name
            who it may hand to, all of them participants.
        start: Who is active first (default: the first participant).
        on_reply: ``"stop"``: a reply without a handoff ends the run (``"answered"``); ``"continue"``:
            the same agent speaks again.
        until: ``fn(messages) -> bool``, checked after each turn: True stops with ``"until"``.
        max_turns: The most turns (replies, people's included) of a run.
        livelock_repeats: Stop with ``"livelock"`` when a cycle of speakers says the same texts this
            many times in a row (None: never).
        output_type: The output's format (default ``"final"``, the last message).
        verbose: Print each posted message.
        context: The speakers' context policy (``fsmchat.speakers.context``).
        name: The conversation's name.
        description: What it is for.

    Examples:
        >>> from fsmchat import Agent
        >>> from fsmchat.patterns import HandoffsConfig
        >>> cfg = HandoffsConfig(participants=[Agent("triage", handoffs=["billing"]), Agent("billing")])
        >>> cfg.first(), cfg.edges(), cfg.on_reply, cfg.max_turns
        ('triage', [('triage', 'billing')], 'stop', 10)
    """

    participants: Annotated[Speakers, AfterValidator(handoffs_roster)] = Field(None, validate_default=True,
                                                                               title="participant")
    start: str | None = None
    on_reply: Literal["stop", "continue"] = "stop"
    until: FunctionField = None
    max_turns: Annotated[int, Count(1, "the most turns of a run")] = 10
    livelock_repeats: Annotated[int | None, Count(2, "times a cycle repeats its texts before the run stops; "
                                                     "None: never")] = 3
    output_type: OutputType = "final"
    verbose: bool = False
    context: Annotated[ContextField, AfterValidator(lambda v: check_context(v, "Handoffs"))] = Field(
        None, description="the speakers' context policy (fsmchat.speakers.context)")
    name: str = "Handoffs"
    description: str = "The active agent speaks until it hands the conversation on."

    @model_validator(mode="after")
    def _check(self) -> "HandoffsConfig":
        names = [a.name for a in self.participants]
        if self.start is not None and self.start not in names:
            raise ConfigError(f"Handoffs: start={self.start!r} is not a participant (participants: "
                              f"{', '.join(map(repr, names))})")
        if self.until is not None and not callable(self.until):
            raise ConfigError(f"Handoffs: until={self.until!r} is invalid: a function of the messages")
        for a in self.participants:
            for h in handoffs_of(a):
                if h.target not in names:
                    raise ConfigError(f"Handoffs: agent {a.name!r} hands off to {h.target!r}, who is not a participant "
                                      f"(participants: {', '.join(map(repr, names))}); add it, or drop the handoff")
        first = self.first()
        seen = reached(self.edges(), [first])
        lost = [n for n in names if n not in seen]
        if lost:
            raise ConfigError(f"Handoffs: no handoff from {first!r} ever reaches {', '.join(map(repr, lost))}; give an "
                              "agent a handoff to it (Agent(handoffs=[...])), or leave it out")
        return self

    def first(self) -> str:
        """Who is active first."""
        return self.start if self.start is not None else self.participants[0].name

    def edges(self) -> list[tuple[str, str]]:
        """Every possible change of the active speaker: each agent's handoffs, and a person back to
        every agent (the one that handed over, or one they name)."""
        agents = [a.name for a in self.participants if not isinstance(a, Human)]
        out = [(a.name, h.target) for a in self.participants for h in handoffs_of(a)]
        out += [(p.name, a) for p in self.participants if isinstance(p, Human) for a in agents]
        return out


@dataclass
class HandoffsState(PatternState):
    """The conversation's working state (checkpointed after each step).

    Attributes:
        active: The active speaker (roster index).
        source: Who handed the floor to it (None: it started, or a person gave it back).
        message: The handoff's message for it.
        handed: Where the last turn handed the floor (None: it kept it).

    Examples:
        >>> from fsmchat.patterns import HandoffsState
        >>> HandoffsState(active=1, source=0, message="refund it", handed=1).snapshot()
        {'active': 1, 'source': 0, 'message': 'refund it', 'handed': 1}
    """

    active: int = 0
    source: int | None = None
    message: str = ""
    handed: int | None = None


@dataclass
class HandoffsContext(ChatContext):
    """A Handoffs run's context: its config and working state (who is active, who handed over).

    Attributes:
        config: The conversation's validated parameters.
        state: The active speaker and the handoff that made it active.

    Examples:
        >>> from fsmchat import Agent, Handoffs
        >>> seen = []
        >>> chat = Handoffs([Agent("triage", handoffs=["billing"]), Agent("billing")])
        >>> _ = chat.execute("Charged twice.", on_start=[seen.append])
        >>> type(seen[0]).__name__, seen[0].names
        ('HandoffsContext', ['triage', 'billing'])
    """

    config: HandoffsConfig = field(kw_only=True)
    state: HandoffsState = field(default_factory=HandoffsState)

    def incoming(self) -> Handoff | None:
        """The handoff that made the active speaker active (its ``input_filter`` shapes what it sees)."""
        src = self.state.source
        if src is None:
            return None
        target = self.speakers[self.state.active].name
        return next((h for h in handoffs_of(self.speakers[src]) if h.target == target), None)


# ---- guards ----
def handed_to(ctx: HandoffsContext, i: int) -> bool:
    """the floor went to this speaker"""
    return ctx.state.handed == i


def kept_floor(ctx: HandoffsContext) -> bool:
    """no handoff: the agent keeps the floor (on_reply="continue")"""
    return ctx.state.handed is None


# ---- actions ----
def post_task(ctx: HandoffsContext) -> None:
    """post the task as message 1"""
    ctx.seed()
    ctx.state.active = ctx.names.index(ctx.config.first())


def turn_instruction(ctx: HandoffsContext, name: str) -> str:
    src = ctx.state.source
    if src is None:
        return f"You are {name}. Reply to the conversation above, or hand it to someone better placed."
    note = f" Their note: {ctx.state.message}" if ctx.state.message else ""
    return (f"You are {name}. {ctx.speakers[src].name} handed the conversation to you.{note} Reply to the "
            "conversation above, or hand it on.")


async def agent_turn(ctx: HandoffsContext, i: int) -> dict[str, str]:
    """the active agent replies, or hands the conversation on"""
    speaker = ctx.speakers[i]
    assert ctx.state.active == i, f"{speaker.name}'s state entered while {ctx.names[ctx.state.active]} is active"
    h = ctx.incoming()
    kw = {"history": conversation_view(speaker.name, h.view(ctx.transcript.messages))} \
        if h is not None and h.input_filter is not None else {}
    reply = await ctx.ask(speaker, turn_instruction(ctx, speaker.name), **kw)
    call = ctx.tool_loop.handoffs.pop(speaker.name, None)
    ctx.turn += 1
    if call is None:
        ctx.post(speaker.name, reply)
        ctx.state.handed = None
        return {"speaker": speaker.name}
    ctx.post(speaker.name, reply, handoff={"to": call.target, "message": call.message})
    ctx.events.append({**call.event(), "turn": ctx.turn - 1})
    target = ctx.names.index(call.target)
    ctx.state.active, ctx.state.source, ctx.state.message, ctx.state.handed = target, i, call.message, target
    return {"speaker": speaker.name, "handoff": call.target}


async def person_turn(ctx: HandoffsContext, i: int) -> dict[str, str]:
    """the person answers; the agent that handed over (or the one they name, "@name") goes on"""
    person = ctx.speakers[i]
    back = ctx.state.source
    text = await ctx.ask(person, f"{ctx.names[back] if back is not None else 'The agents'} handed the conversation "
                                 f"to you ({person.name}).")
    ctx.post(person.name, text)
    ctx.turn += 1
    agents = [j for j, s in enumerate(ctx.speakers) if not isinstance(s, Human)]
    named = next((j for j in agents if text.lstrip().lower().startswith(f"@{ctx.names[j].lower()}")), None)
    target = named if named is not None else back if back is not None else agents[0]
    ctx.state.active, ctx.state.source, ctx.state.message, ctx.state.handed = target, None, "", target
    return {"speaker": person.name, "back_to": ctx.names[target]}


async def turn(ctx: HandoffsContext, i: int) -> dict[str, str]:
    """the active speaker's turn"""
    if isinstance(ctx.speakers[i], Human):
        return await person_turn(ctx, i)
    return await agent_turn(ctx, i)


def compile_handoffs(names: Sequence[str], edges: Sequence[tuple[str, str]], *, first: str,
                     on_reply: str = "stop", until: bool = False, people: Sequence[str] = (),
                     description: str = "") -> StateGraph:
    """Handoffs' graph: a state per participant and an edge per possible handoff.

    Each handoff edge is labelled with its tool (``transfer_to_<name>``); every state has the
    stops (until, livelock, max_turns, answered).

    Args:
        names: The participants' names, in roster order.
        edges: (from, to) for each possible handoff (``HandoffsConfig.edges``).
        first: Who is active first.
        on_reply: ``"stop"`` (a reply without a handoff ends the run) or ``"continue"``.
        until: Draw the ``until`` exit.
        people: The ``Human`` participants' names (their states wait for their answer).
        description: What the diagram says the graph is.

    Examples:
        >>> from fsmchat.patterns.handoffs import compile_handoffs
        >>> g = compile_handoffs(["triage", "billing"], [("triage", "billing")], first="triage")
        >>> [(t.source, t.dest, t.label) for t in g.transitions if t.source == "triage"][-2:]
        [('triage', 'billing', 'transfer_to_billing'), ('triage', 'stop', 'answered')]
    """
    g = StateGraph("handoffs", context=HandoffsContext, description=description)
    g.state("seed", post_task)
    states = speaker_states(g, names, turn, "{name} is active", reserved=["stop"], people=people)
    g.final("stop")
    index = {n: i for i, n in enumerate(names)}
    g.edge("seed", states[index[first]])
    for i, n in enumerate(names):
        if until:
            g.edge(states[i], "stop", when=until_met, label=StopReason.UNTIL)
        g.edge(states[i], "stop", when=livelocked, label=StopReason.LIVELOCK)
        g.edge(states[i], "stop", when=turns_used, label=StopReason.MAX_TURNS)
        person = n in people
        for a, b in edges:
            if a == n:
                g.edge(states[i], states[index[b]], when=named_guard(handed_to, index[b]),
                       label=b if person else Handoff(b).tool_name)
        if person:
            continue
        if on_reply == "continue":
            g.edge(states[i], states[i], when=kept_floor, label="keeps_floor")
        g.edge(states[i], "stop", label=StopReason.ANSWERED)
    return g


class Handoffs(Pattern, kind="handoffs", config=HandoffsConfig):
    """The active agent speaks until it hands the conversation to another (Swarm's handoffs).

    Each agent's ``handoffs`` (``Agent(handoffs=[billing, Human("customer"), ...])``) are offered as
    ``transfer_to_<name>`` tools; calling one ends its turn and makes the target active (a
    ``handoff`` event, and the posted message's ``metadata["handoff"]``). A reply without a handoff
    ends the run with ``"answered"`` (``on_reply="continue"``: the agent speaks again). A handoff to a
    person waits for their answer (``"interrupted"``; the run needs a checkpoint), then the agent
    that handed over goes on, or the one the answer names (``"@tech ..."``). A run also stops on
    ``until``, a repeated cycle (``"livelock"``) or ``max_turns``. ``Swarm`` is the same class
    (AutoGen's name).

    Examples:
        >>> from fsmchat import Handoffs
        >>> from fsmchat.testing import ScriptedModel, Transfer
        >>> model = ScriptedModel({"triage": [Transfer("billing", "double charge")],
        ...                        "billing": ["Refunded the second charge."]})
        >>> triage = model.agent("triage", handoffs=["billing"])
        >>> result = Handoffs([triage, model.agent("billing")]).execute("I was charged twice.")
        >>> result.path, result.stop_reason
        (['seed', 'triage', 'billing', 'stop'], 'answered')
        >>> [(e["from"], e["to"]) for e in result.events if e["event"] == "handoff"]
        [('triage', 'billing')]
    """

    config: HandoffsConfig

    def _calls_by_speaker(self) -> list[tuple[Speaker, int]]:
        """Each agent at most max_turns turns (people make no model call)."""
        return [(a, self.config.max_turns) for a in self.config.participants]

    def _compile(self) -> StateGraph:
        cfg = self.config
        return compile_handoffs([a.name for a in cfg.participants], cfg.edges(), first=cfg.first(),
                                on_reply=cfg.on_reply, until=cfg.until is not None,
                                people=sorted(people_in(cfg.participants)), description=cfg.description)

    def _speaking_states(self, g: StateGraph) -> list[tuple[str, list[Speaker]]]:
        agents = self.config.participants
        states = state_names([a.name for a in agents], reserved=["seed", "stop"], fallback="speaker")
        return [(state, [a]) for state, a in zip(states, agents) if isinstance(a, Agent)]

    def _context(self, task: str) -> HandoffsContext:
        return HandoffsContext(task, list(self.config.participants), config=self.config)


Swarm = Handoffs
"""AutoGen AgentChat's name for the same team: agents hand off with ``transfer_to_<name>`` tools."""


def example_graph() -> StateGraph:
    """Handoffs' graph for the gallery: triage hands to billing or tech, who may hand back."""
    return compile_handoffs(["triage", "billing", "tech"],
                            [("triage", "billing"), ("triage", "tech"), ("billing", "triage"), ("tech", "triage")],
                            first="triage", description="Handoffs: the active agent replies or hands the "
                                                        "conversation on with transfer_to_<name>")
