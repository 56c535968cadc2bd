"""The bid-based, self-selecting ``GroupChat`` (swarms), as a state graph:

    seed -> bid -> select -> post -> penalize -> (bid | stop)
    seed -> stop [max_loops]      select -> stop [lull]

Every agent bids each turn through a forced ``respond(score, message)`` call, concurrently;
the best recency-adjusted bid strictly above ``threshold`` is posted (no second call).

People in the loop (fsmchat's own extension): ``interrupt_before=["post"]`` draws a
``before_post`` wait state where a person approves, edits or rejects the winner's message (or
posts their own); a ``Human`` participant never bids but gets a ``claim_<name>`` wait state
before each bid round, where their message takes the floor.

Tools (fsmchat's own extension): a bidder with tools it can run may call them before it bids. It
is offered its tools and ``respond`` with ``tool_choice="required"``; a tool call is a tool round
of the ``bid`` state (``bid -[tool_calls]-> tools_bid -> bid``, each call's result committed
before the bidder is asked again; the other bids of the turn are kept, not asked again), and
``respond`` is forced once the bidder's ``max_tool_rounds`` are used. Every bidder's tools run,
before anyone is selected; each bidder's calls are recorded as a ``bid_tools`` event of the turn
and the winner's posted message carries its own (``Message.tool_calls``). Without tools a bid is
the forced ``respond`` call as before, and the graph is unchanged.
"""
from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass, field
from typing import Annotated, Callable, Sequence

from pydantic import AfterValidator, Field, model_validator

from ..checks import Amount, Count, check_agents
from ..config.convert import ContextField, Speakers
from ..engine import STEP, mark_replayable
from ..errors import ConfigError, LimitReached, ModelCallError, fatal_error
from ..speakers.classify import grouped_failures
from ..graph.state_graph import StateGraph, state_names
from ..models import Message, StopReason
from ..speakers.agent import Agent, Speaker, Turn, check_roster
from ..speakers.context import ContextPolicy, LastMessages, check_context, view
from ..speakers.human import PERSON_BID, USER, Edit, Human, Reject, Say, request
from ..speakers.respond import BidOutcome
from ..speakers.tools import has_tools, json_bidder_with_tools
from .base import ChatContext, OutputType, Pattern, PatternConfig, PatternState, bind
from .interrupts import TARGET, WaitPoint, insert_before


def group_chat_roster(agents: object) -> list[Speaker]:
    """At least two participants, one of them an agent that bids (people never bid), unique names."""
    if not check_agents(agents, "GroupChat") or not isinstance(agents, (list, tuple)) or len(agents) < 2:
        raise ConfigError("GroupChat requires at least 2 agents.")
    if all(isinstance(a, Human) for a in agents):
        raise ConfigError("GroupChat needs at least one agent that bids besides its Human participants")
    for a in agents:
        if isinstance(a, Agent) and a.tool_mode == "json" and has_tools(a):
            raise json_bidder_with_tools(a.name, "tool_mode='json'")
    return check_roster(agents, "GroupChat")


