"""``ExpertPanelDiscussion`` (swarms): a moderated panel, as a state graph with one state per expert:

    brief -> open_round -> AI_Expert -> Ethics_Expert -> synthesize
          -> (open_round [rounds_remain] | stop [rounds])

The briefing tells the moderator, then each expert, who is on the panel (not posted). Each round
r (1-based) the moderator opens with ``Round {r}: {topic}`` (posted), every expert answers the
opener in roster order (posted), and the moderator synthesises the round's labelled answers
(``Name: reply`` blocks) into a follow-up question (posted) that becomes the next topic.
Calls = 1 + N + max_rounds x (N + 2); posts = max_rounds x (N + 2), ordered M, E1..EN, M.
Every participant keeps a private memory for the run (briefing, its prompts and replies), as the
reference's agents do; they meet through the opener and the synthesis transcript, which is why
the briefing matters. A normal run stops with ``stop_reason="rounds"``. A round's turns (opener,
experts, synthesis) are passed on by ``add_turns``, as every turn-taking pattern's are.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Collection, Sequence, TypeVar

from pydantic import AfterValidator, Field

from ..checks import Count, check_agents
from ..config.convert import ContextField, OneParticipant, Participants
from ..errors import ConfigError
from ..graph.state_graph import StateGraph, state_names
from ..graph.turns import add_turns
from ..models import StopReason
from ..speakers.agent import Speaker, check_roster
from ..speakers.context import check_memory_context
from ..speakers.human import Human
from .base import (PERSON_NOTE, ChatContext, OutputType, Pattern, PatternConfig, PatternState, check_task, people_in,
                   speaker_states)

TOO_FEW_EXPERTS = "At least two expert agents are required for a panel discussion."
NO_MODERATOR = "A moderator agent is required for panel discussion."
T = TypeVar("T")


def experts_list(agents: T) -> T:
    """A list (or None: the roster may be set later; ``run`` needs two experts and a moderator)."""
    check_agents(agents, "ExpertPanelDiscussion")
    return agents


class PanelConfig(PatternConfig):
    """ExpertPanelDiscussion's parameters, declared once: validated before any model call.

    The fields are ``ExpertPanelDiscussion``'s constructor parameters, in swarms' order,
    with its defaults.

    Attributes:
        max_rounds: Number of discussion rounds. Note this is ``max_rounds``, not ``max_loops``.
        agents: Expert panel participants. At least two are required (checked when the panel is
            built with them, and by ``run``); None: set later.
        moderator: The moderator agent who introduces each round and synthesises responses.
        output_type: Format for the returned conversation history.
        verbose: Print each posted message.
        context: fsmchat's extension: the speakers' context policy, ``"full"`` or ``LastMessages(n)``
            (each private memory's first message and its last n); ``Summarize`` is refused (the
            speakers answer from private memories, which a summary of the conversation does not
            shorten). An agent's own ``context`` takes precedence; None: each agent's own, else ``"full"``.

    Examples:
        >>> from fsmchat.patterns import PanelConfig
        >>> cfg = PanelConfig()
        >>> cfg.max_rounds, cfg.agents, cfg.moderator, cfg.output_type
        (3, None, None, 'str-all-except-first')
    """

    max_rounds: Annotated[int, Count(1, "rounds of opener, expert answers and synthesis")] = 3
    agents: Annotated[Participants, AfterValidator(experts_list)] = Field(None, title="expert")
    moderator: OneParticipant = None
    output_type: OutputType = "str-all-except-first"
    verbose: bool = False
    context: Annotated[ContextField, AfterValidator(lambda v: check_memory_context(v, "ExpertPanelDiscussion"))] = \
        Field(None, description="fsmchat extension: the speakers' context policy (fsmchat.speakers.context)")


@dataclass
class PanelState(PatternState):
    """The panel's working state: the round, its topic, the moderator's opener, the answers.

    Attributes:
        topic: What the next round opens on (the task, then each synthesis).
        round: Rounds opened so far.
        opener: The current round's opener.
        answers: (expert, reply) of the current round, in roster order.

    Examples:
        >>> from fsmchat.patterns import PanelState
        >>> state = PanelState(topic="What are the ethical implications of AGI?")
        >>> state.restore({"round": 1, "answers": [["AI_Expert", "Capability evaluations."]]})
        >>> state.round, state.answers
        (1, [('AI_Expert', 'Capability evaluations.')])
    """

    topic: str = ""  # what the next round opens on (the task, then each synthesis)
    round: int = 0  # rounds opened so far
    opener: str = ""  # the current round's opener
    answers: list[tuple[str, str]] = field(default_factory=list)  # (expert, reply) of the current round

    def restore(self, scratch: dict[str, object]) -> None:
        """Set the fields a ``snapshot`` holds (the answers back to pairs)."""
        super().restore(scratch)
        self.answers = [(name, reply) for name, reply in self.answers]  # stored as lists


@dataclass
class PanelContext(ChatContext):
    """A panel run's context: its config, its moderator (the experts are the speakers) and state.

    Attributes:
        config: The panel's validated parameters.
        moderator: The moderator, as a speaker.
        state: The working state (round, topic, opener, answers).

    Examples:
        >>> from fsmchat import ExpertPanelDiscussion
        >>> def moderator(turn):
        ...     if turn.instruction.startswith("Round"):  # open the round: its first line
        ...         return turn.instruction.splitlines()[0]
        ...     return "Which risk comes first?"  # the synthesis: the next round's topic
        >>> def ai_expert(turn):
        ...     return "Capability evaluations."
        >>> def ethics_expert(turn):
        ...     return "Consent and accountability."
        >>> seen = []
        >>> _ = ExpertPanelDiscussion(max_rounds=1, agents=[ai_expert, ethics_expert], moderator=moderator
        ...                           ).execute("What are the ethical implications of AGI?", on_start=[seen.append])
        >>> type(seen[0]).__name__, seen[0].names, seen[0].moderator.name
        ('PanelContext', ['ai_expert', 'ethics_expert'], 'moderator')
    """

    config: PanelConfig = field(kw_only=True)
    moderator: Speaker = field(kw_only=True)
    state: PanelState = field(default_factory=PanelState)


def moderator_brief(moderator: str, experts: Sequence[str]) -> str:
    return (f"You are {moderator}, moderating a panel discussion with the experts {', '.join(experts)}. "
            "Each round you open with the round's question, hear every expert, then synthesise their "
            "answers and ask one follow-up question. Guide the discussion professionally.")


def expert_brief(expert: str, i: int, experts: Sequence[str], moderator: str) -> str:
    others = ", ".join(e for e in experts if e != expert) or "none"
    return (f"You are {expert}, expert {i + 1} of {len(experts)} on a panel moderated by {moderator}. "
            f"Other experts: {others}. Each round, answer the moderator's question with your expert insight.")


def opener_prompt(r: int, topic: str) -> str:
    return f"Round {r}: {topic}\n\nOpen round {r} by putting this question to the panel."


def expert_prompt(expert: str, moderator: str, opener: str) -> str:
    return f"{expert}, please respond to {moderator}:\n\n{opener}"


def synthesis_prompt(r: int, answers: Sequence[tuple[str, str]]) -> str:
    transcript = "\n\n".join(f"{name}: {reply}" for name, reply in answers)
    return (f"Synthesize the experts' answers to round {r} below and ask the panel one follow-up "
            f"question.\n\n{transcript}")


# ---- guards ----
def rounds_remain(ctx: PanelContext) -> bool:
    """fewer than max_rounds rounds held"""
    return ctx.state.round < ctx.config.max_rounds


# ---- actions ----
async def brief(ctx: PanelContext) -> None:
    """moderator, then each expert, told who is on the panel (not posted)"""
    moderator, names = ctx.moderator, ctx.names
    if not isinstance(moderator, Human):  # people know the panel: only agents are briefed
        await ctx.ask_private(moderator, moderator_brief(moderator.name, names))
    for i, expert in enumerate(ctx.speakers):
        if not isinstance(expert, Human):
            await ctx.ask_private(expert, expert_brief(expert.name, i, names, moderator.name))


async def open_round(ctx: PanelContext) -> int:
    """the moderator opens the round on the topic"""
    moderator, state = ctx.moderator, ctx.state
    r = state.round + 1
    opener = await ctx.ask_private(moderator, opener_prompt(r, state.topic))
    state.round = r  # after the ask: a moderator who is a person may stop the run there
    ctx.post(moderator.name, opener, round=r, phase="open")
    state.opener, state.answers = opener, []
    return r


async def expert_answers(ctx: PanelContext, i: int) -> str:
    """the expert answers the moderator's opener"""
    expert, moderator = ctx.speakers[i], ctx.moderator
    reply = await ctx.ask_private(expert, expert_prompt(expert.name, moderator.name, ctx.state.opener))
    ctx.post(expert.name, reply, round=ctx.state.round, phase="answer")
    ctx.state.answers.append((expert.name, reply))
    return expert.name


