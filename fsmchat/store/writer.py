"""The one writer of checkpoints: it turns a run's steps into the rows a store appends.

``RunWriter`` is one run's (or one branch lane's) writer: it numbers the messages, runs the state
differ (``fsmchat.store.statelog.StateDiff``) and hands the store a ``Commit`` (``fsmchat.store.protocol``), so a
store keeps what it is given and never encodes state itself. ``Recorder`` is the engine's
checkpoint observer built on it: it commits each trace event with the messages posted since the
last commit and the context's snapshot, carries the steps that need no commit of their own into
the next one (the run's ``commit`` mode, ``COMMIT_MODES``, decided from what each step did), and
gives each branch run its own lane. ``Lease`` is one execute/resume's hold on a run in a store with
leases.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from concurrent.futures import Future
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

from ..engine import StepWork
from ..errors import bad_value
from ..common.masking import clean, clean_texts, redact_data, redact_json
from ..checks import JsonObject
from ..models import Message, TraceEvent, Transcript
from .protocol import LEASE_TTL, Commit, Fence, LeaseLost, LeaseStore, Row, Saved, Store, lease_owner, leases_of
from .statelog import HELD, StateDiff, encode_data


COMMIT_MODES = {
    "turn": "the default: a step that posted nothing, did not stop the run and did only work that can be done "
            "again is committed with the next step, so a GroupChat or Discussion turn is one commit",
    "step": "every step is its own commit",
}
"""How a durable run batches its commits (``commit=`` where a checkpointed run starts), by name."""
DEFAULT_COMMIT = "turn"


def check_commit(value: object, owner: str, store: str | None = None) -> str:
    """``commit=``: one of ``COMMIT_MODES`` (``ConfigTypeError`` for a value that is not a str,
    ``ConfigError`` for another name), checked before the run makes any model call. ``store``
    names the run's store argument when it was not given (``"checkpoint"``): a mode other than
    the default then has nothing to batch and is refused too."""
    if not (isinstance(value, str) and value in COMMIT_MODES):
        allowed = " or ".join(f"{k!r} ({v})" for k, v in COMMIT_MODES.items())
        if not isinstance(value, str):
            raise bad_value(owner, "commit", value, f"a str, {allowed}", type_error=True)
        raise bad_value(owner, "commit", value, allowed)
    if store is not None and value != DEFAULT_COMMIT:
        raise bad_value(owner, "commit", value, f"it says how a checkpointed run commits its steps, and this run "
                        f"has no {store}= (pass one, or leave commit= out)")
    return value


def carried(work: StepWork | None) -> bool:
    """Whether a step's ``work`` lets a ``commit="turn"`` run commit it with the next step (when it
    also posted nothing and did not stop the run): it did only work that can be done again from the
    last commit and left no effects pending."""
    return work is not None and work.replayable and not work.effects_pending


def masked_message(m: Message) -> Message:
    """``m`` as a store keeps it: every secret in its text and metadata masked (``fsmchat.common.masking``)."""
    row = m.row()
    clean = redact_data(row)
    return m if clean == row else Message(**clean)


def masked_event(ev: TraceEvent) -> TraceEvent:
    """``ev`` as a store keeps it: every secret in its payload masked."""
    if ev.payload is None or isinstance(ev.payload, (int, float)):
        return ev
    clean = redact_data(ev.payload)
    return ev if clean == ev.payload else dataclasses.replace(ev, payload=clean)


def state_deltas(states: Sequence[Mapping[str, object] | str | None]) -> list[str | None]:
    """The deltas a new writer gives for a run's successive states (a str, ``HELD``, and None are
    kept as they are: a carried step, a step without state): what a fork writes."""
    diff = StateDiff()
    return [s if s is None or isinstance(s, str) else diff.delta(s) for s in states]


class RunWriter:
    """Writes one run's commits to ``store``: ``start``, ``commit`` (after each step) and ``finish``.

    ``messages`` and ``events`` are how many of the run's messages and event rows the store
    already holds (a resume's writer numbers its rows from there); ``fence`` the lease every write
    is made under (a store with leases)."""

    def __init__(self, store: Store, run_id: str, fence: Fence | None = None, messages: int = 0, events: int = 0):
        self.store, self.run_id, self.fence = store, run_id, fence
        self.messages, self.events = messages, events
        self.diff = StateDiff()  # what this writer last wrote of the run's state

    def start(self, meta: JsonObject) -> None:
        """Record the new run (its meta masked, as every text the writer stores)."""
        self.store.start(self.run_id, redact_data(meta), self.fence)

    def commit(self, event: TraceEvent, messages: Sequence[Message], state: Mapping[str, object] | None,
               earlier: Sequence[TraceEvent] = ()) -> Future[None] | None:
        """Append ``earlier`` (carried steps, stored without a state of their own), then ``event`` with
        ``messages`` and the delta of ``state`` (None: the step carries no state). Returns the
        store's future when it stores the commit later (see ``Store.append``).

        This is where every text enters a store, so every secret is masked here (by value: the
        run's known credentials; and by shape, ``fsmchat.common.masking``): the messages, each event's
        payload and the state's delta, whatever the store."""
        delta = None if state is None else self.diff.delta(state)
        after = self.messages + len(messages)
        try:  # the payloads and metadata as the store writes them, encoded once: checked, then written
            payloads = [encode_data(e.payload) for e in earlier]
            payloads.append(encode_data(event.payload))
            metadata = [encode_data(m.metadata) for m in messages]
            texts = [m.content for m in messages]
            texts += [m.role for m in messages]
            if delta is not None:
                texts.append(delta)
            written = clean_texts(texts, payloads + metadata)
        except (TypeError, ValueError):  # not plain JSON data
            written = False
        if written:
            rows = tuple(Row(e, self.messages, HELD, p) for e, p in zip(earlier, payloads))
            commit = Commit((*rows, Row(event, after, delta, payloads[-1])), tuple(messages), self.messages,
                            self.events, tuple(metadata))
        else:
            if not clean([delta, [e.payload for e in earlier], event.payload, [m.row() for m in messages]]):
                delta = redact_json(delta)  # something may need masking: each part is masked on its own
                messages = [masked_message(m) for m in messages]
                earlier = [masked_event(e) for e in earlier]
                event = masked_event(event)
            rows = tuple(Row(e, self.messages, HELD) for e in earlier)
            commit = Commit((*rows, Row(event, after, delta)), tuple(messages), self.messages, self.events)
        try:
            pending = self.store.append(self.run_id, commit, self.fence)
        except BaseException:
            self.lost()
            raise
        self.messages, self.events = after, self.events + len(commit.rows)
        return pending

    def lost(self) -> None:
        """A commit was not written: the next one writes the whole state."""
        self.diff = StateDiff()

    def finish(self, stop_reason: str) -> Future[None] | None:
        """Record how the run ended (with the whole state as last written, for a store that keeps it)."""
        return self.store.finish(self.run_id, stop_reason, self.fence, self.diff.text())


@runtime_checkable
class BranchContext(Protocol):
    """The context of a branch run, as its recorder commits and restores it."""

    @property
    def transcript(self) -> Transcript: ...

    def snapshot(self) -> Mapping[str, object]: ...

    def restore(self, state: JsonObject) -> None: ...


class Recorder:
    """The engine's checkpoint observer for one run (or one branch run): commits each trace event
    with the messages posted since the last one and the context's snapshot, and the stop reason
    when the run ends. A branch run gets its own lane, ``<run id>/<step>:<branch>``, committed in
    the same ``commit`` mode (``COMMIT_MODES``)."""

    def __init__(self, cp: Store, run_id: str, transcript: Transcript, snapshot: Callable[[], Mapping[str, object]],
                 saved_messages: int = 0, lease: "Lease | None" = None, saved_events: int = 0,
                 commit: str = DEFAULT_COMMIT):
        self.cp, self.run_id, self.transcript, self.snapshot = cp, run_id, transcript, snapshot
        self.lease = lease
        self.commit = check_commit(commit, "Recorder")
        self.writer = RunWriter(cp, run_id, lease.fence if lease is not None else None, saved_messages, saved_events)
        self.pending: list[TraceEvent] = []  # carried steps, committed with the next step
        self.unsynced: list[Future[None]] = []  # commits a store writes later (durability="fsync"), not yet on disk

    @property
    def saved(self) -> int:
        """How many of the run's messages are committed."""
        return self.writer.messages

    def start(self, meta: JsonObject) -> None:
        """Record the new run (under the lease's fence)."""
        self.writer.start(meta)

    def __call__(self, ev: TraceEvent, work: StepWork | None = None) -> None:
        """Commit ``ev`` with the rows posted since the last commit and the snapshot; ``work`` is
        what its step said about itself (None: the event of a stop). With ``commit="turn"`` a step
        that posted nothing, did not stop the run (``ev.dest`` is a state), did only work that can
        be done again from the last commit and left no effects pending (``carried``) is carried:
        committed in the same transaction as the next step. A GroupChat turn (bid, select, post,
        penalize) is one commit, and after a crash the carried steps are simply run again from the
        previous snapshot. With ``commit="step"`` every step is committed on its own."""
        if self.lease is not None:
            self.lease.renew()
        rows = self.transcript.since(self.saved)
        if self.commit == "turn" and not rows and ev.dest is not None and carried(work):
            self.pending.append(ev)
            return
        if ev.dest is None and ev.trigger not in (None, "interrupted"):
            # a cancelled or failed step: the context may hold half of it, so the carried
            # steps are not committed with it; a resume runs them again from the last snapshot.
            # An interrupted step did nothing (it stopped to wait for a person): they are kept.
            self.pending = []
        state = self.snapshot() if ev.dest is not None or self.pending else None
        earlier, self.pending = self.pending, []
        self._later(self.writer.commit(ev, rows, state, earlier))

    def finish(self, stop_reason: str) -> None:
        self._later(self.writer.finish(stop_reason))

    def _later(self, pending: Future[None] | None) -> None:
        if pending is not None:
            self.unsynced.append(pending)

    async def durable(self) -> None:
        """Wait, without holding the event loop, until every commit so far is stored (a store
        that writes later: ``Store.append``); a failed one's error is raised here."""
        unsynced, self.unsynced = self.unsynced, []
        try:
            for pending in unsynced:
                await asyncio.wrap_future(pending)
        except BaseException:
            self.writer.lost()
            raise

    def branch(self, key: str, ctx: object) -> "tuple[Recorder, Saved | None]":
        """The recorder of a branch run on ``ctx`` (a ``BranchContext``: it has ``transcript``,
        ``snapshot`` and ``restore``), and what its lane already holds (None for a new branch): on a
        resume the branch context is restored from it, so the branch continues instead of starting again."""
        if not isinstance(ctx, BranchContext):
            raise TypeError(f"a branch run's context needs transcript, snapshot and restore; a {type(ctx).__name__} "
                            "has not all of them")
        lane = f"{self.run_id}/{key}"
        try:
            saved: Saved | None = self.cp.load(lane)
        except KeyError:
            saved = None
        if saved is None:
            child = Recorder(self.cp, lane, ctx.transcript, ctx.snapshot, lease=self.lease, commit=self.commit)
            child.start({"parent": self.run_id, "branch": key})
            return child, None
        ctx.transcript.restore(saved.messages)
        if saved.state is not None:
            ctx.restore(saved.state)
        return Recorder(self.cp, lane, ctx.transcript, ctx.snapshot, len(saved.messages), self.lease,
                        len(saved.events), self.commit), saved


class Lease:
    """One execute/resume's hold on a run: taken before anything is written, renewed by the
    recorder's commits (at most every third of the TTL) and checked (and renewed) before each model
    request, given back when the run ends. It carries the owner's ``fence``: every write of the run
    is refused once another owner has taken the run over, and a lost or given-back lease is never
    taken again by this owner (``LeaseLost``). On a store without leases it holds nothing."""

    def __init__(self, cp: Store, run_id: str, ttl: float | None = None):
        self.run_id = run_id
        self.store: LeaseStore | None = leases_of(cp)
        self.ttl = float(ttl if ttl is not None else self.store.lease_ttl if self.store is not None else LEASE_TTL)
        self.owner = lease_owner()
        self.held = self.store is not None  # a store without leases cannot refuse
        self.fence: Fence | None = None
        self._renewed = 0.0
        if self.store is not None:
            token = self.store.acquire(run_id, self.owner, self.ttl)
            self._renewed = time.monotonic()
            self.fence = Fence(run_id, self.owner, token)

    def renew(self) -> None:
        """At a commit: extend the lease when a third of its TTL has passed since the last renewal."""
        if self.held and time.monotonic() - self._renewed > self.ttl / 3:
            self.check()

    def check(self) -> None:
        """Before a model request: ``LeaseLost`` unless this owner still holds the lease (extended
        by this check); a lease given back is never taken again."""
        if self.store is None or self.fence is None:
            return
        if not self.held:
            raise LeaseLost(self.run_id, self.fence.token, None, None)
        self.store.renew(self.fence, self.ttl)
        self._renewed = time.monotonic()

    def release(self) -> None:
        if self.held and self.store is not None:
            self.held = False
            self.store.release(self.run_id, self.owner)
