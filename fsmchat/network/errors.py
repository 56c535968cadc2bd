"""Errors of the network layer (hub, channels, adapters)."""
from __future__ import annotations

from ..errors import FsmchatError


class NetworkError(FsmchatError, RuntimeError):
    """Base of hub and channel errors (a closed hub, a duplicate registration, a failed open)."""


class ProtocolError(NetworkError):
    """A send, open or close the channel protocol refuses; nothing was recorded or changed."""


class HubClosed(NetworkError):
    """The hub was closed (``hub.aclose()``): it accepts no registration, open, send, emit, ack or close."""


class ChannelLimitError(ProtocolError):
    """A custom event over a channel's limits (``Hub(max_custom_events=..., max_event_bytes=...)``);
    nothing was recorded and no sequence number was taken."""


class NotFoundError(NetworkError, LookupError):
    """An unknown channel or agent id."""


class TurnFailed(NetworkError):
    """A participant's turn produced no text (its model call failed or answered nothing), so the
    round robin cannot go on; waiters on the channel get this instead of waiting out a timeout."""

    def __init__(self, channel_id: str, agent_id: str, reason: str, turn: int):
        self.channel_id, self.agent_id, self.reason, self.turn = channel_id, agent_id, reason, turn
        super().__init__(f"channel '{channel_id}': {agent_id}'s turn {turn} failed: {reason}")