class GroupChatConfig(PatternConfig):
    """GroupChat's parameters, declared once: validated before any model call.

    The fields are ``GroupChat``'s constructor parameters, in swarms' order, with its
    defaults; ``GroupChat``'s attributes read and write them.

    Attributes:
        name: Name for the group chat.
        description: Description of the group chat's purpose.
        agents: Participating agents. At least two are required; each message is broadcast to the
            other agents.
        max_loops: Hard cap on total messages posted, including the initial user task.
        threshold: Minimum recency-adjusted decision score (``0..1``) required for an agent to take
            the floor for a turn (a bid must be strictly above it).
        recency_penalty: Amount subtracted from an agent's bid if it spoke within the last
            ``recency_window`` turns. Discourages one agent from monologuing; set to ``0.0`` to disable.
        recency_window: How many of the most recent speakers are subject to ``recency_penalty``.
        idle_timeout: Accepted for backward compatibility but currently unused: the chat stops on a
            bidding lull (no agent clears ``threshold``), not a wall-clock timeout.
        output_type: History format. Use ``"list"`` or ``"dict"`` to iterate individual messages.
        auto_equip: Auto-inject the ``respond`` tool into agents that lack it.
        verbose: Print each posted message as a styled panel.
        context_window: fsmchat's extension, off by default: bidders see the task and only the last
            N messages, which bounds prompt tokens per call in long chats (``context=LastMessages(N)``).
        context: fsmchat's extension: the bidders' context policy, ``"full"``, ``LastMessages(n)``
            or ``Summarize(agent=..., keep_last=k, at=0.8)`` (``fsmchat.speakers.context``); an
            agent's own ``context`` takes precedence. None: ``context_window`` if set, else each
            agent's own policy, else ``"full"``.

    Examples:
        >>> from fsmchat import Agent
        >>> from fsmchat.patterns import GroupChatConfig
        >>> cfg = GroupChatConfig(agents=[Agent("Pro"), Agent("Con")])
        >>> cfg.name, cfg.max_loops, cfg.threshold, cfg.recency_penalty
        ('dynamic-groupchat', 20, 0.5, 0.3)
        >>> GroupChatConfig(agents=[Agent("Pro"), Agent("Con")], threshold=1.0)
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: GroupChatConfig: threshold=1.0 is invalid: a finite number >= 0 and < 1 (a bid must be strictly above it, so 1 or more would silence every bid)
    """

    name: str = "dynamic-groupchat"
    description: str = "Agents take turns; one speaker per turn."
    agents: Annotated[Speakers, AfterValidator(group_chat_roster)] = Field(None, validate_default=True,
                                                                           title="agent")
    max_loops: Annotated[int, Count(1, "cap on total messages, the task included")] = 20
    threshold: Annotated[float, Amount(ge=0, lt=1, meaning="a bid must be strictly above it, so 1 or more would "
                                                           "silence every bid")] = 0.5
    recency_penalty: Annotated[float, Amount(ge=0, meaning="taken off the bid of an agent among the last "
                                                           "recency_window speakers")] = 0.3
    recency_window: Annotated[int, Count(1, "how many of the latest speakers the penalty applies to; swarms "
                                            "treats 0 as 1")] = 1
    idle_timeout: Annotated[float, Amount(ge=0, meaning="seconds; accepted for compatibility, unused")] = 8.0
    output_type: OutputType = "str-all-except-first"
    auto_equip: bool = Field(True, strict=True)
    verbose: bool = False
    context_window: Annotated[int | None, Count(1, "fsmchat extension: bidders see the task and only the last N "
                                                   "messages; None: the context policy decides")] = None
    context: Annotated[ContextField, AfterValidator(lambda v: check_context(v, "GroupChat"))] = Field(
        None, description="fsmchat extension: the bidders' context policy (fsmchat.speakers.context)")

    @model_validator(mode="after")
    def _one_policy(self) -> "GroupChatConfig":
        if self.context is not None and self.context_window is not None:
            raise ValueError(f"context_window={self.context_window} and context={self.context!r} are both set: "
                             "context_window=N is context=LastMessages(N); give one of them")
        return self

    def policy(self) -> ContextPolicy | None:
        """The chat's context policy: ``context``, else ``LastMessages(context_window)``, else None."""
        if self.context is not None:
            return check_context(self.context, "GroupChat")  # already checked (the field's validator): typed back
        return LastMessages(self.context_window) if self.context_window is not None else None


