"""What a handler may do to the hub, as its client (``client.services``): tell the listeners, count,
reach the channel's call stats, run a model call the channel can cancel, report a failed turn.

The default handler does its bookkeeping only through this object, so a custom handler
(``hub.register(agent, handler=my_handler)``) can keep the same counts and events::

    async def my_handler(client, envelope):
        svc = client.services
        svc.count(envelope.channel_id, "deliveries")
        ...
"""
from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from collections.abc import Generator
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..speakers.agent import Turn
from ..speakers.llm import CallStats
from ..speakers.speaker import Speaker
from .errors import ProtocolError
from .events import Envelope

if TYPE_CHECKING:
    from .channel import ChannelRuntime
    from .client import HubClient

T = TypeVar("T")


class Participant(Protocol):
    """Who a channel's ``submit``, ``ack`` and ``close_by`` act for: a registered client (``HubClient``)."""

    @property
    def agent_id(self) -> str: ...


class TurnTask(Protocol):
    """A model call a handler runs under its channel (``track_turn``): an ``asyncio`` task of any result."""

    def cancel(self) -> bool: ...

    def done(self) -> bool: ...

    def __await__(self) -> Generator[object, None, object]: ...


HANDLER_COUNTS = ("deliveries", "skipped_deliveries", "model_calls", "replies", "wasted_calls")
"""The ``TurnStats`` counts a handler keeps through ``HubServices.count``.

``texts`` and ``rejected_sends`` are the hub's, ``turn_failures`` is ``fail_turn``'s.

Examples:
    >>> from fsmchat.network import HANDLER_COUNTS
    >>> HANDLER_COUNTS
    ('deliveries', 'skipped_deliveries', 'model_calls', 'replies', 'wasted_calls')
"""
HUB_KINDS = frozenset({"accepted", "rejected", "transition", "expectation", "turn_failed", "tool_approval",
                       "tool_error", "tool_decision", "tool_result_truncated"})
"""Listener event kinds only the hub reports (``turn_failed`` through ``fail_turn``; ``tool_approval``,
``tool_error``, ``tool_decision`` and ``tool_result_truncated`` through ``speak``)."""


class HubServices:
    """One client's services on the channels it takes part in (``client.services``).

    Every method acts as that client: counts go to the channel's stats and the client's own,
    events carry its agent id. A channel it is not a participant of is a ``ProtocolError``; an
    unknown one ``NotFoundError``. A custom handler keeps the default handler's counts and events
    through it.

    Args:
        client: The client it acts as (each client makes its own).

    Examples:
        >>> import asyncio
        >>> from fsmchat import EV_TEXT, Hub, wait_for_text_count
        >>> from fsmchat.network import EV_CHANNEL_INVITE
        >>> async def polite(client, envelope):
        ...     cid = envelope.channel_id
        ...     if envelope.event_type == EV_CHANNEL_INVITE:
        ...         await client.channel(cid).ack()
        ...     elif envelope.event_type == EV_TEXT and client.can_send(cid):
        ...         client.services.count(cid, "deliveries")
        ...         await client.channel(cid).send(f"Noted, {envelope.sender}.")
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob", handler=polite)
        ...         channel = await alice.open(target=["bob"])
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         await wait_for_text_count(hub, channel.channel_id, expected=2)
        ...         return channel.log()[-1].text, hub.stats(channel.channel_id).deliveries, bob.stats.deliveries
        >>> asyncio.run(main())
        ('Noted, alice.', 1, 1)
    """

    def __init__(self, client: "HubClient"):
        self._client = client

    @property
    def agent_id(self) -> str:
        """The id of the client it acts as."""
        return self._client.agent_id

    def _runtime(self, channel_id: str) -> "ChannelRuntime":
        runtime = self._client.hub.runtime(channel_id)
        if self.agent_id not in runtime.ctx.order:
            raise ProtocolError(f"'{self.agent_id}' is not a participant of channel '{channel_id}'")
        return runtime

    def notify(self, kind: str, channel_id: str, *, envelope: Envelope | None = None,
               error: BaseException | None = None, data: dict[str, object] | None = None) -> None:
        """Tell the hub's listeners ``kind`` happened (``skipped``, ``model_call``, ``wasted_call``,
        ``person_turn``, ``handler_error`` or a handler's own kind) on ``channel_id``, as this agent."""
        if not isinstance(kind, str) or not kind or kind in HUB_KINDS:
            raise ValueError(f"notify kind {kind!r}: a non-empty name that is not one the hub reports itself "
                             f"({sorted(HUB_KINDS)})")
        self._runtime(channel_id).notify(kind, self.agent_id, envelope=envelope, error=error, data=data)

    def count(self, channel_id: str, name: str) -> None:
        """One more of ``name`` (one of ``HANDLER_COUNTS``) in the channel's and this client's stats."""
        if name not in HANDLER_COUNTS:
            raise ValueError(f"count {name!r} is not a handler's; a handler counts one of {list(HANDLER_COUNTS)} "
                             "(texts and rejected_sends are the hub's, turn_failures is fail_turn's)")
        self._runtime(channel_id).stats.add(name)
        self._client.stats.add(name)

    def call_stats(self, channel_id: str) -> CallStats:
        """The channel's token usage and HTTP attempts: give it to the ``Turn`` of a model call."""
        return self._runtime(channel_id).call_stats

    async def track_turn(self, channel_id: str, task: "asyncio.Future[T]") -> T | None:
        """Await a model call's task under its channel: its result, or None when the channel ended
        first (the call is then cancelled; so is it when the hub closes); the call's own exception
        is raised."""
        return await self._runtime(channel_id).track_turn(task)

    def streaming(self, channel_id: str) -> AbstractContextManager[None]:
        """Within it a model call that writes a reply streams its deltas to the hub's token
        listeners, named by the channel's state (``speak`` is within it; a task started within it
        is too)."""
        return self._runtime(channel_id).speaking.streaming()

    async def speak(self, channel_id: str, speaker: Speaker, turn: Turn) -> tuple[str, list[dict[str, object]]]:
        """``speaker``'s reply to ``turn`` on this agent's turn, through the channel's speaking block:
        (the text, its tool calls). An agent with tools takes its tool rounds through the channel's
        turn graph (each call and result committed to the log before the model is asked again);
        see ``ChannelSpeaking.speak``."""
        return await self._runtime(channel_id).speaking.speak(self.agent_id, speaker, turn)

    def fail_turn(self, channel_id: str, reason: str, turn: int) -> None:
        """This agent's turn ``turn`` produced no text: counted, ``EV_TURN_FAILED`` recorded while the
        channel lives, a ``turn_failed`` event, and ``wait_for_text_count`` raises ``TurnFailed``."""
        runtime = self._runtime(channel_id)
        self._client.stats.add("turn_failures")
        runtime.turn_failed(self.agent_id, reason, turn)
