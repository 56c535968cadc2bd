"""Layer 11: ``MemoryCheckpointer``, the store protocol in one process's memory (for tests and for
stores built on top): the same rows as the SQLite store, folded back the same way."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Sequence

from ..checks import JsonObject
from ..models import TraceEvent
from .protocol import (LEASE_TTL, Capabilities, Commit, EvalInfo, EvalRecord, Fence, LeaseLost, ReadsLog, RunInfo,
                       Saved, already_used, check_lease_ttl, lease_refusal, run_info)
from .rows import already_kept, eval_of_row, eval_row
from .statelog import RunLog, copy_state, encode_json

_dumps = encode_json


class _MemoryRows:
    """What ``MemoryCheckpointer`` keeps per run beside its ``Saved``: each event's transcript
    length and state delta, when the run was created and last ended."""

    __slots__ = ("counts", "deltas", "created", "updated")

    def __init__(self, counts: list[int | None], deltas: list[str | None], created: float) -> None:
        self.counts, self.deltas = counts, deltas
        self.created = self.updated = created


@dataclass
class MemoryCheckpointer(ReadsLog):
    """An in-process checkpointer (same protocol), for tests and for stores built on top.

    Attributes:
        data: Each run as a ``Saved``, by run id (its ``state`` is set only by hand; ``load`` folds
            the stored deltas).
        leases: Each leased run's (owner, expiry time).
        rows: What is kept per run beside its ``Saved``: each event's transcript length and state delta.
        tokens: Each run's latest fencing token (kept when its lease is given back: tokens only grow).
        lease_ttl: Seconds a run's lease lasts without renewal.
        evaluations: Each kept evaluation (``fsmchat.evals``), by id, in the order kept.

    Examples:
        >>> from fsmchat import Human, MemoryCheckpointer, RoundRobinSwarm
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> swarm = RoundRobinSwarm(agents=[writer, Human("editor")])
        >>> store = MemoryCheckpointer()
        >>> swarm.execute("Announce the launch.", checkpoint=store, run_id="launch").stop_reason
        'interrupted'
        >>> store.runs(), store.load("launch").finished
        (['launch'], False)
        >>> swarm.resume("launch", store, input="Approved: ship it.").transcript[-1].content
        'Approved: ship it.'
    """

    data: dict[str, Saved] = field(default_factory=dict)
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)
    rows: dict[str, _MemoryRows] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    lease_ttl: float = LEASE_TTL
    evaluations: dict[str, EvalRecord] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lease_ttl = check_lease_ttl(self.lease_ttl, "MemoryCheckpointer")

    capabilities = Capabilities(leases=True, history=True, lanes=True, evals=True)

    def acquire(self, run_id: str, owner: str, ttl: float | None = None) -> int:
        """Take the run's lease for ``owner`` for ``ttl`` seconds (``lease_ttl`` by default) and
        return its fencing token; ``RunInProgress`` if another live owner holds it."""
        held = self.leases.get(run_id)
        refusal = lease_refusal(run_id, held, owner, time.time())
        if refusal is not None:
            raise refusal
        if held is None or held[0] != owner:
            self.tokens[run_id] = self.tokens.get(run_id, 0) + 1
        self.leases[run_id] = (owner, time.time() + (self.lease_ttl if ttl is None else ttl))
        return self.tokens[run_id]

    def _check(self, fence: Fence | None) -> None:
        """``LeaseLost`` unless ``fence`` (when given) still holds its run's lease."""
        if fence is None:
            return
        held = self.leases.get(fence.run_id)
        token = self.tokens.get(fence.run_id)
        if held is None or held[0] != fence.owner or token != fence.token:
            raise LeaseLost(fence.run_id, fence.token, held[0] if held else None, token)

    def renew(self, fence: Fence, ttl: float | None = None) -> None:
        """Extend the lease ``fence`` holds; ``LeaseLost`` when it is no longer that owner's."""
        self._check(fence)
        self.leases[fence.run_id] = (fence.owner, time.time() + (self.lease_ttl if ttl is None else ttl))

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease back (only if ``owner`` still holds it); its fencing token is kept."""
        if self.leases.get(run_id, ("",))[0] == owner:
            del self.leases[run_id]

    def start(self, run_id: str, meta: JsonObject, fence: Fence | None = None) -> None:
        """Record a new run with its metadata; ``ValueError`` when ``run_id`` is already stored,
        ``LeaseLost`` when ``fence`` no longer holds the run's lease."""
        if run_id in self.data:
            raise ValueError(already_used(run_id))
        self._check(fence)
        self.data[run_id] = Saved(run_id, json.loads(_dumps(meta)), [], [], None)
        self.rows[run_id] = _MemoryRows([], [], time.time())

    def _rows(self, run_id: str) -> _MemoryRows:
        rows = self.rows.get(run_id)
        if rows is None:  # a run put in ``data`` by hand
            n = len(self.data[run_id].events)
            rows = self.rows[run_id] = _MemoryRows([None] * n, [None] * n, time.time())
        return rows

    def append(self, run_id: str, commit: Commit, fence: Fence | None = None) -> None:
        """Store one commit: its event rows and messages; the run is marked not ended.
        ``LeaseLost`` (nothing stored) when ``fence`` no longer holds the run's lease."""
        self._check(fence)
        s, rows = self.data[run_id], self._rows(run_id)
        for r in commit.rows:
            s.events.append(_stored_event(r.event))
            rows.counts.append(r.messages)
            rows.deltas.append(r.delta)  # ``load`` folds them (``s.state``: set by hand only)
        s.messages += commit.messages
        s.stop_reason = None

    def finish(self, run_id: str, stop_reason: str, fence: Fence | None = None, state: str | None = None) -> None:
        """Record how the run ended (``LeaseLost``, nothing stored, when ``fence`` no longer holds the lease)."""
        self._check(fence)
        self.data[run_id].stop_reason = stop_reason
        self._rows(run_id).updated = time.time()

    def load(self, run_id: str) -> Saved:
        """The run as a ``Saved``: its events, messages, latest state and stop reason (``KeyError`` if unknown)."""
        if run_id not in self.data:
            raise KeyError(f"no checkpointed run {run_id!r}")
        s, rows = self.data[run_id], self._rows(run_id)
        if any(d is not None for d in rows.deltas):
            state = RunLog(run_id, s.meta, s.stop_reason, s.events, rows.counts, rows.deltas, s.messages,
                           where="MemoryCheckpointer").final_state()
        else:  # nothing committed yet, or a run whose state was set by hand
            state = copy_state(s.state)
        return Saved(run_id, s.meta, s.events, s.messages, state, s.stop_reason)

    def log(self, run_id: str) -> RunLog:
        """The run as stored, row by row (``KeyError`` when there is no such run)."""
        if run_id not in self.data:
            raise KeyError(f"no checkpointed run {run_id!r}")
        s, rows = self.data[run_id], self._rows(run_id)
        legacy = None if any(d is not None for d in rows.deltas) or s.state is None or not s.events else \
            (len(s.events) - 1, _dumps(s.state))  # a run whose state was set by hand
        return RunLog(run_id, json.loads(_dumps(s.meta)), s.stop_reason, list(s.events), list(rows.counts),
                      list(rows.deltas), list(s.messages), legacy, rows.created, rows.updated,
                      where="MemoryCheckpointer")

    def put(self, logs: Sequence[RunLog]) -> None:
        """Add whole runs at once (``fork``); refused, with nothing added, when a run id is taken."""
        for lg in logs:
            if lg.run_id in self.data:
                raise ValueError(already_used(lg.run_id))
        for lg in logs:
            rows = _MemoryRows(list(lg.counts), list(lg.deltas), time.time())
            self.data[lg.run_id] = Saved(lg.run_id, json.loads(_dumps(lg.meta)), list(lg.events), list(lg.messages),
                                         None, lg.stop_reason)
            self.rows[lg.run_id] = rows

    def runs(self) -> list[str]:
        """Every stored run id (branch lanes included), in the order they were started."""
        return list(self.data)

    def lanes(self, run_id: str) -> list[str]:
        """The branch lanes of ``run_id`` (``<run id>/<step>:<branch>``, nested ones too), in order."""
        return sorted(k for k in self.data if k.startswith(run_id + "/"))

    def list_runs(self) -> list[RunInfo]:
        """Every run (branch lanes left out), newest first."""
        out = []
        for k, s in reversed(self.data.items()):  # ties: the later added first
            if "parent" not in s.meta:
                rows = self._rows(k)
                out.append(run_info(k, s.meta, s.stop_reason, len(s.messages), len(s.events), rows.created,
                                    rows.updated, self.leases.get(k)))
        return sorted(out, key=lambda r: -r.created)

    def put_eval(self, record: EvalRecord) -> None:
        """Keep an evaluation, as JSON data would read it back (``ValueError`` when its id is kept)."""
        row = eval_row(record)
        if row[0] in self.evaluations:
            raise ValueError(already_kept(row[0]))
        self.evaluations[row[0]] = eval_of_row(row, "MemoryCheckpointer")

    def list_evals(self) -> list[EvalInfo]:
        """Every kept evaluation, newest first, without its cases."""
        return sorted((r.info for r in reversed(self.evaluations.values())), key=lambda r: -r.created)

    def load_eval(self, eval_id: str) -> EvalRecord:
        """The evaluation ``eval_id`` with its cases (``KeyError`` when there is none)."""
        if eval_id not in self.evaluations:
            raise KeyError(f"no evaluation {eval_id!r} in MemoryCheckpointer")
        return eval_of_row(eval_row(self.evaluations[eval_id]), "MemoryCheckpointer")  # a copy of its own


def _stored_event(e: TraceEvent) -> TraceEvent:
    """``e`` as a store keeps it, its payload as JSON data: ``e`` itself when the payload is a plain
    value (nothing changes an event once made), else a copy with the payload read back from JSON."""
    payload = e.payload
    if type(payload) in (str, int, float, bool, type(None)):
        return e
    return TraceEvent(e.step, e.state, e.trigger, e.dest, e.t, json.loads(_dumps(payload)))
