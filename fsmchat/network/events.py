"""What travels through a hub: event types, envelopes, and the notices listeners receive."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..checks import get_float, get_int, get_list, get_object, get_opt_str, get_str
from ..errors import JsonShapeError
from .errors import ProtocolError

# ---- envelope event types (AG2's names) ----
EV_TEXT = "text"
"""A participant's text: the only event the turn rule gates (``channel.send(text)``).

Accepted from the expected speaker only; delivered to every other participant.

Examples:
    >>> from fsmchat.network import EV_TEXT
    >>> EV_TEXT
    'text'
"""
EV_CHANNEL_INVITE = "channel.invite"
"""An invite to a new channel, one per invitee (sent as the creator).

Its data holds the channel ``type``, the ``participants`` in order and the ``knobs``.

Examples:
    >>> from fsmchat.network import EV_CHANNEL_INVITE
    >>> EV_CHANNEL_INVITE
    'channel.invite'
"""
EV_CHANNEL_INVITE_ACK = "channel.invite_ack"
"""An invitee accepted its invite; the last ack opens the channel.

Examples:
    >>> from fsmchat.network import EV_CHANNEL_INVITE_ACK
    >>> EV_CHANNEL_INVITE_ACK
    'channel.invite_ack'
"""
EV_CHANNEL_INVITE_REJECT = "channel.invite_reject"
"""An invitee rejected its invite: the channel closes.

Examples:
    >>> from fsmchat.network import EV_CHANNEL_INVITE_REJECT
    >>> EV_CHANNEL_INVITE_REJECT
    'channel.invite_reject'
"""
EV_CHANNEL_OPENED = "channel.opened"
"""Every invitee acked: the channel is active and the creator's turn starts.

Examples:
    >>> from fsmchat.network import EV_CHANNEL_OPENED
    >>> EV_CHANNEL_OPENED
    'channel.opened'
"""
EV_CHANNEL_CLOSED = "channel.closed"
"""The channel closed (``close()``, ``max_texts`` or a rejected invite).

Its data holds the first close ``reason``.

Examples:
    >>> from fsmchat.network import EV_CHANNEL_CLOSED
    >>> EV_CHANNEL_CLOSED
    'channel.closed'
"""
EV_CHANNEL_EXPIRED = "channel.expired"
"""The channel's TTL ran out on the hub's clock.

Examples:
    >>> from fsmchat.network import EV_CHANNEL_EXPIRED
    >>> EV_CHANNEL_EXPIRED
    'channel.expired'
"""
# ---- fsmchat's own: a turn that produced no text, and a violated expectation ----
EV_TURN_FAILED = "fsmchat.turn_failed"
"""A participant's turn produced no text: its call failed or answered nothing (fsmchat's own).

Its data holds the ``speaker``, the ``turn`` and the ``reason``; ``wait_for_text_count`` raises
``TurnFailed``.

Examples:
    >>> from fsmchat.network import EV_TURN_FAILED
    >>> EV_TURN_FAILED
    'fsmchat.turn_failed'
"""
EV_EXPECTATION_VIOLATED = "fsmchat.expectation_violated"
"""An expectation was violated, e.g. ``turn_within``: the expected speaker is late (fsmchat's own).

Its data holds the ``expectation``, its ``seconds`` and ``action``, the ``speaker``, the
``turn`` and how long it ``waited``.

Examples:
    >>> from fsmchat.network import EV_EXPECTATION_VIOLATED
    >>> EV_EXPECTATION_VIOLATED
    'fsmchat.expectation_violated'
"""

EV_TOOL_CALLS = "fsmchat.tool_calls"
"""A participant's model asked for tool calls in its turn (fsmchat's own), committed before they run.

