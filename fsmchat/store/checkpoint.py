"""Durable runs: after every transition the new trace event, the messages posted since the last
commit, the transcript's length and a delta of the run's working state (what changed since the
previous commit: ``fsmchat.store.statelog``) are appended, in one transaction, keyed by run id; never
the whole transcript or state again. ``pattern.resume(run_id, checkpoint=...)`` continues from
the last committed state; ``checkpoint.history(run_id)`` lists every step with the state after it
(``fsmchat.fork`` starts a new run from one).

``SqliteCheckpointer`` (stdlib sqlite3, WAL) is the embedded default; anything implementing
``Checkpointer`` (``start``, ``commit``, ``finish``, ``load``) plugs in, e.g. ``MemoryCheckpointer``;
``history``, ``log``, ``put`` and ``lanes`` add time travel.
"""
from __future__ import annotations

import contextvars
import os
import sqlite3
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..checks import JsonObject, check_run_id
from ..errors import CheckpointStoreError, FsmchatError, bad_value
from ..trust import Trust
from .group_commit import GroupCommit
from .protocol import (LEASE_TTL, Capabilities, Commit, EvalInfo, EvalRecord, Fence, LeaseLost, NotSerializable,
                       ReadsLog, RunInfo, RunInProgress, Saved, Store, already_used, check_lease_ttl, check_store,
                       decode, encode, encode_fields, evals_of, lease_owner, lease_refusal, run_info, saved_of)
from .memory import MemoryCheckpointer
from .rows import (EVAL_COLUMNS, already_kept, eval_info_of_row, eval_of_row, eval_row, event_rows, listed_meta,
                   log_of_rows, message_rows)
from .statelog import RunLog, encode_json
from .writer import COMMIT_MODES, DEFAULT_COMMIT, Lease, Recorder, RunWriter, check_commit

__all__ = ["COMMIT_MODES", "DEFAULT_COMMIT", "EVAL_COLUMNS", "LEASE_TTL", "RUN_META", "Capabilities",
           "CheckpointMismatch", "CheckpointStoreError", "Checkpointer", "Commit", "EvalInfo", "EvalRecord", "Fence",
           "Lease", "LeaseLost", "MemoryCheckpointer", "NotSerializable", "Recorder", "RunInProgress", "RunInfo",
           "RunLog", "RunWriter", "Saved", "SqliteCheckpointer", "already_kept", "already_used", "check_checkpoint",
           "check_commit", "check_lease_ttl", "check_resume", "decode", "encode", "encode_fields", "eval_info_of_row",
           "eval_of_row", "eval_row", "evals_of", "event_rows", "lease_owner", "lease_refusal", "listed_meta",
           "log_of_rows", "message_rows", "new_run_id", "resume", "run_info", "saved_of"]

# What a new checkpointed run stores in its metadata besides its own (``fsmchat.otel``: the run's
# W3C trace context, so a resume or a fork continues the trace). A ContextVar: set around one run.
RUN_META: contextvars.ContextVar[Mapping[str, object] | None] = contextvars.ContextVar("fsmchat_run_meta", default=None)

class CheckpointMismatch(FsmchatError, ValueError):
    """A run was resumed with a pattern other than the one that checkpointed it; nothing was written."""


_dumps = encode_json

Checkpointer = Store
"""A store of runs (``fsmchat.store.protocol.Store``): the one protocol every store implements."""


def check_checkpoint(checkpoint: object, owner: str, field: str = "checkpoint") -> Store | None:
    """``checkpoint`` is None or a store (``SqliteCheckpointer("runs.db")``, ...), never a path."""
    return check_store(checkpoint, owner, field)


def check_resume(run_id: object, checkpoint: object, owner: str) -> None:
    """``resume(run_id, checkpoint)``: a run id string and the store the run was checkpointed to."""
    check_run_id(run_id, owner, required=True)
    if checkpoint is None:
        raise bad_value(owner, "checkpoint", None, "the Checkpointer the run was saved to, e.g. "
                        "resume(run_id, SqliteCheckpointer('runs.db'))", type_error=True)
    check_checkpoint(checkpoint, owner)


