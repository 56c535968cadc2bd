"""What travels through a hub: event types, envelopes, and the notices listeners receive."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# ---- envelope event types (the reference's names) ----
EV_TEXT = "text"
EV_CHANNEL_INVITE = "channel.invite"
EV_CHANNEL_INVITE_ACK = "channel.invite_ack"
EV_CHANNEL_INVITE_REJECT = "channel.invite_reject"
EV_CHANNEL_OPENED = "channel.opened"
EV_CHANNEL_CLOSED = "channel.closed"
EV_CHANNEL_EXPIRED = "channel.expired"
# ---- fsmchat's own: a turn that produced no text, and a violated expectation ----
EV_TURN_FAILED = "fsmchat.turn_failed"
EV_EXPECTATION_VIOLATED = "fsmchat.expectation_violated"

PROTOCOL_EVENTS = frozenset({EV_CHANNEL_INVITE, EV_CHANNEL_INVITE_ACK, EV_CHANNEL_INVITE_REJECT,
                             EV_CHANNEL_OPENED, EV_CHANNEL_CLOSED, EV_CHANNEL_EXPIRED,
                             EV_TURN_FAILED, EV_EXPECTATION_VIOLATED})
"""Event types only the hub itself emits; a participant's ``emit`` may not use them (nor ``EV_TEXT``)."""

HUB_SENDER = "hub"

ORDERING_ROUND_ROBIN = "round_robin"
ORDERINGS = (ORDERING_ROUND_ROBIN,)


@dataclass(frozen=True, slots=True)
class Envelope:
    """One accepted event of a channel, in log order (``seq`` starts at 1 per channel).

    ``audience`` is who it was delivered to (participant ids). Texts carry ``text``; protocol and
    custom events carry ``data``.
    """

    seq: int
    channel_id: str
    event_type: str
    sender: str
    text: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    t: float = 0.0
    audience: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "channel_id": self.channel_id, "event_type": self.event_type,
                "sender": self.sender, "text": self.text, "data": dict(self.data), "t": self.t,
                "audience": list(self.audience)}


@dataclass(frozen=True, slots=True)
class NetworkEvent:
    """What a hub listener hears. ``kind`` is one of:

    ``accepted`` (an envelope was recorded), ``rejected`` (a send was refused; ``error`` says why),
    ``transition`` (a channel graph moved; ``data["graph"]``, ``data["event"]``), ``skipped`` (a
    default handler got a text but it was not its turn), ``model_call``, ``wasted_call`` (a reply
    the channel no longer accepted), ``turn_failed``, ``expectation``.
    """

    kind: str
    channel_id: str | None
    agent_id: str | None = None
    envelope: Envelope | None = None
    error: BaseException | None = None
    data: dict[str, Any] = field(default_factory=dict)
    t: float = 0.0
