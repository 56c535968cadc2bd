"""A registered agent's side of a hub: its client (a worker feeding its handler the envelopes
delivered to it, one at a time), its channel handles (which send as that agent, never as another),
and an app's wait for a channel's texts (``wait_for_text_count``)."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from ..speakers.speaker import Speaker
from ..speakers.tool_loop import RUN_TOOLS, ToolLoop
from .adapter import DISCUSSION
from .channel import ChannelRuntime
from .events import EV_TEXT, Envelope
from .expectations import Expectation
from .services import HubServices
from .stats import TurnStats

if TYPE_CHECKING:
    from .hub import Hub

Handler = Callable[["HubClient", Envelope], object]


class DeliveryCounter:
    """Envelopes delivered to client workers and not handled yet (what ``hub.drain()`` waits on)."""

    def __init__(self) -> None:
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def delivered(self) -> None:
        self._pending += 1
        self._idle.clear()

    def handled(self) -> None:
        self._pending -= 1
        if self._pending == 0:
            self._idle.set()

    async def idle(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._idle.wait(), timeout)


class HubClient:
    """A registered agent's access to the hub. Everything it sends is sent as ``agent_id``.

    ``hub.register(...)`` makes and starts it; ``services`` is what its handler may do to the hub
    as this agent (``HubServices``), ``stats`` its own counts.

    Args:
        hub: The hub it is registered with.
        agent_id: Its id.
        speaker: Its speaker (an ``Agent``, a callable, a ``Human``), or None for an app.
        handler: Called with ``(client, envelope)`` for each envelope delivered to it, one at a time.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"], knobs={"max_texts": 2})
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         return alice, bob.can_send(channel.channel_id), bob.channel(channel.channel_id)
        >>> asyncio.run(main())
        (HubClient('alice'), True, Channel('discussion-1', as 'bob'))
    """

    def __init__(self, hub: "Hub", agent_id: str, speaker: Speaker | None, handler: Handler):
        self.hub = hub
        self.agent_id = agent_id
        self.speaker = speaker
        self.handler = handler
        self.stats = TurnStats()
        self.services = HubServices(self)
        self._inbox: asyncio.Queue[Envelope] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._deliveries: DeliveryCounter | None = None

    @property
    def worker(self) -> "asyncio.Task[None] | None":
        """The task feeding the handler (None until the hub registered and started this client)."""
        return self._worker

    def start(self, deliveries: DeliveryCounter, tools: ToolLoop | None = None) -> None:
        """Start the worker (the hub does, as it registers the client); deliveries count in
        ``deliveries``; the handler's own ``agent.reply`` calls share ``tools``' sources (the hub's)."""
        if self._worker is not None:
            raise RuntimeError(f"client '{self.agent_id}' is already started")
        self._deliveries = deliveries
        held = RUN_TOOLS.set(tools)  # the worker's context, and every task its handler starts
        try:
            self._worker = asyncio.create_task(self._run(), name=f"fsmchat-client-{self.agent_id}")
        finally:
            RUN_TOOLS.reset(held)

    async def open(self, type: str = DISCUSSION, target: Sequence[object] | str = (),
                   knobs: dict[str, object] | None = None, ttl: float | str | None = None, *,
                   expectations: Iterable[Expectation] | None = None,
                   handshake_timeout: float | None = 30.0, context: object = None) -> "Channel":
        """Open a channel with this agent as creator; returns once every invitee acked (active).

        ``knobs``: ``ordering`` (``"round_robin"``) and ``max_texts`` (close at exactly N texts).
        ``ttl`` in seconds of the hub's clock. ``expectations`` default to ``turn_within(120s, warn)``
        and ``turn_within(600s, hide)``. ``context``: what each participant's model is sent, as a
        pattern's policy (``fsmchat.speakers.context``): ``"full"`` (every text), ``LastMessages(n)``
        (the first text and the last ``n``) or None (the recent window, older texts folded into one
        ``[summary]`` line); an agent's own ``context`` takes precedence. Raises ``ProtocolError`` if
        refused, rejected or timed out, ``ConfigError`` for a ``context`` that is not one of those.
        """
        runtime = await self.hub.open_channel(self, type, target, knobs, ttl, expectations=expectations,
                                              handshake_timeout=handshake_timeout, context=context)
        return Channel(self, runtime.channel_id)

    def channel(self, channel_id: str) -> "Channel":
        """This agent's own handle on ``channel_id`` (sends go out as this agent)."""
        self.hub.runtime(channel_id)
        return Channel(self, channel_id)

    def can_send(self, channel_id: str) -> bool:
        """Whether a text from this agent would be accepted on ``channel_id`` now; no side effects."""
        return self.hub.can_send(channel_id, self.agent_id)

    def deliver(self, envelope: Envelope) -> None:
        """Queue ``envelope`` for the handler (the hub routes each accepted envelope to its audience);
        a client that is not running drops it."""
        if self._worker is None or self._worker.done() or self._deliveries is None:
            return
        self._deliveries.delivered()
        self._inbox.put_nowait(envelope)

    async def _run(self) -> None:
        while True:
            envelope = await self._inbox.get()
            try:
                result = self.handler(self, envelope)
                if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a handler failure is reported, never kills the worker
                self.services.notify("handler_error", envelope.channel_id, envelope=envelope, error=exc)
            finally:
                if self._deliveries is not None:
                    self._deliveries.handled()

    def __repr__(self) -> str:
        return f"HubClient({self.agent_id!r})"


class Channel:
    """One participant's handle on a channel. It has no sender parameter: it sends as its client.

    ``client.open(...)`` returns the creator's; ``client.channel(channel_id)`` any participant's.

    Args:
        client: The participant's client.
        channel_id: The channel.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice = await hub.register("alice")
        ...         bob = await hub.register("bob", handler=lambda client, envelope: None)  # acks by hand
        ...         opening = asyncio.create_task(alice.open(target=["bob"]))
        ...         await asyncio.sleep(0)  # the invite is out
        ...         await bob.channel("discussion-1").ack()
        ...         channel = await opening
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         reason = await bob.channel(channel.channel_id).close("done")
        ...         return reason, channel.state, channel.close_reason, [e.event_type for e in channel.log()]
        >>> asyncio.run(main())
        ('done', 'closed', 'done', ['channel.invite', 'channel.invite_ack', 'channel.opened', 'text', 'channel.closed'])
    """

    __slots__ = ("_client", "channel_id")

    def __init__(self, client: HubClient, channel_id: str):
        self._client = client
        self.channel_id = channel_id

    @property
    def agent_id(self) -> str:
        """The participant it sends as."""
        return self._client.agent_id

    @property
    def hub(self) -> "Hub":
        """The hub the channel lives on."""
        return self._client.hub

    def _runtime(self) -> ChannelRuntime:
        return self.hub.runtime(self.channel_id)

    async def send(self, text: str, data: dict[str, object] | None = None) -> Envelope:
        """Send a text as this agent; ``ProtocolError`` (and nothing recorded) if refused. ``data``
        (a JSON object) travels with it: the default handler puts a reply's ``tool_calls`` there."""
        return self._runtime().submit(self._client, EV_TEXT, text=text, data=data)

    async def emit(self, event_type: str, data: dict[str, object] | None = None) -> Envelope:
        """Send a custom event (any non-protocol type): passes at any time, never advances the turn.
        ``data`` is a JSON object (stored as a copy); over the hub's ``max_custom_events`` per channel or
        ``max_event_bytes`` per event it is a ``ChannelLimitError``, and nothing is recorded."""
        return self._runtime().submit(self._client, event_type, data=data)

    async def close(self, reason: str = "closed") -> str:
        """Close the channel for everyone; idempotent, returns the reason in effect (the first one)."""
        return self._runtime().close_by(self._client, reason)

    async def ack(self) -> Envelope:
        """Accept this participant's invite (the last ack opens the channel); ``ProtocolError`` if not invited."""
        return self._runtime().ack(self._client, True)

    async def reject(self) -> Envelope:
        """Reject this participant's invite: the channel closes; ``ProtocolError`` if not invited."""
        return self._runtime().ack(self._client, False)

    def can_send(self) -> bool:
        """Whether a text from this participant would be accepted now; no side effects."""
        return self._runtime().can_send(self.agent_id)

    @property
    def state(self) -> str:
        """``pending``, ``active``, ``closed`` or ``expired`` (the lifecycle graph's state)."""
        return self._runtime().state

    @property
    def close_reason(self) -> str | None:
        """The first close reason (``"ttl"`` once expired), None while the channel lives."""
        return self._runtime().close_reason

    def log(self) -> list[Envelope]:
        """The channel's accepted envelopes, in order."""
        return self._runtime().log()

    def __repr__(self) -> str:
        return f"Channel({self.channel_id!r}, as {self.agent_id!r})"


async def wait_for_text_count(hub: "Hub", channel_id: str, expected: int, timeout: float | None = None) -> int:
    """Wait until the channel holds at least ``expected`` texts; returns the count.

    Event-driven (woken by each accepted envelope, before any handler sees it), so an app that
    closes right after it returns closes at exactly ``expected``.

    Args:
        hub: The hub.
        channel_id: The channel.
        expected: The number of texts to wait for.
        timeout: Real seconds to wait at most (None: no limit).

    Raises:
        TurnFailed: A participant's turn failed (with the cause): no further text can come.
        NetworkError: The channel ended with fewer texts.
        TimeoutError: ``timeout`` passed.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub, wait_for_text_count
        >>> def alice(turn):
        ...     return "Yes: memory safety pays off."
        >>> def bob(turn):
        ...     return "Only for systems work."
        >>> async def main():
        ...     async with Hub() as hub:
        ...         a, b = await hub.register(alice), await hub.register(bob)
        ...         channel = await a.open(target=["bob"])
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         count = await wait_for_text_count(hub, channel.channel_id, expected=6)
        ...         await channel.close()  # the app-side cap: close at exactly 6 texts
        ...         return count, hub.stats(channel.channel_id).texts
        >>> asyncio.run(main())
        (6, 6)
    """
    if timeout is None:
        return await hub.runtime(channel_id).wait_for_texts(expected)
    if hasattr(asyncio, "timeout"):  # 3.11+: same task, so the "waiters first" ordering holds
        async with asyncio.timeout(timeout):
            return await hub.runtime(channel_id).wait_for_texts(expected)
    return await asyncio.wait_for(hub.runtime(channel_id).wait_for_texts(expected), timeout)  # pragma: no cover