Its data holds the ``speaker`` and the ``calls`` (each ``id``, ``name``, ``arguments``, ``status``);
the channel's turn graph moves to ``tools_awaiting_<speaker>``. Its audience is empty: the
others see the final reply (its data's ``tool_calls``).

Examples:
    >>> from fsmchat.network import EV_TOOL_CALLS
    >>> EV_TOOL_CALLS
    'fsmchat.tool_calls'
"""
EV_TOOL_RESULT = "fsmchat.tool_result"
"""One tool call's result (or error, or rejection), committed before the model is asked again.

Its data holds the ``speaker`` and the call (``id``, ``name``, ``arguments``, ``status``, and
``result``/``error``, ``duration_s``).

Examples:
    >>> from fsmchat.network import EV_TOOL_RESULT
    >>> EV_TOOL_RESULT
    'fsmchat.tool_result'
"""
EV_TOOL_DECISION = "fsmchat.tool_decision"
"""A decision on a tool call that waited for a person (``hub.decide_tool_call``).

Its data holds the ``speaker``, the ``call_id``, the ``tool`` and the ``decision``
(``approve``, ``edit``, ``say`` or ``reject``).

Examples:
    >>> from fsmchat.network import EV_TOOL_DECISION
    >>> EV_TOOL_DECISION
    'fsmchat.tool_decision'
"""

PROTOCOL_EVENTS = frozenset({EV_CHANNEL_INVITE, EV_CHANNEL_INVITE_ACK, EV_CHANNEL_INVITE_REJECT,
                             EV_CHANNEL_OPENED, EV_CHANNEL_CLOSED, EV_CHANNEL_EXPIRED,
                             EV_TURN_FAILED, EV_EXPECTATION_VIOLATED, EV_TOOL_CALLS, EV_TOOL_RESULT,
                             EV_TOOL_DECISION})
"""Event types only the hub itself emits; a participant's ``emit`` may not use them (nor ``EV_TEXT``)."""

HUB_SENDER = "hub"

ORDERING_ROUND_ROBIN = "round_robin"
"""The discussion's ordering knob: creator first, then the participants in order, cycling.

The only ordering shipped: ``knobs={"ordering": ORDERING_ROUND_ROBIN}`` (the default).

Examples:
    >>> from fsmchat.network import ORDERING_ROUND_ROBIN
    >>> ORDERING_ROUND_ROBIN
    'round_robin'
"""
ORDERINGS = (ORDERING_ROUND_ROBIN,)

MAX_CUSTOM_EVENTS = 1000  # custom (emit) events per channel
"""The default cap on custom (``emit``) events per channel (``Hub(max_custom_events=...)``).

Examples:
    >>> from fsmchat.network import MAX_CUSTOM_EVENTS
    >>> MAX_CUSTOM_EVENTS
    1000
"""
MAX_EVENT_BYTES = 64 * 1024  # one custom event: its type and data as UTF-8 JSON
"""The default cap on one custom event's size: its type and data as UTF-8 JSON (``Hub(max_event_bytes=...)``).

Examples:
    >>> from fsmchat.network import MAX_EVENT_BYTES
    >>> MAX_EVENT_BYTES
    65536
"""


def event_size(channel_id: str, event_type: str, data: object) -> tuple[dict[str, object], int]:
    """A custom event's data as a private JSON copy, and its size (type + data, UTF-8 JSON bytes);
    ``ProtocolError`` when ``data`` is not a JSON object (checked before a sequence number is taken)."""
    if data is None:
        data = {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ProtocolError(f"channel '{channel_id}': event {event_type!r} data must be a dict with string keys "
                            f"(a JSON object), got {type(data).__name__}")
    try:
        text = json.dumps(data, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"channel '{channel_id}': event {event_type!r} data must be JSON-able: {exc}") from None
    return json.loads(text), len(text.encode()) + len(event_type.encode())


@dataclass(frozen=True, slots=True)
class Envelope:
    """One accepted event of a channel, in log order (``seq`` starts at 1 per channel).

    Texts carry ``text``; protocol and custom events carry ``data``. ``channel.log()`` and
    ``hub.read_log(channel_id)`` return them; a handler receives them.

    Attributes:
        seq: Its place in the channel's log, from 1.
        channel_id: The channel.
        event_type: ``EV_TEXT``, a protocol event (``EV_CHANNEL_*``) or a custom type.
        sender: The participant who sent it, or ``"hub"``.
        text: A text's content (None for other events).
        data: A protocol or custom event's data (a JSON object).
        t: When it was accepted, on the hub's clock.
        audience: Who it was delivered to (participant ids).

    Examples:
        >>> from fsmchat.network import EV_TEXT, Envelope
        >>> env = Envelope(4, "discussion-1", EV_TEXT, "bob", text="Only for systems work.", audience=("alice",))
        >>> env.to_dict()["sender"], env.to_dict()["audience"]
        ('bob', ['alice'])
        >>> Envelope.from_dict(env.to_dict()) == env
        True
    """

    seq: int
    channel_id: str
    event_type: str
    sender: str
    text: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    t: float = 0.0
    audience: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """The envelope as plain data (JSON-able when its data is)."""
        return {"seq": self.seq, "channel_id": self.channel_id, "event_type": self.event_type,
                "sender": self.sender, "text": self.text, "data": dict(self.data), "t": self.t,
                "audience": list(self.audience)}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> "Envelope":
        """The envelope ``to_dict()`` wrote (how a store reads its log back); ``JsonShapeError`` when a
        field is missing or of another type."""
        audience = get_list(d, "audience", "envelope")
        if not all(isinstance(a, str) for a in audience):
            raise JsonShapeError("envelope.audience: expected an array of strings")
        return cls(get_int(d, "seq", "envelope"), get_str(d, "channel_id", "envelope"),
                   get_str(d, "event_type", "envelope"), get_str(d, "sender", "envelope"),
                   get_opt_str(d, "text", "envelope"), dict(get_object(d, "data", "envelope")),
                   get_float(d, "t", "envelope"), tuple(str(a) for a in audience))


@dataclass(frozen=True, slots=True)
class NetworkEvent:
    """What a hub listener hears (``hub.listen(listener)``): one happening on a channel.

    Attributes:
        kind: ``accepted`` (an envelope was recorded), ``rejected`` (a send was refused; ``error``
            says why), ``transition`` (a channel graph moved; ``data["graph"]``, ``data["event"]``),
            ``skipped`` (a default handler got a text but it was not its turn), ``model_call``,
            ``wasted_call`` (a reply the channel no longer accepted), ``turn_failed``,
            ``expectation``, ``person_turn``, ``handler_error`` or a handler's own kind.
        channel_id: The channel (None for a happening of no channel).
        agent_id: The participant it concerns, if any.
        envelope: The envelope it concerns, if any.
        error: Why a send was refused or a handler failed, if so.
        data: Details of the kind.
        t: When, on the hub's clock.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         heard = []
        ...         hub.listen(heard.append)
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         await channel.send("Topic: Rust?")
        ...         return [(e.kind, e.agent_id) for e in heard if e.kind in ("accepted", "rejected")][-1]
        >>> asyncio.run(main())
        ('accepted', 'alice')
    """

    kind: str
    channel_id: str | None
    agent_id: str | None = None
    envelope: Envelope | None = None
    error: BaseException | None = None
    data: dict[str, Any] = field(default_factory=dict)
    t: float = 0.0
