"""The hub: registered agents and their clients, the channels (one ``ChannelRuntime`` each, opened
or resumed from the store), routing of accepted envelopes to their audience, listeners, and the
sweep (TTL expiry and expectations).

Every send goes through a channel's runtime, which steps the channel's lifecycle and turn graphs
with ``GraphRun.fire(event)`` (the engine's one runner). Each client has one worker task that feeds
its handler the envelopes delivered to it, one at a time; ``aclose()`` cancels and awaits every task
the hub started.
"""
from __future__ import annotations

import asyncio
import itertools
import warnings
from typing import Annotated, Any, Callable, Iterable, Sequence

from ..checks import Amount, Count
from ..engine import GraphRun
from ..graph.state_graph import StateGraph
from ..speakers.agent import as_speaker
from ..speakers.context import ContextPolicy
from ..speakers.human import Human
from ..speakers.llm import CallStats
from ..speakers.tool_loop import ToolLoop
from ..speakers.tools import has_tools
from .adapter import DISCUSSION, DiscussionState, check_knobs, participant_order
from .channel import ChannelRuntime, HubLink
from .client import Channel, DeliveryCounter, Handler, HubClient, wait_for_text_count
from .clock import Clock, monotonic
from .errors import HubClosed, NetworkError, NotFoundError, ProtocolError
from .events import HUB_SENDER, MAX_CUSTOM_EVENTS, MAX_EVENT_BYTES, Envelope, NetworkEvent
from .expectations import DEFAULT_EXPECTATIONS, Expectation, parse_seconds
from .graphs import ChannelContext
from .handler import DefaultHandler
from .resume import read_channel
from .services import Participant, TurnTask
from .stats import TurnStats
from .store import KnowledgeStore, MemoryKnowledgeStore
from .view import check_channel_context

__all__ = ["Hub", "HubClient", "Channel", "MAX_CUSTOM_EVENTS", "MAX_EVENT_BYTES", "wait_for_text_count"]

Listener = Callable[[NetworkEvent], None]
TokenListener = Callable[[Any], None]
CHANNEL_TYPES = (DISCUSSION,)


# the hub's numbers, by the one rule (fsmchat.checks.Number): declared on the constructor's parameters, checked in it
SWEEP_INTERVAL = Amount(ge=0, meaning="seconds between background sweeps; 0: none, call sweep() yourself")
CUSTOM_EVENTS = Count(1, "custom events allowed per channel")
EVENT_BYTES = Count(1, "the size allowed per custom event, type + JSON data, in bytes")


