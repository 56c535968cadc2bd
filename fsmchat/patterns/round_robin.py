"""``RoundRobinSwarm`` (swarms): every agent speaks once per loop, in roster order, as a state graph.

With the roster known, the graph has one state per speaker, so the diagram reads the rotation:

    seed -> Analyst -> Strategist -> Implementer -> (Analyst [next_loop] | stop [max_loops])

Turn t goes to ``agents[t % N]`` for t < N x max_loops; each turn sends the typed shared
conversation (own replies as ``assistant``, others as ``user`` ``"Name: text"``, the task as
``user``) and the per-turn header prompt. A normal run stops with ``stop_reason="max_loops"``
(swarms' parameter); an agent's exception ends it with ``"error"`` and is re-raised by
``run`` with the transcript so far on ``exc.fsmchat_result``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, Collection, Sequence

from pydantic import AfterValidator, Field

from ..checks import Count, check_agents
from ..config.convert import ContextField, Speakers
from ..errors import ConfigError
from ..graph.state_graph import StateGraph, state_names
from ..graph.turns import TurnOrder, add_turns
from ..models import StopReason
from ..speakers.agent import Speaker, check_roster
from ..speakers.context import check_context
from .base import ChatContext, OutputType, Pattern, PatternConfig, people_in, speaker_states

OPENING = "(none — you open the conversation)"
CLOSING = "(none — you close the conversation)"
COLLABORATE = ("Review the transcript above and build on the prior speaker's contribution. Add your own "
               "perspective concisely; if you are the opening speaker, address the original task directly."
               "\n\nYour response:")


def build_turn_header(agent_name: str, position: int, total: int, loop: int, max_loops: int,
                      prev_name: str | None = None, next_name: str | None = None,
                      agent_names: Sequence[str] | None = None) -> str:
    """The one-line role header of a turn: swarms' exact text.

    It tells the agent its position, the current loop, the previous/next speaker and the other
    participants.

    Args:
        agent_name: The speaking agent.
        position: Its place in the roster, 1-based.
        total: The number of agents.
        loop: The current loop, 1-based.
        max_loops: The number of loops.
        prev_name: The previous speaker (None: this agent opens the conversation).
        next_name: The next speaker (None: this agent closes the conversation).
        agent_names: Every agent's name, in roster order.

    Examples:
        >>> from fsmchat import build_turn_header
        >>> print(build_turn_header("Analyst", 1, 3, 1, 2, next_name="Strategist",
        ...                         agent_names=["Analyst", "Strategist", "Implementer"]))
        You are Analyst, agent 1 of 3 in loop 1 of 2. Previous speaker:
        (none — you open the conversation). Next speaker: Strategist.
        Other participants: Strategist, Implementer.
    """
    others = ", ".join(n for n in (agent_names or []) if n != agent_name) or "(none)"
    return (f"You are {agent_name}, agent {position} of {total} in loop {loop} of {max_loops}. "
            f"Previous speaker: {prev_name or OPENING}. Next speaker: {next_name or CLOSING}. "
            f"Other participants: {others}.")


def build_collaborative_task(conversation_context: str, turn_header: str) -> str:
    """The turn's prompt: the context (if any), the header and the standing instruction.

    The reference's exact text. ``run`` passes ``""`` as context: the transcript travels as typed
    chat messages, not as literal text in the prompt.

    Args:
        conversation_context: Text put before the header (``""``: none).
        turn_header: The turn's header (``build_turn_header``).

    Examples:
        >>> from fsmchat import build_collaborative_task
        >>> print(build_collaborative_task("", "You are Analyst, agent 1 of 3 in loop 1 of 1."))
        You are Analyst, agent 1 of 3 in loop 1 of 1.
        <BLANKLINE>
        Review the transcript above and build on the prior speaker's contribution.
        Add your own perspective concisely; if you are the opening speaker, address
        the original task directly.
        <BLANKLINE>
        Your response:
    """
    head = f"{conversation_context}\n\n" if conversation_context else ""
    return f"{head}{turn_header}\n\n{COLLABORATE}"


def round_robin_roster(agents: Any) -> list[Speaker]:
    """At least one participant, unique names."""
    if not check_agents(agents, "RoundRobinSwarm"):
        raise ConfigError("RoundRobinSwarm cannot be initialized without agents")
    return check_roster(agents, "RoundRobinSwarm")


class RoundRobinConfig(PatternConfig):
    """RoundRobinSwarm's parameters, declared once: validated before any model call.

    The fields are ``RoundRobinSwarm``'s constructor parameters, in swarms' order, with
    its defaults.

    Attributes:
        name: Name of the swarm.
        description: Description of the swarm's purpose.
        agents: Agents that take turns in declared order. Required: constructing the swarm without
            agents raises ``ValueError``.
        verbose: Print each posted message.
        max_loops: Number of full passes over the roster. Each agent speaks exactly once per loop,
            so with N agents and ``max_loops`` loops the swarm runs N * max_loops turns total.
        output_type: Output format applied to the conversation history: ``"final"`` (last message
            only), ``"list"``, ``"dict"``, ``"str"``, ``"json"``...
        context: fsmchat's extension: the speakers' context policy, ``"full"``, ``LastMessages(n)``
            or ``Summarize(agent=..., keep_last=k, at=0.8)`` (``fsmchat.speakers.context``); an
            agent's own ``context`` takes precedence. None: each agent's own, else ``"full"``.

    Examples:
        >>> from fsmchat import Agent
        >>> from fsmchat.patterns import RoundRobinConfig
        >>> cfg = RoundRobinConfig(agents=[Agent("Analyst"), Agent("Strategist")])
        >>> cfg.name, cfg.max_loops, cfg.output_type
        ('RoundRobinSwarm', 1, 'final')
        >>> RoundRobinConfig()
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: RoundRobinSwarm cannot be initialized without agents
    """

    name: str = "RoundRobinSwarm"
    description: str = "A swarm implementation that executes tasks in a round-robin fashion."
    agents: Annotated[Speakers, AfterValidator(round_robin_roster)] = Field(None, validate_default=True,
                                                                            title="agent")
    verbose: bool = False
    max_loops: Annotated[int, Count(1, "full passes over the roster")] = 1
    output_type: OutputType = "final"
    context: Annotated[ContextField, AfterValidator(lambda v: check_context(v, "RoundRobinSwarm"))] = Field(
        None, description="fsmchat extension: the speakers' context policy (fsmchat.speakers.context)")


@dataclass
class RoundRobinContext(ChatContext):
    """A RoundRobinSwarm run's context: its config (the turn counter is all its state).

    Attributes:
        config: The swarm's validated parameters.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> def analyst(turn):
        ...     return "Start with the data."
        >>> seen = []
        >>> _ = RoundRobinSwarm(agents=[analyst], max_loops=2).execute("Plan it.", on_start=[seen.append])
        >>> type(seen[0]).__name__, seen[0].config.max_loops, seen[0].turn
        ('RoundRobinContext', 2, 2)
    """

    config: RoundRobinConfig = field(kw_only=True)

    @cached_property
    def turn_order(self) -> TurnOrder:
        """Turn t goes to ``speakers[t % N]``, for N x max_loops turns (made once per run)."""
        return TurnOrder(len(self.speakers), self.config.max_loops)


# ---- guards ----
def next_loop(ctx: RoundRobinContext) -> bool:
    """another loop remains"""
    return ctx.turn_order.left(ctx.turn)


# ---- actions ----
def post_task(ctx: ChatContext) -> None:
    """post the task as message 1"""
    ctx.seed()


def turn_prompt(ctx: RoundRobinContext, t: int) -> str:
    """The header prompt of global turn ``t`` (0-based); prev/next wrap across loops."""
    names, order = ctx.names, ctx.turn_order
    i, prev, nxt = order.speaker(t), order.prev(t), order.next(t)
    header = build_turn_header(names[i], i + 1, order.n, order.round(t), ctx.config.max_loops,
                               names[prev] if prev is not None else None, names[nxt] if nxt is not None else None,
                               names)
    return build_collaborative_task("", header)


async def take_turn(ctx: RoundRobinContext, i: int) -> str:
    """the speaker builds on the conversation so far"""
    speaker = ctx.speakers[i]
    assert ctx.turn_order.speaker(ctx.turn) == i, f"turn {ctx.turn} is not {speaker.name}'s"
    reply = await ctx.ask(speaker, turn_prompt(ctx, ctx.turn))
    ctx.post(speaker.name, reply, loop=ctx.turn_order.round(ctx.turn))
    ctx.turn += 1
    return speaker.name


def compile_round_robin(names: Sequence[str], description: str = "",
                        name: str = "round_robin", people: Collection[str] = ()) -> StateGraph:
    """The rotation over a known roster: one state per speaker; the loop counter is a guard.

    The speakers' states are chained by ``add_turns``.

    Args:
        names: The speakers' names, in roster order (at least one).
        description: What the diagram says the graph is.
        name: The graph's name.
        people: The names of ``Human`` speakers: their states wait for their message.

    Returns:
        The graph (``RoundRobinSwarm.graph`` is this graph, validated).

    Raises:
        ValueError: No names.

    Examples:
        >>> from fsmchat.patterns import compile_round_robin
        >>> g = compile_round_robin(["Analyst", "Strategist", "Implementer"])
        >>> list(g.states)
        ['seed', 'Analyst', 'Strategist', 'Implementer', 'stop']
        >>> [(t.source, t.dest, t.label) for t in g.transitions if t.source == "Implementer"]
        [('Implementer', 'Analyst', 'next_loop'), ('Implementer', 'stop', 'max_loops')]
    """
    if not names:
        raise ValueError("compile_round_robin needs at least one speaker name")
    g = StateGraph(name, context=RoundRobinContext, description=description)
    g.state("seed", post_task)
    states = speaker_states(g, names, take_turn, "{name} builds on the conversation", reserved=["stop"],
                            people=people)
    g.final("stop", reason=StopReason.MAX_LOOPS)
    g.edge("seed", states[0])
    return add_turns(g, states, more=next_loop, exhausted=("stop", StopReason.MAX_LOOPS))


class RoundRobinSwarm(Pattern, kind="round_robin", config=RoundRobinConfig):
    """Deterministic round robin: turn t goes to ``agents[t % N]`` for N x ``max_loops`` turns.

    RoundRobinSwarm visits agents in their declared insertion order, cycling through the full
    roster once per loop. Each turn's request is ``[system prompt] + typed shared conversation +
    [user: header prompt]`` (``build_turn_header`` / ``build_collaborative_task``); the reply is
    posted under the agent's name. Calls = N x max_loops; the transcript holds 1 + N x max_loops
    rows; a run stops with ``stop_reason="max_loops"``. A ``Human`` among ``agents`` waits at its
    own turn (the run then needs a checkpoint).

    The attributes below are also the constructor's parameters, in this order
    (``RoundRobinConfig`` declares and validates them).

    Attributes:
        name (str): Name of the swarm.
        description (str): Description of the swarm's purpose.
        agents (list): Agents that take turns in declared order (required).
        verbose (bool): Print each posted message.
        max_loops (int): Number of full passes over the roster.
        output_type (str): Output format applied to the conversation history (default ``"final"``, the
            last message only).
        context: The speakers' context policy (fsmchat's extension): ``"full"``, ``LastMessages(n)`` or
            ``Summarize(agent=..., keep_last=k, at=0.8)`` (``fsmchat.speakers.context``).

    Args:
        *args: The attributes above by position (``name``, ``description``, ``agents``, ...).
        **kwargs: The attributes above by name.
        interrupt_before: States where the run stops for a person before entering them.
        interrupt_after: States where the run stops for a person after leaving them.

    Raises:
        ConfigError: No agents (a ``ValueError``), duplicate names, or a value out of range.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> def analyst(turn):
        ...     return "Start with the data."
        >>> def strategist(turn):
        ...     return f"Building on {turn.transcript[-1].role}: plan it."
        >>> swarm = RoundRobinSwarm(agents=[analyst, strategist], max_loops=2)
        >>> result = swarm.execute("How should we approach building a new AI product?")
        >>> result.stop_reason, result.path
        ('max_loops', ['seed', 'analyst', 'strategist', 'analyst', 'strategist', 'stop'])
        >>> swarm.run("How should we approach building a new AI product?"), swarm.max_calls()
        ('Building on analyst: plan it.', 4)
    """

    config: RoundRobinConfig

    def _calls_by_speaker(self) -> list[tuple[Any, int]]:
        """One call per turn: each agent max_loops times (N x max_loops)."""
        return [(a, self.config.max_loops) for a in self.config.agents]

    def _compile(self) -> StateGraph:
        agents = self.config.agents
        return compile_round_robin([a.name for a in agents], self.config.description, people=people_in(agents))

    def _speaking_states(self, g: StateGraph) -> list[tuple[str, list[Any]]]:
        agents = self.config.agents
        return [(state, [a]) for state, a in zip(state_names([a.name for a in agents], reserved=["seed", "stop"],
                                                             fallback="speaker"), agents)]

    def _context(self, task: str) -> RoundRobinContext:
        return RoundRobinContext(task, list(self.config.agents), config=self.config)


def example_graph() -> StateGraph:
    """RoundRobinSwarm's graph for the gallery: swarms' three agents."""
    return compile_round_robin(["Analyst", "Strategist", "Implementer"],
                               "RoundRobinSwarm: each agent speaks once per loop, in roster order")
