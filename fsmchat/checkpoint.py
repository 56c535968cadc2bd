"""Durable runs: after every transition the new trace event, the messages posted since the last
commit and a small snapshot of the run's working state are appended, in one transaction, keyed by
run id; never the whole transcript again. ``pattern.resume(run_id, checkpoint=...)`` continues
from the last committed state.

``SqliteCheckpointer`` (stdlib sqlite3, WAL) is the embedded default; anything implementing
``Checkpointer`` (``start``, ``commit``, ``finish``, ``load``) plugs in, e.g. ``MemoryCheckpointer``.
"""
from __future__ import annotations

import inspect
import json
import os
import re
import socket
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from .errors import FsmchatError
from .models import Message, TraceEvent

LEASE_TTL = 30.0
"""Seconds a run's lease lasts without renewal (each commit renews it). A lease whose owner
process on this host has died is taken over at once; one from another host after it expires."""


class RunInProgress(FsmchatError, RuntimeError):
    """Another execute/resume owns this run right now (its lease is live); nothing was changed."""

    def __init__(self, run_id: str, owner: str, expires_in: float):
        self.run_id, self.owner = run_id, owner
        super().__init__(f"run {run_id!r} is in progress elsewhere (lease held by {owner}, {expires_in:.0f} s left "
                         "unless renewed); wait for it to finish, or resume it once that process has ended")


class CheckpointMismatch(FsmchatError, ValueError):
    """A run was resumed with a pattern other than the one that checkpointed it; nothing was written."""


class CheckpointStoreError(FsmchatError, RuntimeError):
    """A checkpoint store could not be opened or read; the message names the store and what to do."""


def lease_owner() -> str:
    """A unique owner id for one execute/resume: host, process id and a random token."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _owner_alive(owner: str) -> bool:
    """False only when ``owner`` is a process on this host that no longer exists."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lease_refusal(run_id: str, held: tuple[str, float] | None, owner: str, now: float) -> RunInProgress | None:
    """Why ``owner`` may not take ``run_id`` now (None: it may): another live, unexpired owner holds it."""
    if held is None:
        return None
    holder, expires = held
    if holder == owner or expires <= now or not _owner_alive(holder):
        return None
    return RunInProgress(run_id, holder, expires - now)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=repr, separators=(",", ":"))


@dataclass
class Saved:
    """What a checkpointer holds for one run."""

    run_id: str
    meta: dict[str, Any]
    events: list[TraceEvent]
    messages: list[Message]
    state: dict[str, Any] | None
    stop_reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None and self.stop_reason not in ("error", "cancelled")

    @property
    def resume_at(self) -> str | None:
        """The state to enter next: the destination of the last committed transition."""
        for ev in reversed(self.events):
            if ev.dest is not None:
                return ev.dest
        return None


