"""Two-agent debates (swarms ``OneOnOneDebate`` and ``one_on_one_debate``) as a state graph:

    intro_a -> intro_b -> turn_a -> (turn_b [turns_remain] | stop [max_loops])
                          turn_b -> (turn_a [turns_remain] | stop [max_loops])

The introductions (``send_intros``) tell each debater who it faces and are not posted; the
function form starts at ``turn_a``. Turn 1's prompt is the task; every later prompt is the
other debater's last reply, exactly. Only replies travel: the reference page calls the
alternative (passing an agent's whole, growing transcript on) a pitfall. Each debater keeps a
private memory for the run (its prompts as ``user``, its replies as ``assistant``). The task is
not posted, so ``str-all-except-first`` skips the first debater's first reply.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Collection, Sequence

from pydantic import AfterValidator, Field

from ..checks import check_agents
from ..config import Participants
from ..errors import ConfigError
from ..graph.state_graph import StateGraph
from ..models import StopReason
from ..speakers.agent import Speaker, as_speaker, check_roster
from ..speakers.human import Human
from .base import (PERSON_NOTE, ChatContext, OutputType, Pattern, PatternConfig, PatternState, bind, check_image,
                   check_task, people_in)

TWO_AGENTS = "There must be exactly two agents in the dialogue."


def debaters(agents: Any) -> Any:
    """A list (or None: the debaters may be set later; ``run`` needs exactly two)."""
    check_agents(agents, "OneOnOneDebate")
    return agents


class DebateConfig(PatternConfig):
    """A debate, declared once: its parameters in the reference's order, validated before any
    model call."""

    max_loops: int = Field(1, ge=1, description="turns in all, alternating from agents[0]")
    agents: Annotated[Participants, AfterValidator(debaters)] = Field(None, title="agent")
    img: str | None = None
    output_type: OutputType = "str-all-except-first"
    send_intros: bool = True
    verbose: bool = False


@dataclass
class DebateState(PatternState):
    """A debate's working state: the message the next debater answers."""

    message: str = ""


@dataclass
class DebateContext(ChatContext):
    """A debate run's context: its config and its typed working state."""

    config: DebateConfig = field(kw_only=True)
    state: DebateState = field(default_factory=DebateState)


def intro_prompt(me: str, opponent: str) -> str:
    return (f"You are {me}, in a one-on-one debate against {opponent}. You will take turns: each message "
            f"you receive is {opponent}'s latest argument (the first one may be the debate topic), and "
            f"each of your replies goes to {opponent}. Argue thoughtfully and concisely.")


# ---- guards ----
def turns_remain(ctx: DebateContext) -> bool:
    """fewer than max_loops turns taken"""
    return ctx.turn < ctx.config.max_loops


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
    assert ctx.turn % 2 == i, f"turn {ctx.turn} is not {speaker.name}'s"
    reply = await ctx.ask_private(speaker, ctx.state.message)
    ctx.post(speaker.name, reply, turn=ctx.turn + 1)
    ctx.state.message = reply
    ctx.turn += 1
    return speaker.name


def compile_debate(names: Sequence[str] | None = None, send_intros: bool = True, description: str = "",
                   name: str | None = None, people: Collection[str] = ()) -> StateGraph:
    """The debate graph; ``names`` (the two debaters, optional) only label the states; a debater
    among ``people`` (a ``Human``) makes its turn state wait for their message."""
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
    g.edge("turn_a", "turn_b", when=turns_remain)
    g.edge("turn_a", "stop", label=StopReason.MAX_LOOPS)
    g.edge("turn_b", "turn_a", when=turns_remain)
    g.edge("turn_b", "stop", label=StopReason.MAX_LOOPS)
    return g


class OneOnOneDebate(Pattern, kind="one_on_one_debate", config=DebateConfig):
    """Two agents alternate for ``max_loops`` turns from ``agents[0]``, after an introduction each.

    Takes ``DebateConfig``'s fields: ``max_loops``, ``agents``, ``img``, ``output_type``,
    ``send_intros``, ``verbose``. Calls = 2 + max_loops (max_loops without introductions); posts =
    max_loops. Exactly two agents are required (``ValueError("There must be exactly two agents in
    the dialogue.")``), checked at construction when ``agents`` is given and again by ``run``.
    ``img`` rides on every call (introductions included) as an OpenAI-style ``image_url`` part.
    Debaters exchange replies, not growing transcripts: passing an agent's whole conversation on
    each turn is the pitfall the reference page warns about, and each debater already remembers
    its own side of the exchange (private memory, per run).
    """

    name = "OneOnOneDebate"
    config: DebateConfig

    def _validate(self) -> None:
        if self.config.agents is not None:  # refused now; run() checks again (the roster may be set later)
            self._speakers()

    def _calls_by_speaker(self) -> list[tuple[Any, int]]:
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

    def _check_run(self, task: Any) -> None:
        self._speakers()
        check_task(task, type(self).__name__)
        check_image(self.config.img, type(self).__name__)

    def _compile(self) -> StateGraph:
        agents = self.config.agents
        speakers = [as_speaker(a) for a in agents] if agents and len(agents) == 2 else None
        names = [s.name for s in speakers] if speakers else None
        return compile_debate(names, self.config.send_intros, people=people_in(speakers or []))

    def _context(self, task: str) -> DebateContext:
        ctx = DebateContext(task, self._speakers(), images=check_image(self.config.img, type(self).__name__),
                            config=self.config, state=DebateState(message=task))
        ctx.stats.roster = list(ctx.speakers)
        return ctx


def one_on_one_debate(max_loops: int = 1, task: str | None = None, agents: Sequence[Any] | None = None,
                      img: str | None = None, output_type: str = "str-all-except-first",
                      send_intros: bool = False) -> Any:
    """The function form: no introductions (unless ``send_intros``), calls = max_loops, only each
    reply is passed on. Returns the output per ``output_type``; an agent's exception is
    re-raised with the transcript so far on ``exc.fsmchat_result``."""
    if agents is None or len(agents) != 2:
        raise ConfigError(TWO_AGENTS)
    if not isinstance(task, str) or not task.strip():
        raise ValueError(f"one_on_one_debate needs task=: the opening message sent to agents[0] "
                         f"(a non-empty string), got {task!r}")
    debate = OneOnOneDebate(max_loops=max_loops, agents=agents, img=img, output_type=output_type,
                            send_intros=send_intros)
    return debate.run(task)


def example_graph() -> StateGraph:
    """OneOnOneDebate's graph for the gallery (the reference's two philosophers)."""
    return compile_debate(["Philosopher1", "Philosopher2"], send_intros=True,
                          description="OneOnOneDebate: introductions, then alternating replies")


def example_function_graph() -> StateGraph:
    """one_on_one_debate's graph for the gallery: no introductions."""
    return compile_debate(["Optimist", "Skeptic"], send_intros=False,
                          description="one_on_one_debate: alternating replies, no introductions")
