"""Durable runs: after every transition the new trace event, the messages posted since the last
commit, the transcript's length and a delta of the run's working state (what changed since the
previous commit: ``fsmchat.statelog``) are appended, in one transaction, keyed by run id; never
the whole transcript or state again. ``pattern.resume(run_id, checkpoint=...)`` continues from
the last committed state; ``checkpoint.history(run_id)`` lists every step with the state after it
(``fsmchat.fork`` starts a new run from one).

``SqliteCheckpointer`` (stdlib sqlite3, WAL) is the embedded default; anything implementing
``Checkpointer`` (``start``, ``commit``, ``finish``, ``load``) plugs in, e.g. ``MemoryCheckpointer``;
``history``, ``log``, ``put`` and ``lanes`` add time travel.
"""
from __future__ import annotations

import contextvars
import inspect
import json
import math
import os
import socket
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence, TypeGuard, cast

from .checks import check_run_id
from .errors import CheckpointStoreError, FsmchatError, bad_value
from .models import Message, StopReason, TraceEvent
from .speakers.respond import BidOutcome
from .statelog import (HELD, AppendLog, HistoryStep, RunLog, StateDiff, copy_state, encode_json, encode_value,
                       history_of)
from .trust import Trust

# What a new checkpointed run stores in its metadata besides its own (``fsmchat.otel``: the run's
# W3C trace context, so a resume or a fork continues the trace). A ContextVar: set around one run.
RUN_META: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("fsmchat_run_meta", default=None)

LEASE_TTL = 30.0
"""Seconds a run's lease lasts without renewal (commits and model requests renew it), unless the
store says otherwise (``SqliteCheckpointer(path, lease_ttl=...)``, ``MemoryCheckpointer(lease_ttl=...)``).
A lease whose owner process on this host has died is taken over at once; one from another host,
or from a live process that stopped renewing it (paused, hung), after it expires."""


class RunInProgress(FsmchatError, RuntimeError):
    """Another execute/resume owns this run right now (its lease is live); nothing was changed."""

    def __init__(self, run_id: str, owner: str, expires_in: float):
        self.run_id, self.owner = run_id, owner
        super().__init__(f"run {run_id!r} is in progress elsewhere (lease held by {owner}, {expires_in:.0f} s left "
                         "unless renewed); wait for it to finish, or resume it once that process has ended")


class LeaseLost(FsmchatError, RuntimeError):
    """This execute/resume no longer owns its run: its lease expired and another owner took the run
    over (or it was given back). The write or model request that found out was refused and nothing
    was written; the run stands as its current owner left it."""

    fsmchat_fatal = True  # never a step's failure to retry or skip: the run must stop at once

    def __init__(self, run_id: str, token: int, holder: str | None, holder_token: int | None):
        self.run_id, self.token, self.holder, self.holder_token = run_id, token, holder, holder_token
        now = (f"the lease expired and was taken over by {holder} (fencing token {holder_token})" if holder else
               f"the lease expired, was taken over and given back since (fencing token {holder_token})"
               if holder_token is not None and holder_token != token else "this owner gave the lease back")
        super().__init__(f"run {run_id!r}: this execute/resume no longer owns the run (its fencing token {token}; "
                         f"{now}), so it writes nothing more and sends no model request; resume the run to see or "
                         "continue it as its current owner left it")


@dataclass(frozen=True)
class Fence:
    """The lease a write is made under: the run whose lease it is (a branch lane writes under its
    run's), its owner and the fencing token ``acquire`` gave that owner. Tokens only grow: each new
    owner of a run gets a larger one, so a store refuses the write of an owner it has since replaced."""

    run_id: str
    owner: str
    token: int