class Hub:
    """Routes envelopes between registered agents; each channel's graphs are enforced by its runtime.

    Open with ``hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=...)``
    (``Hub(...)`` builds one without the background sweep; ``async with`` closes it). Register
    agents (``hub.register``), then a client opens a discussion channel, whose participants speak
    in round robin, creator first. After ``aclose()`` every send, emit, open, ack and close is
    ``HubClosed``.

    Args:
        store: Where channel logs and states are kept (a new ``MemoryKnowledgeStore`` by default).
        ttl_sweep_interval: Seconds between background sweeps (TTL expiry and expectations); with
            0, call ``expire_due()`` / ``check_expectations()`` / ``sweep()`` yourself.
        clock: What TTLs and expectations are measured on (default ``time.monotonic``;
            ``ManualClock`` in tests).
        max_custom_events: Custom events (``channel.emit``) allowed per channel (default 1,000);
            over it is a ``ChannelLimitError``.
        max_event_bytes: The size allowed per custom event, type + JSON data (default 64 KiB).

    Raises:
        ValueError: A negative or non-finite ``ttl_sweep_interval``, or a limit below 1 (a ``ConfigError``).
        TypeError: A number that is a bool or a string, or a limit that is not an int (a ``ConfigTypeError``).

    Examples:
        >>> import asyncio
        >>> from fsmchat import ORDERING_ROUND_ROBIN, Hub, MemoryKnowledgeStore, wait_for_text_count
        >>> def alice(turn):
        ...     return "Yes: memory safety pays off."
        >>> def bob(turn):
        ...     return f"Only for systems work (turn {turn.variables['turn']})."
        >>> async def main():
        ...     hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0)
        ...     a, b = await hub.register(alice), await hub.register(bob)
        ...     channel = await a.open(type="discussion", target=[b.agent_id],
        ...                            knobs={"ordering": ORDERING_ROUND_ROBIN, "max_texts": 4})
        ...     await channel.send("Topic: should every developer learn Rust?")
        ...     await wait_for_text_count(hub, channel.channel_id, expected=4)
        ...     texts = [(e.sender, e.text) for e in hub.read_log(channel.channel_id) if e.event_type == "text"]
        ...     state, reason = hub.channel_state(channel.channel_id), hub.close_reason(channel.channel_id)
        ...     await hub.aclose()
        ...     return texts, state, reason
        >>> texts, state, reason = asyncio.run(main())
        >>> texts
        [('alice', 'Topic: should every developer learn Rust?'), ('bob', 'Only for systems work (turn 1).'),
         ('alice', 'Yes: memory safety pays off.'), ('bob', 'Only for systems work (turn 3).')]
        >>> state, reason
        ('closed', 'max_texts')
    """

    def __init__(self, store: KnowledgeStore | None = None, *,
                 ttl_sweep_interval: Annotated[float, SWEEP_INTERVAL] = 0.0, clock: Clock | None = None,
                 max_custom_events: Annotated[int, CUSTOM_EVENTS] = MAX_CUSTOM_EVENTS,
                 max_event_bytes: Annotated[int, EVENT_BYTES] = MAX_EVENT_BYTES):
        self.ttl_sweep_interval: float = SWEEP_INTERVAL.check(ttl_sweep_interval, "Hub", "ttl_sweep_interval")
        self.max_custom_events: int = CUSTOM_EVENTS.check(max_custom_events, "Hub", "max_custom_events")
        self.max_event_bytes: int = EVENT_BYTES.check(max_event_bytes, "Hub", "max_event_bytes")
        self.store: KnowledgeStore = store if store is not None else MemoryKnowledgeStore()
        self.clock: Clock = clock or monotonic
        self._clients: dict[str, HubClient] = {}
        self._channels: dict[str, ChannelRuntime] = {}
        self._listeners: list[Listener] = []
        self._token_listeners: list[TokenListener] = []
        self._ids = itertools.count(1)
        self._sweeper: asyncio.Task[None] | None = None
        self._deliveries = DeliveryCounter()
        self._closed = False
        self._tools = ToolLoop()  # the tool sources (MCP servers) of every channel: started once, stopped by aclose
        self._link = HubLink(self.store, self.clock, self._notify, self._route, self._client_stats, self._admit,
                             self.max_custom_events, self.max_event_bytes, self._tools, self._token_sink)

    @classmethod
    async def open(cls, store: KnowledgeStore | None = None, *, ttl_sweep_interval: float = 0.0,
                   clock: Clock | None = None, max_custom_events: int = MAX_CUSTOM_EVENTS,
                   max_event_bytes: int = MAX_EVENT_BYTES) -> "Hub":
        """A new hub (the arguments are the class's), its background sweep started when
        ``ttl_sweep_interval > 0``; call it from a running event loop."""
        hub = cls(store, ttl_sweep_interval=ttl_sweep_interval, clock=clock, max_custom_events=max_custom_events,
                  max_event_bytes=max_event_bytes)
        if hub.ttl_sweep_interval > 0:
            hub._sweeper = asyncio.create_task(hub._sweep_loop(), name="fsmchat-hub-sweep")
        return hub

    async def __aenter__(self) -> "Hub":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- agents ----
    async def register(self, agent: object, *, agent_id: str | None = None, handler: Handler | None = None,
                       accept_invites: bool | Callable[[Envelope], bool] = True,
                       close_tool: bool = False) -> HubClient:
        """Register an ``Agent``, a callable ``(turn) -> str``, a ``Human`` (a person: never called; on
        their turn the hub tells listeners ``person_turn`` and the channel waits for their
        ``client.channel(id).send(text)``), or a bare id (a client without a model: an app) and
        return its client. ``handler(client, envelope)`` replaces the default handler (it does its
        bookkeeping through ``client.services``); ``close_tool=True`` offers the default handler's
        model a ``close_channel`` tool."""
        self._check_open()
        if isinstance(agent, str):
            speaker, name = None, agent
        else:
            speaker = as_speaker(agent)
            name = speaker.name
        agent_id = agent_id or name
        if not isinstance(agent_id, str) or not agent_id or agent_id == HUB_SENDER or "[" in agent_id \
                or "]" in agent_id or len(agent_id.splitlines()) != 1:
            raise NetworkError(f"agent id {agent_id!r} is not allowed (non-empty, one line, no '[' or ']' since "
                               f"it labels texts as [id]:, and not {HUB_SENDER!r})")
        if agent_id in self._clients:
            raise NetworkError(f"agent '{agent_id}' is already registered")
        client = HubClient(self, agent_id, speaker,
                           handler or DefaultHandler(accept_invites=accept_invites, close_tool=close_tool))
        self._clients[agent_id] = client
        client.start(self._deliveries, self._tools)
        return client

    def client(self, agent_id: str) -> HubClient:
        """The registered client of ``agent_id`` (``NotFoundError`` if none)."""
        try:
            return self._clients[agent_id]
        except KeyError:
            raise NotFoundError(f"agent '{agent_id}' is not registered") from None

    @property
    def agents(self) -> list[str]:
        """The registered agent ids, in registration order."""
        return list(self._clients)

    def _admit(self, client: Participant) -> None:
        self._check_open()
        if self._clients.get(client.agent_id) is not client:
            raise NetworkError(f"client '{client.agent_id}' is not registered with this hub")

    def _client_stats(self, agent_id: str) -> TurnStats | None:
        client = self._clients.get(agent_id)
        return client.stats if client is not None else None

    # ---- channels ----
    def runtime(self, channel_id: str) -> ChannelRuntime:
        """The channel's runtime: its state, graph runs, counts and transitions (``NotFoundError``)."""
        try:
            return self._channels[channel_id]
        except KeyError:
            raise NotFoundError(f"channel '{channel_id}' not found") from None

    def list_channels(self, *, include_hidden: bool = False) -> list[str]:
        """The channel ids, in opening order; a channel a ``hide`` expectation hid is left out
        unless ``include_hidden``."""
        return [cid for cid, rt in self._channels.items() if include_hidden or not rt.ctx.hidden]

    # the public readings of one channel (each is its runtime's)
    def can_send(self, channel_id: str, agent_id: str) -> bool:
        """Whether a text from ``agent_id`` would be accepted now; no side effects."""
        return self.runtime(channel_id).can_send(agent_id)

    def adapter_state(self, channel_id: str) -> DiscussionState:
        """``DiscussionState(participant_order, expected_next_speaker, turn_count)`` (a snapshot)."""
        return self.runtime(channel_id).adapter_state()

    def read_log(self, channel_id: str) -> list[Envelope]:
        """The channel's accepted envelopes, in order."""
        return self.runtime(channel_id).log()

    def channel_state(self, channel_id: str) -> str:
        """``pending``, ``active``, ``closed`` or ``expired`` (the lifecycle graph's state)."""
        return self.runtime(channel_id).state

    def close_reason(self, channel_id: str) -> str | None:
        """The first close reason (``"ttl"`` once expired), None while the channel lives."""
        return self.runtime(channel_id).close_reason

    def stats(self, channel_id: str) -> TurnStats:
        """Texts, deliveries, skipped deliveries, model calls, wasted calls, turn failures (a copy)."""
        return self.runtime(channel_id).stats.copy()

    def usage(self, channel_id: str) -> CallStats:
        """Token usage and HTTP attempts of the channel's ``Agent`` model calls."""
        return self.runtime(channel_id).call_stats

    def runs(self, channel_id: str) -> tuple[GraphRun, GraphRun]:
        """(lifecycle, turns): the channel's two graph instances, with their paths and traces."""
        return self.runtime(channel_id).runs

    def turn_graph(self, channel_id: str) -> StateGraph:
        """The channel's turn graph (its round-robin rule), to render or analyse."""
        return self.runtime(channel_id).turn_graph

    def waiting_call(self, channel_id: str) -> dict[str, object] | None:
        """The channel's tool call waiting for a person (``Tool(approval=True)``): its ``speaker``,
        ``tool``, ``arguments``, ``call_id``, ``prompt`` and ``allowed`` answers; None when none
        waits. Listeners hear a ``tool_approval`` event when one starts waiting."""
        return self.runtime(channel_id).speaking.waiting_call()

    async def decide_tool_call(self, channel_id: str, answer: object) -> Envelope:
        """Decide on the channel's waiting tool call: ``Approve()``, ``Edit(arguments={...})``
        (checked against the tool's schema), ``Say(text)`` (its result, the tool not run) or
        ``Reject(reason)`` (the reason is its result). The decision is committed to the log
        (``EV_TOOL_DECISION``) and the agent's turn goes on.

        Raises:
            ProtocolError: No tool call waits in the channel.
            ToolArgumentsError: Edited arguments the tool's schema refuses (the call still waits).
        """
        self._check_open()
        return await self.runtime(channel_id).speaking.decide(answer)

    def is_hidden(self, channel_id: str) -> bool:
        """Whether a ``hide`` expectation hid the channel (until its next text)."""
        return self.runtime(channel_id).ctx.hidden

    # ---- listeners and routing ----
    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(NetworkEvent)`` on every hub happening; returns an unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def on_token(self, listener: TokenListener) -> Callable[[], None]:
        """Stream every channel reply to ``listener``: a ``TokenDelta(agent, step, text, attempt)``
        per piece of text as the model writes it (``step`` names the channel and its turn state,
        ``"discussion-1|awaiting_bob"``), and a ``StreamRetry`` when a stream broke after text was
        shown and the call is tried again. The reply is still sent whole, after its deltas; with
        tools only the final reply's text streams. While no token listener is registered no
        request asks for a stream. Returns an unsubscribe function.

        Raises:
            TypeError: ``listener`` is not callable.
        """
        if not callable(listener):
            raise TypeError(f"Hub.on_token: listener must be callable (it is given each TokenDelta and "
                            f"StreamRetry), got {listener!r}")
        self._token_listeners.append(listener)
        return lambda: self._token_listeners.remove(listener) if listener in self._token_listeners else None

    def _token_sink(self) -> Callable[[object], None] | None:
        return self._tell_tokens if self._token_listeners else None

    def _tell_tokens(self, item: object) -> None:
        for listener in list(self._token_listeners):
            try:
                listener(item)
            except Exception as exc:  # a display that fails never breaks the reply
                warnings.warn(f"fsmchat hub token listener {listener!r} raised {type(exc).__name__}: {exc}",
                              RuntimeWarning, stacklevel=2)

    def _notify(self, event: NetworkEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception as exc:  # a listener never breaks the hub's state
                warnings.warn(f"fsmchat hub listener {listener!r} raised {type(exc).__name__}: {exc}",
                              RuntimeWarning, stacklevel=2)

    def _route(self, envelope: Envelope) -> None:
        for pid in envelope.audience:
            client = self._clients.get(pid)
            if client is not None:
                client.deliver(envelope)

    # ---- opening ----
    async def open_channel(self, creator: HubClient, type: str = DISCUSSION, target: Sequence[object] | str = (),
                           knobs: dict[str, object] | None = None, ttl: float | str | None = None, *,
                           expectations: Iterable[Expectation] | None = None,
                           handshake_timeout: float | None = 30.0, context: object = None) -> ChannelRuntime:
        """Create a channel with ``creator`` first, invite the targets, and return its runtime once
        every invitee acked (what ``creator.open(...)`` does; its docstring has the arguments)."""
        self._admit(creator)
        if type not in CHANNEL_TYPES:
            raise ProtocolError(f"channel type {type!r} not supported; choose from {list(CHANNEL_TYPES)}")
        knobs = check_knobs(knobs)
        context = check_channel_context(context)
        targets: list[object] = [target] if isinstance(target, str) else list(target or ())
        targets = [t.agent_id if isinstance(t, HubClient) else t for t in targets]
        order = participant_order(creator.agent_id, targets, self._clients)
        expires_at = None
        if ttl is not None:
            try:
                expires_at = self.clock() + parse_seconds(ttl)
            except ValueError as exc:
                raise ProtocolError(f"channel ttl: {exc}") from None
        if handshake_timeout is not None:
            try:
                handshake_timeout = parse_seconds(handshake_timeout)
            except ValueError as exc:
                raise ProtocolError(f"channel handshake_timeout: {exc} (None waits without a limit)") from None
        cid = f"{type}-{next(self._ids)}"
        while self.store.get_state(cid) is not None:  # a channel the store holds keeps its id
            cid = f"{type}-{next(self._ids)}"
        ctx = self._context(cid, creator.agent_id, order, type, knobs, expires_at, expectations, context)
        runtime = self._channels[cid] = ChannelRuntime(ctx, self._link)
        runtime.invite()
        await runtime.wait_open(handshake_timeout)
        return runtime

    async def resume_channel(self, channel_id: str, *, expectations: Iterable[Expectation] | None = None
                             ) -> ChannelRuntime:
        """Resume a channel this hub's store holds (a hub of an earlier process, on a
        ``SQLiteKnowledgeStore``): register its participants first. Its graph runs stand where it
        was (their paths start there), its log and counts go on, and each participant is handed what
        it has not acted on: an invite not acked, or the last text to the expected speaker, whose
        handler takes the turn. An agent's tool round in progress goes on from its log: a call with a
        committed result never runs again; one asked for without a committed result runs again only
        when its tool is ``idempotent``, else it waits at ``approve_awaiting_<p>`` for
        ``decide_tool_call`` (as a pattern's resumed run waits). TTLs stay on the hub's clock (give
        the hubs a wall clock such as ``time.time`` for TTLs that hold across processes).

        Raises:
            NotFoundError: The store holds no such channel, or a participant is not registered.
            ProtocolError: The channel is open on this hub already.
        """
        self._check_open()
        if channel_id in self._channels:
            raise ProtocolError(f"channel '{channel_id}' is already open on this hub")
        stored = read_channel(self.store, channel_id)
        missing = [p for p in stored.order if p not in self._clients]
        if missing:
            raise NotFoundError(f"channel '{channel_id}' cannot resume: participant '{missing[0]}' is not registered "
                                f"(register {missing} first)")
        ctx = self._context(channel_id, stored.creator, stored.order, stored.type, stored.knobs, stored.expires_at,
                            expectations, stored.context)
        ctx.acked, ctx.rejected_by, ctx.close_reason, ctx.closed_by = stored.acked, stored.rejected_by, \
            stored.close_reason, stored.closed_by
        ctx.turn_count, ctx.hidden, ctx.turn_started = stored.texts, stored.hidden, self.clock()
        runtime = self._channels[channel_id] = ChannelRuntime(ctx, self._link, stored)
        runtime.redeliver()
        return runtime

    def _context(self, cid: str, creator: str, order: list[str], type: str, knobs: dict[str, object],
                 expires_at: float | None, expectations: Iterable[Expectation] | None,
                 context: ContextPolicy | None) -> ChannelContext:
        clients = [self._clients[p] for p in order]
        max_texts = knobs.get("max_texts")  # a positive integer or absent (check_knobs)
        return ChannelContext(cid, creator, order, max_texts if isinstance(max_texts, int) else None, expires_at,
                              self.clock,
                              expectations=tuple(DEFAULT_EXPECTATIONS if expectations is None else expectations),
                              type=type, knobs=knobs, context=context,
                              people=frozenset(c.agent_id for c in clients if isinstance(c.speaker, Human)),
                              speakers={c.agent_id: c.speaker for c in clients
                                        if c.speaker is not None and has_tools(c.speaker)})

    # ---- time: TTL and expectations ----
    def expire_due(self) -> list[str]:
        """Move every channel whose TTL has run out (on the hub's clock) to ``expired``; their ids."""
        return [cid for cid, rt in list(self._channels.items()) if rt.expire_if_due()]

    def check_expectations(self) -> list[NetworkEvent]:
        """Evaluate every live channel's expectations now; report each new violation once per turn."""
        now = self.clock()
        return [event for rt in list(self._channels.values()) for event in rt.check_expectations(now)]

    async def sweep(self) -> tuple[list[str], list[NetworkEvent]]:
        """``expire_due()`` then ``check_expectations()`` (what the background sweep runs)."""
        return self.expire_due(), self.check_expectations()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_sweep_interval)
            await self.sweep()

    async def drain(self, timeout: float | None = None) -> None:
        """Wait until every delivered envelope has been handled (texts a handler sends in reply
        are deliveries too, so on an endless discussion this only returns once it is closed)."""
        await self._deliveries.idle(timeout)

    # ---- lifetime ----
    def _check_open(self) -> None:
        if self._closed:
            raise HubClosed("the hub is closed (hub.aclose() was called): it accepts nothing more")

    async def aclose(self) -> None:
        """Stop the sweep, every client worker and every model call still running; idempotent."""
        if self._closed:
            return
        self._closed = True
        tasks: list[TurnTask] = []
        if self._sweeper is not None:
            tasks.append(self._sweeper)
        tasks += [c.worker for c in self._clients.values() if c.worker is not None]
        tasks += [t for rt in self._channels.values() for t in rt.turn_tasks()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for rt in self._channels.values():
            rt.cancel_open()
        await self._tools.close()  # every tool source (MCP server) a channel started

    @property
    def closed(self) -> bool:
        """Whether ``aclose()`` was called."""
        return self._closed

    def __repr__(self) -> str:
        return f"Hub({len(self._clients)} agents, {len(self._channels)} channels)"