@dataclass
class GroupChatState(PatternState):
    """GroupChat's working state between steps (checkpointed after each step).

    Attributes:
        recent: The latest speakers, oldest first (the recency window).
        bids: This turn's bids, in roster order.
        winner: The roster index of the turn's winner (None: a lull).
        dropped: Turns a person rejected (they count toward ``max_loops``).

    Examples:
        >>> from fsmchat.patterns import GroupChatState
        >>> GroupChatState(recent=["critic"], winner=1).snapshot()  # what a checkpoint stores
        {'recent': ['critic'], 'bids': [], 'winner': 1, 'dropped': 0}
    """

    recent: list[str] = field(default_factory=list)  # the latest speakers (the recency window)
    bids: list[BidOutcome] = field(default_factory=list)  # this turn's bids, in roster order
    winner: int | None = None  # roster index of the turn's winner (None: a lull)
    dropped: int = 0  # turns a person rejected (they count toward max_loops)


@dataclass
class GroupChatContext(ChatContext):
    """A GroupChat run's context: its config and its typed working state.

    Attributes:
        config: The chat's validated parameters.
        state: The working state (bids, winner, recency window).

    Examples:
        >>> from fsmchat import Bid, GroupChat
        >>> def optimist(turn):
        ...     return Bid(0.9, "AI will cure diseases.")
        >>> def critic(turn):
        ...     return Bid(0.7, "Not without oversight.")
        >>> seen = []
        >>> _ = GroupChat(agents=[optimist, critic], max_loops=3).execute("AI: develop or regulate?",
        ...                                                               on_start=[seen.append])
        >>> ctx = seen[0]
        >>> type(ctx).__name__, ctx.config.max_loops, ctx.names, len(ctx.transcript)
        ('GroupChatContext', 3, ['optimist', 'critic'], 3)
    """

    config: GroupChatConfig = field(kw_only=True)
    state: GroupChatState = field(default_factory=GroupChatState)


# ---- guards ----
def under_cap(ctx: GroupChatContext) -> bool:
    """fewer than max_loops messages posted (a turn a person rejected counts as one)"""
    return len(ctx.transcript) + ctx.state.dropped < ctx.config.max_loops


def has_winner(ctx: GroupChatContext) -> bool:
    """an adjusted bid cleared the threshold"""
    return ctx.state.winner is not None


# ---- actions ----
def post_task(ctx: ChatContext) -> None:
    """post the task as message 1"""
    ctx.seed()


def bid_instruction(name: str, others: Sequence[str], sender: str, text: str) -> str:
    return (f"You are {name} in a group chat with {', '.join(others) or 'no one else'}. "
            f"The latest message is from {sender}:\n\n{text}\n\n"
            "Decide whether to speak next. Call the respond tool exactly once: score (0..1) is how much "
            "you want the floor, message is your reply to the group, or an empty string to stay silent.")


BIDS: contextvars.ContextVar[Callable[[str, str | None, BidOutcome], None] | None] = \
    contextvars.ContextVar("fsmchat_bids", default=None)
"""Given each bid of a GroupChat turn as that bidder's call returns, before the round closes:
``fn(agent, step, bid)``, ``step`` the state it was asked in (``bid``; ``review.bid`` in a flow).
``fsmchat run`` sets it to its live view while the run streams. The round is decided whole all the
same: the same calls, the same winner, the same posts. A bid kept from before a bidder's tool
round is given once, when it came."""