def check_lease_ttl(value: Any, owner: str) -> float:
    """``lease_ttl`` as seconds: a positive, finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise bad_value(owner, "lease_ttl", value, f"seconds a run's lease lasts without renewal, a positive "
                        f"number (default {LEASE_TTL:g})", type_error=isinstance(value, bool) or not isinstance(value, (int, float)))
    return float(value)

class CheckpointMismatch(FsmchatError, ValueError):
    """A run was resumed with a pattern other than the one that checkpointed it; nothing was written."""


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
    if not holder or holder == owner or expires <= now or not _owner_alive(holder):
        return None
    return RunInProgress(run_id, holder, expires - now)


_dumps = encode_json


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
        """Ended for good: a resume rebuilds it. A failed, cancelled or waiting (``interrupted``) run
        is not finished: a resume continues it."""
        return self.stop_reason is not None and StopReason.run_status(self.stop_reason) == "finished"

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
    the steps of pure and hold states together with the next step."""

    def start(self, run_id: str, meta: dict[str, Any]) -> None: ...

    def commit(self, run_id: str, event: TraceEvent, messages: list[Message], state: dict[str, Any] | None
               ) -> None: ...

    def finish(self, run_id: str, stop_reason: str) -> None: ...

    def load(self, run_id: str) -> Saved: ...

    def acquire(self, run_id: str, owner: str, ttl: float | None = None) -> int | None:
        """Take the run's lease for ``owner``; raise ``RunInProgress`` if another live owner holds
        it. A fencing store returns the owner's fencing token."""

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease back (only if ``owner`` still holds it)."""


class BatchingCheckpointer(Checkpointer, Protocol):
    """A store whose ``commit`` also stores the ``earlier`` events (before ``event``, in the same
    transaction), as ``SqliteCheckpointer`` and ``MemoryCheckpointer`` do (``batches = True``)."""

    batches: bool

    def commit(self, run_id: str, event: TraceEvent, messages: list[Message], state: dict[str, Any] | None,
               earlier: Sequence[TraceEvent] = ()) -> None: ...


class FencedCheckpointer(BatchingCheckpointer, Protocol):
    """A store that fences its writes (``fences = True``), as ``SqliteCheckpointer`` and
    ``MemoryCheckpointer`` do: ``acquire`` returns a fencing token that only grows; ``start``,
    ``commit`` and ``finish`` take ``fence=`` (the writer's ``Fence``) and refuse, inside the same
    transaction and with nothing written, a write whose owner no longer holds the run's lease
    (``LeaseLost``); ``renew`` extends the lease of a fence that still holds it, never re-taking a
    lost or released one. A commit also marks its run as not ended (its stop reason cleared, in
    the same transaction): a run continued after an answer, a cancel or a failure is never left
    looking ended by a crash before it ends again."""

    fences: bool
    lease_ttl: float

    def acquire(self, run_id: str, owner: str, ttl: float | None = None) -> int: ...

    def start(self, run_id: str, meta: dict[str, Any], fence: Fence | None = None) -> None: ...

    def commit(self, run_id: str, event: TraceEvent, messages: list[Message], state: dict[str, Any] | None,
               earlier: Sequence[TraceEvent] = (), fence: Fence | None = None) -> None: ...

    def finish(self, run_id: str, stop_reason: str, fence: Fence | None = None) -> None: ...

    def renew(self, fence: Fence, ttl: float | None = None) -> None: ...


_PROTOCOL = ("start", "commit", "finish", "load")


def check_checkpoint(checkpoint: object, owner: str, field: str = "checkpoint") -> Checkpointer | None:
    """``checkpoint`` is None or a Checkpointer (``SqliteCheckpointer("runs.db")``, ...), never a path."""
    if checkpoint is None or all(callable(getattr(checkpoint, m, None)) for m in _PROTOCOL):
        return cast("Checkpointer | None", checkpoint)
    hint = (f"a Checkpointer, e.g. checkpoint=SqliteCheckpointer({checkpoint!r}) (from fsmchat import "
            "SqliteCheckpointer)") if isinstance(checkpoint, (str, bytes)) or hasattr(checkpoint, "__fspath__") \
        else "a Checkpointer such as SqliteCheckpointer('runs.db') or MemoryCheckpointer()"
    raise bad_value(owner, field, checkpoint, hint, type_error=True)


def check_resume(run_id: object, checkpoint: object, owner: str) -> None:
    """``resume(run_id, checkpoint)``: a run id string and the store the run was checkpointed to."""
    check_run_id(run_id, owner, required=True)
    if checkpoint is None:
        raise bad_value(owner, "checkpoint", None, "the Checkpointer the run was saved to, e.g. "
                        "resume(run_id, SqliteCheckpointer('runs.db'))", type_error=True)
    check_checkpoint(checkpoint, owner)


@dataclass(frozen=True)
class RunInfo:
    """One line of a store's run list (``list_runs()``, ``fsmchat runs``): a run (not a branch lane)."""

    run_id: str
    pattern: str | None
    name: str | None
    task: str | None
    stop_reason: str | None  # None: not ended (running, or cut by a crash)
    messages: int
    steps: int
    created: float
    updated: float
    forked_from: dict[str, Any] | None = None
    leased: bool = False  # a live process holds the run's lease

    @property
    def status(self) -> str:
        """``finished``, ``waiting`` (interrupted for a person), ``failed`` (error), ``cancelled``,
        ``running`` (not ended, its lease is live) or ``unfinished`` (cut by a crash: resumable)."""
        return StopReason.run_status(self.stop_reason, self.leased)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "pattern": self.pattern, "name": self.name, "task": self.task,
                "status": self.status, "stop_reason": self.stop_reason, "messages": self.messages,
                "steps": self.steps, "created": self.created, "updated": self.updated,
                "forked_from": self.forked_from}


def run_info(run_id: str, meta: dict[str, Any], stop_reason: str | None, messages: int, steps: int,
             created: float, updated: float, lease: tuple[str, float] | None = None) -> RunInfo:
    def text(k: str) -> str | None:  # untrusted meta
        v = meta.get(k)
        return v if isinstance(v, str) else None

    origin = meta.get("forked_from")
    leased = lease is not None and lease_refusal(run_id, lease, "", time.time()) is not None
    return RunInfo(run_id, text("pattern"), text("name"), text("task"), stop_reason, messages, steps, created, updated,
                   origin if isinstance(origin, dict) else None, leased)


def _json(text: Any, what: str, log: RunLog) -> Any:
    """A JSON column of ``log``'s run, parsed (data only: ``json.loads`` never runs code)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise log.bad(f"{what} is not JSON ({exc})") from None


def _event(row: Sequence[Any], log: RunLog) -> TraceEvent:
    seq, step, state, trigger, dest, t, payload = row[:7]
    if not (isinstance(state, str) and isinstance(step, (int, type(None))) and isinstance(trigger, (str, type(None)))
            and isinstance(dest, (str, type(None))) and isinstance(t, (int, float, type(None)))):
        raise log.bad(f"event {seq} has a malformed row ({encode_json(list(row[:6]))[:120]})")
    return TraceEvent(step if step is not None else seq, state, trigger, dest, t or 0.0,
                      _json(payload, f"the payload of event {seq}", log))


def _message(seq: int, role: Any, content: Any, metadata: Any, log: RunLog) -> Message:
    md = _json(metadata, f"the metadata of message {seq}", log)
    if not (isinstance(role, str) and isinstance(content, str) and isinstance(md, (dict, type(None)))):
        raise log.bad(f"message {seq} has a malformed row")
    return Message(role=role, content=content, metadata=md or {})


def listed_meta(text: Any) -> dict[str, Any] | None:
    """A stored run's metadata as a run list shows it (``{}`` when unreadable), or None for a
    branch lane (it has a ``parent``: listed with its run, not on its own)."""
    try:
        meta = json.loads(text)
    except (TypeError, ValueError):
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    return None if "parent" in meta else meta


def log_of_rows(run_id: str, run: Sequence[Any], events: Sequence[Sequence[Any]],
                messages: Sequence[Sequence[Any]], where: str) -> RunLog:
    """A run as its store's rows hold it (``run``: meta, stop reason, created, updated; each event
    row: seq, step, state, trigger, dest, t, payload, nmsg, delta; each message row: seq, role,
    content, metadata), every column checked (``log.bad`` names what is malformed)."""
    log = RunLog(run_id, {}, run[1], [], [], [], [], created=run[2], updated=run[3], where=where)
    meta = _json(run[0], "its meta", log)
    if not isinstance(meta, dict):
        raise log.bad("its meta is not a JSON object")
    log.meta = meta
    for r in events:
        log.events.append(_event(r, log))
        nmsg, delta = r[7], r[8]
        if not (isinstance(nmsg, (int, type(None))) and isinstance(delta, (str, type(None)))):
            raise log.bad(f"event {r[0]} has a malformed state column")
        log.counts.append(nmsg)
        log.deltas.append(delta)
    log.messages = [_message(seq, role, content, md, log) for seq, role, content, md in messages]
    return log


_INSERT_EVENT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_MESSAGE = "INSERT INTO messages VALUES (?, ?, ?, ?, ?)"
_EVENT_ROWS = [""] + [_INSERT_EVENT + ", (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" * (n - 1) for n in range(1, 9)]
_HOLDS = "EXISTS (SELECT 1 FROM leases WHERE run_id=? AND owner=? AND token=?)"  # the writer still holds the lease
_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


def _fenced_sql(n: int) -> str:
    """One INSERT of ``n`` event rows that inserts nothing unless the fence holds (one statement:
    the check and the write are atomic; ``rowcount`` says which happened)."""
    return "INSERT INTO events SELECT * FROM (VALUES " + ", ".join([_ROW] * n) + ") WHERE " + _HOLDS


_FENCED_ROWS = [""] + [_fenced_sql(n) for n in range(1, 9)]


def _insert_events(rows: list[tuple[Any, ...]], fence: Fence | None = None) -> tuple[str, Sequence[Any]]:
    """One INSERT statement for a commit's event rows (atomic on its own, without BEGIN/COMMIT);
    with ``fence``, one that inserts nothing when the fence no longer holds the run's lease."""
    n = len(rows)
    if fence is not None:
        sql = _FENCED_ROWS[n] if n < len(_FENCED_ROWS) else _fenced_sql(n)
        return sql, [v for r in rows for v in r] + [fence.run_id, fence.owner, fence.token]
    if n == 1:
        return _INSERT_EVENT, rows[0]
    sql = _EVENT_ROWS[n] if n < len(_EVENT_ROWS) else _INSERT_EVENT + ", (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" * (n - 1)
    return sql, [v for r in rows for v in r]


