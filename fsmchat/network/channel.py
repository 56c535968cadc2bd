"""One channel at run time: its context, its two graph runs, its log, counts and running model calls,
and every way it changes (an envelope recorded, a participant's send, emit, ack or close, TTL
expiry, a violated expectation, a failed turn).

The hub keeps one ``ChannelRuntime`` per channel (``hub.runtime(channel_id)``) and hands it a
``HubLink``: the store, the clock, the listeners, delivery to the clients, and the admission check
(a closed hub or an unregistered client is refused before anything else). The lifecycle and the
turn rule advance only through their ``GraphRun``s (``fire(event)``), the engine's one runner; its
agents' replies and tool rounds are its speaking block's (``speaking.py``). A channel read back
from its store (``hub.resume_channel``) starts where it was.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ..engine import GraphRun
from ..graph.state_graph import StateGraph
from ..speakers.llm import CallStats
from ..speakers.tool_loop import ToolLoop
from .adapter import DiscussionAdapter, DiscussionState
from .clock import Clock
from .errors import ChannelLimitError, NetworkError, ProtocolError, TurnFailed
from .events import EV_CHANNEL_CLOSED, EV_CHANNEL_EXPIRED, EV_CHANNEL_INVITE, EV_CHANNEL_INVITE_ACK, \
    EV_CHANNEL_INVITE_REJECT, EV_EXPECTATION_VIOLATED, EV_TEXT, EV_TURN_FAILED, HUB_SENDER, MAX_CUSTOM_EVENTS, \
    MAX_EVENT_BYTES, PROTOCOL_EVENTS, Envelope, NetworkEvent, event_size
from .expectations import due
from .graphs import LIFECYCLE, LIFECYCLE_ACTIVE, LIFECYCLE_CLOSED, LIFECYCLE_EXPIRED, LIFECYCLE_PENDING, \
    ChannelContext, send_invites, ttl_elapsed
from .resume import StoredChannel, context_data
from .services import Participant, T, TurnTask
from .speaking import ChannelSpeaking
from .stats import TurnStats
from .store import KnowledgeStore


@dataclass(frozen=True)
class HubLink:
    """What a channel needs of its hub (the hub builds one and hands it to every channel it opens).

    Attributes:
        store: Where the channel's log and state are kept.
        clock: The hub's clock.
        notify: Tells the hub's listeners a ``NetworkEvent``.
        route: Delivers an envelope to each audience member's client.
        client_stats: A registered client's own counts by agent id, else None.
        admit: Raises ``HubClosed`` / ``NetworkError`` for a closed hub or an unregistered client.
        max_custom_events: The cap on custom events per channel.
        max_event_bytes: The cap on one custom event's size.
        tools: The hub's ``ToolLoop`` whose tool sources (MCP servers) every channel shares: each
            is started once per hub, on first use, and stopped by ``hub.aclose()``.
        tokens: The hub's token sink now (``hub.on_token``), or None when none listens (a reply streams only to a sink).

    Examples:
        >>> from fsmchat.network import HubLink, MemoryKnowledgeStore
        >>> link = HubLink(MemoryKnowledgeStore(), clock=lambda: 0.0, notify=print, route=lambda env: None,
        ...                client_stats=lambda agent_id: None, admit=lambda client: None)
        >>> link.max_custom_events, link.max_event_bytes
        (1000, 65536)
    """

    store: KnowledgeStore
    clock: Clock
    notify: Callable[[NetworkEvent], None]  # to the hub's listeners
    route: Callable[[Envelope], None]  # to each audience member's client
    client_stats: Callable[[str], "TurnStats | None"]  # a registered client's own counts, else None
    admit: Callable[[Participant], None]  # HubClosed / NetworkError for a closed hub or an unregistered client
    max_custom_events: int = MAX_CUSTOM_EVENTS
    max_event_bytes: int = MAX_EVENT_BYTES
    tools: ToolLoop | None = None  # the hub's tool sources: each started once per hub, stopped by aclose
    tokens: Callable[[], Callable[[object], None] | None] = lambda: None  # the hub's token sink, None unheard


def _retrieve(fut: "asyncio.Future[None]") -> None:
    if not fut.cancelled():
        fut.exception()  # mark retrieved: nobody awaiting an open is not an error


class ChannelRuntime:
    """One channel's state and its transitions (``hub.runtime(channel_id)``).

    Participants act through it as their client (``submit``, ``ack``, ``close_by``), the hub
    through ``expire_if_due`` and ``check_expectations``, handlers through ``HubServices``. Its
    lifecycle and turn rule advance only through their ``GraphRun``s.

    Args:
        ctx: The channel's context.
        link: What it needs of its hub.
        stored: The channel as its store holds it (``hub.resume_channel``): its graph runs resume where
            it was, its counts go on, and its agent's tool round in progress is rebuilt from the log.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         runtime = hub.runtime(channel.channel_id)
        ...         return runtime.state, runtime.can_send("bob"), runtime.stats.texts, runtime.lifecycle.path
        >>> asyncio.run(main())
        ('active', True, 1, ['pending'])
    """

    def __init__(self, ctx: ChannelContext, link: HubLink, stored: StoredChannel | None = None):
        self.ctx, self._link = ctx, link
        self.stats = TurnStats()
        self.call_stats = CallStats()  # token usage and HTTP attempts of the channel's Agent model calls
        self.failure: TurnFailed | None = None  # the first failed turn (the round robin stalls there)
        self._seq = self._custom_events = 0
        self._changed = asyncio.Event()
        self._opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._opened.add_done_callback(_retrieve)
        self._turn_tasks: set[TurnTask] = set()
        ctx.emit = self._emit
        self.speaking = ChannelSpeaking(ctx, emit=self._emit, save=self._save, notify=self.notify,
                                        tokens=link.tokens, sources=link.tools)
        self.lifecycle = ctx.lifecycle = GraphRun(LIFECYCLE, ctx, observers=[self._observer(LIFECYCLE.name)],
                                                  clock=link.clock, start=stored.lifecycle if stored else None)
        self.adapter = DiscussionAdapter(ctx, observers=[self._observer("discussion_turns")],
                                         start=stored.turns if stored else None)
        if stored is not None:
            self._resumed(stored)

    def _resumed(self, stored: StoredChannel) -> None:
        """A channel read back from its store: its runs stand where it was, their states' actions
        done before it stopped (``pending`` sent its invites, ``active`` announced the opening)."""
        self.lifecycle.entered = self.adapter.turns.entered = True
        self._seq, self._custom_events = stored.log[-1].seq if stored.log else 0, stored.custom_events
        self.stats.texts = stored.texts
        if self.state == LIFECYCLE_ACTIVE:
            self._opened.set_result(None)
        expected = self.adapter.expected
        if not self.lifecycle.finished and expected in self.ctx.speakers:  # its tool round, if one was going on
            self.speaking.restore(expected, self.ctx.speakers[expected].name, stored.log, stored.digests)

    def redeliver(self) -> None:
        """A resumed channel: hand each participant what it has not acted on yet (its invite to an
        invitee that has not acked; the last text to the expected speaker, whose handler takes the turn)."""
        log, ctx = self.log(), self.ctx
        if self.state == LIFECYCLE_PENDING:
            for env in log:
                if env.event_type == EV_CHANNEL_INVITE and env.audience[0] not in ctx.acked:
                    self._link.route(env)
        elif self.state == LIFECYCLE_ACTIVE:
            text = next((e for e in reversed(log) if e.event_type == EV_TEXT), None)
            if text is not None:
                self._link.route(replace(text, audience=(self.adapter.expected,)))

    @property
    def channel_id(self) -> str:
        """The channel's id."""
        return self.ctx.channel_id

    # ---- reading ----
    @property
    def state(self) -> str:
        """``pending``, ``active``, ``closed`` or ``expired`` (the lifecycle graph's state)."""
        return self.lifecycle.state

    @property
    def close_reason(self) -> str | None:
        """The first close reason (``"ttl"`` once expired), None while the channel lives."""
        return self.ctx.close_reason if self.lifecycle.finished else None

    @property
    def turn_graph(self) -> StateGraph:
        """The channel's turn graph (its round-robin rule)."""
        return self.adapter.graph

    @property
    def runs(self) -> tuple[GraphRun, GraphRun]:
        """(lifecycle, turns): the channel's two graph instances, with their paths and traces."""
        return self.lifecycle, self.adapter.turns

    def adapter_state(self) -> DiscussionState:
        """``DiscussionState(participant_order, expected_next_speaker, turn_count)`` (a snapshot)."""
        return self.adapter.state()

    def can_send(self, agent_id: str) -> bool:
        """Whether a text from ``agent_id`` would be accepted now; no side effects."""
        return self.adapter.can_send(agent_id)

    def log(self) -> list[Envelope]:
        """The channel's accepted envelopes, in order."""
        return self._link.store.read(self.ctx.channel_id)

    def turn_tasks(self) -> list[TurnTask]:
        """The model calls running for this channel (``track_turn`` registered them)."""
        return list(self._turn_tasks)

    def notify(self, kind: str, agent_id: str | None = None, *, envelope: Envelope | None = None,
               error: BaseException | None = None, data: dict[str, object] | None = None) -> NetworkEvent:
        """Tell the hub's listeners ``kind`` happened on this channel; returns the event."""
        event = NetworkEvent(kind, self.ctx.channel_id, agent_id, envelope, error, dict(data or {}),
                             self._link.clock())
        self._link.notify(event)
        return event

    def _observer(self, graph: str) -> Callable[[object], None]:
        def observe(ev: object) -> None:
            self.notify("transition", data={"graph": graph, "event": ev})
        return observe

    # ---- the one way an envelope enters the channel ----
    def _emit(self, event_type: str, *, sender: str = HUB_SENDER, text: str | None = None,
              data: dict[str, object] | None = None, audience: Sequence[str] | None = None) -> Envelope:
        ctx = self.ctx
        if audience is None:
            audience = [p for p in ctx.order if p != sender]
        env = Envelope(self._seq + 1, ctx.channel_id, event_type, sender, text, dict(data or {}), self._link.clock(),
                       tuple(audience))
        self._seq = env.seq  # taken only once the envelope exists
        self._link.store.append(ctx.channel_id, env)
        if event_type == EV_TEXT:
            self.stats.texts += 1
            own = self._link.client_stats(sender)
            if own is not None:
                own.texts += 1
        self._wake()  # waiters (wait_for_texts) first: they see a text before any handler reacts to it
        self.notify("accepted", sender, envelope=env)
        self._link.route(env)
        return env

    def _wake(self) -> None:
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    def _save(self) -> None:
        ctx, s = self.ctx, self.adapter.state()
        self._link.store.put_state(ctx.channel_id, {
            "type": ctx.type, "state": ctx.state, "turns_state": self.adapter.turns.state,
            "participant_order": list(ctx.order), "expected_next_speaker": s.expected_next_speaker,
            "turn_count": ctx.turn_count, "close_reason": self.close_reason, "knobs": dict(ctx.knobs),
            "expires_at": ctx.expires_at, "hidden": ctx.hidden, "creator": ctx.creator,
            "context": context_data(ctx.context), "tool_digests": dict(self.speaking.tool_loop.digests)})

    def _refuse(self, sender: str, exc: ProtocolError, **data: object) -> ProtocolError:
        self.stats.rejected_sends += 1
        self.notify("rejected", sender, error=exc, data=data)
        return exc

    # ---- opening ----
    def invite(self) -> None:
        """Send one invite per invitee (once, as the channel is created in ``pending``)."""
        send_invites(self.ctx)
        self._save()

    async def wait_open(self, handshake_timeout: float | None) -> None:
        """Until every invitee acked; ``ProtocolError`` if an invite was rejected, or (closing the
        channel) if the acks did not all come within ``handshake_timeout`` seconds."""
        if handshake_timeout is None:
            await asyncio.shield(self._opened)
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._opened), handshake_timeout)
        except asyncio.TimeoutError:
            missing = self.adapter.missing_acks()
            self._close("handshake timed out", HUB_SENDER)
            raise ProtocolError(f"channel '{self.ctx.channel_id}' did not open within {handshake_timeout}s; no ack "
                                f"from {missing}") from None

    def cancel_open(self) -> None:
        """Cancel a still-waiting open (the hub is closing)."""
        if not self._opened.done():
            self._opened.cancel()

    # ---- a participant's actions (sender always the client's own id) ----
    def submit(self, client: Participant, event_type: str, *, text: str | None = None,
               data: dict[str, object] | None = None) -> Envelope:
        """A text (turn-gated) or a custom event from ``client``; ``ProtocolError`` and nothing recorded
        if refused."""
        self._link.admit(client)
        cid, sender = self.ctx.channel_id, client.agent_id
        self.expire_if_due()
        custom = event_type != EV_TEXT
        try:
            if not custom:
                if not isinstance(text, str) or not text.strip():
                    raise ProtocolError(f"channel '{cid}': a text must be a non-empty string, got {text!r}")
                if data is not None:
                    data, _ = event_size(cid, event_type, data)
            elif not isinstance(event_type, str) or not event_type or event_type in PROTOCOL_EVENTS:
                raise ProtocolError(f"event type {event_type!r} is reserved for the hub (or empty); custom "
                                    "events use their own names, e.g. 'myapp.note'")
            else:
                data, size = event_size(cid, event_type, data)
                limit = self._link.max_event_bytes
                if size > limit:
                    raise ChannelLimitError(f"channel '{cid}': event {event_type!r} is {size} bytes, over the "
                                            f"limit of {limit} per event (Hub(max_event_bytes=...))")
                if self._custom_events >= self._link.max_custom_events:
                    raise ChannelLimitError(f"channel '{cid}' already holds {self._custom_events} custom events, "
                                            f"its limit (Hub(max_custom_events=...)); {event_type!r} refused")
            self.adapter.validate_send(sender, event_type)
        except ProtocolError as exc:
            raise self._refuse(sender, exc, event_type=event_type, text=text) from None
        capped = self.adapter.accept_text(sender) if event_type == EV_TEXT else False
        env = self._emit(event_type, sender=sender, text=text, data=data)
        self._custom_events += custom
        if capped:
            self._close("max_texts", HUB_SENDER)
        self._save()
        return env

    def ack(self, client: Participant, accept: bool) -> Envelope:
        """``client`` accepts (or rejects) its invite; the last ack opens the channel, a reject closes it."""
        self._link.admit(client)
        me, ctx, cid = client.agent_id, self.ctx, self.ctx.channel_id
        self.expire_if_due()
        ev_type = EV_CHANNEL_INVITE_ACK if accept else EV_CHANNEL_INVITE_REJECT
        try:
            if me not in ctx.invitees:
                raise ProtocolError(f"'{me}' was not invited to channel '{cid}'")
            if ctx.state in (LIFECYCLE_CLOSED, LIFECYCLE_EXPIRED):
                raise ProtocolError(f"channel '{cid}' is {ctx.state}")
            if ctx.state == LIFECYCLE_ACTIVE or me in ctx.acked:
                raise ProtocolError(f"'{me}' already acknowledged channel '{cid}'")
        except ProtocolError as exc:
            raise self._refuse(me, exc, event_type=ev_type) from None
        env = self._emit(ev_type, sender=me, audience=(ctx.creator,))
        if accept:
            ctx.acked.add(me)
            self.lifecycle.fire("ack", {"agent": me})
            if self.lifecycle.state == LIFECYCLE_ACTIVE and not self._opened.done():
                self._opened.set_result(None)
        else:
            ctx.rejected_by = me
            reason = f"invite rejected by '{me}'"
            ctx.close_reason, ctx.closed_by = reason, me
            self.lifecycle.fire("reject", {"agent": me})
            self._ended("close", reason, me)
        self._save()
        return env

    def close_by(self, client: Participant, reason: str) -> str:
        """A participant closes the channel for everyone; idempotent, returns the reason in effect."""
        self._link.admit(client)
        if client.agent_id not in self.ctx.order:
            exc = ProtocolError(f"'{client.agent_id}' is not a participant of channel '{self.ctx.channel_id}'")
            raise self._refuse(client.agent_id, exc, event_type=EV_CHANNEL_CLOSED) from None
        self.expire_if_due()
        return self._close(reason, client.agent_id)

    # ---- ending ----
    def _close(self, reason: str, by: str) -> str:
        """Close once; later calls change nothing and return the first reason."""
        ctx = self.ctx
        if self.lifecycle.finished:
            return ctx.close_reason or ctx.state
        ctx.close_reason, ctx.closed_by = reason, by
        self.lifecycle.fire("close", {"reason": reason, "by": by})
        self._ended("close", reason, by)
        self._save()
        return reason

    def expire_if_due(self) -> bool:
        """Move to ``expired`` if the TTL has run out on the hub's clock; whether it did now."""
        if self.lifecycle.finished or not self.lifecycle.can_fire("expire"):
            return False
        ctx = self.ctx
        ctx.close_reason, ctx.closed_by = "ttl", HUB_SENDER
        self.lifecycle.fire("expire", {"expires_at": ctx.expires_at, "now": self._link.clock()})
        self._ended("expire", "ttl", HUB_SENDER)
        self._save()
        return True

    def _ended(self, label: str, reason: str, by: str) -> None:
        """After the lifecycle left pending/active: end the turns, tell everyone, fail a waiting open,
        cancel model calls still running for this channel."""
        ctx = self.ctx
        self.adapter.end(label)
        self.speaking.end()
        if label == "expire":
            self._emit(EV_CHANNEL_EXPIRED, audience=tuple(ctx.order), data={"expires_at": ctx.expires_at})
        else:
            self._emit(EV_CHANNEL_CLOSED, sender=by, audience=tuple(ctx.order), data={"reason": reason})
        if not self._opened.done():
            self._opened.set_exception(ProtocolError(f"channel '{ctx.channel_id}' is {ctx.state}: {reason}"))
        current = asyncio.current_task()
        for task in list(self._turn_tasks):
            if task is not current:
                task.cancel()

    # ---- time ----
    def check_expectations(self, now: float) -> list[NetworkEvent]:
        """Report each expectation violated at ``now`` and not reported yet (once per turn)."""
        ctx = self.ctx
        if ttl_elapsed(ctx):
            return []  # expiring, not stalled
        out = []
        for v in due(ctx, self.adapter.expected, now):
            ctx.fired.add((v.index, v.turn))
            if v.expectation.action == "hide":
                ctx.hidden = True
            data = {"expectation": v.expectation.name, "seconds": v.expectation.seconds,
                    "action": v.expectation.action, "speaker": v.speaker, "turn": v.turn, "waited": v.waited}
            env = self._emit(EV_EXPECTATION_VIOLATED, audience=tuple(ctx.order), data=data)
            event = NetworkEvent("expectation", ctx.channel_id, v.speaker, env, None, data, now)
            self._link.notify(event)
            out.append(event)
            self._save()
        return out

    # ---- turns a handler runs ----
    async def track_turn(self, task: "asyncio.Future[T]") -> T | None:
        """Await a model call registered under this channel (cancelled if the channel ends first).
        Returns None when it was cancelled that way; re-raises the call's own exception."""
        self._turn_tasks.add(task)
        task.add_done_callback(self._turn_tasks.discard)
        try:
            await asyncio.wait({task})
        finally:
            if not task.done():  # our caller was cancelled (hub shutdown): the call goes too
                task.cancel()
        if task.cancelled():
            return None
        return task.result()

    def turn_failed(self, agent_id: str, reason: str, turn: int) -> None:
        """``agent_id``'s turn produced no text: count it, record ``EV_TURN_FAILED`` while the channel
        lives, tell the listeners, and wake the waiters (the first failure is what they raise)."""
        self.stats.turn_failures += 1
        data = {"speaker": agent_id, "turn": turn, "reason": reason}
        if self.failure is None:
            self.failure = TurnFailed(self.ctx.channel_id, agent_id, reason, turn)
        env = None
        if self.ctx.state in (LIFECYCLE_ACTIVE, LIFECYCLE_PENDING):
            env = self._emit(EV_TURN_FAILED, sender=agent_id, data=data)
        self.notify("turn_failed", agent_id, envelope=env, data=data)
        self._wake()

    async def wait_for_texts(self, expected: int) -> int:
        """Until the channel holds ``expected`` texts (woken by each accepted envelope, before any
        handler sees it); ``TurnFailed`` once a turn failed, ``NetworkError`` if it ends short."""
        while True:
            n = self.stats.texts
            if n >= expected:
                return n
            if self.failure is not None:  # the expected speaker failed: no text will come
                raise self.failure
            if self.lifecycle.finished:
                raise NetworkError(f"channel '{self.ctx.channel_id}' is {self.ctx.state} with {n} of {expected} "
                                   "texts")
            await self._changed.wait()