async def collect_bids(ctx: GroupChatContext) -> dict[str, float]:
    """every agent bids at once"""
    # replayable: after a crash the round is asked again (its bids are posted by the turn: one commit), unless
    # a bidder asks for tool calls (the tool loop then says its effects are pending: committed before they run)
    mark_replayable()
    names = [s.name for s in ctx.speakers]
    last = ctx.transcript[-1]

    policy = ctx.config.policy()
    rows: Sequence[Message] = ctx.transcript.view()
    if isinstance(policy, LastMessages):
        rows = view(rows, policy)  # the task, then the last n messages

    def turn(s: Speaker) -> Turn:  # every bidder shares one view of the rows (no copy per bid)
        others = [n for n in names if n != s.name]
        return Turn(s.name, rows, bid_instruction(s.name, others, last.role, last.content), "bid", ctx.stats)

    callers = sum(isinstance(s, Agent) for s in ctx.speakers)
    if not ctx.stats.fits(callers):  # a round that could cross max_model_calls is not started
        raise ctx.stats.refuse_over_cap(f"a bid round of {callers} request(s)")
    loop = ctx.tool_loop  # the speaking block: a bidder with tools may call them before it bids
    shown = BIDS.get()

    async def heard(s: Speaker) -> BidOutcome:  # each bid handed to ``shown`` as it comes
        kept = loop.exchanges.get(s.name)
        new = kept is None or not kept.answered  # one kept from before a tool round was given when it came
        b = await loop.bid(s, turn(s))
        if new and shown is not None and b is not PERSON_BID:
            shown(s.name, STEP.get(), b)
        return b

    got = await asyncio.gather(*((heard(s) if shown is not None else loop.bid(s, turn(s))) for s in ctx.speakers),
                               return_exceptions=True)
    for out in got:  # a run limit first (the engine takes its stop edge), then errors in roster order
        if isinstance(out, BaseException) and isinstance(fatal_error(out), LimitReached):
            raise out
    for out in got:
        if isinstance(out, BaseException):
            raise out
    bids = [b for b in got if not isinstance(b, BaseException)]  # all of them: no exception is left
    ctx.state.bids = bids
    for s in ctx.speakers:  # each bidder's tool calls this turn, in the result's events
        calls = loop.entries(s.name)
        if calls:
            ctx.events.append({"event": "bid_tools", "turn": ctx.turn, "agent": s.name, "tool_calls": calls})
    for s, b in zip(ctx.speakers, bids):
        if b.note is not None:
            ctx.events.append({**b.note, "turn": ctx.turn})
        if not b.valid:
            ctx.events.append({"event": "invalid_bid", "turn": ctx.turn, "agent": s.name, "reason": b.reason})
    if bids and all(b.error is not None or b is PERSON_BID for b in bids):  # people never bid
        raise NoBidHeard(ctx.turn, [(s.name, b.error) for s, b in zip(ctx.speakers, bids) if b.error is not None])
    return {s.name: b.score for s, b in zip(ctx.speakers, bids)}


class NoBidHeard(ModelCallError):
    """Every agent's bid call of a GroupChat turn failed: the chat ends with "error", not a lull."""

    def __init__(self, turn: int, failures: list[tuple[str, BaseException]]):
        first_agent, first = failures[0]
        cause = getattr(first, "cause", first)
        super().__init__(first_agent, cause, getattr(first, "attempts", 1), getattr(first, "model", None))
        self.failures = failures
        lines = grouped_failures(failures)  # one line per cause, the agents that share it named together
        self.args = (f"GroupChat turn {turn + 1}: every agent's bid call failed, so no bid was heard (this is not "
                     "a lull):" + (f" {lines[0]}" if len(lines) == 1 else "".join(f"\n  {line}" for line in lines)),)

    def __str__(self) -> str:
        return str(self.args[0])


def pick_speaker(ctx: GroupChatContext) -> dict[str, object]:
    """best adjusted bid strictly above threshold; ties to the earlier agent"""
    cfg = ctx.config
    recent = set(ctx.state.recent[-max(1, cfg.recency_window):])
    best_i, best = None, cfg.threshold
    adjusted, messages, invalid = {}, {}, {}
    for i, (s, b) in enumerate(zip(ctx.speakers, ctx.state.bids)):
        if not b.valid:
            invalid[s.name] = b.reason
        if not b.message:
            continue
        messages[s.name] = b.message
        score = b.score - cfg.recency_penalty if s.name in recent else b.score
        adjusted[s.name] = round(score, 6)
        if score > best:
            best_i, best = i, score
    ctx.state.winner = best_i
    mark_replayable()  # computed from the context: committed with the turn's post
    # the turn's record (trace, checkpoints, the run viewer): every bid's message, not only the winner's
    return {"winner": ctx.speakers[best_i].name if best_i is not None else None, "adjusted": adjusted,
            "threshold": cfg.threshold, "messages": messages, "invalid": invalid}