def next_delta(diffs: dict[str, StateDiff], run_id: str, state: dict[str, Any] | None) -> str | None:
    """The delta of ``run_id``'s working state since its last commit (``diffs`` holds each run's
    differ; its first delta is the whole state); None when the step carries no state."""
    if state is None:
        return None
    diff = diffs.get(run_id)
    if diff is None:
        diff = diffs[run_id] = StateDiff()
    return diff.delta(state)


def event_rows(run_id: str, seq: int, messages: int, earlier: Sequence[TraceEvent], event: TraceEvent,
               after: int, delta: str | None) -> list[tuple[Any, ...]]:
    """The ``events`` rows of one commit: each held step of ``earlier`` (numbered from ``seq``, the
    message count before the commit, state ``HELD``), then ``event`` with the count after and the delta."""
    rows: list[tuple[Any, ...]] = [(run_id, seq + i, e.step, e.state, e.trigger, e.dest, e.t, encode_value(e.payload),
                                    messages, HELD) for i, e in enumerate(earlier)]
    rows.append((run_id, seq + len(earlier), event.step, event.state, event.trigger, event.dest, event.t,
                 encode_value(event.payload), after, delta))
    return rows


class _Refused(FsmchatError):
    """Inside a store transaction: the writer's fence no longer holds the run's lease (rolled back)."""


