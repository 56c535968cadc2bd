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

from typing import Any, Collection, Sequence

from pydantic import Field

from ..checks import check_agents
from ..graph.state_graph import StateGraph
from ..speakers.agent import as_speaker, check_roster
from ..speakers.human import Human
from .base import PERSON_NOTE, ChatContext, Pattern, PatternConfig, bind, check_image, check_task, people_in

TWO_AGENTS = "There must be exactly two agents in the dialogue."


class DebateConfig(PatternConfig):
    """A debate's limits, validated before any model call."""

    max_loops: int = Field(1, ge=1, description="turns in all, alternating from agents[0]")
    output_type: str = "str-all-except-first"
    send_intros: bool = True


def intro_prompt(me: str, opponent: str) -> str:
    return (f"You are {me}, in a one-on-one debate against {opponent}. You will take turns: each message "
            f"you receive is {opponent}'s latest argument (the first one may be the debate topic), and "
            f"each of your replies goes to {opponent}. Argue thoughtfully and concisely.")


# ---- guards ----
def turns_remain(ctx: ChatContext) -> bool:
    """fewer than max_loops turns taken"""
    return ctx.turn < ctx.scratch["cfg"].max_loops


# ---- actions ----
async def introduce(ctx: ChatContext, i: int) -> str:
    """the debater is told whom it faces (not posted)"""
    me, other = ctx.speakers[i], ctx.speakers[1 - i]
    if not isinstance(me, Human):  # a person knows whom they face: nothing to ask them
        await ctx.ask_private(me, intro_prompt(me.name, other.name))
    return me.name


async def debate_turn(ctx: ChatContext, i: int) -> str:
    """the debater answers the last message; its reply is the other's next prompt"""
    speaker = ctx.speakers[i]
    assert ctx.turn % 2 == i, f"turn {ctx.turn} is not {speaker.name}'s"
    reply = await ctx.ask_private(speaker, ctx.scratch["message"])
    ctx.post(speaker.name, reply, turn=ctx.turn + 1)
    ctx.scratch["message"] = reply
    ctx.turn += 1
    return speaker.name


def compile_debate(names: Sequence[str] | None = None, send_intros: bool = True, description: str = "",
                   name: str | None = None, people: Collection[str] = ()) -> StateGraph:
    """The debate graph; ``names`` (the two debaters, optional) only label the states; a debater
    among ``people`` (a ``Human``) makes its turn state wait for their message."""
    a, b = names if names else ("agents[0]", "agents[1]")
    g = StateGraph(name or ("one_on_one_debate" if send_intros else "one_on_one_exchange"),
                   context=ChatContext, description=description)
    if send_intros:
        g.state("intro_a", bind(introduce, 0), f"{a} is told it debates {b} (not posted)")
        g.state("intro_b", bind(introduce, 1), f"{b} is told it debates {a} (not posted)")
    g.state("turn_a", bind(debate_turn, 0), f"{a} answers the last message (turn 1: the task)"
            + (PERSON_NOTE if a in people else ""), waits=a in people)
    g.state("turn_b", bind(debate_turn, 1), f"{b} answers {a}'s reply" + (PERSON_NOTE if b in people else ""),
            waits=b in people)
    g.final("stop", reason="max_loops")
    if send_intros:
        g.edge("intro_a", "intro_b")
        g.edge("intro_b", "turn_a")
    g.edge("turn_a", "turn_b", when=turns_remain)
    g.edge("turn_a", "stop", label="max_loops")
    g.edge("turn_b", "turn_a", when=turns_remain)
    g.edge("turn_b", "stop", label="max_loops")
    return g


class OneOnOneDebate(Pattern):
    """Two agents alternate for ``max_loops`` turns from ``agents[0]``, after an introduction each.

    Calls = 2 + max_loops (max_loops without introductions); posts = max_loops. Exactly two
    agents are required (``ValueError("There must be exactly two agents in the dialogue.")``),
    checked at construction when ``agents`` is given and again by ``run``. ``img`` rides on every
    call (introductions included) as an OpenAI-style ``image_url`` part. Debaters exchange
    replies, not growing transcripts: passing an agent's whole conversation on each turn is the
    pitfall the reference page warns about, and each debater already remembers its own side of
    the exchange (private memory, per run).
    """

    name = "OneOnOneDebate"

    def __init__(self, max_loops: int = 1, agents: Sequence[Any] | None = None, img: str | None = None,
                 output_type: str = "str-all-except-first", *, send_intros: bool = True, verbose: bool = False,
                 interrupt_before: Sequence[str] | None = None, interrupt_after: Sequence[str] | None = None):
        self.config = DebateConfig.make(type(self).__name__, max_loops=max_loops, output_type=output_type,
                                        send_intros=send_intros, verbose=verbose)
        self.max_loops, self.agents, self.img, self.output_type = max_loops, agents, img, output_type
        self.send_intros, self.verbose = send_intros, verbose
        if check_agents(agents, type(self).__name__) is not None:  # refused now; run() checks again (set later)
            self._speakers()
        self._set_interrupts(interrupt_before, interrupt_after)

    def _calls_by_speaker(self) -> list[tuple[Any, int]]:
        """An introduction each (when sent; a person gets none), then turns alternating from agents[0]:
        2 + max_loops."""
        first, second = self._speakers()
        intro, loops = (1 if self.config.send_intros else 0), self.config.max_loops
        return [(first, intro + (loops + 1) // 2), (second, intro + loops // 2)]

    def _speakers(self) -> list[Any]:
        if self.agents is None or len(self.agents) != 2:
            raise ValueError(TWO_AGENTS)
        return check_roster(self.agents, type(self).__name__)

    def _check_run(self, task: Any) -> None:
        self._speakers()
        check_task(task, type(self).__name__)
        check_image(self.img, type(self).__name__)

    def _compile(self) -> StateGraph:
        speakers = [as_speaker(a) for a in self.agents] if self.agents and len(self.agents) == 2 else None
        names = [s.name for s in speakers] if speakers else None
        return compile_debate(names, self.config.send_intros,
                              people=people_in(speakers or []))

    def _context(self, task: str) -> ChatContext:
        ctx = ChatContext(task, self._speakers(), images=check_image(self.img, type(self).__name__))
        ctx.stats.roster = list(ctx.speakers)
        ctx.scratch.update(cfg=self.config, message=task)
        return ctx


def one_on_one_debate(max_loops: int = 1, task: str | None = None, agents: Sequence[Any] | None = None,
                      img: str | None = None, output_type: str = "str-all-except-first",
                      send_intros: bool = False) -> Any:
    """The function form: no introductions (unless ``send_intros``), calls = max_loops, only each
    reply is passed on. Returns the output per ``output_type``; an agent's exception is
    re-raised with the transcript so far on ``exc.fsmchat_result``."""
    if agents is None or len(agents) != 2:
        raise ValueError(TWO_AGENTS)
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
