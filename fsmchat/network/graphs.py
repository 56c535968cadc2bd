"""The two state graphs of a discussion channel, stepped by the hub through the engine's ``GraphRun.fire``.

- **lifecycle** (one graph shared by every channel): ``pending -> active -> closed | expired``.
  ``pending`` sends the invites; each ack is an event; the last one opens the channel.
- **turns** (built per channel from its participant order): ``awaiting_<p>`` for each participant,
  a ``text`` event moving to ``awaiting_<next>`` (the round-robin rule, drawn by
  ``fsmchat.graph.turns.add_turns`` as RoundRobinSwarm's and the flow Discussion's), an optional exact cap
  (``text [reaches_cap]`` ends the turns at exactly ``max_texts`` texts), and ``close``/``expire``
  following the lifecycle.

Guards and actions are small functions over ``ChannelContext``; their names and docstrings are
the diagrams' labels.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Collection, Mapping, Sequence

from ..graph.state_graph import StateGraph, state_names
from ..graph.turns import Exit, TurnOrder, add_turns
from ..speakers.context import ContextPolicy
from ..speakers.tool_loop import ToolLoop, add_tool_loop
from ..speakers.tools import has_tools
from .clock import Clock, monotonic
from .events import EV_CHANNEL_INVITE, EV_CHANNEL_OPENED, Envelope
from ..speakers.speaker import Speaker

if TYPE_CHECKING:
    from ..engine import GraphRun
    from .expectations import Expectation

LIFECYCLE_PENDING, LIFECYCLE_ACTIVE, LIFECYCLE_CLOSED, LIFECYCLE_EXPIRED = "pending", "active", "closed", "expired"
TURNS_CLOSED, TURNS_EXPIRED = "closed", "expired"


def _no_emit(*_a: object, **_k: object) -> None:
    return None


@dataclass
class ChannelContext:
    """What a channel's guards and actions read and write (one per channel, shared by its two graphs).

    The hub makes one as it opens a channel (``hub.runtime(channel_id).ctx``).

    Attributes:
        channel_id: The channel's id.
        creator: The agent that opened it (it speaks first).
        order: The participant order, creator first.
        max_texts: Close at exactly this many texts (None: no cap).
        expires_at: When the TTL runs out, on the hub's clock (None: never).
        clock: The hub's clock.
        emit: Records an envelope: ``(event_type, *, sender, audience, data) -> Envelope``.
        expectations: The channel's expectations (``turn_within``...).
        type: The channel type (``"discussion"``).
        knobs: The normalised knobs.
        acked: The invitees that acknowledged.
        rejected_by: The invitee that rejected its invite, if any.
        close_reason: The first close reason (``"ttl"`` once expired).
        closed_by: Who closed it (a participant, or ``"hub"``).
        turn_count: Texts accepted so far.
        turn_started: When the current turn began, on the hub's clock.
        hidden: Hidden from ``hub.list_channels()`` (a ``hide`` expectation fired this turn).
        fired: (expectation index, turn) already reported.
        people: The participants that are people (``Human`` clients).
        speakers: The participants whose speakers have tools, and those speakers (their turn
            states are drawn with their tool loops).
        tool_loop: The channel's ``ToolLoop`` (its speaking block; the tool loop's guards read it).
        events: The events its tool states' actions record (``tool_error``, ``tool_decision``...),
            told to the hub's listeners as each step is committed.
        context: The channel's context policy (``client.open(context=...)``): what its participants'
            models are sent of it (None: the recent window, older texts folded into one line).
        lifecycle: The lifecycle graph's run.
        turns: The turn graph's run.

    Examples:
        >>> from fsmchat.network import ChannelContext
        >>> ctx = ChannelContext("discussion-1", "alice", ["alice", "bob", "carol"], max_texts=6)
        >>> ctx.invitees, ctx.state
        (['bob', 'carol'], 'pending')
    """

    channel_id: str
    creator: str
    order: list[str]
    max_texts: int | None = None
    expires_at: float | None = None
    clock: Clock = monotonic
    emit: Callable[..., Envelope | None] = _no_emit  # (event_type, *, sender, audience, data) -> Envelope
    expectations: Sequence["Expectation"] = ()
    type: str = "discussion"
    knobs: dict[str, object] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)
    rejected_by: str | None = None
    close_reason: str | None = None
    closed_by: str | None = None
    turn_count: int = 0
    turn_started: float = 0.0
    hidden: bool = False
    fired: set[tuple[int, int]] = field(default_factory=set)  # (expectation index, turn) already reported
    people: frozenset[str] = frozenset()  # participants that are people (Human clients)
    speakers: dict[str, Speaker] = field(default_factory=dict)  # participants whose speakers have tools
    tool_loop: ToolLoop | None = None  # the channel's ToolLoop (the tool_calls / needs_person guards read it)
    events: list[dict[str, object]] = field(default_factory=list)  # its tool states' events, told to the listeners
    context: ContextPolicy | None = None  # the channel's policy: "full", LastMessages(n) or None (the recent window)
    lifecycle: "GraphRun | None" = None
    turns: "GraphRun | None" = None

    @property
    def invitees(self) -> list[str]:
        """Every participant but the creator, in order."""
        return [p for p in self.order if p != self.creator]

    @property
    def state(self) -> str:
        """The lifecycle's state: ``pending``, ``active``, ``closed`` or ``expired``."""
        return self.lifecycle.state if self.lifecycle is not None else LIFECYCLE_PENDING

    @property
    def turn_order(self) -> TurnOrder:
        """The creator speaks first, then ``order`` round robin; at most ``max_texts`` texts."""
        return TurnOrder(len(self.order), first=self.order.index(self.creator), max_turns=self.max_texts)


