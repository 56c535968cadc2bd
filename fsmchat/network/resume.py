"""A channel read back from its hub's store, for ``hub.resume_channel``: what its log says happened
(the lifecycle's envelopes, its texts, its agent's tool calls) and what only its state snapshot
holds (the participants in order, the knobs, the TTL, the context policy, the tools each source offered).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..checks import as_str, as_str_map, get_float, get_list, get_object, get_str
from ..graph.turns import TurnOrder
from ..speakers.context import ContextPolicy, LastMessages, check_context
from .errors import NetworkError, NotFoundError
from .events import EV_CHANNEL_CLOSED, EV_CHANNEL_EXPIRED, EV_CHANNEL_INVITE_ACK, EV_CHANNEL_INVITE_REJECT, \
    EV_CHANNEL_OPENED, EV_TEXT, HUB_SENDER, PROTOCOL_EVENTS, Envelope
from .graphs import LIFECYCLE_ACTIVE, LIFECYCLE_CLOSED, LIFECYCLE_EXPIRED, LIFECYCLE_PENDING, TURNS_CLOSED, \
    TURNS_EXPIRED, turn_state_names
from .store import KnowledgeStore


@dataclass
class StoredChannel:
    """One channel as its store holds it (``read_channel``), what a resumed ``ChannelRuntime`` starts from.

    Attributes:
        channel_id: The channel's id.
        creator: Who opened it.
        order: The participant order.
        type: The channel type.
        knobs: The normalised knobs.
        expires_at: When its TTL runs out, on the hub's clock (None: never).
        hidden: Hidden by a ``hide`` expectation.
        context: Its context policy.
        digests: The tools each tool source offered (``{source: {tool: digest}}``).
        log: Its envelopes, in order.
        lifecycle: The lifecycle's state, as the log says.
        turns: The turn graph's state to resume at: the expected speaker's ``awaiting_<p>``, or where
            the turns ended.
        acked: The invitees that acknowledged.
        rejected_by: The invitee that rejected its invite, if any.
        close_reason: The first close reason (``"ttl"`` once expired).
        closed_by: Who closed it.
        texts: The texts accepted.
        custom_events: The custom events accepted.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> from fsmchat.network.resume import read_channel
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         return read_channel(hub.store, channel.channel_id)
        >>> stored = asyncio.run(main())
        >>> stored.lifecycle, stored.turns, stored.texts, [e.seq for e in stored.log]
        ('active', 'awaiting_bob', 1, [1, 2, 3, 4])
    """

    channel_id: str
    creator: str
    order: list[str]
    type: str
    knobs: dict[str, object]
    expires_at: float | None
    hidden: bool
    context: ContextPolicy | None
    digests: dict[str, dict[str, str]]
    log: list[Envelope]
    lifecycle: str = LIFECYCLE_PENDING
    turns: str = ""
    acked: set[str] = field(default_factory=set)
    rejected_by: str | None = None
    close_reason: str | None = None
    closed_by: str | None = None
    texts: int = 0
    custom_events: int = 0


def context_data(policy: ContextPolicy | None) -> object:
    """A channel's context policy as its state stores it (``"full"``, ``{"last_messages": n}`` or None)."""
    return {"last_messages": policy.n} if isinstance(policy, LastMessages) else policy


_STATE_KEYS = ("context", "creator", "participant_order", "type", "knobs", "expires_at", "hidden")  # read in order


def read_channel(store: KnowledgeStore, channel_id: str) -> StoredChannel:
    """Read ``channel_id`` back from ``store``: its state snapshot and its log.

    Raises:
        NotFoundError: The store holds no such channel.
        NetworkError: Its state lacks a field this version writes (an older fsmchat stored it).
    """
    state = store.get_state(channel_id)
    if state is None:
        raise NotFoundError(f"channel '{channel_id}' is not in the store")
    context = state.get("context")
    missing = next((k for k in _STATE_KEYS if k not in state), None)  # the first one, as they are read
    if missing is None and isinstance(context, dict) and "last_messages" not in context:
        missing = "last_messages"
    if missing is None and "tool_digests" not in state:
        missing = "tool_digests"
    if missing is not None:
        raise NetworkError(f"channel '{channel_id}' cannot resume: its stored state has no {missing!r} (an older "
                           "fsmchat stored it)")
    where = f"channel '{channel_id}' state"
    expires_at = None if state["expires_at"] is None else get_float(state, "expires_at", where)
    policy = LastMessages(context["last_messages"]) if isinstance(context, dict) else \
        check_context(context, f"channel '{channel_id}'")
    digests = {source: as_str_map(tools, f"{where}.tool_digests.{source}")
               for source, tools in get_object(state, "tool_digests", where).items()}
    stored = StoredChannel(channel_id, get_str(state, "creator", where),
                           [as_str(p, f"{where}.participant_order") for p in get_list(state, "participant_order", where)],
                           get_str(state, "type", where), dict(get_object(state, "knobs", where)), expires_at,
                           bool(state["hidden"]), policy, digests, store.read(channel_id))
    for env in stored.log:
        kind = env.event_type
        stored.texts += kind == EV_TEXT
        stored.custom_events += kind != EV_TEXT and kind not in PROTOCOL_EVENTS
        if kind == EV_CHANNEL_INVITE_ACK:
            stored.acked.add(env.sender)
        elif kind == EV_CHANNEL_INVITE_REJECT:
            stored.rejected_by = env.sender
        elif kind == EV_CHANNEL_OPENED:
            stored.lifecycle = LIFECYCLE_ACTIVE
        elif kind == EV_CHANNEL_CLOSED:
            stored.lifecycle, stored.close_reason, stored.closed_by = LIFECYCLE_CLOSED, env.data["reason"], env.sender
        elif kind == EV_CHANNEL_EXPIRED:
            stored.lifecycle, stored.close_reason, stored.closed_by = LIFECYCLE_EXPIRED, "ttl", HUB_SENDER
    order = stored.order
    speaker = TurnOrder(len(order), first=order.index(stored.creator)).speaker(stored.texts)
    stored.turns = {LIFECYCLE_CLOSED: TURNS_CLOSED, LIFECYCLE_EXPIRED: TURNS_EXPIRED}.get(
        stored.lifecycle, turn_state_names(order)[speaker])
    return stored