def post_winner(ctx: GroupChatContext) -> str:
    """post the winner's bid message"""
    i = ctx.state.winner
    assert i is not None, "post entered without a winner"
    speaker, bid = ctx.speakers[i], ctx.state.bids[i]
    calls = ctx.tool_loop.last.get(speaker.name)
    if calls:  # the winner called tools before it bid: its message carries them
        ctx.post(speaker.name, bid.message, score=bid.score, tool_calls=calls)
    else:
        ctx.post(speaker.name, bid.message, score=bid.score)
    ctx.turn += 1
    return speaker.name


def remember_speaker(ctx: GroupChatContext) -> None:
    """recency window"""
    recent, i = ctx.state.recent, ctx.state.winner
    assert i is not None, "penalize entered without a winner"
    recent.append(ctx.speakers[i].name)
    del recent[:-max(1, ctx.config.recency_window)]  # bounded: only the window is ever read
    mark_replayable()  # computed from the context: committed with the next turn


# ---- people in the loop ----
def approved(ctx: ChatContext) -> bool:
    """the person approved (or edited) the winner's message"""
    return ctx.people.verdict in ("approve", "edit")


def claimed(ctx: ChatContext) -> bool:
    """the person took the floor"""
    return ctx.people.verdict == "say"


POST_ALLOWED = {"approve": "post the winner's message as is",
                "edit": "post Edit(text) as the winner's message instead",
                "reject": "drop the turn (it counts toward max_loops); the winner is penalized as if it had spoken",
                "say": f"post your message (as {USER!r}) instead; the winner is penalized as for a rejection"}


def review_winner(ctx: GroupChatContext) -> str:
    """a person approves, edits or rejects the winner's message"""
    i = ctx.state.winner
    assert i is not None, "review entered without a winner"
    speaker, bid = ctx.speakers[i], ctx.state.bids[i]
    answer = ctx.people.ask(request("post", f"{speaker.name} won turn {ctx.turn + 1}: post its message?",
                                    POST_ALLOWED, proposed={"speaker": speaker.name, "content": bid.message,
                                                            "score": bid.score}, edit="text"))
    ctx.people.verdict = answer.kind
    if isinstance(answer, Edit):
        ctx.state.bids[i] = BidOutcome(bid.score, answer.text or "", bid.valid, bid.reason)
        ctx.events.append({"event": "edited", "turn": ctx.turn, "agent": speaker.name})
    elif isinstance(answer, (Reject, Say)):
        ctx.state.dropped += isinstance(answer, Reject)
        ctx.events.append({"event": "rejected", "turn": ctx.turn, "agent": speaker.name,
                           "reason": answer.reason if isinstance(answer, Reject) else "a person spoke instead"})
        if isinstance(answer, Say):
            ctx.post(USER, answer.text, by="person")
        ctx.turn += 1
    return answer.kind


def claim_floor(ctx: GroupChatContext, i: int) -> str:
    """the person may take the floor before the agents bid"""
    person = ctx.speakers[i]
    assert isinstance(person, Human), "a claim state is drawn for people only"
    answer = ctx.people.ask(request("claim", f"{person.name}: turn {ctx.turn + 1} is next; take the floor, "
                                    "or let the agents bid", CLAIM_ALLOWED, person=person.name), person)
    ctx.people.verdict = answer.kind
    if isinstance(answer, Say):
        ctx.post(person.name, answer.text, claimed=True)
        ctx.state.winner = i  # penalize remembers them as the latest speaker
        ctx.turn += 1
    return answer.kind


CLAIM_ALLOWED = {"approve": "let the agents bid for this turn", "say": "your message wins this turn"}


