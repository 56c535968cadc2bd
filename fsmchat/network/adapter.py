"""The discussion adapter: participant order, knobs, and the turn rule (``validate_send``,
``can_send``), all read from the channel's turn graph rather than from hand-kept variables."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from ..models import TraceEvent
from ..engine import GraphRun
from .errors import NotFoundError, ProtocolError
from .events import EV_TEXT, ORDERING_ROUND_ROBIN, ORDERINGS
from .graphs import LIFECYCLE_ACTIVE, LIFECYCLE_CLOSED, LIFECYCLE_EXPIRED, ChannelContext, \
    turn_graph, turn_state_names, ttl_elapsed

DISCUSSION = "discussion"
KNOWN_KNOBS = ("max_texts", "ordering")


@dataclass(slots=True)
class DiscussionState:
    """The reference's adapter state: who speaks in which order, who is next, how many texts so far.

    ``hub.adapter_state(channel_id)`` returns a snapshot.

    Attributes:
        participant_order: The speaking order, creator first.
        expected_next_speaker: Who may send the next text.
        turn_count: Texts accepted so far.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice, bob, carol = [await hub.register(n) for n in ("alice", "bob", "carol")]
        ...         channel = await alice.open(target=["bob", "carol"])
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         return hub.adapter_state(channel.channel_id)
        >>> asyncio.run(main())
        DiscussionState(participant_order=['alice', 'bob', 'carol'], expected_next_speaker='bob', turn_count=1)
    """

    participant_order: list[str]
    expected_next_speaker: str
    turn_count: int = 0


def check_knobs(knobs: Mapping[str, object] | None) -> dict[str, object]:
    """Normalised knobs, or ``ProtocolError`` before anything is created or sent.

    ``ordering`` defaults to round robin (the only one shipped); ``max_texts`` (fsmchat's exact
    cap) is a positive integer or absent. ``client.open`` checks its ``knobs`` with it.

    Args:
        knobs: A discussion's knobs (None: the defaults).

    Raises:
        ProtocolError: An unknown knob or ordering, or a bad ``max_texts``.

    Examples:
        >>> from fsmchat.network import check_knobs
        >>> check_knobs({"max_texts": 6})
        {'ordering': 'round_robin', 'max_texts': 6}
        >>> check_knobs({"ordering": "random"})
        Traceback (most recent call last):
        ...
        fsmchat.network.errors.ProtocolError: discussion knobs.ordering='random' not supported; choose from ['round_robin']
    """
    knobs = dict(knobs or {})
    ordering = knobs.get("ordering", ORDERING_ROUND_ROBIN)
    if ordering not in ORDERINGS:
        raise ProtocolError(f"discussion knobs.ordering={ordering!r} not supported; choose from {list(ORDERINGS)}")
    unknown = sorted(k for k in knobs if k not in KNOWN_KNOBS)
    if unknown:
        raise ProtocolError(f"discussion knobs {unknown} not supported; known knobs: {list(KNOWN_KNOBS)}")
    max_texts = knobs.get("max_texts")
    if max_texts is not None and (isinstance(max_texts, bool) or not isinstance(max_texts, int) or max_texts < 1):
        raise ProtocolError(f"discussion knobs.max_texts={max_texts!r} must be a positive integer (the exact "
                            "number of texts after which the channel closes)")
    return {"ordering": ordering, **({"max_texts": max_texts} if max_texts is not None else {})}


def participant_order(creator: str, targets: Sequence[object], known: Iterable[str]) -> list[str]:
    """The channel's participant order (docs/semantics.md): the creator first, then the targets in order.

    When the creator is listed among the targets, the targets' order is kept as given (the
    creator at its listed place). The creator speaks first either way.

    Args:
        creator: The agent opening the channel.
        targets: The invitees' ids, in order.
        known: Every registered agent id.

    Raises:
        ProtocolError: A duplicate target, or fewer than 2 participants.
        NotFoundError: A target that is not registered.

    Examples:
        >>> from fsmchat.network import participant_order
        >>> participant_order("alice", ["bob", "carol"], known=["alice", "bob", "carol"])
        ['alice', 'bob', 'carol']
        >>> participant_order("alice", ["bob", "alice", "carol"], known=["alice", "bob", "carol"])
        ['bob', 'alice', 'carol']
    """
    known = set(known)
    seen: set[str] = set()
    ids: list[str] = []
    for t in targets:
        if not isinstance(t, str):
            raise ProtocolError(f"discussion targets are agent ids (str), got {type(t).__name__} {t!r}")
        if t in seen:
            raise ProtocolError(f"discussion target {t!r} is listed twice")
        seen.add(t)
        ids.append(t)
        if t != creator and t not in known:
            raise NotFoundError(f"discussion target {t!r} is not a registered agent; registered: {sorted(known)}")
    order = ids if creator in seen else [creator, *ids]
    if len(order) < 2:
        raise ProtocolError(f"a discussion needs at least 2 participants (creator first, then targets), "
                            f"got {order}")
    return order


class DiscussionAdapter:
    """One channel's turn rule, held by a ``GraphRun`` (the engine's runner) on the channel's turn graph.

    The expected speaker is the participant of the turn graph's current ``awaiting_<p>`` state;
    an accepted text is the graph's ``text`` event. ``validate_send`` rejects a text from anyone
    other than the expected speaker, sends from non-participants and sends to a closed channel;
    protocol and custom events bypass the turn check. Each channel's runtime holds one
    (``hub.runtime(channel_id).adapter``).

    Args:
        ctx: The channel's context.
        observers: Called with each ``TraceEvent`` of the turn graph.
        start: The turn graph's state to start in (a resumed channel's); None: its initial state.

    Examples:
        >>> import asyncio
        >>> from fsmchat import EV_TEXT, Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         adapter = hub.runtime(channel.channel_id).adapter
        ...         before = adapter.expected, adapter.can_send("bob")
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         return before, adapter.expected, adapter.turns.state
        >>> asyncio.run(main())
        (('alice', False), 'bob', 'awaiting_bob')
    """

    type = DISCUSSION

    def __init__(self, ctx: ChannelContext, observers: Iterable[Callable[[TraceEvent], None]] = (),
                 start: str | None = None):
        self.ctx = ctx
        self.graph = turn_graph(ctx.order, ctx.max_texts, first=ctx.creator, people=ctx.people,
                                speakers=ctx.speakers)
        self._speaker_of = dict(zip(turn_state_names(ctx.order), ctx.order))
        self.turns = GraphRun(self.graph, ctx, observers=observers, clock=ctx.clock, start=start)
        ctx.turns = self.turns

    # ---- reading ----
    @property
    def expected(self) -> str:
        """Who speaks next: the turn graph's state, or (once the turns ended) the next in order."""
        who = self._speaker_of.get(self.turns.state)
        return who if who is not None else self.ctx.order[self.ctx.turn_order.speaker(self.ctx.turn_count)]

    def state(self) -> DiscussionState:
        """A snapshot of AG2's adapter state."""
        return DiscussionState(list(self.ctx.order), self.expected, self.ctx.turn_count)

    def missing_acks(self) -> list[str]:
        """The invitees that have not acknowledged yet."""
        return [p for p in self.ctx.invitees if p not in self.ctx.acked]

    def validate_send(self, sender: str, event_type: str) -> None:
        """Raise ``ProtocolError`` if ``sender`` may not send ``event_type`` now; changes nothing.

        Non-participants are refused; every send to a closed or expired channel is refused; only
        text is turn-gated (protocol and custom events pass at any time while the channel lives).
        """
        cid = self.ctx.channel_id
        if sender not in self.ctx.order:
            raise ProtocolError(f"'{sender}' is not a participant of channel '{cid}'")
        state = self.ctx.state
        if state == LIFECYCLE_CLOSED:
            raise ProtocolError(f"channel '{cid}' is closed")
        if state == LIFECYCLE_EXPIRED or ttl_elapsed(self.ctx):
            raise ProtocolError(f"channel '{cid}' is expired")
        if event_type != EV_TEXT:
            return
        if state != LIFECYCLE_ACTIVE:
            raise ProtocolError(f"channel '{cid}' is not open yet: waiting for invite acks from "
                                f"{self.missing_acks()}")
        expected = self.expected
        if sender != expected or not self.turns.can_fire("text"):
            raise ProtocolError(f"discussion channel '{cid}' expects '{expected}' to speak, got '{sender}'")

    def can_send(self, agent_id: str) -> bool:
        """Whether a text from ``agent_id`` would be accepted now (no side effects)."""
        try:
            self.validate_send(agent_id, EV_TEXT)
        except ProtocolError:
            return False
        return True

    # ---- stepping (the hub calls these after validate_send) ----
    def accept_text(self, sender: str) -> bool:
        """Advance the turn graph by one text; True when that text ended the turns (max_texts)."""
        self.turns.fire("text", {"sender": sender, "turn": self.ctx.turn_count})
        self.ctx.turn_count += 1
        self.ctx.turn_started = self.ctx.clock()
        self.ctx.hidden = False
        return self.turns.finished

    def end(self, label: str) -> None:
        """Follow the lifecycle into ``close`` / ``expire`` (no-op once the turns have ended)."""
        if not self.turns.finished:
            self.turns.fire(label)