_INSERT_EVENT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_MESSAGE = "INSERT INTO messages VALUES (?, ?, ?, ?, ?)"
_HOLDS = "SELECT 1 FROM leases WHERE run_id=? AND owner=? AND token=?"  # the writer still holds the lease
# a commit's check: a row when the fence holds the lease, with the run's stop reason (a resumed run is reopened)
_HELD_ENDED = "SELECT (SELECT stop_reason FROM runs WHERE run_id=?) FROM leases WHERE run_id=? AND owner=? AND token=?"
_ENDED = "SELECT stop_reason FROM runs WHERE run_id=?"
_REOPEN = "UPDATE runs SET stop_reason=NULL WHERE run_id=?"


class _Refused(FsmchatError):
    """Inside a store transaction: the writer's fence no longer holds the run's lease (rolled back)."""

class SqliteCheckpointer(ReadsLog):
    """Checkpoints in one SQLite file (WAL mode; ``synchronous=NORMAL`` survives a killed process).

    A commit is one transaction: the trace event(s), the messages posted since the last commit,
    and on the event's row the transcript's length and the state delta (``fsmchat.store.statelog``).
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
    CREATE TABLE IF NOT EXISTS evals (eval_id TEXT PRIMARY KEY, name TEXT NOT NULL, created REAL NOT NULL,
                                      summary TEXT NOT NULL, cases TEXT NOT NULL);
    """
    # A run that gains a step is not ended (a resumed run's first commit clears its stop reason):
    # ``append`` reads the stop reason in its lease check (``_HELD_ENDED``) and clears it, in the
    # commit's own transaction. A store made by an older fsmchat keeps its ``events_reopen``
    # trigger, which did it on every row insert (about 2 µs a commit), and which that fsmchat adds
    # again when it opens the store
    COLUMNS = {"runs": {"run_id", "meta", "stop_reason", "created", "updated"},
               "events": {"run_id", "seq", "step", "state", "trigger", "dest", "t", "payload"},
               "messages": {"run_id", "seq", "role", "content", "metadata"},
               "states": {"run_id", "seq", "state"}}
    """The columns a store must have (the first schema's); ``ADDED`` ones are added when missing, and
    tables outside it (``leases``, ``evals``) are created when the store is opened for writing: a
    store without them reads as having no leases and no evaluations."""
    ADDED = {"events": (("nmsg", "INTEGER"), ("delta", "TEXT")), "leases": (("token", "INTEGER NOT NULL DEFAULT 0"),)}
    TABLES = set(COLUMNS)

    def __init__(self, path: str | Path, *, read_only: bool | None = None, lease_ttl: float = LEASE_TTL,
                 durability: str = "normal"):
        """Open (or create) the store at ``path``.

        Args:
            path: The SQLite file (created with the store's tables when missing or empty).
            read_only: Open it without writing anything: finished runs can be loaded and rebuilt,
                nothing run or resumed. By default, when the file exists and is not writable.
            lease_ttl: Seconds a run's lease lasts without renewal (its commits and model requests
                renew it): how long a paused or hung owner keeps others out of its run.
            durability: ``"normal"`` (WAL, ``synchronous=NORMAL``): a commit survives a killed
                process, not a power loss. ``"fsync"``: ``synchronous=FULL`` on a writer thread; a
                run's step goes on only once its commit is on disk, the event loop is never held
                meanwhile, and the commits queued during one fsync (several runs' turns) share the next.

        Raises:
            CheckpointStoreError: The file is not an fsmchat store, is corrupted or cannot be opened.
            ConfigTypeError: ``path`` is not a path (a number would create a file named after it).
            ConfigError: ``lease_ttl`` is not a positive number.
        """
        if not isinstance(path, (str, os.PathLike)) or isinstance(path, str) and not path.strip():
            raise bad_value("SqliteCheckpointer", "path", path, "the SQLite file's path, a non-empty str or a "
                            "pathlib.Path (':memory:' for a store in memory)", type_error=True)
        self.lease_ttl = check_lease_ttl(lease_ttl, "SqliteCheckpointer")
        if durability not in ("normal", "fsync"):
            raise bad_value("SqliteCheckpointer", "durability", durability, "'normal' (survives a killed process) "
                            "or 'fsync' (survives a power loss: each commit waits for its fsync, off the event loop)",
                            type_error=not isinstance(durability, str))
        self.durability = durability
        self.group: GroupCommit | None = None  # the writer thread (durability="fsync")
        self.path = str(path)
        self._lock = threading.Lock()
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
            new = self._check_schema()  # a foreign database is refused before anything is written to it
            if not self.read_only:
                if new and durability == "normal":  # an empty file: its switch to WAL (one write of its
                    self._db.execute("PRAGMA journal_mode=MEMORY")  # header) has nothing to journal or sync
                    self._db.execute("PRAGMA synchronous=OFF")
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")  # (durability="fsync": the writer thread's are FULL)
                # a new store's tables in one transaction (one WAL commit, not one per table)
                self._db.executescript(f"BEGIN IMMEDIATE;{self.SCHEMA}COMMIT;" if new else self.SCHEMA)
                if not new:
                    self._migrate()
                if durability == "fsync":
                    self.group = GroupCommit(self.path)
            self._deltas = new or self._columns("events") >= {"nmsg", "delta"}
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

    def _check_schema(self) -> bool:
        """An empty file becomes a store (True: it is one); any other database must have the store's
        tables and columns."""
        found = {r[0]: self._columns(r[0]) for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not found and not self.read_only:
            return True
        wrong = sorted(t for t, cols in self.COLUMNS.items() if not cols <= found.get(t, set()))
        if wrong:
            raise CheckpointStoreError(
                f"checkpoint store {self.path}: not an fsmchat checkpoint database (tables {sorted(found)}; "
                f"missing or different: {wrong}); point SqliteCheckpointer at a new file or an fsmchat store")
        return False

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

    capabilities = Capabilities(leases=True, history=True, lanes=True, evals=True)

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
        return int(token)

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

    def _lost(self, fence: Fence, db: sqlite3.Connection | None = None) -> LeaseLost:
        """The ``LeaseLost`` of ``fence``, naming who holds the lease now (under the store lock, or
        on the connection ``db``)."""
        row = (db or self._db).execute("SELECT owner, token FROM leases WHERE run_id=?", (fence.run_id,)).fetchone()
        return LeaseLost(fence.run_id, fence.token, row[0] or None if row else None, row[1] if row else None)

    def _require(self, fence: Fence | None, db: sqlite3.Connection | None = None) -> None:
        """Inside a transaction: refuse the write (``_Refused``) unless ``fence`` holds the lease."""
        if fence is not None and (db or self._db).execute(_HOLDS, (fence.run_id, fence.owner,
                                                                  fence.token)).fetchone() is None:
            raise _Refused

    def _transaction(self, write: Callable[[sqlite3.Connection], None], fence: Fence | None) -> None:
        """Run ``write`` in one transaction (``BEGIN IMMEDIATE``: one writer at a time, across
        processes), committed when it returns, rolled back on any exception; a write the fence
        refused (``_Refused``) becomes ``LeaseLost``. Under the store lock."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            write(db)
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

    def start(self, run_id: str, meta: JsonObject, fence: Fence | None = None) -> None:
        """Record a new run with its metadata; ``ValueError`` when ``run_id`` is already stored,
        ``LeaseLost`` (nothing written) when ``fence`` no longer holds the run's lease."""
        self._writable("start a run")
        now = time.time()

        def write(db: sqlite3.Connection) -> None:
            if db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone():
                raise ValueError(already_used(run_id))
            self._require(fence, db)
            db.execute("INSERT INTO runs VALUES (?, ?, NULL, ?, ?)", (run_id, _dumps(meta), now, now))

        with self._lock:
            self._transaction(write, fence)

    def append(self, run_id: str, commit: Commit, fence: Fence | None = None) -> "Future[None] | None":
        """Store one commit in one transaction: its event rows, its messages, and the run marked
        not ended (its stop reason, read by the lease check's statement, cleared). With ``fence``,
        nothing is written and ``LeaseLost`` is raised when the fence no longer holds the run's lease.
        With ``durability="fsync"`` the commit is queued to the writer thread and its future
        returned (done once on disk)."""
        self._writable("write a run")

        def write(db: sqlite3.Connection) -> None:
            if fence is None:
                held = db.execute(_ENDED, (run_id,)).fetchone() or (None,)
            else:
                held = db.execute(_HELD_ENDED, (run_id, fence.run_id, fence.owner, fence.token)).fetchone()
                if held is None:
                    raise _Refused
            if held[0] is not None:
                db.execute(_REOPEN, (run_id,))
            db.executemany(_INSERT_EVENT, event_rows(run_id, commit))
            db.executemany(_INSERT_MESSAGE, message_rows(run_id, commit))

        return self._write(write, fence)

    def finish(self, run_id: str, stop_reason: str, fence: Fence | None = None,
               state: str | None = None) -> "Future[None] | None":
        """Record how the run ended, and its last state (``state``, the writer's; else folded from
        its rows) in ``states``, what an older fsmchat reads; with ``fence``, nothing is written and
        ``LeaseLost`` is raised when the fence no longer holds the run's lease. With
        ``durability="fsync"``, queued after the run's commits (its future returned)."""
        whole = state if state is not None else self._whole_state(run_id)

        def write(db: sqlite3.Connection) -> None:
            self._require(fence, db)
            db.execute("UPDATE runs SET stop_reason=?, updated=? WHERE run_id=?", (stop_reason, time.time(), run_id))
            if whole is not None:
                seq = db.execute("SELECT COALESCE(MAX(seq), -1) FROM events WHERE run_id=?", (run_id,)).fetchone()[0]
                db.execute("INSERT OR REPLACE INTO states VALUES (?, ?, ?)", (run_id, seq, whole))

        return self._write(write, fence)

    def _write(self, write: Callable[[sqlite3.Connection], None], fence: Fence | None) -> "Future[None] | None":
        """Run ``write`` in a transaction of its own now, or (``durability="fsync"``) queue it to the
        writer thread, whose transaction it shares with the other writes queued meanwhile."""
        if self.group is None:
            with self._lock:
                self._transaction(write, fence)
            return None

        def fenced(db: sqlite3.Connection) -> None:
            try:
                write(db)
            except _Refused:
                assert fence is not None
                raise self._lost(fence, db) from None

        return self.group.submit(fenced)

    def _whole_state(self, run_id: str) -> str | None:
        """The run's latest state as JSON, folded from its rows (a run that ends in a process that
        committed no state of it); None when it has none or its rows cannot be read."""
        try:
            state = self.log(run_id).final_state()
        except (KeyError, CheckpointStoreError):
            return None
        return None if state is None else encode_json(state)

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
                        if lg.stop_reason is not None:  # (an older store's events_reopen trigger cleared it)
                            db.execute("UPDATE runs SET stop_reason=? WHERE run_id=?", (lg.stop_reason, lg.run_id))
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

    def put_eval(self, record: EvalRecord) -> None:
        """Keep an evaluation (``fsmchat.evals``) in one transaction; ``ValueError``, nothing written,
        when its id is already kept."""
        self._writable("keep an evaluation")
        row = eval_row(record)

        def write(db: sqlite3.Connection) -> None:
            if db.execute("SELECT 1 FROM evals WHERE eval_id=?", (row[0],)).fetchone():
                raise ValueError(already_kept(row[0]))
            db.execute("INSERT INTO evals VALUES (?, ?, ?, ?, ?)", row)

        try:
            done = self._write(write, None)
            if done is not None:
                done.result()
        except sqlite3.DatabaseError as exc:
            raise self._store_error(exc) from None

    def _eval_rows(self, sql: str, args: tuple[str, ...] = ()) -> list[tuple[object, ...]]:
        """The rows ``sql`` reads from ``evals``; none when the store has no such table (an older one)."""
        try:
            with self._lock:
                if not self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='evals'").fetchone():
                    return []
                return self._db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._store_error(exc) from None

    def list_evals(self) -> list[EvalInfo]:
        """Every kept evaluation, newest first, without its cases."""
        where = f"checkpoint store {self.path}"
        return [eval_info_of_row(r, where) for r in
                self._eval_rows(f"SELECT {EVAL_COLUMNS} FROM evals ORDER BY created DESC, rowid DESC")]

    def load_eval(self, eval_id: str) -> EvalRecord:
        """The evaluation ``eval_id`` with its cases (``KeyError`` when the store has none by that id)."""
        rows = self._eval_rows(f"SELECT {EVAL_COLUMNS}, cases FROM evals WHERE eval_id=?", (eval_id,))
        if not rows:
            raise KeyError(f"no evaluation {eval_id!r} in {self.path}")
        return eval_of_row(rows[0], f"checkpoint store {self.path}")

    def close(self) -> None:
        """Close the database connection (after the writer thread has committed what is queued)."""
        if self.group is not None:
            self.group.close()
        self._db.close()


def new_run_id() -> str:
    return uuid.uuid4().hex


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
        what = f"run {run_id!r} factory"
        if not isinstance(factory, str):  # (what Trust says of a reference that is not one)
            raise bad_value(what, "reference", factory, "a 'module:attr' string", type_error=True)
        pattern = trust.pattern(factory, what)
    return pattern.resume(run_id, checkpoint, input=input)