# ---- lifecycle guards ----
def all_acked(ctx: ChannelContext) -> bool:
    """every invitee has acknowledged"""
    return set(ctx.invitees) <= ctx.acked


def acks_missing(ctx: ChannelContext) -> bool:
    """some invitee has not acknowledged yet"""
    return not all_acked(ctx)


def ttl_elapsed(ctx: ChannelContext) -> bool:
    """the channel's TTL has run out on the hub's clock"""
    return ctx.expires_at is not None and ctx.clock() >= ctx.expires_at


def invite_rejected(ctx: ChannelContext) -> bool:
    """an invitee rejected its invite"""
    return ctx.rejected_by is not None


# ---- lifecycle actions ----
def send_invites(ctx: ChannelContext) -> list[str]:
    """One invite per invitee (the hub sends them once, as the channel is created in ``pending``;
    ``pending`` has no action because each partial ack re-enters it)."""
    for invitee in ctx.invitees:
        ctx.emit(EV_CHANNEL_INVITE, sender=ctx.creator, audience=(invitee,),
                 data={"type": ctx.type, "participants": list(ctx.order), "knobs": dict(ctx.knobs)})
    return ctx.invitees


def announce_opened(ctx: ChannelContext) -> list[str]:
    """EV_CHANNEL_OPENED to everyone; the first turn starts"""
    ctx.turn_started = ctx.clock()
    ctx.emit(EV_CHANNEL_OPENED, audience=tuple(ctx.order), data={"participants": list(ctx.order)})
    return list(ctx.order)


def lifecycle_graph(name: str = "discussion_channel") -> StateGraph:
    """A channel's lifecycle: invites and acks, then active until close() or TTL.

    ``pending -> active -> closed | expired``: ``pending`` waits for every ack (each ack is an
    event; the last one opens the channel), a rejected invite or ``close`` closes it, the TTL
    expires it.

    Args:
        name: The graph's name.

    Examples:
        >>> from fsmchat.network import lifecycle_graph
        >>> g = lifecycle_graph()
        >>> list(g.states)
        ['pending', 'active', 'closed', 'expired']
        >>> [(t.dest, t.label) for t in g.transitions if t.source == "active"]
        [('expired', 'expire'), ('closed', 'close')]
    """
    g = StateGraph(name, context=ChannelContext,
                   description="Discussion channel lifecycle: invite, ack, active until close() or TTL")
    g.state(LIFECYCLE_PENDING, None, "one invite per invitee sent; waiting for every ack")
    g.state(LIFECYCLE_ACTIVE, announce_opened)
    g.final(LIFECYCLE_CLOSED, "close(), max_texts or a rejected invite; first reason kept", reason="closed")
    g.final(LIFECYCLE_EXPIRED, "TTL ran out", reason="ttl")
    g.edge(LIFECYCLE_PENDING, LIFECYCLE_ACTIVE, when=all_acked, label="ack")
    g.edge(LIFECYCLE_PENDING, LIFECYCLE_PENDING, when=acks_missing, label="ack")
    g.edge(LIFECYCLE_PENDING, LIFECYCLE_CLOSED, when=invite_rejected, label="reject")
    g.edge(LIFECYCLE_PENDING, LIFECYCLE_EXPIRED, when=ttl_elapsed, label="expire")
    g.edge(LIFECYCLE_PENDING, LIFECYCLE_CLOSED, label="close")
    g.edge(LIFECYCLE_ACTIVE, LIFECYCLE_EXPIRED, when=ttl_elapsed, label="expire")
    g.edge(LIFECYCLE_ACTIVE, LIFECYCLE_CLOSED, label="close")
    return g


LIFECYCLE = lifecycle_graph()
"""The lifecycle graph every channel runs (compiled once; each channel is one model on its machine).

Examples:
    >>> from fsmchat.network import LIFECYCLE
    >>> LIFECYCLE.name, LIFECYCLE.initial
    ('discussion_channel', 'pending')
"""