def add_claims(g: StateGraph, people: Sequence[tuple[int, str]]) -> None:
    """A ``claim_<name>`` wait state per person before ``bid``, in roster order: a claim posts their
    message and goes to ``penalize``; otherwise the next person is asked, then the agents bid."""
    for i, name in people:
        point = WaitPoint(bind(claim_floor, i), [("penalize", claimed, "claimed"), (TARGET, None, "passed")],
                          f"{name} (a person) may take the floor before the bids")
        insert_before(g, "bid", state_names([name], g.states, prefix="claim_")[0], point)


def compile_group_chat(name: str = "group_chat", description: str = "",
                       people: Sequence[tuple[int, str]] = ()) -> StateGraph:
    """GroupChat's graph: seed, bid, select, post, penalize, then bid again or stop.

    It does not depend on the roster, except for the people in it: each ``Human`` gets a
    ``claim_<name>`` wait state before the bids, where their message may take the floor.

    Args:
        name: The graph's name.
        description: What the diagram says the graph is.
        people: (roster index, name) of each ``Human`` participant.

    Returns:
        The graph (``GroupChat.graph`` is this graph, validated).

    Examples:
        >>> from fsmchat.patterns import compile_group_chat
        >>> g = compile_group_chat()
        >>> list(g.states)
        ['seed', 'bid', 'select', 'post', 'penalize', 'stop']
        >>> [(t.source, t.dest, t.label) for t in g.transitions if t.dest == "stop"]
        [('seed', 'stop', 'max_loops'), ('select', 'stop', 'lull'), ('penalize', 'stop', 'max_loops')]
        >>> list(compile_group_chat(people=[(2, "host")]).states)[-1]
        'claim_host'
    """
    g = StateGraph(name, context=GroupChatContext, description=description)
    g.state("seed", post_task)
    g.state("bid", collect_bids)
    g.state("select", pick_speaker)
    g.state("post", post_winner)
    g.state("penalize", remember_speaker)
    g.final("stop")
    g.edge("seed", "bid", when=under_cap)
    g.edge("seed", "stop", label=StopReason.MAX_LOOPS)
    g.edge("bid", "select")
    g.edge("select", "post", when=has_winner)
    g.edge("select", "stop", label=StopReason.LULL)
    g.edge("post", "penalize")
    g.edge("penalize", "bid", when=under_cap)
    g.edge("penalize", "stop", label=StopReason.MAX_LOOPS)
    if people:
        add_claims(g, people)
    return g