class Checkpointer(Protocol):
    """A store of runs. A store whose ``commit`` also takes ``earlier=[events]`` (stored before
    ``event``, in the same transaction) says so with ``batches = True``; the recorder then commits
    the steps of pure states together with the next step."""

    def start(self, run_id: str, meta: dict[str, Any]) -> None: ...

    def commit(self, run_id: str, event: TraceEvent, messages: list[Message], state: dict[str, Any] | None
               ) -> None: ...

    def finish(self, run_id: str, stop_reason: str) -> None: ...

    def load(self, run_id: str) -> Saved: ...

    def acquire(self, run_id: str, owner: str, ttl: float = LEASE_TTL) -> None:
        """Take (or renew) the run's lease; raise ``RunInProgress`` if another live owner holds it."""

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease back (only if ``owner`` still holds it)."""


class SqliteCheckpointer:
    """Checkpoints in one SQLite file (WAL mode; ``synchronous=NORMAL`` survives a killed process)."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, meta TEXT NOT NULL, stop_reason TEXT,
                                     created REAL NOT NULL, updated REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, step INTEGER, state TEXT,
                                       trigger TEXT, dest TEXT, t REAL, payload TEXT, nmsg INTEGER,
                                       PRIMARY KEY (run_id, seq));
    CREATE TABLE IF NOT EXISTS messages (run_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT, content TEXT,
                                         metadata TEXT, PRIMARY KEY (run_id, seq));
    CREATE TABLE IF NOT EXISTS states (run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS leases (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL);
    """
    TABLES = {"runs", "events", "messages", "states"}
    ADDED = {"events": (("nmsg", "INTEGER"),)}  # columns added since the first stores; an older store gains
    # them when opened for writing. events.nmsg: the transcript's length once that step is stored (what a
    # viewer replays at that step); NULL in rows written before the column existed

    def __init__(self, path: str | Path, *, read_only: bool | None = None):
        """Open (or create) the store at ``path``. ``read_only`` (default: when the file is not
        writable) opens it without writing anything: finished runs can be loaded and rebuilt."""
        self.path = str(path)
        self._lock = threading.Lock()
        self._seq: dict[str, tuple[int, int]] = {}  # run -> (events, messages) committed
        self._last_state: dict[str, str] = {}  # run -> last snapshot written (skip unchanged ones)
        p = Path(self.path)
        self.read_only = read_only if read_only is not None else p.exists() and not os.access(p, os.W_OK)
        try:
            if self.read_only:
                if not p.exists():
                    raise sqlite3.OperationalError("unable to open database file")
                self._db = sqlite3.connect(f"file:{p.resolve()}?mode=ro", uri=True, check_same_thread=False,
                                           isolation_level=None)
            else:
                self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            self._check_schema()  # a foreign database is refused before anything is written to it
            if not self.read_only:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(self.SCHEMA)
                self._add_columns()
        except sqlite3.DatabaseError as exc:
            raise self._store_error(exc) from None

    def _check_schema(self) -> None:
        """An empty file becomes a store; any other database must have the store's tables and columns."""
        found = {r[0]: {c[1] for c in self._db.execute(f"PRAGMA table_info('{r[0]}')")}
                 for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not found and not self.read_only:
            return
        expected = {t: set(re.findall(r"(\w+) (?:TEXT|INTEGER|REAL)", body))
                    for t, body in re.findall(r"TABLE IF NOT EXISTS (\w+) \((.*?)\);", self.SCHEMA, re.S)}
        wrong = sorted(t for t in self.TABLES
                       if not expected[t] - {c for c, _ in self.ADDED.get(t, ())} <= found.get(t, set()))
        if wrong:
            raise CheckpointStoreError(
                f"checkpoint store {self.path}: not an fsmchat checkpoint database (tables {sorted(found)}; "
                f"missing or different: {wrong}); point SqliteCheckpointer at a new file or an fsmchat store")

    def _add_columns(self) -> None:
        for table, columns in self.ADDED.items():
            have = {c[1] for c in self._db.execute(f"PRAGMA table_info('{table}')")}
            for column, kind in columns:
                if column not in have:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def _store_error(self, exc: sqlite3.Error) -> CheckpointStoreError:
        text = str(exc)
        if "malformed" in text or "not a database" in text:
            hint = "the file is corrupted or not SQLite; restore it from a backup or start a new store"
        elif "unable to open" in text or "readonly" in text or "read-only" in text:
            hint = "the file or its directory is not writable (or does not exist); check the path and permissions"
        else:
            hint = "check the file and its directory"
        return CheckpointStoreError(f"checkpoint store {self.path}: {type(exc).__name__}: {text}; {hint}")

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise CheckpointStoreError(f"checkpoint store {self.path} is read-only: it can load and rebuild "
                                       f"finished runs, but cannot {what}; copy it somewhere writable to resume")

    def acquire(self, run_id: str, owner: str, ttl: float = LEASE_TTL) -> None:
        self._writable("run or resume")
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")  # one writer at a time, across processes
            try:
                now = time.time()
                row = db.execute("SELECT owner, expires FROM leases WHERE run_id=?", (run_id,)).fetchone()
                refusal = lease_refusal(run_id, tuple(row) if row else None, owner, now)
                if refusal is not None:
                    raise refusal
                db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?)", (run_id, owner, now + ttl))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if row is None or row[0] != owner:  # a new owner: what another process wrote may be newer
                self._seq.pop(run_id, None)
                self._last_state.pop(run_id, None)

    def release(self, run_id: str, owner: str) -> None:
        if self.read_only:
            return
        with self._lock:
            self._db.execute("DELETE FROM leases WHERE run_id=? AND owner=?", (run_id, owner))

    def start(self, run_id: str, meta: dict[str, Any]) -> None:
        self._writable("start a run")
        now = time.time()
        with self._lock:
            if self._db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone():
                raise ValueError(already_used(run_id))
            self._db.execute("INSERT INTO runs VALUES (?, ?, NULL, ?, ?)", (run_id, _dumps(meta), now, now))
            self._seq[run_id] = self._counts(run_id)

    def _counts(self, run_id: str) -> tuple[int, int]:
        e = self._db.execute("SELECT COUNT(*) FROM events WHERE run_id=?", (run_id,)).fetchone()[0]
        m = self._db.execute("SELECT COUNT(*) FROM messages WHERE run_id=?", (run_id,)).fetchone()[0]
        return e, m

    batches = True  # commit(..., earlier=[...]) stores several events in one transaction

    def commit(self, run_id: str, event: TraceEvent, messages: list[Message], state: dict[str, Any] | None,
               earlier: Sequence[TraceEvent] = ()) -> None:
        with self._lock:
            ne, nm = self._seq.get(run_id) or self._counts(run_id)
            db = self._db
            db.execute("BEGIN")
            try:
                after = nm + len(messages)  # the earlier (pure) steps posted nothing
                db.executemany("INSERT INTO events (run_id, seq, step, state, trigger, dest, t, payload, nmsg) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               [(run_id, ne + i, e.step, e.state, e.trigger, e.dest, e.t, _dumps(e.payload),
                                 after if e is event else nm) for i, e in enumerate([*earlier, event])])
                ne += len(earlier)
                if messages:
                    db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)",
                                   [(run_id, nm + i, m.role, m.content, _dumps(m.metadata))
                                    for i, m in enumerate(messages)])
                text = _dumps(state) if state is not None else None
                if text is not None and text != self._last_state.get(run_id):
                    db.execute("INSERT OR REPLACE INTO states VALUES (?, ?, ?)", (run_id, ne, text))
                    self._last_state[run_id] = text
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._seq[run_id] = (ne + 1, nm + len(messages))

    def finish(self, run_id: str, stop_reason: str) -> None:
        with self._lock:
            self._last_state.pop(run_id, None)
            self._db.execute("UPDATE runs SET stop_reason=?, updated=? WHERE run_id=?", (stop_reason, time.time(), run_id))

    def load(self, run_id: str) -> Saved:
        try:
            return self._load(run_id)
        except sqlite3.DatabaseError as exc:
            raise self._store_error(exc) from None

    def _load(self, run_id: str) -> Saved:
        with self._lock:
            row = self._db.execute("SELECT meta, stop_reason FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                raise KeyError(f"no checkpointed run {run_id!r} in {self.path}")
            events = [TraceEvent(step, state, trig, dest, t, json.loads(p) if p else None) for step, state, trig, dest, t, p
                      in self._db.execute("SELECT step, state, trigger, dest, t, payload FROM events WHERE run_id=? "
                                          "ORDER BY seq", (run_id,))]
            messages = [Message(role=r, content=c, metadata=json.loads(md)) for r, c, md in
                        self._db.execute("SELECT role, content, metadata FROM messages WHERE run_id=? ORDER BY seq",
                                         (run_id,))]
            st = self._db.execute("SELECT state FROM states WHERE run_id=?", (run_id,)).fetchone()
        return Saved(run_id, json.loads(row[0]), events, messages, json.loads(st[0]) if st else None, row[1])

    def runs(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT run_id FROM runs ORDER BY created")]

    def close(self) -> None:
        self._db.close()


@dataclass
class MemoryCheckpointer:
    """An in-process checkpointer (same protocol), for tests and for stores built on top."""

    data: dict[str, Saved] = field(default_factory=dict)
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)

    def acquire(self, run_id: str, owner: str, ttl: float = LEASE_TTL) -> None:
        refusal = lease_refusal(run_id, self.leases.get(run_id), owner, time.time())
        if refusal is not None:
            raise refusal
        self.leases[run_id] = (owner, time.time() + ttl)

    def release(self, run_id: str, owner: str) -> None:
        if self.leases.get(run_id, ("",))[0] == owner:
            del self.leases[run_id]

    def start(self, run_id: str, meta: dict[str, Any]) -> None:
        if run_id in self.data:
            raise ValueError(already_used(run_id))
        self.data[run_id] = Saved(run_id, json.loads(_dumps(meta)), [], [], None)

    batches = True

    def commit(self, run_id: str, event: TraceEvent, messages: list[Message], state: dict[str, Any] | None,
               earlier: Sequence[TraceEvent] = ()) -> None:
        s = self.data[run_id]
        s.events.extend(TraceEvent(e.step, e.state, e.trigger, e.dest, e.t, json.loads(_dumps(e.payload)))
                        for e in [*earlier, event])
        s.messages.extend(messages)
        if state is not None:
            s.state = json.loads(_dumps(state))

    def finish(self, run_id: str, stop_reason: str) -> None:
        self.data[run_id].stop_reason = stop_reason

    def load(self, run_id: str) -> Saved:
        if run_id not in self.data:
            raise KeyError(f"no checkpointed run {run_id!r}")
        return self.data[run_id]


def already_used(run_id: str) -> str:
    return (f"run id {run_id!r} is already checkpointed; resume it with pattern.resume({run_id!r}, checkpoint) "
            "or start a new run under another id")


def new_run_id() -> str:
    return uuid.uuid4().hex


def _takes_earlier(cp: Any) -> bool:
    """Whether ``cp`` batches: it says so and its ``commit`` (maybe a subclass's) takes ``earlier``."""
    if not getattr(cp, "batches", False):
        return False
    try:
        return "earlier" in inspect.signature(cp.commit).parameters
    except (TypeError, ValueError):
        return False


class Recorder:
    """The engine's checkpoint observer for one run (or one branch run): commits each trace event
    with the messages posted since the last one and the context's snapshot, and the stop reason
    when the run ends. A branch run gets its own lane, ``<run id>/<step>:<branch>``."""

    def __init__(self, cp: Checkpointer, run_id: str, transcript: Any, snapshot: Callable[[], dict[str, Any]],
                 saved_messages: int = 0, lease: "Lease | None" = None):
        self.cp, self.run_id, self.transcript, self.snapshot = cp, run_id, transcript, snapshot
        self.saved = saved_messages
        self.lease = lease
        self.batches = _takes_earlier(cp)
        self.pending: list[TraceEvent] = []  # steps of pure states, committed with the next step

    def __call__(self, ev: TraceEvent, pure: bool = False) -> None:
        """Commit ``ev`` with the rows posted since the last commit and the snapshot. The step of a
        ``pure`` state that posted nothing is held back and committed in the same transaction as
        the next step (stores with ``batches``): one commit instead of two, and after a crash the
        pure step is simply run again from the previous snapshot."""
        if self.lease is not None:
            self.lease.renew()
        rows = self.transcript.since(self.saved)
        if pure and not rows and self.batches and ev.dest is not None:
            self.pending.append(ev)
            return
        if ev.dest is None and ev.trigger is not None:
            # a cancelled or failed step: the context may hold half of it, so the held-back pure
            # steps are not committed with it; a resume runs them again from the last snapshot
            self.pending = []
        state = self.snapshot() if ev.dest is not None or self.pending else None
        if self.pending:
            earlier, self.pending = self.pending, []
            self.cp.commit(self.run_id, ev, rows, state, earlier=earlier)
        else:
            self.cp.commit(self.run_id, ev, rows, state)
        self.saved += len(rows)

    def finish(self, stop_reason: str) -> None:
        self.cp.finish(self.run_id, stop_reason)

    def branch(self, key: str, ctx: Any) -> "tuple[Recorder, Saved | None]":
        """The recorder of a branch run on ``ctx`` (which has ``transcript``, ``snapshot`` and
        ``restore``), and what its lane already holds (None for a new branch): on a resume the
        branch context is restored from it, so the branch continues instead of starting again."""
        lane = f"{self.run_id}/{key}"
        try:
            saved: Saved | None = self.cp.load(lane)
        except KeyError:
            saved = None
        if saved is None:
            self.cp.start(lane, {"parent": self.run_id, "branch": key})
            return Recorder(self.cp, lane, ctx.transcript, ctx.snapshot, lease=self.lease), None
        ctx.transcript.restore(saved.messages)
        if saved.state is not None:
            ctx.restore(saved.state)
        return Recorder(self.cp, lane, ctx.transcript, ctx.snapshot, len(saved.messages), self.lease), saved


class Lease:
    """One execute/resume's hold on a run: taken before anything is written, renewed by the
    recorder's commits (at most every third of the TTL), given back when the run ends."""

    def __init__(self, cp: Any, run_id: str, ttl: float = LEASE_TTL):
        self.cp, self.run_id, self.ttl = cp, run_id, ttl
        self.owner = lease_owner()
        self.held = callable(getattr(cp, "acquire", None))  # a store without leases cannot refuse
        self._renewed = 0.0
        if self.held:
            cp.acquire(run_id, self.owner, ttl)
            self._renewed = time.monotonic()

    def renew(self) -> None:
        if self.held and time.monotonic() - self._renewed > self.ttl / 3:
            self.cp.acquire(self.run_id, self.owner, self.ttl)
            self._renewed = time.monotonic()

    def release(self) -> None:
        if self.held:
            self.held = False
            self.cp.release(self.run_id, self.owner)


class NotSerializable(FsmchatError, TypeError):
    pass


def encode(obj: Any) -> Any:
    """JSON-able form of working state: dataclasses (e.g. BidOutcome) tagged with their type,
    tuples as lists; anything else non-JSON raises ``NotSerializable`` (the caller skips it and
    the pattern rebuilds it from its config on resume)."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [encode(x) for x in obj]
    if isinstance(obj, dict):
        if not all(isinstance(k, (str, int)) for k in obj):
            raise NotSerializable(type(obj).__name__)
        return {"__dict__": [[k, encode(v)] for k, v in obj.items()]} if any(isinstance(k, int) for k in obj) \
            else {k: encode(v) for k, v in obj.items()}
    from .speakers.respond import BidOutcome

    if isinstance(obj, BidOutcome):
        return {"__bid__": [obj.score, obj.message, obj.valid, obj.reason]}
    raise NotSerializable(type(obj).__name__)


def decode(obj: Any) -> Any:
    if isinstance(obj, list):
        return [decode(x) for x in obj]
    if isinstance(obj, dict):
        if "__bid__" in obj:
            from .speakers.respond import BidOutcome

            return BidOutcome(*obj["__bid__"])
        if "__dict__" in obj:
            return {k: decode(v) for k, v in obj["__dict__"]}
        return {k: decode(v) for k, v in obj.items()}
    return obj


def encode_fields(values: dict[str, Any]) -> dict[str, Any]:
    """Encode what can be encoded; leave out the rest (rebuilt by the pattern on resume)."""
    out = {}
    for k, v in values.items():
        try:
            out[k] = encode(v)
        except NotSerializable:
            continue
    return out


def resume(run_id: str, checkpoint: Checkpointer, pattern: Any = None, *, allow: Any = (),
           trusted: bool = False) -> Any:
    """Continue a checkpointed run. ``pattern`` rebuilds it; without one, the ``factory``
    ("module:attr", set as ``pattern.factory`` before the first run) stored with the run is used,
    under the same trust as ``from_config``: only fsmchat's modules and the ``allow`` prefixes are
    imported (``trusted=True``: anything); a checkpoint naming other code raises
    ``UntrustedReference`` before anything is imported or written."""
    if pattern is None:
        from .trust import Trust

        trust = Trust.of(allow, trusted, owner="resume")
        factory = checkpoint.load(run_id).meta.get("factory")
        if not factory:
            raise ValueError(f"run {run_id!r} was checkpointed without a factory; pass the pattern: "
                             "resume(run_id, checkpoint, pattern=...) or set pattern.factory='module:attr'")
        pattern = trust.pattern(factory, f"run {run_id!r} factory")
    return pattern.resume(run_id, checkpoint)
