"""The hub: registered agents, their clients and channel handles, and every channel's two graphs.

Every send goes through the hub. A channel's lifecycle (``pending -> active -> closed | expired``)
and its turn rule (``awaiting_<p> -> awaiting_<next>``) are ``StateGraph``s stepped by
``GraphRun``s (the engine's one runner, moved by ``fire(event)``); the hub turns outside happenings (acks, texts,
close, TTL) into their events. Each client has one worker task that feeds its handler the
envelopes delivered to it, one at a time; ``aclose()`` cancels and awaits every task the hub
started.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import math
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterable, Sequence

from ..graph.state_graph import StateGraph
from ..engine import GraphRun
from ..speakers.agent import as_speaker
from ..speakers.human import Human
from ..speakers.llm import CallStats
from .adapter import DISCUSSION, DiscussionAdapter, DiscussionState, check_knobs, participant_order
from .clock import Clock, monotonic
from .errors import ChannelLimitError, HubClosed, NetworkError, NotFoundError, ProtocolError, TurnFailed
from .events import EV_CHANNEL_CLOSED, EV_CHANNEL_EXPIRED, EV_CHANNEL_INVITE_ACK, EV_CHANNEL_INVITE_REJECT, \
    EV_EXPECTATION_VIOLATED, EV_TEXT, EV_TURN_FAILED, HUB_SENDER, PROTOCOL_EVENTS, Envelope, NetworkEvent
from .expectations import DEFAULT_EXPECTATIONS, Expectation, due, parse_seconds
from .graphs import LIFECYCLE, LIFECYCLE_ACTIVE, LIFECYCLE_CLOSED, LIFECYCLE_EXPIRED, LIFECYCLE_PENDING, \
    ChannelContext, send_invites, ttl_elapsed
from .handler import DefaultHandler, TurnStats
from .store import KnowledgeStore, MemoryKnowledgeStore

Listener = Callable[[NetworkEvent], None]
Handler = Callable[["HubClient", Envelope], Any]
CHANNEL_TYPES = (DISCUSSION,)
MAX_CUSTOM_EVENTS = 1000  # custom (emit) events per channel
MAX_EVENT_BYTES = 64 * 1024  # one custom event: its type and data as UTF-8 JSON


def _limit(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name} must be an int >= 1, got {value!r}")
    return value


def event_size(channel_id: str, event_type: str, data: Any) -> tuple[dict[str, Any], int]:
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


@dataclass(eq=False)
class _ChannelRecord:
    """The hub's side of one channel."""

    ctx: ChannelContext
    lifecycle: GraphRun = None  # type: ignore[assignment]
    adapter: DiscussionAdapter = None  # type: ignore[assignment]
    stats: TurnStats = field(default_factory=TurnStats)
    call_stats: CallStats = field(default_factory=CallStats)
    seq: int = 0
    custom_events: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    opened: "asyncio.Future[None] | None" = None
    inflight: set = field(default_factory=set)
    failure: TurnFailed | None = None  # the first failed turn (the round robin stalls there)


def _retrieve(fut: "asyncio.Future[Any]") -> None:
    if not fut.cancelled():
        fut.exception()  # mark retrieved: nobody awaiting an open is not an error


