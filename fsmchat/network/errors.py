"""Errors of the network layer (hub, channels, adapters)."""
from __future__ import annotations

from ..errors import FsmchatError


class NetworkError(FsmchatError, RuntimeError):
    """Base of hub and channel errors (a closed hub, a duplicate registration, a failed open).

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         await hub.register("alice")
        ...         await hub.register("alice")
        >>> asyncio.run(main())
        Traceback (most recent call last):
        ...
        fsmchat.network.errors.NetworkError: agent 'alice' is already registered
    """


class ProtocolError(NetworkError):
    """A send, open or close the channel protocol refuses; nothing was recorded or changed.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         await bob.channel(channel.channel_id).send("Me first.")  # the creator speaks first
        >>> asyncio.run(main())
        Traceback (most recent call last):
        ...
        fsmchat.network.errors.ProtocolError: discussion channel 'discussion-1' expects 'alice' to speak, got 'bob'
    """


class HubClosed(NetworkError):
    """The hub was closed (``hub.aclose()``): it accepts no registration, open, send, emit, ack or close.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     hub = await Hub.open()
        ...     await hub.aclose()
        ...     await hub.register("alice")
        >>> asyncio.run(main())
        Traceback (most recent call last):
        ...
        fsmchat.network.errors.HubClosed: the hub is closed (hub.aclose() was called): it accepts nothing more
    """


class ChannelLimitError(ProtocolError):
    """A custom event over a channel's limits (``Hub(max_custom_events=..., max_event_bytes=...)``).

    Nothing was recorded and no sequence number was taken.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub(max_custom_events=1) as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         await channel.emit("myapp.note", {"n": 1})
        ...         await channel.emit("myapp.note", {"n": 2})
        >>> asyncio.run(main())
        Traceback (most recent call last):
        ...
        fsmchat.network.errors.ChannelLimitError: channel 'discussion-1' already holds 1 custom events, its limit ...
    """


class NotFoundError(NetworkError, LookupError):
    """An unknown channel or agent id.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         return hub.channel_state("discussion-9")
        >>> asyncio.run(main())
        Traceback (most recent call last):
        ...
        fsmchat.network.errors.NotFoundError: channel 'discussion-9' not found
    """


class TurnFailed(NetworkError):
    """A participant's turn produced no text (its model call failed or answered nothing).

    The round robin cannot go on, so waiters on the channel (``wait_for_text_count``) get this
    instead of waiting out a timeout.

    Args:
        channel_id: The channel.
        agent_id: The participant whose turn failed.
        reason: Why (the call's error, or ``"empty reply"``).
        turn: The turn's number (texts accepted before it).

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub, wait_for_text_count
        >>> def alice(turn):
        ...     return "Yes."
        >>> def mute(turn):
        ...     return ""
        >>> async def main():
        ...     async with Hub() as hub:
        ...         a, b = await hub.register(alice), await hub.register(mute)
        ...         channel = await a.open(target=["mute"])
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         await wait_for_text_count(hub, channel.channel_id, expected=3)
        >>> asyncio.run(main())
        Traceback (most recent call last):
        ...
        fsmchat.network.errors.TurnFailed: channel 'discussion-1': mute's turn 1 failed: empty reply
    """

    def __init__(self, channel_id: str, agent_id: str, reason: str, turn: int):
        self.channel_id, self.agent_id, self.reason, self.turn = channel_id, agent_id, reason, turn
        super().__init__(f"channel '{channel_id}': {agent_id}'s turn {turn} failed: {reason}")
