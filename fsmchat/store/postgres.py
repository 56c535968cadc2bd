"""Durable runs in PostgreSQL (psycopg 3): the store protocol of ``SqliteCheckpointer`` (start,
commit, finish and load; history, log, put, runs, lanes and list_runs for time travel and the
viewer), with leases and fencing tokens held in the database, so processes on different machines
share one store's runs safely.

Every write runs in one transaction that first takes a shared lock on the run's lease row and
checks that the writer's fence still holds it; a new owner's ``acquire`` locks that row for update,
so a takeover waits for a write in flight and every write after it is refused (``LeaseLost``) with
nothing written. Lease expiry is read from the database's clock, one clock for every machine.
"""
from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Sequence

from ..errors import CheckpointStoreError, FsmchatError, bad_value
from ..checks import JsonObject
from ..models import Message, TraceEvent
from .checkpoint import (EVAL_COLUMNS, RunInfo, already_kept, eval_info_of_row, eval_of_row, eval_row, event_rows,
                         listed_meta, log_of_rows, message_rows, run_info)
from .protocol import (LEASE_TTL, Capabilities, Commit, EvalInfo, EvalRecord, Fence, LeaseLost, ReadsLog,
                       already_used, check_lease_ttl, lease_refusal)
from .statelog import RunLog, encode_json

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, meta TEXT NOT NULL, stop_reason TEXT,
                                 created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL,
                                 ord BIGSERIAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, step INTEGER, state TEXT,
                                   trigger TEXT, dest TEXT, t DOUBLE PRECISION, payload TEXT, nmsg INTEGER,
                                   delta TEXT, PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS messages (run_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT, content TEXT,
                                     metadata TEXT, PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS leases (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL,
                                   token BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS evals (eval_id TEXT PRIMARY KEY, name TEXT NOT NULL, created DOUBLE PRECISION NOT NULL,
                                  summary TEXT NOT NULL, cases TEXT NOT NULL, ord BIGSERIAL NOT NULL);
"""
_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"
_HOLDS = "SELECT 1 FROM leases WHERE run_id=%s AND owner=%s AND token=%s FOR SHARE"
_INSERT_EVENT = "INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
_INSERT_MESSAGE = "INSERT INTO messages VALUES (%s, %s, %s, %s, %s)"


class _Refused(FsmchatError):
    """Inside a transaction: the writer's fence no longer holds the run's lease (rolled back)."""


def _where(dsn: str) -> str:
    """The DSN as an error names it: without its password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return "PostgreSQL (an unreadable dsn)"
    shown = " ".join(f"{k}={parts[k]}" for k in ("host", "port", "dbname", "user") if parts.get(k))
    return f"PostgreSQL {shown or '(default connection)'}"


class PostgresCheckpointer(ReadsLog):
    """Checkpoints in a PostgreSQL database (psycopg 3, the ``postgres`` extra).

    A commit is one transaction: the trace event(s), the messages posted since the last commit, and
    on the event's row the transcript's length and the state delta, as in ``SqliteCheckpointer``.
    Leases live in the ``leases`` table with fencing tokens that only grow, so several machines
    can run and resume one store's runs: a run is owned by one execute/resume at a time, and the
    writes of an owner that has been replaced are refused with nothing written (``LeaseLost``).
    Calls are synchronous and serialised per store object (one connection), as ``SqliteCheckpointer``.

    Examples:
        >>> from fsmchat import PostgresCheckpointer
        >>> PostgresCheckpointer("host=127.0.0.1 port=1 dbname=runs user=app password=secret")  # no server there
        Traceback (most recent call last):
            ...
        fsmchat.errors.CheckpointStoreError: checkpoint store PostgreSQL host=127.0.0.1 port=1 dbname=runs user=app: OperationalError: connection failed: ...

        With a server, any pattern runs and resumes on it as on SQLite (``pattern.execute(task,
        checkpoint=store, run_id=...)``, ``pattern.resume(run_id, store)``), from any machine
        that reaches the database.
    """

    capabilities = Capabilities(leases=True, history=True, lanes=True, evals=True)

    def __init__(self, dsn: str, *, lease_ttl: float = LEASE_TTL):
        """Connect to the database at ``dsn`` and create the store's tables when missing.

        Args:
            dsn: A libpq connection string or URI, e.g. ``"postgresql://user@db.internal/fsmchat"``
                or ``"host=127.0.0.1 port=5432 dbname=fsmchat"``.
            lease_ttl: Seconds a run's lease lasts without renewal (its commits and model requests
                renew it): how long a paused or hung owner keeps others out of its run.

        Raises:
            CheckpointStoreError: The server cannot be reached or refused the connection or the tables.
            ConfigTypeError: ``dsn`` is not a non-empty str.
            ConfigError: ``lease_ttl`` is not a positive number.
        """
        if not isinstance(dsn, str) or not dsn.strip():
            raise bad_value("PostgresCheckpointer", "dsn", dsn, "a libpq connection string or URI, a non-empty str "
                            "such as 'postgresql://user@host/dbname'", type_error=True)
        self.lease_ttl = check_lease_ttl(lease_ttl, "PostgresCheckpointer")
        import psycopg

        self._psycopg = psycopg
        self.dsn = dsn
        self.where = _where(dsn)
        self.read_only = False
        self._lock = threading.Lock()
        try:
            self._db: psycopg.Connection[TupleRow] = psycopg.connect(dsn, autocommit=True)
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(7412093)")  # one creator of the tables at a time
                self._db.execute(SCHEMA)
        except psycopg.Error as exc:
            raise self._store_error(exc) from None

    def _store_error(self, exc: Exception) -> CheckpointStoreError:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return CheckpointStoreError(f"checkpoint store {self.where}: {type(exc).__name__}: {text}; check that the "
                                    "server is running, the dsn and the user's rights on the database")

    def _now(self) -> float:
        row = self._db.execute(_NOW).fetchone()
        assert row is not None
        return float(row[0])

    def acquire(self, run_id: str, owner: str, ttl: float | None = None) -> int:
        """Take the run's lease for ``owner`` for ``ttl`` seconds (the store's ``lease_ttl`` by
        default) and return its fencing token (each new owner gets a larger one);
        ``RunInProgress`` if another live owner holds it."""
        db = self._db
        with self._lock, self._errors():
            with db.transaction():
                db.execute("INSERT INTO leases VALUES (%s, '', 0, 0) ON CONFLICT (run_id) DO NOTHING", (run_id,))
                row = db.execute("SELECT owner, expires, token FROM leases WHERE run_id=%s FOR UPDATE",
                                 (run_id,)).fetchone()
                assert row is not None
                now = self._now()
                refusal = lease_refusal(run_id, (row[0], row[1]) if row[0] else None, owner, now)
                if refusal is not None:
                    raise refusal
                token = int(row[2]) if row[0] == owner else int(row[2]) + 1
                db.execute("UPDATE leases SET owner=%s, expires=%s, token=%s WHERE run_id=%s",
                           (owner, now + (self.lease_ttl if ttl is None else ttl), token, run_id))
        return token

    def _errors(self) -> "_StoreErrors":
        return _StoreErrors(self)

    def renew(self, fence: Fence, ttl: float | None = None) -> None:
        """Extend the lease ``fence`` holds; ``LeaseLost`` when it is no longer that owner's."""
        with self._lock, self._errors():
            cur = self._db.execute("UPDATE leases SET expires=extract(epoch FROM clock_timestamp()) + %s "
                                   "WHERE run_id=%s AND owner=%s AND token=%s",
                                   (self.lease_ttl if ttl is None else ttl, fence.run_id, fence.owner, fence.token))
            if cur.rowcount == 0:
                raise self._lost(fence)

    def _lost(self, fence: Fence) -> LeaseLost:
        row = self._db.execute("SELECT owner, token FROM leases WHERE run_id=%s", (fence.run_id,)).fetchone()
        return LeaseLost(fence.run_id, fence.token, row[0] or None if row else None, int(row[1]) if row else None)

    def _check(self, fence: Fence | None) -> None:
        """Inside a transaction: lock the fence's lease row (a takeover waits for this write) or refuse."""
        if fence is not None and self._db.execute(_HOLDS, (fence.run_id, fence.owner, fence.token)).fetchone() is None:
            raise _Refused

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease back (only if ``owner`` still holds it); its fencing token is kept."""
        with self._lock, self._errors():
            self._db.execute("UPDATE leases SET owner='', expires=0 WHERE run_id=%s AND owner=%s", (run_id, owner))

    def start(self, run_id: str, meta: JsonObject, fence: Fence | None = None) -> None:
        """Record a new run with its metadata; ``ValueError`` when ``run_id`` is already stored,
        ``LeaseLost`` (nothing written) when ``fence`` no longer holds the run's lease."""
        db = self._db
        with self._lock, self._errors():
            try:
                with db.transaction():
                    self._check(fence)
                    now = time.time()
                    cur = db.execute("INSERT INTO runs (run_id, meta, stop_reason, created, updated) "
                                     "VALUES (%s, %s, NULL, %s, %s) ON CONFLICT (run_id) DO NOTHING",
                                     (run_id, encode_json(meta), now, now))
                    if cur.rowcount == 0:
                        raise ValueError(already_used(run_id))
            except _Refused:
                assert fence is not None
                raise self._lost(fence) from None

    def append(self, run_id: str, commit: Commit, fence: Fence | None = None) -> None:
        """Store one commit in one transaction: its event rows and messages; the run is marked not
        ended in the same transaction. With ``fence``, nothing is written and ``LeaseLost`` is
        raised when the fence no longer holds the run's lease."""
        db = self._db
        with self._lock, self._errors():
            try:
                with db.transaction(), db.cursor() as cur:
                    self._check(fence)
                    cur.executemany(_INSERT_EVENT, event_rows(run_id, commit))
                    if commit.messages:
                        cur.executemany(_INSERT_MESSAGE, message_rows(run_id, commit))
                    cur.execute("UPDATE runs SET stop_reason=NULL WHERE run_id=%s AND stop_reason IS NOT NULL",
                                (run_id,))
            except _Refused:
                assert fence is not None
                raise self._lost(fence) from None

    def finish(self, run_id: str, stop_reason: str, fence: Fence | None = None, state: str | None = None) -> None:
        """Record how the run ended; with ``fence``, nothing is written and ``LeaseLost`` is raised
        when the fence no longer holds the run's lease."""
        db = self._db
        with self._lock, self._errors():
            try:
                with db.transaction():
                    self._check(fence)
                    db.execute("UPDATE runs SET stop_reason=%s, updated=%s WHERE run_id=%s",
                               (stop_reason, time.time(), run_id))
            except _Refused:
                assert fence is not None
                raise self._lost(fence) from None

    def log(self, run_id: str) -> RunLog:
        """The run as stored, row by row (``KeyError`` when there is no such run)."""
        db = self._db
        with self._lock, self._errors():
            with db.transaction():
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one snapshot: a commit whole or not at all
                row = db.execute("SELECT meta, stop_reason, created, updated FROM runs WHERE run_id=%s",
                                 (run_id,)).fetchone()
                if row is None:
                    raise KeyError(f"no checkpointed run {run_id!r} in {self.where}")
                events = db.execute("SELECT seq, step, state, trigger, dest, t, payload, nmsg, delta FROM events "
                                    "WHERE run_id=%s ORDER BY seq", (run_id,)).fetchall()
                messages = db.execute("SELECT seq, role, content, metadata FROM messages WHERE run_id=%s ORDER BY seq",
                                      (run_id,)).fetchall()
        return log_of_rows(run_id, row, events, messages, f"checkpoint store {self.where}")

    def put(self, logs: Sequence[RunLog]) -> None:
        """Write whole runs at once, in one transaction (``fork``); refused, with nothing written,
        when one of the run ids is already taken."""
        db = self._db
        with self._lock, self._errors():
            with db.transaction(), db.cursor() as cur:
                now = time.time()
                for lg in logs:
                    cur.execute("INSERT INTO runs (run_id, meta, stop_reason, created, updated) VALUES "
                                "(%s, %s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING",
                                (lg.run_id, encode_json(lg.meta), lg.stop_reason, lg.created or now, lg.updated or now))
                    if cur.rowcount == 0:
                        raise ValueError(already_used(lg.run_id))
                    if lg.events:
                        cur.executemany(_INSERT_EVENT, [(lg.run_id, i, e.step, e.state, e.trigger, e.dest, e.t,
                                                         encode_json(e.payload), n, d)
                                                        for i, (e, n, d) in enumerate(zip(lg.events, lg.counts,
                                                                                          lg.deltas))])
                    if lg.messages:
                        cur.executemany(_INSERT_MESSAGE, [(lg.run_id, i, m.role, m.content, encode_json(m.metadata))
                                                          for i, m in enumerate(lg.messages)])

    def runs(self) -> list[str]:
        """Every stored run id (branch lanes included), oldest first."""
        with self._lock, self._errors():
            return [r[0] for r in self._db.execute("SELECT run_id FROM runs ORDER BY created, ord")]

    def lanes(self, run_id: str) -> list[str]:
        """The branch lanes of ``run_id`` (``<run id>/<step>:<branch>``, nested ones too), in order."""
        with self._lock, self._errors():
            return [r[0] for r in self._db.execute("SELECT run_id FROM runs WHERE run_id COLLATE \"C\" > %s AND "
                                                   "run_id COLLATE \"C\" < %s ORDER BY run_id COLLATE \"C\"", (run_id + "/", run_id + "0"))]

    def list_runs(self) -> list[RunInfo]:
        """Every run (branch lanes left out), newest first."""
        with self._lock, self._errors():
            rows = self._db.execute(
                "SELECT r.run_id, r.meta, r.stop_reason, r.created, r.updated, "
                "(SELECT COUNT(*) FROM messages m WHERE m.run_id = r.run_id), "
                "(SELECT COUNT(*) FROM events e WHERE e.run_id = r.run_id), l.owner, l.expires "
                "FROM runs r LEFT JOIN leases l ON l.run_id = r.run_id AND l.owner <> '' "
                "ORDER BY r.created DESC, r.ord DESC").fetchall()
            now = self._now()
        out = []
        for run_id, meta_text, stop, created, updated, n_msgs, n_events, owner, expires in rows:
            meta = listed_meta(meta_text)
            if meta is None:
                continue
            # the lease's time left by the database's clock, as run_info reads it by this one
            lease = (owner, time.time() + expires - now) if owner else None
            out.append(run_info(run_id, meta, stop, int(n_msgs), int(n_events), created, updated, lease))
        return out

    def put_eval(self, record: EvalRecord) -> None:
        """Keep an evaluation (``fsmchat.evals``) in one transaction; ``ValueError``, nothing written,
        when its id is already kept."""
        row = eval_row(record)
        with self._lock, self._errors():
            cur = self._db.execute("INSERT INTO evals (eval_id, name, created, summary, cases) VALUES "
                                   "(%s, %s, %s, %s, %s) ON CONFLICT (eval_id) DO NOTHING", row)
            if cur.rowcount == 0:
                raise ValueError(already_kept(row[0]))

    def list_evals(self) -> list[EvalInfo]:
        """Every kept evaluation, newest first, without its cases."""
        with self._lock, self._errors():
            rows = self._db.execute(f"SELECT {EVAL_COLUMNS} FROM evals ORDER BY created DESC, ord DESC").fetchall()
        return [eval_info_of_row(r, f"checkpoint store {self.where}") for r in rows]

    def load_eval(self, eval_id: str) -> EvalRecord:
        """The evaluation ``eval_id`` with its cases (``KeyError`` when the store has none by that id)."""
        with self._lock, self._errors():
            row = self._db.execute(f"SELECT {EVAL_COLUMNS}, cases FROM evals WHERE eval_id=%s", (eval_id,)).fetchone()
        if row is None:
            raise KeyError(f"no evaluation {eval_id!r} in {self.where}")
        return eval_of_row(row, f"checkpoint store {self.where}")

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()


class _StoreErrors:
    """A context that turns psycopg's errors into ``CheckpointStoreError`` naming the store."""

    def __init__(self, store: PostgresCheckpointer) -> None:
        self.store = store

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if isinstance(exc, self.store._psycopg.Error):
            raise self.store._store_error(exc) from None
