"""Two-agent debates (swarms ``OneOnOneDebate`` and ``one_on_one_debate``) as a state graph:

    intro_a -> intro_b -> turn_a -> (turn_b [turns_remain] | stop [max_loops])
                          turn_b -> (turn_a [turns_remain] | stop [max_loops])

The turns are a ``TurnOrder`` of two speakers capped at ``max_loops`` turns, drawn by ``add_turns``
(the bound is checked after every turn), as every turn-taking pattern's are.

The introductions (``send_intros``) tell each debater who it faces and are not posted; the
function form starts at ``turn_a``. Turn 1's prompt is the task; every later prompt is the
other debater's last reply, exactly. Only replies travel: swarms' documentation page calls the
alternative (passing an agent's whole, growing transcript on) a pitfall. Each debater keeps a
private memory for the run (its prompts as ``user``, its replies as ``assistant``). The task is
not posted, so ``str-all-except-first`` skips the first debater's first reply.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, Collection, Sequence, TypeVar

from pydantic import AfterValidator, Field

from ..checks import Count, check_agents
from ..config.convert import ContextField, ParticipantLike, Participants
from ..errors import ConfigError
from ..graph.state_graph import StateGraph
from ..graph.turns import TurnOrder, add_turns
from ..models import StopReason
from ..speakers.agent import Speaker, as_speaker, check_roster
from ..speakers.context import check_memory_context
from ..speakers.human import Human
from .base import (PERSON_NOTE, ChatContext, OutputType, Pattern, PatternConfig, PatternState, bind, check_image,
                   check_task, people_in)

TWO_AGENTS = "There must be exactly two agents in the dialogue."
T = TypeVar("T")


def debaters(agents: T) -> T:
    """A list (or None: the debaters may be set later; ``run`` needs exactly two)."""
    check_agents(agents, "OneOnOneDebate")
    return agents


class DebateConfig(PatternConfig):
    """OneOnOneDebate's parameters, declared once: validated before any model call.

    The fields are ``OneOnOneDebate``'s constructor parameters, in swarms' order, with
    its defaults.

    Attributes:
        max_loops: Number of conversational turns. One agent speaks per loop, alternating.
        agents: Exactly two agents (``run()`` raises ``ValueError`` otherwise); None: set later.
        img: Optional image passed to each agent's call.
        output_type: Format for the returned conversation history.
        send_intros: Introduce each debater to its opponent first (not posted; one call each).
        verbose: Print each posted message.
        context: fsmchat's extension: the speakers' context policy, ``"full"`` or ``LastMessages(n)``
            (each private memory's first message and its last n); ``Summarize`` is refused (the
            speakers answer from private memories, which a summary of the conversation does not
            shorten). An agent's own ``context`` takes precedence; None: each agent's own, else ``"full"``.

    Examples:
        >>> from fsmchat.patterns import DebateConfig
        >>> cfg = DebateConfig(max_loops=3)
        >>> cfg.agents, cfg.output_type, cfg.send_intros
        (None, 'str-all-except-first', True)
    """

    max_loops: Annotated[int, Count(1, "turns in all, alternating from agents[0]")] = 1
    agents: Annotated[Participants, AfterValidator(debaters)] = Field(None, title="agent")
    img: str | None = None
    output_type: OutputType = "str-all-except-first"
    send_intros: bool = True
    verbose: bool = False
    context: Annotated[ContextField, AfterValidator(lambda v: check_memory_context(v, "OneOnOneDebate"))] = Field(
        None, description="fsmchat extension: the speakers' context policy (fsmchat.speakers.context)")


@dataclass
class DebateState(PatternState):
    """A debate's working state: the message the next debater answers.

    Attributes:
        message: The next debater's prompt: the task, then the other debater's last reply.

    Examples:
        >>> from fsmchat.patterns import DebateState
        >>> DebateState(message="Will open-weight models match frontier models?").snapshot()
        {'message': 'Will open-weight models match frontier models?'}
    """

    message: str = ""


@dataclass
class DebateContext(ChatContext):
    """A debate run's context: its config and its typed working state.

    Attributes:
        config: The debate's validated parameters.
        state: The working state (the message the next debater answers).

    Examples:
        >>> from fsmchat import OneOnOneDebate
        >>> def optimist(turn):
        ...     return "Open models will catch up."
        >>> def skeptic(turn):
        ...     return f"Doubtful that {turn.instruction.lower()}"
        >>> seen = []
        >>> _ = OneOnOneDebate(max_loops=2, agents=[optimist, skeptic]).execute(
        ...     "Will open-weight models match frontier models?", on_start=[seen.append])
        >>> type(seen[0]).__name__, seen[0].turn, len(seen[0].memory["optimist"])
        ('DebateContext', 2, 4)
    """

    config: DebateConfig = field(kw_only=True)
    state: DebateState = field(default_factory=DebateState)

    @cached_property
    def turn_order(self) -> TurnOrder:
        """Turn t goes to ``speakers[t % 2]``, for ``max_loops`` turns in all (made once per run)."""
        return TurnOrder(2, max_turns=self.config.max_loops)


def intro_prompt(me: str, opponent: str) -> str:
    return (f"You are {me}, in a one-on-one debate against {opponent}. You will take turns: each message "
            f"you receive is {opponent}'s latest argument (the first one may be the debate topic), and "
            f"each of your replies goes to {opponent}. Argue thoughtfully and concisely.")


# ---- guards ----
def turns_remain(ctx: DebateContext) -> bool:
    """fewer than max_loops turns taken"""
    return ctx.turn_order.left(ctx.turn)


# ---- actions ----
async def introduce(ctx: ChatContext, i: int) -> str:
    """the debater is told whom it faces (not posted)"""
    me, other = ctx.speakers[i], ctx.speakers[1 - i]
    if not isinstance(me, Human):  # a person knows whom they face: nothing to ask them
        await ctx.ask_private(me, intro_prompt(me.name, other.name))
    return me.name


async def debate_turn(ctx: DebateContext, i: int) -> str:
    """the debater answers the last message; its reply is the other's next prompt"""
    speaker = ctx.speakers[i]
    assert ctx.turn_order.speaker(ctx.turn) == i, f"turn {ctx.turn} is not {speaker.name}'s"
    reply = await ctx.ask_private(speaker, ctx.state.message)
    ctx.post(speaker.name, reply, turn=ctx.turn + 1)
    ctx.state.message = reply
    ctx.turn += 1
    return speaker.name