async def synthesize(ctx: PanelContext) -> None:
    """the moderator synthesises the answers and asks a follow-up (the next topic)"""
    moderator, r = ctx.moderator, ctx.state.round
    synthesis = await ctx.ask_private(moderator, synthesis_prompt(r, ctx.state.answers))
    ctx.post(moderator.name, synthesis, round=r, phase="synthesis")
    ctx.state.topic = synthesis


def compile_panel(experts: Sequence[str], moderator: str = "moderator", description: str = "",
                  name: str = "expert_panel", people: Collection[str] = ()) -> StateGraph:
    """The panel over a known roster: one state per expert; the round counter is a guard.

    Args:
        experts: The experts' names, in roster order (at least two).
        moderator: The moderator's name (it labels ``open_round`` and ``synthesize``).
        description: What the diagram says the graph is.
        name: The graph's name.
        people: The names of ``Human`` experts or moderator: their states wait for their messages.

    Returns:
        The graph (``ExpertPanelDiscussion.graph`` is this graph, validated).

    Raises:
        ValueError: Fewer than two experts.

    Examples:
        >>> from fsmchat.patterns import compile_panel
        >>> g = compile_panel(["AI_Expert", "Ethics_Expert"], "Moderator")
        >>> list(g.states)
        ['brief', 'open_round', 'AI_Expert', 'Ethics_Expert', 'synthesize', 'stop']
        >>> [(t.dest, t.label) for t in g.transitions if t.source == "synthesize"]
        [('open_round', 'rounds_remain'), ('stop', 'rounds')]
    """
    if len(experts) < 2:
        raise ValueError(TOO_FEW_EXPERTS)
    g = StateGraph(name, context=PanelContext, description=description)
    g.state("brief", brief)
    chair = moderator in people
    note = PERSON_NOTE if chair else ""
    g.state("open_round", open_round, f"{moderator} opens with 'Round r: topic'{note}", waits=chair)
    states = speaker_states(g, experts, expert_answers, "{name} answers the opener", reserved=["synthesize", "stop"],
                            people=people)
    g.state("synthesize", synthesize, f"{moderator} synthesises, asks a follow-up (the next topic){note}",
            waits=chair)
    g.final("stop", reason=StopReason.ROUNDS)
    g.edge("brief", "open_round")
    # a round is one pass of turns: the opener, each expert in roster order, the synthesis
    return add_turns(g, ["open_round", *states, "synthesize"], more=rounds_remain,
                     exhausted=("stop", StopReason.ROUNDS))


