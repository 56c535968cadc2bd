"""``RoundRobinSwarm`` (swarms): every agent speaks once per loop, in roster order, as a state graph.

With the roster known, the graph has one state per speaker, so the diagram reads the rotation:

    seed -> Analyst -> Strategist -> Implementer -> (Analyst [next_loop] | stop [max_loops])

Turn t goes to ``agents[t % N]`` for t < N x max_loops; each turn sends the typed shared
conversation (own replies as ``assistant``, others as ``user`` ``"Name: text"``, the task as
``user``) and the per-turn header prompt. A normal run stops with ``stop_reason="max_loops"``
(the reference's parameter); an agent's exception ends it with ``"error"`` and is re-raised by
``run`` with the transcript so far on ``exc.fsmchat_result``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Collection, Sequence

from pydantic import AfterValidator, Field

from ..checks import check_agents
from ..config import Participants
from ..errors import ConfigError
from ..graph.state_graph import StateGraph
from ..graph.turns import TurnOrder, add_turns
from ..models import StopReason
from ..speakers.agent import Speaker, check_roster
from .base import ChatContext, OutputType, Pattern, PatternConfig, people_in, speaker_states

OPENING = "(none — you open the conversation)"
CLOSING = "(none — you close the conversation)"
COLLABORATE = ("Review the transcript above and build on the prior speaker's contribution. Add your own "
               "perspective concisely; if you are the opening speaker, address the original task directly."
               "\n\nYour response:")


def build_turn_header(agent_name: str, position: int, total: int, loop: int, max_loops: int,
                      prev_name: str | None = None, next_name: str | None = None,
                      agent_names: Sequence[str] | None = None) -> str:
    """The one-line role header of a turn (1-based ``position`` and ``loop``); exact reference text."""
    others = ", ".join(n for n in (agent_names or []) if n != agent_name) or "(none)"
    return (f"You are {agent_name}, agent {position} of {total} in loop {loop} of {max_loops}. "
            f"Previous speaker: {prev_name or OPENING}. Next speaker: {next_name or CLOSING}. "
            f"Other participants: {others}.")


def build_collaborative_task(conversation_context: str, turn_header: str) -> str:
    """The turn's prompt: the context (if any), the header and the standing instruction; exact
    reference text. ``run`` passes ``""`` as context: the transcript travels as typed turns."""
    head = f"{conversation_context}\n\n" if conversation_context else ""
    return f"{head}{turn_header}\n\n{COLLABORATE}"


def round_robin_roster(agents: Any) -> list[Speaker]:
    """At least one participant, unique names."""
    if not check_agents(agents, "RoundRobinSwarm"):
        raise ConfigError("RoundRobinSwarm cannot be initialized without agents")
    return check_roster(agents, "RoundRobinSwarm")


class RoundRobinConfig(PatternConfig):
    """RoundRobinSwarm, declared once: its parameters in the reference's order, validated before
    any model call."""

    name: str = "RoundRobinSwarm"
    description: str = "A swarm implementation that executes tasks in a round-robin fashion."
    agents: Annotated[Participants, AfterValidator(round_robin_roster)] = Field(None, validate_default=True,
                                                                                title="agent")
    verbose: bool = False
    max_loops: int = Field(1, ge=1, description="full passes over the roster")
    output_type: OutputType = "final"


@dataclass
class RoundRobinContext(ChatContext):
    """A RoundRobinSwarm run's context: its config (the turn counter is all its state)."""

    config: RoundRobinConfig = field(kw_only=True)

    @property
    def turn_order(self) -> TurnOrder:
        """Turn t goes to ``speakers[t % N]``, for N x max_loops turns."""
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
    """The rotation over a known roster: one state per speaker (a ``Human``'s, among ``people``,
    waits for their message), passed on by ``add_turns``; the loop counter is a guard."""
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

    Takes ``RoundRobinConfig``'s fields: ``name``, ``description``, ``agents``, ``verbose``,
    ``max_loops``, ``output_type``; ``interrupt_before``/``interrupt_after``: states where the run
    stops for a person (a ``Human`` among ``agents`` waits at its own turn; the run then needs a
    checkpoint). Each turn's request is ``[system prompt] + typed shared conversation + [user:
    header prompt]`` (``build_turn_header`` / ``build_collaborative_task``); the reply is posted
    under the agent's name. Calls = N x max_loops; the transcript holds 1 + N x max_loops rows.
    """

    config: RoundRobinConfig

    def _calls_by_speaker(self) -> list[tuple[Any, int]]:
        """One call per turn: each agent max_loops times (N x max_loops)."""
        return [(a, self.config.max_loops) for a in self.config.agents]

    def _compile(self) -> StateGraph:
        agents = self.config.agents
        return compile_round_robin([a.name for a in agents], self.config.description, people=people_in(agents))

    def _context(self, task: str) -> RoundRobinContext:
        ctx = RoundRobinContext(task, list(self.config.agents), config=self.config)
        ctx.stats.roster = list(self.config.agents)
        return ctx


def example_graph() -> StateGraph:
    """RoundRobinSwarm's graph for the gallery: the reference's three agents."""
    return compile_round_robin(["Analyst", "Strategist", "Implementer"],
                               "RoundRobinSwarm: each agent speaks once per loop, in roster order")