def compile_debate(names: Sequence[str] | None = None, send_intros: bool = True, description: str = "",
                   name: str | None = None, people: Collection[str] = ()) -> StateGraph:
    """The debate graph: introductions (when sent), then turns alternating until ``max_loops``.

    Args:
        names: The two debaters' names; they only label the states (optional).
        send_intros: Start with ``intro_a`` and ``intro_b`` (the function form does not).
        description: What the diagram says the graph is.
        name: The graph's name (by default ``one_on_one_debate``, or ``one_on_one_exchange``
            without introductions).
        people: The names of ``Human`` debaters: their turn states wait for their message.

    Returns:
        The graph (``OneOnOneDebate.graph`` is this graph, validated).

    Examples:
        >>> from fsmchat.patterns import compile_debate
        >>> list(compile_debate(["Philosopher1", "Philosopher2"]).states)
        ['intro_a', 'intro_b', 'turn_a', 'turn_b', 'stop']
        >>> g = compile_debate(["Optimist", "Skeptic"], send_intros=False)
        >>> g.name, [(t.source, t.dest, t.label) for t in g.transitions if t.source == "turn_a"]
        ('one_on_one_exchange', [('turn_a', 'turn_b', 'turns_remain'), ('turn_a', 'stop', 'max_loops')])
    """
    a, b = names if names else ("agents[0]", "agents[1]")
    g = StateGraph(name or ("one_on_one_debate" if send_intros else "one_on_one_exchange"),
                   context=DebateContext, description=description)
    if send_intros:
        g.state("intro_a", bind(introduce, 0), f"{a} is told it debates {b} (not posted)")
        g.state("intro_b", bind(introduce, 1), f"{b} is told it debates {a} (not posted)")
    g.state("turn_a", bind(debate_turn, 0), f"{a} answers the last message (turn 1: the task)"
            + (PERSON_NOTE if a in people else ""), waits=a in people)
    g.state("turn_b", bind(debate_turn, 1), f"{b} answers {a}'s reply" + (PERSON_NOTE if b in people else ""),
            waits=b in people)
    g.final("stop", reason=StopReason.MAX_LOOPS)
    if send_intros:
        g.edge("intro_a", "intro_b")
        g.edge("intro_b", "turn_a")
    return add_turns(g, ["turn_a", "turn_b"], more=turns_remain, exhausted=("stop", StopReason.MAX_LOOPS),
                     every_turn=True)