class GroupChat(Pattern, kind="group_chat", config=GroupChatConfig):
    """Turn-based, self-selecting multi-agent chat: one speaker per turn, chosen by bids.

    There is no fixed speaking order, but exactly one agent speaks per turn. Each turn, every
    agent privately "bids" (a forced ``respond(score, message)`` tool call, concurrently) on how
    much it wants the floor; the single highest recency-adjusted bidder above ``threshold`` speaks,
    and only that reply is posted. The chat ends when ``max_loops`` total messages have been
    posted (``stop_reason="max_loops"``), or a turn arrives where no agent's adjusted bid clears
    ``threshold`` (a conversational lull, ``"lull"``). A callable participant bids by returning a
    ``Bid``; a ``Human`` claims the floor instead of bidding.

    The attributes below are also the constructor's parameters, in this order
    (``GroupChatConfig`` declares and validates them; setting one later is validated the same way).

    Attributes:
        name (str): Name for the group chat.
        description (str): Description of the group chat's purpose.
        agents (list): Participating agents. At least two are required; each message is broadcast to the
            other agents.
        max_loops (int): Hard cap on total messages posted, including the initial user task.
        threshold (float): Minimum recency-adjusted decision score (``0..1``) required for an agent to take
            the floor for a turn (a bid must be strictly above it).
        recency_penalty (float): Amount subtracted from an agent's bid if it spoke within the last
            ``recency_window`` turns; ``0.0`` disables it.
        recency_window (int): How many of the most recent speakers are subject to ``recency_penalty``.
        idle_timeout (float): Accepted for backward compatibility but currently unused.
        output_type (str): History format. Use ``"list"`` or ``"dict"`` to iterate individual messages.
        auto_equip (bool): Auto-inject the ``respond`` tool into agents that lack it.
        verbose (bool): Print each posted message as a styled panel.
        context_window (int | None): Bidders see the task and only the last N messages (fsmchat's extension,
            off by default): an alias of ``context=LastMessages(N)``.
        context: The bidders' context policy (fsmchat's extension): ``"full"``, ``LastMessages(n)`` or
            ``Summarize(agent=..., keep_last=k, at=0.8)`` (``fsmchat.speakers.context``).

    Args:
        *args: The attributes above by position (``name``, ``description``, ``agents``, ...).
        **kwargs: The attributes above by name.
        interrupt_before: States where the run stops for a person before entering them
            (``["post"]``: approve, edit or reject each winner's message; the run needs a checkpoint).
        interrupt_after: States where the run stops for a person after leaving them.

    Raises:
        ConfigError: Fewer than two agents, duplicate names, or a value out of range.

    Examples:
        >>> from fsmchat import Bid, GroupChat
        >>> def optimist(turn):
        ...     return Bid(0.9, "AI will cure diseases.")
        >>> def critic(turn):
        ...     return Bid(0.7, "Not without oversight.")
        >>> chat = GroupChat(agents=[optimist, critic], max_loops=4, threshold=0.5, recency_penalty=0.3)
        >>> result = chat.execute("Should we prioritize AI development or AI regulation?")
        >>> result.stop_reason, [m.role for m in result.transcript]
        ('max_loops', ['User', 'optimist', 'critic', 'optimist'])
        >>> result.path[:5], chat.max_calls()
        (['seed', 'bid', 'select', 'post', 'penalize'], 6)
        >>> chat.threshold = 0.95  # no bid clears it: a lull after the task
        >>> chat.execute("Should we prioritize AI development or AI regulation?").stop_reason
        'lull'
    """

    config: GroupChatConfig

    def _calls_by_speaker(self) -> list[tuple[Speaker, int]]:
        """Every agent bids every turn; at most max_loops - 1 turns (a turn that posts nothing ends the
        chat; a rejected one counts toward max_loops). People make no model call (``max_calls`` skips them)."""
        return [(a, max(0, self.config.max_loops - 1)) for a in self.config.agents]

    def _compile(self) -> StateGraph:
        people = [(i, a.name) for i, a in enumerate(self.config.agents) if isinstance(a, Human)]
        return compile_group_chat(description=self.config.description, people=people)

    def _speaking_states(self, g: StateGraph) -> list[tuple[str, list[Speaker]]]:
        """Every bidder bids in ``bid``; a bidder with tools may call them there before it bids."""
        return [("bid", [a for a in self.config.agents if isinstance(a, Agent)])]

    @property
    def context_policy(self) -> ContextPolicy | None:
        """The bidders' context policy (``context``, else ``LastMessages(context_window)``)."""
        return self.config.policy()

    def _wait_point(self, where: str, qualified: str, level: StateGraph) -> WaitPoint:
        """Before ``post`` a person reviews the winner's message: ``Approve``/``Edit`` post it,
        ``Reject``/``Say`` drop it (and penalize the winner)."""
        if (where, qualified) == ("before", "post"):
            return WaitPoint(review_winner, [(TARGET, approved, "approved"), ("penalize", None, "rejected")],
                             "a person approves, edits or rejects the winner's message")
        return super()._wait_point(where, qualified, level)

    def _context(self, task: str) -> GroupChatContext:
        cfg = self.config
        speakers = [a.equipped() if cfg.auto_equip and isinstance(a, Agent) else a for a in cfg.agents]
        return GroupChatContext(task, speakers, config=self.config)


def example_graph() -> StateGraph:
    """GroupChat's graph for the gallery (it does not depend on the roster)."""
    return compile_group_chat(description="GroupChat: every agent bids each turn; the best bid above "
                                          "threshold speaks")
