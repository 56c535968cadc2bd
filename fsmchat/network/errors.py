"""Errors of the network layer (hub, channels, adapters)."""
from __future__ import annotations

from ..errors import FsmchatError


class NetworkError(FsmchatError, RuntimeError):
    """Base of hub and channel errors (a closed hub, a duplicate registration, a failed open)."""


class ProtocolError(NetworkError):
    """A send, open or close the channel protocol refuses; nothing was recorded or changed."""


class NotFoundError(NetworkError, LookupError):
    """An unknown channel or agent id."""