class Hub:
    """Routes envelopes between registered agents and enforces each channel's graphs.

    Open with ``hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=...)``;
    ``ttl_sweep_interval > 0`` starts a background sweep (TTL expiry and expectations) every that
    many real seconds; with 0, call ``expire_due()`` / ``check_expectations()`` / ``sweep()``.
    ``clock`` (default ``time.monotonic``) is what TTLs and expectations are measured on.
    Custom events (``channel.emit``) are capped per channel: ``max_custom_events`` (default 1,000)
    and ``max_event_bytes`` per event (default 64 KiB of type + JSON data); over either is a
    ``ChannelLimitError``. After ``aclose()`` every send, emit, open, ack and close is ``HubClosed``.
    """

    def __init__(self, store: KnowledgeStore | None = None, *, ttl_sweep_interval: float = 0.0,
                 clock: Clock | None = None, max_custom_events: int = MAX_CUSTOM_EVENTS,
                 max_event_bytes: int = MAX_EVENT_BYTES):
        if isinstance(ttl_sweep_interval, bool) or not isinstance(ttl_sweep_interval, (int, float)) \
                or not math.isfinite(ttl_sweep_interval) or ttl_sweep_interval < 0:
            raise ValueError(f"ttl_sweep_interval must be a finite number >= 0 (0 = no background sweep), "
                             f"got {ttl_sweep_interval!r}")
        self.max_custom_events = _limit("Hub", "max_custom_events", max_custom_events)
        self.max_event_bytes = _limit("Hub", "max_event_bytes", max_event_bytes)
        self.store: KnowledgeStore = store if store is not None else MemoryKnowledgeStore()
        self.clock: Clock = clock or monotonic
        self.ttl_sweep_interval = float(ttl_sweep_interval)
        self._clients: dict[str, HubClient] = {}
        self._channels: dict[str, _ChannelRecord] = {}
        self._listeners: list[Listener] = []
        self._ids = itertools.count(1)
        self._sweeper: asyncio.Task | None = None
        self._turn_tasks: set[asyncio.Task] = set()
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    @classmethod
    async def open(cls, store: KnowledgeStore | None = None, *, ttl_sweep_interval: float = 0.0,
                   clock: Clock | None = None, max_custom_events: int = MAX_CUSTOM_EVENTS,
                   max_event_bytes: int = MAX_EVENT_BYTES) -> "Hub":
        hub = cls(store, ttl_sweep_interval=ttl_sweep_interval, clock=clock, max_custom_events=max_custom_events,
                  max_event_bytes=max_event_bytes)
        if hub.ttl_sweep_interval > 0:
            hub._sweeper = asyncio.create_task(hub._sweep_loop(), name="fsmchat-hub-sweep")
        return hub

    async def __aenter__(self) -> "Hub":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ---- agents ----
    async def register(self, agent: Any, *, agent_id: str | None = None, handler: Handler | None = None,
                       accept_invites: bool | Callable[[Envelope], bool] = True,
                       close_tool: bool = False) -> "HubClient":
        """Register an ``Agent``, a callable ``(turn) -> str``, a ``Human`` (a person: never called; on
        their turn the hub tells listeners ``person_turn`` and the channel waits for their
        ``client.channel(id).send(text)``), or a bare id (a client without a model: an app) and
        return its client. ``handler(client, envelope)`` replaces the default
        handler; ``close_tool=True`` offers the default handler's model a ``close_channel`` tool."""
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
        client._worker = asyncio.create_task(client._run(), name=f"fsmchat-client-{agent_id}")
        return client

    def client(self, agent_id: str) -> "HubClient":
        try:
            return self._clients[agent_id]
        except KeyError:
            raise NotFoundError(f"agent '{agent_id}' is not registered") from None

    @property
    def agents(self) -> list[str]:
        return list(self._clients)

    # ---- reading a channel ----
    def _get(self, channel_id: str) -> _ChannelRecord:
        try:
            return self._channels[channel_id]
        except KeyError:
            raise NotFoundError(f"channel '{channel_id}' not found") from None

    def can_send(self, channel_id: str, agent_id: str) -> bool:
        """Whether a text from ``agent_id`` would be accepted now; no side effects."""
        return self._get(channel_id).adapter.can_send(agent_id)

    def adapter_state(self, channel_id: str) -> DiscussionState:
        """``DiscussionState(participant_order, expected_next_speaker, turn_count)`` (a snapshot)."""
        return self._get(channel_id).adapter.state()

    def read_log(self, channel_id: str) -> list[Envelope]:
        """The channel's accepted envelopes, in order."""
        self._get(channel_id)
        return self.store.read(channel_id)

    def text_count(self, channel_id: str) -> int:
        return self._get(channel_id).stats.texts

    def channel_state(self, channel_id: str) -> str:
        """``pending``, ``active``, ``closed`` or ``expired`` (the lifecycle graph's state)."""
        return self._get(channel_id).lifecycle.state

    def close_reason(self, channel_id: str) -> str | None:
        """The first close reason (``"ttl"`` once expired), None while the channel lives."""
        ch = self._get(channel_id)
        return ch.ctx.close_reason if ch.lifecycle.finished else None

    def stats(self, channel_id: str) -> TurnStats:
        """Texts, deliveries, skipped deliveries, model calls, wasted calls, turn failures (a copy)."""
        return self._get(channel_id).stats.copy()

    def usage(self, channel_id: str) -> CallStats:
        """Token usage and HTTP attempts of the channel's ``Agent`` model calls."""
        return self._get(channel_id).call_stats

    def runs(self, channel_id: str) -> tuple[GraphRun, GraphRun]:
        """(lifecycle, turns): the channel's two graph instances, with their paths and traces."""
        ch = self._get(channel_id)
        return ch.lifecycle, ch.adapter.turns

    def turn_graph(self, channel_id: str) -> StateGraph:
        return self._get(channel_id).adapter.graph

    @staticmethod
    def lifecycle_graph() -> StateGraph:
        return LIFECYCLE

    def is_hidden(self, channel_id: str) -> bool:
        return self._get(channel_id).ctx.hidden

    def list_channels(self, *, include_hidden: bool = False) -> list[str]:
        return [cid for cid, ch in self._channels.items() if include_hidden or not ch.ctx.hidden]

    # ---- listeners ----
    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(NetworkEvent)`` on every hub happening; returns an unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _notify(self, event: NetworkEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception as exc:  # a listener never breaks the hub's state
                warnings.warn(f"fsmchat hub listener {listener!r} raised {type(exc).__name__}: {exc}",
                              RuntimeWarning, stacklevel=2)

    def _notify_kind(self, kind: str, channel_id: str | None, agent_id: str | None = None, *,
                     envelope: Envelope | None = None, error: BaseException | None = None,
                     data: dict[str, Any] | None = None) -> None:
        self._notify(NetworkEvent(kind, channel_id, agent_id, envelope, error, dict(data or {}), self.clock()))

    def _refuse(self, channel_id: str, sender: str, exc: ProtocolError, **data: Any) -> ProtocolError:
        ch = self._channels.get(channel_id)
        if ch is not None:
            ch.stats.rejected_sends += 1
        self._notify_kind("rejected", channel_id, sender, error=exc, data=data)
        return exc

    # ---- opening ----
    async def _open_channel(self, creator: "HubClient", type: str, target: Sequence[Any] | str,
                            knobs: dict[str, Any] | None, ttl: float | str | None,
                            expectations: Iterable[Expectation] | None,
                            handshake_timeout: float | None) -> "Channel":
        self._check_open()
        self._check_client(creator)
        if type not in CHANNEL_TYPES:
            raise ProtocolError(f"channel type {type!r} not supported; choose from {list(CHANNEL_TYPES)}")
        knobs = check_knobs(knobs)
        targets = [target] if isinstance(target, str) else list(target or ())
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
        ctx = ChannelContext(cid, creator.agent_id, order, knobs.get("max_texts"), expires_at, self.clock,
                             expectations=tuple(DEFAULT_EXPECTATIONS if expectations is None else expectations),
                             type=type, knobs=knobs,
                             people=frozenset(p for p in order if isinstance(self._clients[p].speaker, Human)))
        ch = _ChannelRecord(ctx)
        ch.opened = asyncio.get_running_loop().create_future()
        ch.opened.add_done_callback(_retrieve)
        self._channels[cid] = ch
        ctx.emit = partial(self._emit, ch)
        ch.lifecycle = ctx.lifecycle = GraphRun(LIFECYCLE, ctx, observers=[self._observer(cid, LIFECYCLE.name)],
                                               clock=self.clock)
        ch.adapter = DiscussionAdapter(ctx, observers=[self._observer(cid, "discussion_turns")])
        send_invites(ctx)
        self._save(ch)
        if handshake_timeout is None:
            await asyncio.shield(ch.opened)
        else:
            try:
                await asyncio.wait_for(asyncio.shield(ch.opened), handshake_timeout)
            except asyncio.TimeoutError:
                missing = ch.adapter.missing_acks()
                self._close(ch, "handshake timed out", HUB_SENDER)
                raise ProtocolError(f"channel '{cid}' did not open within {handshake_timeout}s; no ack from "
                                    f"{missing}") from None
        return Channel(creator, cid)

    def _observer(self, cid: str, graph: str) -> Callable[[Any], None]:
        return lambda ev: self._notify_kind("transition", cid, data={"graph": graph, "event": ev})

    # ---- the one way an envelope enters a channel ----
    def _emit(self, ch: _ChannelRecord, event_type: str, *, sender: str = HUB_SENDER, text: str | None = None,
              data: dict[str, Any] | None = None, audience: Sequence[str] | None = None) -> Envelope:
        ctx = ch.ctx
        if audience is None:
            audience = [p for p in ctx.order if p != sender]
        env = Envelope(ch.seq + 1, ctx.channel_id, event_type, sender, text, dict(data or {}), self.clock(),
                       tuple(audience))
        ch.seq = env.seq  # taken only once the envelope exists
        self.store.append(ctx.channel_id, env)
        if event_type == EV_TEXT:
            ch.stats.texts += 1
            if sender in self._clients:
                self._clients[sender].stats.texts += 1
        self._wake(ch)  # waiters (wait_for_text_count) first: they see a text before any handler reacts to it
        self._notify_kind("accepted", ctx.channel_id, sender, envelope=env)
        for pid in env.audience:
            client = self._clients.get(pid)
            if client is not None:
                client._deliver(env)
        return env

    def _wake(self, ch: _ChannelRecord) -> None:
        old, ch.changed = ch.changed, asyncio.Event()
        old.set()

    def _save(self, ch: _ChannelRecord) -> None:
        ctx = ch.ctx
        s = ch.adapter.state() if ch.adapter is not None else None
        self.store.put_state(ctx.channel_id, {
            "type": ctx.type, "state": ctx.state, "turns_state": ch.adapter.turns.state if ch.adapter else None,
            "participant_order": list(ctx.order), "expected_next_speaker": s.expected_next_speaker if s else None,
            "turn_count": ctx.turn_count, "close_reason": ctx.close_reason if ch.lifecycle.finished else None,
            "knobs": dict(ctx.knobs), "expires_at": ctx.expires_at, "hidden": ctx.hidden})

    # ---- participant actions (sender always the client's own id) ----
    async def _submit(self, client: "HubClient", channel_id: str, event_type: str, *, text: str | None = None,
                      data: dict[str, Any] | None = None) -> Envelope:
        self._check_open()
        self._check_client(client)
        ch = self._get(channel_id)
        sender = client.agent_id
        self._expire_if_due(ch)
        custom = event_type != EV_TEXT
        try:
            if not custom:
                if not isinstance(text, str) or not text.strip():
                    raise ProtocolError(f"channel '{channel_id}': a text must be a non-empty string, got {text!r}")
            elif not isinstance(event_type, str) or not event_type or event_type in PROTOCOL_EVENTS:
                raise ProtocolError(f"event type {event_type!r} is reserved for the hub (or empty); custom "
                                    "events use their own names, e.g. 'myapp.note'")
            else:
                data, size = event_size(channel_id, event_type, data)
                if size > self.max_event_bytes:
                    raise ChannelLimitError(f"channel '{channel_id}': event {event_type!r} is {size} bytes, over the "
                                            f"limit of {self.max_event_bytes} per event (Hub(max_event_bytes=...))")
                if ch.custom_events >= self.max_custom_events:
                    raise ChannelLimitError(f"channel '{channel_id}' already holds {ch.custom_events} custom events, "
                                            f"its limit (Hub(max_custom_events=...)); {event_type!r} refused")
            ch.adapter.validate_send(sender, event_type)
        except ProtocolError as exc:
            raise self._refuse(channel_id, sender, exc, event_type=event_type, text=text) from None
        capped = ch.adapter.accept_text(sender) if event_type == EV_TEXT else False
        env = self._emit(ch, event_type, sender=sender, text=text, data=data)
        ch.custom_events += custom
        if capped:
            self._close(ch, "max_texts", HUB_SENDER)
        self._save(ch)
        return env

    async def _ack(self, client: "HubClient", channel_id: str, accept: bool) -> Envelope:
        self._check_open()
        self._check_client(client)
        ch = self._get(channel_id)
        me, ctx = client.agent_id, ch.ctx
        self._expire_if_due(ch)
        ev_type = EV_CHANNEL_INVITE_ACK if accept else EV_CHANNEL_INVITE_REJECT
        try:
            if me not in ctx.invitees:
                raise ProtocolError(f"'{me}' was not invited to channel '{channel_id}'")
            if ctx.state in (LIFECYCLE_CLOSED, LIFECYCLE_EXPIRED):
                raise ProtocolError(f"channel '{channel_id}' is {ctx.state}")
            if ctx.state == LIFECYCLE_ACTIVE or me in ctx.acked:
                raise ProtocolError(f"'{me}' already acknowledged channel '{channel_id}'")
        except ProtocolError as exc:
            raise self._refuse(channel_id, me, exc, event_type=ev_type) from None
        env = self._emit(ch, ev_type, sender=me, audience=(ctx.creator,))
        if accept:
            ctx.acked.add(me)
            ch.lifecycle.fire("ack", {"agent": me})
            if ch.lifecycle.state == LIFECYCLE_ACTIVE and ch.opened is not None and not ch.opened.done():
                ch.opened.set_result(None)
        else:
            ctx.rejected_by = me
            reason = f"invite rejected by '{me}'"
            ctx.close_reason, ctx.closed_by = reason, me
            ch.lifecycle.fire("reject", {"agent": me})
            self._ended(ch, "close", reason, me)
        self._save(ch)
        return env

    async def _close_by(self, client: "HubClient", channel_id: str, reason: str) -> str:
        self._check_open()
        self._check_client(client)
        ch = self._get(channel_id)
        if client.agent_id not in ch.ctx.order:
            exc = ProtocolError(f"'{client.agent_id}' is not a participant of channel '{channel_id}'")
            raise self._refuse(channel_id, client.agent_id, exc, event_type=EV_CHANNEL_CLOSED) from None
        self._expire_if_due(ch)
        return self._close(ch, reason, client.agent_id)

    def _close(self, ch: _ChannelRecord, reason: str, by: str) -> str:
        """Close once; later calls change nothing and return the first reason."""
        ctx = ch.ctx
        if ch.lifecycle.finished:
            return ctx.close_reason or ctx.state
        ctx.close_reason, ctx.closed_by = reason, by
        ch.lifecycle.fire("close", {"reason": reason, "by": by})
        self._ended(ch, "close", reason, by)
        self._save(ch)
        return reason

    def _expire_if_due(self, ch: _ChannelRecord) -> bool:
        if ch.lifecycle.finished or not ch.lifecycle.can_fire("expire"):
            return False
        ctx = ch.ctx
        ctx.close_reason, ctx.closed_by = "ttl", HUB_SENDER
        ch.lifecycle.fire("expire", {"expires_at": ctx.expires_at, "now": self.clock()})
        self._ended(ch, "expire", "ttl", HUB_SENDER)
        self._save(ch)
        return True

    def _ended(self, ch: _ChannelRecord, label: str, reason: str, by: str) -> None:
        """After the lifecycle left pending/active: end the turns, tell everyone, fail a waiting open,
        cancel model calls still running for this channel."""
        ctx = ch.ctx
        ch.adapter.end(label)
        if label == "expire":
            self._emit(ch, EV_CHANNEL_EXPIRED, audience=tuple(ctx.order), data={"expires_at": ctx.expires_at})
        else:
            self._emit(ch, EV_CHANNEL_CLOSED, sender=by, audience=tuple(ctx.order), data={"reason": reason})
        if ch.opened is not None and not ch.opened.done():
            ch.opened.set_exception(ProtocolError(f"channel '{ctx.channel_id}' is {ctx.state}: {reason}"))
        current = asyncio.current_task()
        for task in list(ch.inflight):
            if task is not current:
                task.cancel()

    # ---- time: TTL and expectations ----
    def expire_due(self) -> list[str]:
        """Move every channel whose TTL has run out (on the hub's clock) to ``expired``; their ids."""
        return [cid for cid, ch in list(self._channels.items()) if self._expire_if_due(ch)]

    def check_expectations(self) -> list[NetworkEvent]:
        """Evaluate every live channel's expectations now; report each new violation once per turn."""
        now = self.clock()
        out = []
        for cid, ch in list(self._channels.items()):
            ctx = ch.ctx
            if ttl_elapsed(ctx):
                continue  # expiring, not stalled
            for v in due(ctx, ch.adapter.expected, now):
                ctx.fired.add((v.index, v.turn))
                if v.expectation.action == "hide":
                    ctx.hidden = True
                data = {"expectation": v.expectation.name, "seconds": v.expectation.seconds,
                        "action": v.expectation.action, "speaker": v.speaker, "turn": v.turn, "waited": v.waited}
                env = self._emit(ch, EV_EXPECTATION_VIOLATED, audience=tuple(ctx.order), data=data)
                event = NetworkEvent("expectation", cid, v.speaker, env, None, data, now)
                self._notify(event)
                out.append(event)
                self._save(ch)
        return out

    async def sweep(self) -> tuple[list[str], list[NetworkEvent]]:
        """``expire_due()`` then ``check_expectations()`` (what the background sweep runs)."""
        return self.expire_due(), self.check_expectations()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_sweep_interval)
            await self.sweep()

    # ---- the default handler's bookkeeping ----
    def _count(self, channel_id: str, agent_id: str, name: str) -> None:
        ch = self._channels.get(channel_id)
        if ch is not None:
            setattr(ch.stats, name, getattr(ch.stats, name) + 1)
        client = self._clients.get(agent_id)
        if client is not None:
            setattr(client.stats, name, getattr(client.stats, name) + 1)

    def _call_stats(self, channel_id: str) -> CallStats:
        return self._get(channel_id).call_stats

    async def _track_turn(self, channel_id: str, task: "asyncio.Future[Any]") -> Any:
        """Await a model call registered under its channel (cancelled if the channel ends first).
        Returns None when it was cancelled that way; re-raises the call's own exception."""
        ch = self._get(channel_id)
        ch.inflight.add(task)
        self._turn_tasks.add(task)  # type: ignore[arg-type]
        task.add_done_callback(self._turn_tasks.discard)
        try:
            await asyncio.wait({task})
        finally:
            ch.inflight.discard(task)
            if not task.done():  # our worker was cancelled (hub shutdown): the call goes too
                task.cancel()
        if task.cancelled():
            return None
        return task.result()

    def _turn_failed(self, channel_id: str, agent_id: str, reason: str, turn: int) -> None:
        ch = self._get(channel_id)
        self._count(channel_id, agent_id, "turn_failures")
        data = {"speaker": agent_id, "turn": turn, "reason": reason}
        if ch.failure is None:
            ch.failure = TurnFailed(channel_id, agent_id, reason, turn)
        env = None
        if ch.ctx.state in (LIFECYCLE_ACTIVE, LIFECYCLE_PENDING):
            env = self._emit(ch, EV_TURN_FAILED, sender=agent_id, data=data)
        self._notify_kind("turn_failed", channel_id, agent_id, envelope=env, data=data)
        self._wake(ch)

    def _delivered(self) -> None:
        self._pending += 1
        self._idle.clear()

    def _handled(self) -> None:
        self._pending -= 1
        if self._pending == 0:
            self._idle.set()

    async def drain(self, timeout: float | None = None) -> None:
        """Wait until every delivered envelope has been handled (texts a handler sends in reply
        are deliveries too, so on an endless discussion this only returns once it is closed)."""
        await asyncio.wait_for(self._idle.wait(), timeout)

    # ---- lifetime ----
    def _check_open(self) -> None:
        if self._closed:
            raise HubClosed("the hub is closed (hub.aclose() was called): it accepts nothing more")

    def _check_client(self, client: "HubClient") -> None:
        if self._clients.get(client.agent_id) is not client:
            raise NetworkError(f"client '{client.agent_id}' is not registered with this hub")

    async def aclose(self) -> None:
        """Stop the sweep, every client worker and every model call still running; idempotent."""
        if self._closed:
            return
        self._closed = True
        tasks: list[asyncio.Future[Any]] = []
        if self._sweeper is not None:
            tasks.append(self._sweeper)
        tasks += [c._worker for c in self._clients.values() if c._worker is not None]
        tasks += list(self._turn_tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._turn_tasks.clear()
        for ch in self._channels.values():
            if ch.opened is not None and not ch.opened.done():
                ch.opened.cancel()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"Hub({len(self._clients)} agents, {len(self._channels)} channels)"


class HubClient:
    """A registered agent's access to the hub. Everything it sends is sent as ``agent_id``."""

    def __init__(self, hub: Hub, agent_id: str, speaker: Any, handler: Handler):
        self.hub = hub
        self.agent_id = agent_id
        self.speaker = speaker
        self.handler = handler
        self.stats = TurnStats()
        self._inbox: asyncio.Queue[Envelope] = asyncio.Queue()
        self._worker: asyncio.Task | None = None

    @property
    def agent(self) -> Any:
        return self.speaker

    async def open(self, type: str = DISCUSSION, target: Sequence[Any] | str = (),
                   knobs: dict[str, Any] | None = None, ttl: float | str | None = None, *,
                   expectations: Iterable[Expectation] | None = None,
                   handshake_timeout: float | None = 30.0) -> "Channel":
        """Open a channel with this agent as creator; returns once every invitee acked (active).

        ``knobs``: ``ordering`` (``"round_robin"``) and ``max_texts`` (close at exactly N texts).
        ``ttl`` in seconds of the hub's clock. ``expectations`` default to ``turn_within(120s, warn)``
        and ``turn_within(600s, hide)``. Raises ``ProtocolError`` if refused, rejected or timed out.
        """
        return await self.hub._open_channel(self, type, target, knobs, ttl, expectations, handshake_timeout)

    def channel(self, channel_id: str) -> "Channel":
        """This agent's own handle on ``channel_id`` (sends go out as this agent)."""
        self.hub._get(channel_id)
        return Channel(self, channel_id)

    def can_send(self, channel_id: str) -> bool:
        return self.hub.can_send(channel_id, self.agent_id)

    def _deliver(self, envelope: Envelope) -> None:
        if self._worker is None or self._worker.done():
            return
        self.hub._delivered()
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
                self.hub._notify_kind("handler_error", envelope.channel_id, self.agent_id, envelope=envelope,
                                      error=exc)
            finally:
                self.hub._handled()

    def __repr__(self) -> str:
        return f"HubClient({self.agent_id!r})"


class Channel:
    """One participant's handle on a channel. It has no sender parameter: it sends as its client."""

    __slots__ = ("_client", "channel_id")

    def __init__(self, client: HubClient, channel_id: str):
        self._client = client
        self.channel_id = channel_id

    @property
    def agent_id(self) -> str:
        return self._client.agent_id

    @property
    def hub(self) -> Hub:
        return self._client.hub

    async def send(self, text: str) -> Envelope:
        """Send a text as this agent; ``ProtocolError`` (and nothing recorded) if refused."""
        return await self.hub._submit(self._client, self.channel_id, EV_TEXT, text=text)

    async def emit(self, event_type: str, data: dict[str, Any] | None = None) -> Envelope:
        """Send a custom event (any non-protocol type): passes at any time, never advances the turn.
        ``data`` is a JSON object (stored as a copy); over the hub's ``max_custom_events`` per channel or
        ``max_event_bytes`` per event it is a ``ChannelLimitError``, and nothing is recorded."""
        return await self.hub._submit(self._client, self.channel_id, event_type, data=data)

    async def close(self, reason: str = "closed") -> str:
        """Close the channel for everyone; idempotent, returns the reason in effect (the first one)."""
        return await self.hub._close_by(self._client, self.channel_id, reason)

    async def ack(self) -> Envelope:
        return await self.hub._ack(self._client, self.channel_id, True)

    async def reject(self) -> Envelope:
        return await self.hub._ack(self._client, self.channel_id, False)

    def can_send(self) -> bool:
        return self.hub.can_send(self.channel_id, self.agent_id)

    @property
    def state(self) -> str:
        return self.hub.channel_state(self.channel_id)

    @property
    def close_reason(self) -> str | None:
        return self.hub.close_reason(self.channel_id)

    def log(self) -> list[Envelope]:
        return self.hub.read_log(self.channel_id)

    def __repr__(self) -> str:
        return f"Channel({self.channel_id!r}, as {self.agent_id!r})"


async def wait_for_text_count(hub: Hub, channel_id: str, expected: int, timeout: float | None = None) -> int:
    """Wait until the channel holds at least ``expected`` texts; returns the count.

    Event-driven (woken by each accepted envelope, before any handler sees it), so an app that
    closes right after it returns closes at exactly ``expected``. Raises ``TurnFailed`` (with the
    cause) as soon as a participant's turn fails, since no further text can come; ``NetworkError``
    if the channel ends with fewer texts; ``TimeoutError`` after ``timeout`` real seconds.
    """
    async def wait() -> int:
        while True:
            ch = hub._get(channel_id)
            n = ch.stats.texts
            if n >= expected:
                return n
            if ch.failure is not None:  # the expected speaker failed: no text will come
                raise ch.failure
            if ch.lifecycle.finished:
                raise NetworkError(f"channel '{channel_id}' is {ch.ctx.state} with {n} of {expected} texts")
            await ch.changed.wait()

    if timeout is None:
        return await wait()
    if hasattr(asyncio, "timeout"):  # 3.11+: same task, so the "waiters first" ordering holds
        async with asyncio.timeout(timeout):
            return await wait()
    return await asyncio.wait_for(wait(), timeout)  # pragma: no cover - Python 3.10