# ---- turn rule ----
def reaches_cap(ctx: ChannelContext) -> bool:
    """this text is the max_texts-th"""
    return not ctx.turn_order.left(ctx.turn_count + 1)


def channel_closed(ctx: ChannelContext) -> bool:
    """the channel lifecycle is closed"""
    return ctx.lifecycle is not None and ctx.lifecycle.state == LIFECYCLE_CLOSED


def channel_expired(ctx: ChannelContext) -> bool:
    """the channel lifecycle is expired"""
    return ctx.lifecycle is not None and ctx.lifecycle.state == LIFECYCLE_EXPIRED


def turn_state_names(order: Sequence[str]) -> list[str]:
    """``awaiting_<participant>`` per participant (the graph layer's one state-name rule)."""
    return state_names(order, reserved=(TURNS_CLOSED, TURNS_EXPIRED), prefix="awaiting_", fallback="_")


def turn_graph(order: Sequence[str], max_texts: int | None = None, name: str = "discussion_turns",
               first: str | None = None, people: Collection[str] = (),
               speakers: Mapping[str, Speaker] | None = None) -> StateGraph:
    """The round-robin turn rule for ``order``: one ``awaiting_<p>`` state per participant.

    ``first`` speaks first, and after ``order[i]`` speaks ``order[(i + 1) % N]`` is expected;
    with ``max_texts`` the turns end at exactly that many texts; ``close`` and ``expire`` follow
    the lifecycle.

    Args:
        order: The participant order (at least 2).
        max_texts: End the turns at exactly this many texts (None: no cap).
        name: The graph's name.
        first: Who speaks first (the creator; default ``order[0]``).
        people: The ``Human`` participants: their turn states are drawn as waiting for a person
            (the channel waits there until they send).
        speakers: Each participant's speaker (an ``Agent``...): one with tools is drawn with its
            tool loop as every pattern's, ``awaiting_<p> -[tool_calls]-> tools_awaiting_<p> ->
            awaiting_<p>`` and its wait point ``approve_awaiting_<p>``, with the same actions (the
            channel steps them, committing each call and result). Without tools nothing changes.

    Raises:
        ValueError: Fewer than 2 participants.

    Examples:
        >>> from fsmchat.network import turn_graph
        >>> g = turn_graph(["alice", "bob", "carol"], max_texts=6)
        >>> list(g.states)
        ['awaiting_alice', 'awaiting_bob', 'awaiting_carol', 'closed', 'expired']
        >>> g.description
        'Discussion turns (round robin): alice -> bob -> carol -> alice ...; closes at exactly 6 texts'
    """
    order = list(order)
    if len(order) < 2:
        raise ValueError(f"a discussion turn graph needs at least 2 participants, got {order}")
    states = turn_state_names(order)
    turns = TurnOrder(len(order), first=order.index(first) if first is not None else 0)
    cap = f"; closes at exactly {max_texts} texts" if max_texts is not None else ""
    spoken = [order[turns.speaker(t)] for t in range(turns.n)]
    g = StateGraph(name, context=ChannelContext, initial=states[turns.first],
                   description=f"Discussion turns (round robin): {' -> '.join(spoken)} -> {spoken[0]} ...{cap}")
    for p, s in zip(order, states):
        g.state(s, None, f"{p} speaks next" + (" (a person: waits for their text)" if p in people else ""),
                waits=p in people)
    g.final(TURNS_CLOSED, "channel closed or max_texts reached", reason="closed")
    g.final(TURNS_EXPIRED, "channel expired", reason="ttl")
    exits: list[Exit[ChannelContext]] = [(TURNS_CLOSED, reaches_cap, "text")] if max_texts is not None else []
    ends: list[Exit[ChannelContext]] = [(TURNS_CLOSED, channel_closed, "close"), (TURNS_EXPIRED, channel_expired, "expire")]
    add_turns(g, states, exits=exits + ends, label="text")
    for p, s in zip(order, states):
        speaker = (speakers or {}).get(p)
        if speaker is None or not has_tools(speaker):
            continue
        add_tool_loop(g, s, [speaker], events=True, exits=ends)  # the channel may end while a tool runs
    return g


# ---- gallery factories (zero-argument) ----
def example_lifecycle_graph() -> StateGraph:
    """The discussion channel lifecycle, for the graphs/ gallery.

    Examples:
        >>> from fsmchat.network import example_lifecycle_graph
        >>> example_lifecycle_graph().name
        'discussion_channel'
    """
    return lifecycle_graph()


def example_turn_graph() -> StateGraph:
    """The reference's alice/bob/carol turn rule, for the graphs/ gallery.

    Examples:
        >>> from fsmchat.network import example_turn_graph
        >>> example_turn_graph().description
        'Discussion turns (round robin): alice -> bob -> carol -> alice ...'
    """
    return turn_graph(["alice", "bob", "carol"])