class OneOnOneDebate(Pattern, kind="one_on_one_debate", config=DebateConfig):
    """Two agents alternate for ``max_loops`` turns from ``agents[0]``, after an introduction each.

    Both agents are first given a short introduction naming their opponent, then they alternate:
    each agent's response becomes the next agent's prompt. Calls = 2 + max_loops (max_loops
    without introductions); posts = max_loops; a run stops with ``stop_reason="max_loops"``.
    Exactly two agents are required (``ValueError("There must be exactly two agents in the
    dialogue.")``), checked at construction when ``agents`` is given and again by ``run``.
    ``img`` rides on every call (introductions included) as an OpenAI-style ``image_url`` part.
    Debaters exchange replies, not growing transcripts: passing an agent's whole conversation on
    each turn is the pitfall swarms' documentation page warns about, and each debater already remembers
    its own side of the exchange (private memory, per run). The task is not posted, so the
    default ``"str-all-except-first"`` leaves out the first debater's first reply.

    The attributes below are also the constructor's parameters, in this order (``DebateConfig``
    declares and validates them).

    Attributes:
        max_loops (int): Number of conversational turns. One agent speaks per loop, alternating.
        agents (list | None): Exactly two agents.
        img (str | None): Optional image passed to each agent's call.
        output_type (str): Format for the returned conversation history.
        send_intros (bool): Introduce each debater to its opponent first (fsmchat's switch; default on).
        verbose (bool): Print each posted message.
        context: The speakers' context policy (fsmchat's extension): ``"full"`` or ``LastMessages(n)``
            (``fsmchat.speakers.context``).

    Args:
        *args: The attributes above by position (``max_loops``, ``agents``, ...).
        **kwargs: The attributes above by name.
        interrupt_before: States where the run stops for a person before entering them.
        interrupt_after: States where the run stops for a person after leaving them.

    Raises:
        ConfigError: Not exactly two agents (a ``ValueError``), or a value out of range.

    Examples:
        >>> from fsmchat import OneOnOneDebate
        >>> def optimist(turn):
        ...     return "Open models will catch up."
        >>> def skeptic(turn):
        ...     return f"Doubtful that {turn.instruction.lower()}"
        >>> debate = OneOnOneDebate(max_loops=3, agents=[optimist, skeptic], output_type="str")
        >>> result = debate.execute("Will open-weight models match frontier models?")
        >>> result.path, debate.max_calls()
        (['intro_a', 'intro_b', 'turn_a', 'turn_b', 'turn_a', 'stop'], 5)
        >>> print(result.output)
        optimist: Open models will catch up.
        <BLANKLINE>
        skeptic: Doubtful that open models will catch up.
        <BLANKLINE>
        optimist: Open models will catch up.
    """

    name = "OneOnOneDebate"
    config: DebateConfig
    speaks_from_memory = True  # each speaker answers from its private memory

    def _validate(self) -> None:
        if self.config.agents is not None:  # refused now; run() checks again (the roster may be set later)
            self._speakers()

    def _calls_by_speaker(self) -> list[tuple[Speaker, int]]:
        """An introduction each (when sent; a person gets none), then turns alternating from agents[0]:
        2 + max_loops."""
        first, second = self._speakers()
        intro, loops = (1 if self.config.send_intros else 0), self.config.max_loops
        return [(first, intro + (loops + 1) // 2), (second, intro + loops // 2)]

    def _speakers(self) -> list[Speaker]:
        agents = self.config.agents
        if agents is None or len(agents) != 2:
            raise ConfigError(TWO_AGENTS)
        return check_roster(agents, type(self).__name__)

    def _check_run(self, task: object) -> None:
        self._speakers()
        check_task(task, type(self).__name__)
        check_image(self.config.img, type(self).__name__)

    def _compile(self) -> StateGraph:
        agents = self.config.agents
        speakers = [as_speaker(a) for a in agents] if agents and len(agents) == 2 else None
        names = [s.name for s in speakers] if speakers else None
        return compile_debate(names, self.config.send_intros, people=people_in(speakers or []))

    def _speaking_states(self, g: StateGraph) -> list[tuple[str, list[Speaker]]]:
        agents = self.config.agents
        if not agents or len(agents) != 2:
            return []  # no roster yet: drawn as the bare exchange (_compile)
        a, b = self._speakers()
        states = [("intro_a", [a]), ("intro_b", [b])] if self.config.send_intros else []
        return states + [("turn_a", [a]), ("turn_b", [b])]

    def _context(self, task: str) -> DebateContext:
        ctx = DebateContext(task, self._speakers(), images=check_image(self.config.img, type(self).__name__),
                            config=self.config, state=DebateState(message=task))
        return ctx


def one_on_one_debate(max_loops: int = 1, task: str | None = None, agents: Sequence[ParticipantLike] | None = None,
                      img: str | None = None, output_type: str = "str-all-except-first",
                      send_intros: bool = False) -> Any:
    """The function form of the two-agent debate, without the introductions.

    On each turn it records the speaker's final answer and passes only that answer to the other
    agent; calls = max_loops. An agent's exception is re-raised with the transcript so far on
    ``exc.fsmchat_result``.

    Args:
        max_loops: Number of turns. One agent speaks per turn, alternating, starting with ``agents[0]``.
        task: The opening message sent to the first agent (required).
        agents: Exactly two agents. Any other number raises ``ValueError``.
        img: Optional image passed to each agent's call.
        output_type: Format for the returned conversation history.
        send_intros: Introduce the debaters first, as ``OneOnOneDebate`` does (fsmchat's switch).

    Returns:
        The conversation, formatted per ``output_type``.

    Raises:
        ConfigError: Not exactly two agents (a ``ValueError``).
        ValueError: No task.

    Examples:
        >>> from fsmchat import one_on_one_debate
        >>> def optimist(turn):
        ...     return "Open models will catch up."
        >>> def skeptic(turn):
        ...     return f"Doubtful that {turn.instruction.lower()}"
        >>> print(one_on_one_debate(max_loops=2, task="Will open-weight models match frontier models?",
        ...                         agents=[optimist, skeptic], output_type="str"))
        optimist: Open models will catch up.
        <BLANKLINE>
        skeptic: Doubtful that open models will catch up.
    """
    if agents is None or len(agents) != 2:
        raise ConfigError(TWO_AGENTS)
    if not isinstance(task, str) or not task.strip():
        raise ValueError(f"one_on_one_debate needs task=: the opening message sent to agents[0] "
                         f"(a non-empty string), got {task!r}")
    debate = OneOnOneDebate(max_loops=max_loops, agents=agents, img=img, output_type=output_type,
                            send_intros=send_intros)
    return debate.run(task)


def example_graph() -> StateGraph:
    """OneOnOneDebate's graph for the gallery (swarms' two philosophers)."""
    return compile_debate(["Philosopher1", "Philosopher2"], send_intros=True,
                          description="OneOnOneDebate: introductions, then alternating replies")


def example_function_graph() -> StateGraph:
    """one_on_one_debate's graph for the gallery: no introductions."""
    return compile_debate(["Optimist", "Skeptic"], send_intros=False,
                          description="one_on_one_debate: alternating replies, no introductions")