class SqliteCheckpointer:
    """Checkpoints in one SQLite file (WAL mode; ``synchronous=NORMAL`` survives a killed process).

    A commit is one transaction: the trace event(s), the messages posted since the last commit,
    and on the event's row the transcript's length and the state delta (``fsmchat.statelog``).
    Event and message tables are ``WITHOUT ROWID`` (one b-tree each, so a commit writes about half
    the pages a rowid table with its key index would). A store written by an older fsmchat (one
    whole snapshot per run in ``states``) is read as it is, and gains the two event columns when it
    is opened for writing; ``states`` still gets each run's last state when it ends.

    Examples:
        >>> from fsmchat import RoundRobinSwarm, SqliteCheckpointer
        >>> def analyst(turn):
        ...     return "Data first."
        >>> def strategist(turn):
        ...     return "Then the plan."
        >>> swarm = RoundRobinSwarm(agents=[analyst, strategist])
        >>> store = SqliteCheckpointer("runs.db")
        >>> swarm.execute("Plan the launch.", checkpoint=store, run_id="launch").stop_reason
        'max_loops'
        >>> saved = store.load("launch")
        >>> store.runs(), saved.finished, [m.role for m in saved.messages]
        (['launch'], True, ['User', 'analyst', 'strategist'])
        >>> swarm.resume("launch", store).output  # a finished run is rebuilt, no call made
        'Then the plan.'
        >>> store.close()
    """

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, meta TEXT NOT NULL, stop_reason TEXT,
                                     created REAL NOT NULL, updated REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, step INTEGER, state TEXT,
                                       trigger TEXT, dest TEXT, t REAL, payload TEXT, nmsg INTEGER, delta TEXT,
                                       PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS messages (run_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT, content TEXT,
                                         metadata TEXT, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS states (run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS leases (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL,
                                       token INTEGER NOT NULL DEFAULT 0);
    """
    COLUMNS = {"runs": {"run_id", "meta", "stop_reason", "created", "updated"},
               "events": {"run_id", "seq", "step", "state", "trigger", "dest", "t", "payload"},
               "messages": {"run_id", "seq", "role", "content", "metadata"},
               "states": {"run_id", "seq", "state"}}
    """The columns a store must have (the first schema's); ``ADDED`` ones are added when missing."""
    ADDED = {"events": (("nmsg", "INTEGER"), ("delta", "TEXT")), "leases": (("token", "INTEGER NOT NULL DEFAULT 0"),)}
    TABLES = set(COLUMNS)

    def __init__(self, path: str | Path, *, read_only: bool | None = None, lease_ttl: float = LEASE_TTL):
        """Open (or create) the store at ``path``.

        Args:
            path: The SQLite file (created with the store's tables when missing or empty).
            read_only: Open it without writing anything: finished runs can be loaded and rebuilt,
                nothing run or resumed. By default, when the file exists and is not writable.
            lease_ttl: Seconds a run's lease lasts without renewal (its commits and model requests
                renew it): how long a paused or hung owner keeps others out of its run.

        Raises:
            CheckpointStoreError: The file is not an fsmchat store, is corrupted or cannot be opened.
            ConfigTypeError: ``path`` is not a path (a number would create a file named after it).
            ConfigError: ``lease_ttl`` is not a positive number.
        """
        if not isinstance(path, (str, os.PathLike)) or isinstance(path, str) and not path.strip():
            raise bad_value("SqliteCheckpointer", "path", path, "the SQLite file's path, a non-empty str or a "
                            "pathlib.Path (':memory:' for a store in memory)", type_error=True)
        self.lease_ttl = check_lease_ttl(lease_ttl, "SqliteCheckpointer")
        self.path = str(path)
        self._lock = threading.Lock()
        self._open: set[str] = set()  # runs whose stop reason this store knows to be NULL (no commit need clear it)
        self._seq: dict[str, tuple[int, int]] = {}  # run -> (events, messages) committed
        self._diffs: dict[str, StateDiff] = {}  # run -> the state last written (for the next delta)
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
                self._migrate()
            self._deltas = self._columns("events") >= {"nmsg", "delta"}
            self._cur = self._db.cursor()  # the commits' own (under the lock): no new cursor per statement
        except sqlite3.DatabaseError as exc:
            raise self._store_error(exc) from None

    @staticmethod
    def run_ends(path: str | Path) -> list[tuple[str, str | None, float]]:
        """``(run_id, stop_reason, updated)`` of every run (branch lanes too) in the store at
        ``path``, read without opening it as a store (nothing is created or migrated; another process
        may be writing it). ``CheckpointStoreError`` when it is not a readable fsmchat store."""
        try:
            con = sqlite3.connect(str(path), timeout=30)
            try:
                rows = con.execute("SELECT run_id, stop_reason, updated FROM runs").fetchall()
            finally:
                con.close()
        except sqlite3.Error as exc:
            raise CheckpointStoreError(f"checkpoint store {path}: {type(exc).__name__}: {exc}") from None
        return [(run_id, stop, float(updated or 0)) for run_id, stop, updated in rows]

    def _columns(self, table: str) -> set[str]:
        return {c[1] for c in self._db.execute(f"PRAGMA table_info('{table}')")}

    def _check_schema(self) -> None:
        """An empty file becomes a store; any other database must have the store's tables and columns."""
        found = {r[0]: self._columns(r[0]) for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not found and not self.read_only:
            return
        wrong = sorted(t for t, cols in self.COLUMNS.items() if not cols <= found.get(t, set()))
        if wrong:
            raise CheckpointStoreError(
                f"checkpoint store {self.path}: not an fsmchat checkpoint database (tables {sorted(found)}; "
                f"missing or different: {wrong}); point SqliteCheckpointer at a new file or an fsmchat store")

    def _migrate(self) -> None:
        """Add the columns an older store lacks (one writer at a time; another may have just done it)."""
        if all({c for c, _ in cols} <= self._columns(t) for t, cols in self.ADDED.items()):
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for table, cols in self.ADDED.items():
                have = self._columns(table)
                for name, kind in cols:
                    if name not in have:
                        self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

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

    fences = True  # writes take fence=: refused when the writer no longer holds the run's lease

    def acquire(self, run_id: str, owner: str, ttl: float | None = None) -> int:
        """Take the run's lease for ``owner`` for ``ttl`` seconds (the store's ``lease_ttl`` by
        default) and return its fencing token (each new owner gets a larger one);
        ``RunInProgress`` if another live owner holds it."""
        self._writable("run or resume")
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")  # one writer at a time, across processes
            try:
                now = time.time()
                row = db.execute("SELECT owner, expires, token FROM leases WHERE run_id=?", (run_id,)).fetchone()
                refusal = lease_refusal(run_id, (row[0], row[1]) if row else None, owner, now)
                if refusal is not None:
                    raise refusal
                token = row[2] if row is not None and row[0] == owner else (row[2] if row else 0) + 1
                db.execute("INSERT OR REPLACE INTO leases (run_id, owner, expires, token) VALUES (?, ?, ?, ?)",
                           (run_id, owner, now + (self.lease_ttl if ttl is None else ttl), token))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if row is None or row[0] != owner:  # a new owner: what another process wrote may be newer
                self._forget(run_id)
        return int(token)

    def _forget(self, run_id: str) -> None:
        """Drop what this store remembers of ``run_id`` and its lanes (another owner may have written since)."""
        lanes = run_id + "/"
        for kept in (self._seq, self._diffs):
            for k in [k for k in kept if k == run_id or k.startswith(lanes)]:
                del kept[k]
        self._open = {k for k in self._open if k != run_id and not k.startswith(lanes)}

    def renew(self, fence: Fence, ttl: float | None = None) -> None:
        """Extend the lease ``fence`` holds by ``ttl`` seconds (the store's ``lease_ttl`` by default);
        ``LeaseLost`` when the lease is no longer that owner's (taken over, or given back): a lost
        lease is never taken again this way."""
        self._writable("run or resume")
        with self._lock:
            cur = self._db.execute("UPDATE leases SET expires=? WHERE run_id=? AND owner=? AND token=?",
                                   (time.time() + (self.lease_ttl if ttl is None else ttl), fence.run_id,
                                    fence.owner, fence.token))
            if cur.rowcount == 0:
                raise self._lost(fence)

    def _lost(self, fence: Fence) -> LeaseLost:
        """The ``LeaseLost`` of ``fence``, naming who holds the lease now (under the store lock)."""
        row = self._db.execute("SELECT owner, token FROM leases WHERE run_id=?", (fence.run_id,)).fetchone()
        return LeaseLost(fence.run_id, fence.token, row[0] or None if row else None, row[1] if row else None)

    def _holds(self, fence: Fence | None) -> bool:
        return fence is None or self._db.execute("SELECT " + _HOLDS, (fence.run_id, fence.owner,
                                                                     fence.token)).fetchone()[0] == 1

    def _require(self, fence: Fence | None) -> None:
        """Inside a transaction: refuse the write (``_Refused``) unless ``fence`` holds the lease."""
        if not self._holds(fence):
            raise _Refused

    @contextmanager
    def _transaction(self, begin: str, fence: Fence | None) -> Iterator[sqlite3.Connection]:
        """One transaction opened with ``begin``, committed when the block ends, rolled back on any
        exception; a write the fence refused (``_Refused``) becomes ``LeaseLost``."""
        db = self._db
        db.execute(begin)
        try:
            yield db
            db.execute("COMMIT")
        except _Refused:
            db.execute("ROLLBACK")
            assert fence is not None
            raise self._lost(fence) from None
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease back (only if ``owner`` still holds it); its fencing token is kept, so the
        next owner's is larger."""
        if self.read_only:
            return
        with self._lock:
            self._db.execute("UPDATE leases SET owner='', expires=0 WHERE run_id=? AND owner=?", (run_id, owner))

    def start(self, run_id: str, meta: dict[str, Any], fence: Fence | None = None) -> None:
        """Record a new run with its metadata; ``ValueError`` when ``run_id`` is already stored,
        ``LeaseLost`` (nothing written) when ``fence`` no longer holds the run's lease."""
        self._writable("start a run")
        now = time.time()
        with self._lock:
            with self._transaction("BEGIN IMMEDIATE", fence) as db:
                if db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone():
                    raise ValueError(already_used(run_id))
                self._require(fence)
                db.execute("INSERT INTO runs VALUES (?, ?, NULL, ?, ?)", (run_id, _dumps(meta), now, now))
            self._seq[run_id] = self._counts(run_id)
            self._diffs.pop(run_id, None)
            self._open.add(run_id)

    def _counts(self, run_id: str) -> tuple[int, int]:
        e = self._db.execute("SELECT COUNT(*) FROM events WHERE run_id=?", (run_id,)).fetchone()[0]
        m = self._db.execute("SELECT COUNT(*) FROM messages WHERE run_id=?", (run_id,)).fetchone()[0]
        return e, m

    batches = True  # commit(..., earlier=[...]) stores several events in one transaction

    def commit(self, run_id: str, event: TraceEvent, messages: list[Message], state: dict[str, Any] | None,
               earlier: Sequence[TraceEvent] = (), fence: Fence | None = None) -> None:
        """Store one step in one transaction: ``earlier`` events (held steps), ``event``, the messages
        posted since the last commit and the working state's delta; the run is marked not ended
        (its stop reason cleared) in the same transaction. With ``fence``, nothing is written and
        ``LeaseLost`` is raised when the fence no longer holds the run's lease."""
        with self._lock:
            ne, nm = self._seq.get(run_id) or self._counts(run_id)
            after = nm + len(messages)
            rows = event_rows(run_id, ne, nm, earlier, event, after, next_delta(self._diffs, run_id, state))
            row = rows[-1]
            if earlier:
                sql, params = _insert_events(rows, fence)
            elif fence is not None:
                sql, params = _FENCED_ROWS[1], row + (fence.run_id, fence.owner, fence.token)
            else:
                sql, params = _INSERT_EVENT, row
            reopen = run_id not in self._open  # its stop reason may be set: cleared in this transaction
            cur = self._cur
            try:
                if messages or reopen:
                    cur.execute("BEGIN")
                    try:
                        cur.execute(sql, params)
                        if fence is not None and cur.rowcount == 0:
                            raise _Refused
                        if reopen:
                            cur.execute("UPDATE runs SET stop_reason=NULL WHERE run_id=? AND stop_reason IS NOT NULL",
                                        (run_id,))
                        if len(messages) == 1:
                            m = messages[0]
                            cur.execute(_INSERT_MESSAGE, (run_id, nm, m.role, m.content, encode_value(m.metadata)))
                        elif messages:
                            cur.executemany(_INSERT_MESSAGE, [(run_id, nm + i, m.role, m.content,
                                                               encode_value(m.metadata))
                                                              for i, m in enumerate(messages)])
                        cur.execute("COMMIT")
                    except BaseException:
                        cur.execute("ROLLBACK")
                        raise
                else:  # one statement is a transaction of its own
                    cur.execute(sql, params)
                    if fence is not None and cur.rowcount == 0:
                        raise _Refused
            except _Refused:
                self._diffs.pop(run_id, None)
                assert fence is not None
                raise self._lost(fence) from None
            except BaseException:
                self._diffs.pop(run_id, None)  # not written: the next commit writes the whole state
                raise
            if reopen:
                self._open.add(run_id)
            self._seq[run_id] = (ne + len(earlier) + 1, after)

    def finish(self, run_id: str, stop_reason: str, fence: Fence | None = None) -> None:
        """Record how the run ended, and its last state in ``states`` (what an older fsmchat reads);
        with ``fence``, nothing is written and ``LeaseLost`` is raised when the fence no longer
        holds the run's lease."""
        with self._lock:
            diff = self._diffs.pop(run_id, None)
        whole = diff.text() if diff is not None else self._whole_state(run_id)
        with self._lock:
            with self._transaction("BEGIN" if fence is None else "BEGIN IMMEDIATE", fence) as db:
                self._require(fence)
                db.execute("UPDATE runs SET stop_reason=?, updated=? WHERE run_id=?", (stop_reason, time.time(), run_id))
                if whole is not None:
                    seq = (self._seq.get(run_id) or self._counts(run_id))[0] - 1
                    db.execute("INSERT OR REPLACE INTO states VALUES (?, ?, ?)", (run_id, seq, whole))
            self._open.discard(run_id)

    def _whole_state(self, run_id: str) -> str | None:
        """The run's latest state as JSON, folded from its rows (a run that ends in a process that
        committed no state of it); None when it has none or its rows cannot be read."""
        try:
            state = self.log(run_id).final_state()
        except (KeyError, CheckpointStoreError):
            return None
        return None if state is None else encode_json(state)

    def load(self, run_id: str) -> Saved:
        """The run as a ``Saved``: its events, messages, latest state and stop reason (``KeyError`` if unknown)."""
        return saved_of(self.log(run_id))

    def history(self, run_id: str) -> list[HistoryStep]:
        """Every step of the run, in order (``fsmchat.statelog.HistoryStep``): its state, transition,
        time, the messages and usage so far and the working state after it."""
        return history_of(self.log(run_id))

    def log(self, run_id: str) -> RunLog:
        """The run as stored, row by row (``KeyError`` when there is no such run)."""
        try:
            return self._log(run_id)
        except sqlite3.DatabaseError as exc:
            raise self._store_error(exc) from None

    def _log(self, run_id: str) -> RunLog:
        cols = "nmsg, delta" if self._deltas else "NULL, NULL"
        with self._lock:
            db = self._db
            db.execute("BEGIN")  # one read snapshot: a commit landing meanwhile is seen whole or not at all
            try:
                row = db.execute("SELECT meta, stop_reason, created, updated FROM runs WHERE run_id=?",
                                 (run_id,)).fetchone()
                if row is None:
                    raise KeyError(f"no checkpointed run {run_id!r} in {self.path}")
                events = db.execute(f"SELECT seq, step, state, trigger, dest, t, payload, {cols} FROM events "
                                    "WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()
                messages = db.execute("SELECT seq, role, content, metadata FROM messages WHERE run_id=? ORDER BY seq",
                                      (run_id,)).fetchall()
                st = db.execute("SELECT seq, state FROM states WHERE run_id=?", (run_id,)).fetchone()
            finally:
                db.execute("COMMIT")
        log = log_of_rows(run_id, row, events, messages, f"checkpoint store {self.path}")
        if st is not None:
            index = next((i for i, r in enumerate(events) if r[0] == st[0]), None)
            if index is not None:
                log.legacy = (index, st[1])
        return log

    def put(self, logs: Sequence[RunLog]) -> None:
        """Write whole runs at once, in one transaction (``fork``); refused, with nothing written,
        when one of the run ids is already taken."""
        self._writable("write a forked run")
        try:
            with self._lock:
                db = self._db
                db.execute("BEGIN IMMEDIATE")
                try:
                    for lg in logs:
                        if db.execute("SELECT 1 FROM runs WHERE run_id=?", (lg.run_id,)).fetchone():
                            raise ValueError(already_used(lg.run_id))
                    now = time.time()
                    for lg in logs:
                        db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                                   (lg.run_id, _dumps(lg.meta), lg.stop_reason, lg.created or now, lg.updated or now))
                        db.executemany(_INSERT_EVENT,
                                       [(lg.run_id, i, e.step, e.state, e.trigger, e.dest, e.t, encode_json(e.payload),
                                         n, d) for i, (e, n, d) in enumerate(zip(lg.events, lg.counts, lg.deltas))])
                        db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)",
                                       [(lg.run_id, i, m.role, m.content, encode_json(m.metadata))
                                        for i, m in enumerate(lg.messages)])
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
        except sqlite3.DatabaseError as exc:
            raise self._store_error(exc) from None

    def runs(self) -> list[str]:
        """Every stored run id (branch lanes included), oldest first."""
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT run_id FROM runs ORDER BY created")]

    def lanes(self, run_id: str) -> list[str]:
        """The branch lanes of ``run_id`` (``<run id>/<step>:<branch>``, nested ones too), in order."""
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT run_id FROM runs WHERE run_id > ? AND run_id < ? "
                                                   "ORDER BY run_id", (run_id + "/", run_id + "0"))]

    def list_runs(self) -> list[RunInfo]:
        """Every run (branch lanes left out), newest first."""
        try:
            with self._lock:
                rows = self._db.execute(
                    "SELECT r.run_id, r.meta, r.stop_reason, r.created, r.updated, "
                    "(SELECT COUNT(*) FROM messages m WHERE m.run_id = r.run_id), "
                    "(SELECT COUNT(*) FROM events e WHERE e.run_id = r.run_id) "
                    "FROM runs r ORDER BY r.created DESC, r.rowid DESC").fetchall()  # ties: the later written first
                leases = {r[0]: (r[1], r[2]) for r in self._db.execute("SELECT run_id, owner, expires FROM leases")} \
                    if "leases" in {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")} else {}
        except sqlite3.DatabaseError as exc:
            raise self._store_error(exc) from None
        out = []
        for run_id, meta_text, stop, created, updated, n_msgs, n_events in rows:
            meta = listed_meta(meta_text)
            if meta is None:
                continue
            out.append(run_info(run_id, meta, stop, n_msgs, n_events, created, updated, leases.get(run_id)))
        return out

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()


def saved_of(log: RunLog) -> Saved:
    """What ``load`` returns: the run's events and messages, and its latest state (a fresh copy)."""
    return Saved(log.run_id, log.meta, log.events, log.messages, log.final_state(), log.stop_reason)


class _MemoryRows:
    """What ``MemoryCheckpointer`` keeps per run beside its ``Saved``: each event's transcript
    length and state delta, the state last written, when the run was created and last ended."""

    __slots__ = ("counts", "deltas", "diff", "created", "updated")

    def __init__(self, counts: list[int | None], deltas: list[str | None], created: float) -> None:
        self.counts, self.deltas, self.diff = counts, deltas, StateDiff()
        self.created = self.updated = created


@dataclass
class MemoryCheckpointer:
    """An in-process checkpointer (same protocol), for tests and for stores built on top.

    Attributes:
        data: Each run as a ``Saved``, by run id (its ``state`` is set only by hand; ``load`` folds
            the stored deltas).
        leases: Each leased run's (owner, expiry time).
        rows: What is kept per run beside its ``Saved``: each event's transcript length and state delta.
        tokens: Each run's latest fencing token (kept when its lease is given back: tokens only grow).
        lease_ttl: Seconds a run's lease lasts without renewal.

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

    def __post_init__(self) -> None:
        self.lease_ttl = check_lease_ttl(self.lease_ttl, "MemoryCheckpointer")

    fences = True

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

    def start(self, run_id: str, meta: dict[str, Any], fence: Fence | None = None) -> None:
        """Record a new run with its metadata; ``ValueError`` when ``run_id`` is already stored,
        ``LeaseLost`` when ``fence`` no longer holds the run's lease."""
        if run_id in self.data:
            raise ValueError(already_used(run_id))
        self._check(fence)
        self.data[run_id] = Saved(run_id, json.loads(_dumps(meta)), [], [], None)
        self.rows[run_id] = _MemoryRows([], [], time.time())

    batches = True

    def _rows(self, run_id: str) -> _MemoryRows:
        rows = self.rows.get(run_id)
        if rows is None:  # a run put in ``data`` by hand
            n = len(self.data[run_id].events)
            rows = self.rows[run_id] = _MemoryRows([None] * n, [None] * n, time.time())
        return rows

    def commit(self, run_id: str, event: TraceEvent, messages: list[Message], state: dict[str, Any] | None,
               earlier: Sequence[TraceEvent] = (), fence: Fence | None = None) -> None:
        """Store one step: ``earlier`` events (held steps), ``event``, the new messages and the
        state's delta; the run is marked not ended. ``LeaseLost`` (nothing stored) when ``fence``
        no longer holds the run's lease."""
        if fence is not None:
            self._check(fence)
        s, rows = self.data[run_id], self.rows.get(run_id) or self._rows(run_id)
        delta = rows.diff.delta(state) if state is not None else None
        nm = len(s.messages)
        for e in earlier:  # (held steps: none on most commits)
            s.events.append(_stored_event(e))
            rows.counts.append(nm)
            rows.deltas.append(HELD)
        s.events.append(_stored_event(event))
        if messages:
            s.messages += messages
        rows.counts.append(nm + len(messages))
        rows.deltas.append(delta)  # ``load`` folds them (``s.state``: set by hand only)
        s.stop_reason = None

    def finish(self, run_id: str, stop_reason: str, fence: Fence | None = None) -> None:
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

    def history(self, run_id: str) -> list[HistoryStep]:
        """Every step of the run, in order (as ``SqliteCheckpointer.history``)."""
        return history_of(self.log(run_id))

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
            state = lg.final_state()
            if state is not None:
                rows.diff.full(state)
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


def _stored_event(e: TraceEvent) -> TraceEvent:
    """``e`` as a store keeps it, its payload as JSON data: ``e`` itself when the payload is a plain
    value (nothing changes an event once made), else a copy with the payload read back from JSON."""
    payload = e.payload
    if type(payload) in _PLAIN:
        return e
    return TraceEvent(e.step, e.state, e.trigger, e.dest, e.t, json.loads(_dumps(payload)))


def already_used(run_id: str) -> str:
    return (f"run id {run_id!r} is already checkpointed; resume it with pattern.resume({run_id!r}, checkpoint) "
            "or start a new run under another id")


def new_run_id() -> str:
    return uuid.uuid4().hex


def _takes_earlier(cp: Any) -> TypeGuard[BatchingCheckpointer]:
    """Whether ``cp`` batches: it says so and its ``commit`` (maybe a subclass's) takes ``earlier``."""
    if not getattr(cp, "batches", False):
        return False
    try:
        return "earlier" in inspect.signature(cp.commit).parameters
    except (TypeError, ValueError):
        return False


def _fences(cp: Any) -> TypeGuard[FencedCheckpointer]:
    """Whether ``cp`` fences its writes: it says so, batches, has ``renew``, and its ``start``,
    ``commit`` and ``finish`` (maybe a subclass's) take ``fence``."""
    if not getattr(cp, "fences", False) or not _takes_earlier(cp) or not callable(getattr(cp, "renew", None)):
        return False
    try:
        return all("fence" in inspect.signature(getattr(cp, m)).parameters for m in ("start", "commit", "finish"))
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
        self.batching = cp if _takes_earlier(cp) else None  # the store, when it batches
        self.batches = self.batching is not None
        self.fence = lease.fence if lease is not None else None  # every write carries it (a fencing store)
        self.fenced = cp if self.fence is not None and _fences(cp) else None
        self.pending: list[TraceEvent] = []  # held steps (pure or hold states), committed with the next step

    def start(self, meta: dict[str, Any]) -> None:
        """Record the new run (under the lease's fence)."""
        if self.fenced is not None:
            self.fenced.start(self.run_id, meta, fence=self.fence)
        else:
            self.cp.start(self.run_id, meta)

    def __call__(self, ev: TraceEvent, held: bool = False) -> None:
        """Commit ``ev`` with the rows posted since the last commit and the snapshot. The step of a
        ``held`` state (``pure`` or ``hold``: see ``StateGraph.state``) that posted nothing is held
        back and committed in the same transaction as the next step (stores with ``batches``): a
        GroupChat turn (bid, select, post, penalize) is one commit, and after a crash the held steps
        are simply run again from the previous snapshot."""
        if self.lease is not None:
            self.lease.renew()
        rows = self.transcript.since(self.saved)
        if held and not rows and self.batches and ev.dest is not None:
            self.pending.append(ev)
            return
        if ev.dest is None and ev.trigger not in (None, "interrupted"):
            # a cancelled or failed step: the context may hold half of it, so the held-back
            # steps are not committed with it; a resume runs them again from the last snapshot.
            # An interrupted step did nothing (it stopped to wait for a person): they are kept.
            self.pending = []
        state = self.snapshot() if ev.dest is not None or self.pending else None
        if self.fenced is not None:  # a fencing store batches too
            earlier, self.pending = self.pending, []
            self.fenced.commit(self.run_id, ev, rows, state, earlier, self.fence)
        elif self.pending and self.batching is not None:  # pending only fills when the store batches
            earlier, self.pending = self.pending, []
            self.batching.commit(self.run_id, ev, rows, state, earlier=earlier)
        else:
            self.cp.commit(self.run_id, ev, rows, state)
        self.saved += len(rows)

    def finish(self, stop_reason: str) -> None:
        if self.fenced is not None:
            self.fenced.finish(self.run_id, stop_reason, fence=self.fence)
        else:
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
            child = Recorder(self.cp, lane, ctx.transcript, ctx.snapshot, lease=self.lease)
            child.start({"parent": self.run_id, "branch": key})
            return child, None
        ctx.transcript.restore(saved.messages)
        if saved.state is not None:
            ctx.restore(saved.state)
        return Recorder(self.cp, lane, ctx.transcript, ctx.snapshot, len(saved.messages), self.lease), saved


class Lease:
    """One execute/resume's hold on a run: taken before anything is written, renewed by the
    recorder's commits (at most every third of the TTL) and checked (and renewed) before each model
    request, given back when the run ends. On a fencing store (``fences``) it carries the owner's
    ``fence``: every write of the run is refused once another owner has taken the run over, and a
    lost or given-back lease is never taken again by this owner (``LeaseLost``)."""

    def __init__(self, cp: Any, run_id: str, ttl: float | None = None):
        self.cp, self.run_id = cp, run_id
        self.ttl = float(ttl if ttl is not None else getattr(cp, "lease_ttl", LEASE_TTL))
        self.owner = lease_owner()
        self.held = callable(getattr(cp, "acquire", None))  # a store without leases cannot refuse
        self.fence: Fence | None = None
        self._renewed = 0.0
        if self.held:
            token = cp.acquire(run_id, self.owner, self.ttl)
            self._renewed = time.monotonic()
            if _fences(cp) and isinstance(token, int):
                self.fence = Fence(run_id, self.owner, token)

    def renew(self) -> None:
        """At a commit: extend the lease when a third of its TTL has passed since the last renewal."""
        if self.held and time.monotonic() - self._renewed > self.ttl / 3:
            self.check()

    def check(self) -> None:
        """Before a model request: ``LeaseLost`` unless this owner still holds the lease (a fencing
        store: extended by this check); a lease given back is never taken again."""
        fence = self.fence
        if fence is not None:
            if not self.held:
                raise LeaseLost(self.run_id, fence.token, None, None)
            self.cp.renew(fence, self.ttl)
        elif self.held:  # a store that does not fence: its acquire renews
            self.cp.acquire(self.run_id, self.owner, self.ttl)
        self._renewed = time.monotonic()

    def release(self) -> None:
        if self.held:
            self.held = False
            self.cp.release(self.run_id, self.owner)


class NotSerializable(FsmchatError, TypeError):
    pass


_PLAIN = frozenset({str, int, float, bool, type(None)})
_KEPT = _PLAIN | {AppendLog}  # what ``encode`` keeps as it is (an AppendLog holds JSON data: a commit writes its new items)
_OPAQUE: set[type] = set()  # types ``encode`` refused (a config, a model client): skipped at once next time


def encode(obj: Any) -> Any:
    """JSON-able form of working state: dataclasses (e.g. BidOutcome) tagged with their type,
    tuples as lists; anything else non-JSON raises ``NotSerializable`` (the caller skips it and
    the pattern rebuilds it from its config on resume). Runs on every commit: exact built-in types
    are dispatched first."""
    t = type(obj)
    if t in _KEPT:
        return obj
    if t is list or t is tuple:
        return [x if type(x) in _KEPT else encode(x) for x in obj]
    if t is dict:  # the common case: str keys (one pass; else the general rules below)
        out = {}
        for k, v in obj.items():
            if type(k) is not str:
                break
            out[k] = v if type(v) in _KEPT else encode(v)
        else:
            return out
    if isinstance(obj, BidOutcome):  # (GroupChat's bids, at every commit: before the general rules)
        return {"__bid__": [obj.score, obj.message, obj.valid, obj.reason]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [encode(x) for x in obj]
    if isinstance(obj, dict):
        if not all(isinstance(k, (str, int)) for k in obj):
            raise NotSerializable(type(obj).__name__)
        return {"__dict__": [[k, encode(v)] for k, v in obj.items()]} if any(isinstance(k, int) for k in obj) \
            else {k: encode(v) for k, v in obj.items()}
    _OPAQUE.add(t)
    raise NotSerializable(type(obj).__name__)


def decode(obj: Any) -> Any:
    if isinstance(obj, list):
        return [decode(x) for x in obj]
    if isinstance(obj, dict):
        if "__bid__" in obj:
            return BidOutcome(*obj["__bid__"])
        if "__dict__" in obj:
            return {k: decode(v) for k, v in obj["__dict__"]}
        return {k: decode(v) for k, v in obj.items()}
    return obj


def encode_fields(values: dict[str, Any]) -> dict[str, Any]:
    """Encode what can be encoded; leave out the rest (rebuilt by the pattern on resume)."""
    out = {}
    for k, v in values.items():
        if type(v) in _OPAQUE:
            continue
        try:
            out[k] = encode(v)
        except NotSerializable:
            continue
    return out


def resume(run_id: str, checkpoint: Checkpointer, pattern: Any = None, *, input: Any = None, allow: Any = (),
           trusted: bool = False) -> Any:
    """Continue a checkpointed run, from its last committed step.

    A run waiting for a person continues with ``input``, their answer (see ``Pattern.resume``); a
    finished run's result is rebuilt without calling any model. Without ``pattern``, the
    ``factory`` stored with the run rebuilds it, under the same trust as ``from_config``: only
    fsmchat's modules and the ``allow`` prefixes are imported; a checkpoint naming other code
    raises ``UntrustedReference`` before anything is imported or written.

    Args:
        run_id: The run to continue.
        checkpoint: The store it was checkpointed in.
        pattern: The pattern that started it; None: rebuilt from the run's stored ``factory``
            ("module:attr", set as ``pattern.factory`` before the first run).
        input: A waiting run's answer: ``Approve()``, ``Edit(...)``, ``Reject(...)``, ``Say(text)``
            or a plain str.
        allow: Module prefixes whose code the stored factory may import, besides fsmchat's own.
        trusted: Import any factory, file paths included.

    Returns:
        The run's ``RunResult``.

    Raises:
        ValueError: No pattern given and the run was stored without a factory.
        UntrustedReference: The stored factory is outside fsmchat and ``allow``.

    Examples:
        >>> from fsmchat import Human, MemoryCheckpointer, RoundRobinSwarm, resume
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> swarm = RoundRobinSwarm(agents=[writer, Human("editor")])
        >>> store = MemoryCheckpointer()
        >>> swarm.execute("Announce the launch.", checkpoint=store, run_id="launch").stop_reason
        'interrupted'
        >>> done = resume("launch", store, swarm, input="Approved: ship it.")
        >>> done.stop_reason, [m.role for m in done.transcript]
        ('max_loops', ['User', 'writer', 'editor'])
    """
    if pattern is None:
        trust = Trust.of(allow, trusted, owner="resume")
        check_resume(run_id, checkpoint, "resume")
        factory = checkpoint.load(run_id).meta.get("factory")
        if not factory:
            raise ValueError(f"run {run_id!r} was checkpointed without a factory; pass the pattern: "
                             "resume(run_id, checkpoint, pattern=...) or set pattern.factory='module:attr'")
        pattern = trust.pattern(factory, f"run {run_id!r} factory")
    return pattern.resume(run_id, checkpoint, input=input)