class ExpertPanelDiscussion(Pattern, kind="expert_panel", config=PanelConfig):
    """A moderator runs ``max_rounds`` rounds over at least two experts.

    Before the first round, the moderator and each expert are briefed on the panel's participants
    (not posted). Each round, the moderator introduces the topic (``Round r: topic``), every expert
    responds in turn to the moderator's message, and the moderator then synthesises the responses
    (one ``Expert_Name: reply`` block per expert) into a follow-up question that becomes the next
    round's topic. Calls = 1 + N + max_rounds x (N + 2) for N experts; a run stops with
    ``stop_reason="rounds"``. Both roster errors are raised at construction when a roster is
    given, and again by ``run`` (and by ``.graph``, which needs the roster), before any model call.

    The attributes below are also the constructor's parameters, in this order (``PanelConfig``
    declares and validates them).

    Attributes:
        max_rounds (int): Number of discussion rounds.
        agents (list | None): Expert panel participants (at least two).
        moderator (Agent | None): The moderator agent who introduces each round and synthesises responses.
        output_type (str): Format for the returned conversation history.
        verbose (bool): Print each posted message.
        context: The speakers' context policy (fsmchat's extension): ``"full"`` or ``LastMessages(n)``
            (``fsmchat.speakers.context``).

    Args:
        *args: The attributes above by position (``max_rounds``, ``agents``, ...).
        **kwargs: The attributes above by name.
        interrupt_before: States where the run stops for a person before entering them.
        interrupt_after: States where the run stops for a person after leaving them.

    Raises:
        ConfigError: Fewer than two experts, or no moderator (a ``ValueError``).

    Examples:
        >>> from fsmchat import ExpertPanelDiscussion
        >>> def moderator(turn):
        ...     if turn.instruction.startswith("Round"):  # open the round: its first line
        ...         return turn.instruction.splitlines()[0]
        ...     return "Which risk comes first?"  # the synthesis: the next round's topic
        >>> def ai_expert(turn):
        ...     return "Capability evaluations."
        >>> def ethics_expert(turn):
        ...     return "Consent and accountability."
        >>> panel = ExpertPanelDiscussion(max_rounds=2, agents=[ai_expert, ethics_expert], moderator=moderator,
        ...                               output_type="list")
        >>> result = panel.execute("What are the ethical implications of AGI development?")
        >>> result.stop_reason, panel.max_calls()
        ('rounds', 11)
        >>> [m["content"] for m in result.output if m["role"] == "moderator"]
        ['Round 1: What are the ethical implications of AGI development?', 'Which risk comes first?',
         'Round 2: Which risk comes first?', 'Which risk comes first?']
    """

    name = "ExpertPanelDiscussion"
    config: PanelConfig
    speaks_from_memory = True  # each speaker answers from its private memory

    def _validate(self) -> None:
        if self.config.agents is not None or self.config.moderator is not None:  # run() checks again
            self._roster()

    def _calls_by_speaker(self) -> list[tuple[Speaker, int]]:
        """Briefings (1 + N), then per round the moderator twice and each expert once: 1 + N + R(N + 2)."""
        experts, moderator = self._roster()
        rounds = self.config.max_rounds
        return [(moderator, 1 + 2 * rounds)] + [(e, 1 + rounds) for e in experts]

    def _roster(self) -> tuple[list[Speaker], Speaker]:
        agents, moderator = self.config.agents, self.config.moderator
        if not agents or len(agents) < 2:
            raise ConfigError(TOO_FEW_EXPERTS)
        if not moderator:
            raise ConfigError(NO_MODERATOR)
        *experts, chair = check_roster([*agents, moderator], "ExpertPanelDiscussion")
        return experts, chair

    def _check_run(self, task: object) -> None:
        self._roster()
        check_task(task, "ExpertPanelDiscussion")

    def _compile(self) -> StateGraph:
        experts, moderator = self._roster()
        return compile_panel([e.name for e in experts], moderator.name, people=people_in([*experts, moderator]))

    def _speaking_states(self, g: StateGraph) -> list[tuple[str, list[Speaker]]]:
        experts, moderator = self._roster()
        states = state_names([e.name for e in experts], reserved=["brief", "open_round", "synthesize", "stop"],
                             fallback="speaker")
        return [("brief", [moderator, *experts]), ("open_round", [moderator]),
                *((state, [e]) for state, e in zip(states, experts)), ("synthesize", [moderator])]

    def _context(self, task: str) -> PanelContext:
        experts, moderator = self._roster()
        ctx = PanelContext(task, experts, config=self.config, moderator=moderator, state=PanelState(topic=task))
        return ctx


def example_graph() -> StateGraph:
    """ExpertPanelDiscussion's graph for the gallery (three experts, as in swarms' example)."""
    return compile_panel(["AI_Expert", "Ethics_Expert", "Neuroscience_Expert"], "Moderator",
                         "ExpertPanelDiscussion: briefing, then rounds of opener, answers and synthesis")
