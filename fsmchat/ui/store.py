"""The run viewer's reading side: the runs of a checkpoint store and one run's steps, read-only.

An SQLite store (a file path): the tables are the checkpoint module's
(``fsmchat.store.checkpoint.SqliteCheckpointer.SCHEMA``); this module only reads them, through SQLite's
``mode=ro``, so the viewer can never change a store. (Like any reader of a WAL database, SQLite may
create the ``-wal``/``-shm`` side files next to it; the database file itself is untouched.) A store
another process is writing is read as of its last commit.

A PostgreSQL store (a ``postgresql://`` or ``postgres://`` URI wherever a path is accepted) is read
through ``PostgresCheckpointer``'s reading methods only (``list_runs``, ``log``, ``lanes``, ``load``),
which never write a run.

Evaluations (``fsmchat.evals`` with ``checkpoint=``) are read from the same store: its ``evals``
table (``list_evals``/``load_eval`` on PostgreSQL); a store written before evaluations were kept
has none, and reads as such.
"""
from __future__ import annotations

import json
import re
import sqlite3
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, TypedDict, TypeVar, Union

from urllib.parse import urlsplit, urlunsplit

from ..errors import CheckpointStoreError, FsmchatError
from ..models import Message, StopReason
from ..store.checkpoint import (EVAL_COLUMNS, EvalInfo, EvalRecord, RunInfo, RunLog, SqliteCheckpointer, eval_info_of_row,
                                eval_of_row, evals_of, lease_refusal, saved_of)
from ..store.postgres import PostgresCheckpointer

_T = TypeVar("_T")

DSN_SCHEMES = ("postgresql://", "postgres://")


def is_dsn(target: str | Path) -> bool:
    """A PostgreSQL URI (``postgresql://...`` or ``postgres://...``) rather than an SQLite file path."""
    return isinstance(target, str) and target.lower().startswith(DSN_SCHEMES)


def store_label(target: str | Path) -> str:
    """How messages name a store: its path, or its URI without the password."""
    if not is_dsn(target):
        return str(target)
    parts = urlsplit(str(target))
    host = parts.hostname or ""
    netloc = (f"{parts.username}@" if parts.username else "") + (f"[{host}]" if ":" in host else host) + \
        (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


OpenedStore = Union[SqliteCheckpointer, PostgresCheckpointer]
"""The checkpoint store a path or a URI names (``open_checkpointer``)."""


def open_checkpointer(target: str | Path, *, read_only: bool = False) -> OpenedStore:
    """The checkpoint store ``target`` names: ``PostgresCheckpointer`` for a PostgreSQL URI, else
    ``SqliteCheckpointer`` on the file (``read_only``: opened ``mode=ro``, never created)."""
    if is_dsn(target):
        return PostgresCheckpointer(str(target))
    return SqliteCheckpointer(str(target), read_only=True if read_only else None)

STATUSES = ("running", "waiting", "finished", "failed", "cancelled", "unfinished")
"""A run's status in the viewer (the words ``fsmchat runs`` and ``list_runs`` use, from
``StopReason.run_status``): ``running`` (no stop reason, its lease is live), ``waiting`` (stop
reason ``interrupted``: it waits for a person), ``finished`` (any other stop reason but ``error``
and ``cancelled``), ``failed`` (``error``), ``cancelled``, ``unfinished`` (no stop reason and no
live lease: its process ended mid-run; resumable)."""


class StoreUnreadable(FsmchatError, RuntimeError):
    """The store is missing, not SQLite, corrupted or not an fsmchat checkpoint store.

    Examples:
        >>> from fsmchat.ui import Store, StoreUnreadable
        >>> _ = open("notes.txt", "w").write("not a database")
        >>> try:
        ...     Store("notes.txt").summaries()
        ... except StoreUnreadable as exc:
        ...     print(exc)
        notes.txt: file is not a database; the file is corrupted or not an SQLite database (restore it from a backup, or point the viewer at another store)
    """


class RunNotFound(FsmchatError, KeyError):
    """No run with that id in the store.

    Examples:
        >>> from fsmchat import RoundRobinSwarm, SqliteCheckpointer
        >>> def host(turn):
        ...     return "Welcome."
        >>> _ = RoundRobinSwarm(agents=[host]).execute("Hello?", checkpoint=SqliteCheckpointer("missing.db"), run_id="r1")
        >>> from fsmchat.ui import RunNotFound, Store
        >>> try:
        ...     Store("missing.db").run("r2")
        ... except RunNotFound as exc:
        ...     print(exc)
        no run 'r2' in missing.db
    """

    def __str__(self) -> str:
        return str(self.args[0])


class EvalNotFound(FsmchatError, KeyError):
    """No evaluation with that id in the store, or no such variant, case or repeat in it.

    Examples:
        >>> from fsmchat import RoundRobinSwarm, SqliteCheckpointer
        >>> from fsmchat.evals import Eval
        >>> store = SqliteCheckpointer("evals.db")
        >>> result = Eval([{"name": "hi", "task": "Hi?"}], lambda: RoundRobinSwarm(agents=[lambda t: "Hi."], max_loops=1),
        ...               checkpoint=store).run()
        >>> from fsmchat.ui import EvalNotFound, Store
        >>> [e.name for e in Store("evals.db").evaluations()]
        ['dataset']
        >>> try:
        ...     Store("evals.db").evaluation("nope")
        ... except EvalNotFound as exc:
        ...     print(exc)
        no evaluation 'nope' in evals.db
    """

    def __str__(self) -> str:
        return str(self.args[0])


_LANES = "WHERE run_id=? OR substr(run_id, 1, ?)=?"  # a run and its branch lanes (``<run id>/<lane>``)


def status_of(stop_reason: str | None, lease: tuple[str, float] | None, now: float) -> str:
    live = stop_reason is None and lease is not None and lease_refusal("", lease, "fsmchat-ui", now) is not None
    return StopReason.run_status(stop_reason, live)


def _json(text: str | None, default: object = None) -> object:
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return text  # shown as the text it is


@dataclass
class Step:
    """One committed trace event, of the run itself (``lane == ""``) or of a branch run's lane."""

    lane: str
    step: int
    state: str
    trigger: str | None
    dest: str | None
    t: float | None
    payload: object
    nmsg: int | None  # its lane's transcript length once this step was stored (None: not recorded)


class ViewMessage(TypedDict):
    """A message of a run as the viewer reads it: its metadata as stored (JSON)."""

    role: str
    content: str
    metadata: object


@dataclass
class RunRecord:
    """Everything the store holds about one run; each branch lane's steps come before the fork step
    that joined them (lanes of one fork in branch order)."""

    run_id: str
    meta: Mapping[str, object]
    stop_reason: str | None
    status: str
    created: float
    updated: float
    steps: list[Step]
    messages: list[ViewMessage]  # the run's own, in order
    lanes: dict[str, list[ViewMessage]] = field(default_factory=dict)  # branch lane -> its messages
    state: Mapping[str, object] | None = None  # the latest snapshot (usage, events, flow variables)


@dataclass
class _Open:
    """A read-only connection and what the store's schema has (None: an empty store)."""

    db: sqlite3.Connection | None
    nmsg: bool = False  # events.nmsg: the transcript's length at each step is recorded
    leases: bool = False
    evals: bool = False  # the store keeps evaluations (a store written before they were kept has no table)

    def leases_of(self) -> dict[str, tuple[str, float]]:
        if self.db is None or not self.leases:
            return {}
        return {r[0]: (r[1], r[2]) for r in self.db.execute("SELECT run_id, owner, expires FROM leases")}


class Store:
    """A checkpoint store opened read-only, as the run viewer reads it (one short connection per read).

    SQLite's ``mode=ro`` makes writing impossible; an empty or missing-tables store reads as empty.

    Args:
        path: The ``SqliteCheckpointer`` file.

    Examples:
        >>> from fsmchat import RoundRobinSwarm, SqliteCheckpointer
        >>> def host(turn):
        ...     return "Welcome."
        >>> _ = RoundRobinSwarm(agents=[host]).execute("Hello?", checkpoint=SqliteCheckpointer("viewer.db"), run_id="r1")
        >>> from fsmchat.ui import Store
        >>> store = Store("viewer.db")
        >>> [(s["run_id"], s["pattern"], s["status"], s["stop_reason"], s["messages"]) for s in store.summaries()]
        [('r1', 'RoundRobinSwarm', 'finished', 'max_loops', 2)]
        >>> [m["content"] for m in store.run("r1").messages]
        ['Hello?', 'Welcome.']
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.label, self.name = str(self.path), self.path.name

    @contextmanager
    def _open(self) -> Iterator[_Open]:
        if not self.path.is_file():
            raise StoreUnreadable(f"{self.path}: no such file")
        if self.path.stat().st_size == 0:  # an empty file: a store nothing was written to yet
            yield _Open(None)
            return
        try:
            db = sqlite3.connect(f"file:{self.path.resolve()}?mode=ro", uri=True, timeout=10)
        except sqlite3.Error as exc:
            raise StoreUnreadable(f"{self.path}: cannot open it read-only: {exc}") from None
        with closing(db):
            try:
                yield self._check(db)
            except sqlite3.DatabaseError as exc:
                raise StoreUnreadable(f"{self.path}: {exc}; the file is corrupted or not an SQLite database "
                                      "(restore it from a backup, or point the viewer at another store)") from None

    def _check(self, db: sqlite3.Connection) -> _Open:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return _Open(None)
        missing = sorted(SqliteCheckpointer.TABLES - tables)
        if missing:
            raise StoreUnreadable(f"{self.path}: not an fsmchat checkpoint store (it has tables {sorted(tables)}; "
                                  f"missing {missing})")
        return _Open(db, "nmsg" in {c[1] for c in db.execute("PRAGMA table_info('events')")}, "leases" in tables,
                     "evals" in tables)

    def summaries(self) -> list[RunSummary]:
        """Return every run (branch lanes left out), newest first: pattern, task, status, counts, usage, times.

        Raises:
            StoreUnreadable: The file is missing, corrupted or not a checkpoint store.
        """
        with self._open() as o:
            if o.db is None:
                return []
            db, now, leases = o.db, time.time(), o.leases_of()
            msgs = dict(db.execute("SELECT run_id, COUNT(*) FROM messages GROUP BY run_id").fetchall())
            steps = {r[0]: (r[1], r[2]) for r in
                     db.execute("SELECT run_id, COUNT(*), MAX(t) FROM events GROUP BY run_id")}
            stats = {r[0]: _json(r[1], {}) for r in
                     db.execute("SELECT run_id, CASE WHEN json_valid(state) THEN json_extract(state, '$.stats') END "
                                "FROM states")}
            out = []
            for run_id, meta_text, stop, created, updated in db.execute(
                    "SELECT run_id, meta, stop_reason, created, updated FROM runs ORDER BY created DESC"):
                meta = _json(meta_text, {})
                meta = meta if isinstance(meta, dict) else {}
                if "parent" in meta:
                    continue  # a branch run's lane: shown within its run
                st = stats.get(run_id) if run_id in stats or stop is not None else self._state(run_id).get("stats")
                out.append(summary(run_id, meta, stop, created, updated, status_of(stop, leases.get(run_id), now),
                                   msgs.get(run_id, 0), steps.get(run_id, (0, None)), st if isinstance(st, dict)
                                   else {}, now))
            return out

    def run(self, run_id: str) -> RunRecord:
        """Return one run with its branch lanes: meta, status, steps, messages, working state.

        Args:
            run_id: The run's id.

        Raises:
            RunNotFound: The store has no such run.
            StoreUnreadable: The file is missing, corrupted or not a checkpoint store.
        """
        with self._open() as o:
            db, row = self._row(o, run_id, "stop_reason, meta, created, updated")
            stop, meta_text, created, updated = row
            if not (isinstance(stop, (str, type(None))) and isinstance(meta_text, (str, type(None)))
                    and isinstance(created, (int, float)) and isinstance(updated, (int, float))):
                raise StoreUnreadable(f"{self.path}: run {run_id!r} has a malformed row (its stop reason, meta or "
                                      "times); the store was changed by something other than fsmchat or is damaged")
            meta = _json(meta_text, {})
            where, lanes = _LANES, (run_id, len(run_id) + 1, run_id + "/")
            by_lane: dict[str, list[Step]] = {}
            for rid, step, state, trig, dest, t, payload, n in db.execute(
                    f"SELECT run_id, step, state, trigger, dest, t, payload, {'nmsg' if o.nmsg else 'NULL'} "
                    f"FROM events {where} ORDER BY run_id, seq", lanes):
                lane = rid[len(run_id) + 1:]
                by_lane.setdefault(lane, []).append(Step(lane, step, state, trig, dest, t, _json(payload), n))
            messages: list[ViewMessage] = []
            lane_messages: dict[str, list[ViewMessage]] = {}
            for rid, role, content, metadata in db.execute(
                    f"SELECT run_id, role, content, metadata FROM messages {where} ORDER BY run_id, seq", lanes):
                m: ViewMessage = {"role": role, "content": content, "metadata": _json(metadata, {})}
                (messages if rid == run_id else lane_messages.setdefault(rid[len(run_id) + 1:], [])).append(m)
            status = status_of(stop, o.leases_of().get(run_id), time.time())
        return RunRecord(run_id, meta if isinstance(meta, dict) else {}, stop, status, created, updated,
                         in_fork_order(by_lane), messages, lane_messages, self._state(run_id))

    def progress(self, run_id: str) -> tuple[int, str]:
        """Return the run's step count (its branch lanes' included, as ``len(run(run_id).steps)``)
        and its status, without reading the run: what a live page asks on every poll.

        Args:
            run_id: The run's id.

        Raises:
            RunNotFound: The store has no such run.
            StoreUnreadable: The file is missing, corrupted or not a checkpoint store.
        """
        with self._open() as o:
            db, row = self._row(o, run_id, "stop_reason")
            n = db.execute(f"SELECT COUNT(*) FROM events {_LANES}", (run_id, len(run_id) + 1, run_id + "/")).fetchone()[0]
            stop = row[0]
            if not isinstance(stop, (str, type(None))):
                raise StoreUnreadable(f"{self.path}: run {run_id!r} has a malformed stop reason; the store was changed "
                                      "by something other than fsmchat or is damaged")
            return n, status_of(stop, o.leases_of().get(run_id), time.time())

    def evaluations(self) -> list[EvalInfo]:
        """Return every evaluation the store keeps, newest first, without its cases (none in an
        older store).

        Raises:
            StoreUnreadable: The file is missing, corrupted or not a checkpoint store.
        """
        with self._open() as o:
            if o.db is None or not o.evals:
                return []
            rows = o.db.execute(f"SELECT {EVAL_COLUMNS} FROM evals ORDER BY created DESC, rowid DESC").fetchall()
        try:
            return [eval_info_of_row(r, self.label) for r in rows]
        except CheckpointStoreError as exc:
            raise StoreUnreadable(str(exc)) from None

    def evaluation(self, eval_id: str) -> EvalRecord:
        """Return the evaluation ``eval_id`` with its cases.

        Args:
            eval_id: The evaluation's id.

        Raises:
            EvalNotFound: The store keeps no such evaluation.
            StoreUnreadable: The file is missing, corrupted or not a checkpoint store.
        """
        with self._open() as o:
            row = None if o.db is None or not o.evals else \
                o.db.execute(f"SELECT {EVAL_COLUMNS}, cases FROM evals WHERE eval_id=?", (eval_id,)).fetchone()
        if row is None:
            raise EvalNotFound(f"no evaluation {eval_id!r} in {self.path}")
        try:
            return eval_of_row(row, self.label)
        except CheckpointStoreError as exc:
            raise StoreUnreadable(str(exc)) from None

    def _row(self, o: _Open, run_id: str, columns: str) -> tuple[sqlite3.Connection, tuple[object, ...]]:
        """The open database and the run's ``columns`` of its ``runs`` row (``RunNotFound`` if none)."""
        row = None if o.db is None else o.db.execute(f"SELECT {columns} FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if o.db is None or row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.path}")
        return o.db, row

    def _state(self, run_id: str) -> Mapping[str, object]:
        """The run's latest working state (usage, events, flow variables), read by the checkpoint
        module itself (its format is that module's); {} when none is stored yet."""
        try:
            cp = SqliteCheckpointer(self.path, read_only=True)
        except CheckpointStoreError as exc:
            raise StoreUnreadable(str(exc)) from None
        try:
            state = cp.load(run_id).state
        except KeyError:
            state = None
        except CheckpointStoreError as exc:
            raise StoreUnreadable(str(exc)) from None
        finally:
            cp.close()
        return state if isinstance(state, dict) else {}


def in_fork_order(by_lane: dict[str, list[Step]]) -> list[Step]:
    """The run's steps (lane ``""``) with each branch lane's steps placed before the step of the fork
    that ran it: a lane is named ``<fork step>:<branch>`` inside its parent lane (``a/b``: lane ``b``
    of lane ``a``). Lanes of a fork still running come after their parent's last step."""
    children: dict[str, list[str]] = {}
    for lane in sorted(by_lane, key=_natural):
        if lane:
            children.setdefault(lane.rpartition("/")[0], []).append(lane)

    def walk(lane: str) -> list[Step]:
        waiting: dict[str, list[str]] = {}
        for kid in children.get(lane, []):
            waiting.setdefault(kid.rpartition("/")[2].partition(":")[0], []).append(kid)
        out: list[Step] = []
        for s in by_lane.get(lane, []):
            for kid in waiting.pop(str(s.step), []):
                out += walk(kid)
            out.append(s)
        for kids in waiting.values():
            for kid in kids:
                out += walk(kid)
        return out

    return walk("")


def _natural(text: str) -> list[object]:
    """``parallel|10`` after ``parallel|2``."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text)]


class RunSummary(TypedDict):
    """One row of the runs page (``Store.summaries``): what the store holds of a run."""

    run_id: str
    pattern: object
    name: object
    task: object
    status: str
    stop_reason: str | None
    messages: int
    steps: int
    calls: object
    tokens: object
    cost_usd: object
    started: float
    duration: float | None


def summary(run_id: str, meta: Mapping[str, object], stop: str | None, created: float, updated: float, status: str,
            messages: int, steps: tuple[int, float | None], stats: Mapping[str, object], now: float) -> RunSummary:
    """One row of the runs page."""
    usage = u if isinstance(u := stats.get("usage"), dict) else {}
    duration: float | None
    if status == "running":
        duration = now - created
    elif stop is not None:
        duration = updated - created
    else:
        duration = steps[1]  # stopped mid-run: up to its last committed step
    return {"run_id": run_id, "pattern": meta.get("pattern"), "name": meta.get("name"), "task": meta.get("task"),
            "status": status, "stop_reason": stop, "messages": messages, "steps": steps[0],
            "calls": stats.get("calls"), "tokens": usage.get("total_tokens"), "cost_usd": stats.get("cost_usd"),
            "started": created, "duration": duration}


class CheckpointView:
    """A checkpoint store read through its public reading methods (``list_runs``, ``log``, ``lanes``,
    ``load``), as the run viewer shows it: what ``Store`` gives for an SQLite file, for any store that
    has them (``PostgresCheckpointer``). It never writes a run.

    Args:
        checkpoint: The store (``open_view`` opens one from a PostgreSQL URI).
        label: How pages and errors name it (never its password).
    """

    def __init__(self, checkpoint: "SqliteCheckpointer | PostgresCheckpointer", label: str):
        self.checkpoint, self.label, self.name = checkpoint, label, label

    def _read(self, what: Callable[[], _T]) -> _T:
        try:
            return what()
        except CheckpointStoreError as exc:
            raise StoreUnreadable(str(exc)) from None

    def _info(self, run_id: str) -> RunInfo | None:
        for info in self._read(self.checkpoint.list_runs):
            if info.run_id == run_id:
                return info
        return None

    def _log(self, run_id: str) -> RunLog:
        try:
            return self._read(lambda: self.checkpoint.log(run_id))
        except KeyError:
            raise RunNotFound(f"no run {run_id!r} in {self.label}") from None

    def summaries(self) -> list[RunSummary]:
        """Every run (branch lanes left out), newest first, as ``Store.summaries``."""
        out, now = [], time.time()
        for info in self._read(self.checkpoint.list_runs):
            log = self._log(info.run_id)
            state = saved_of(log).state
            stats = state.get("stats") if isinstance(state, dict) else None
            last = log.events[-1].t if log.events else None
            out.append(summary(info.run_id, log.meta, info.stop_reason, info.created, info.updated, info.status,
                               info.messages, (info.steps, last), stats if isinstance(stats, dict) else {}, now))
        return out

    def run(self, run_id: str) -> RunRecord:
        """One run with its branch lanes, as ``Store.run``."""
        log = self._log(run_id)
        by_lane: dict[str, list[Step]] = {}
        lane_messages: dict[str, list[ViewMessage]] = {}
        for rid in [run_id, *self._read(lambda: self.checkpoint.lanes(run_id))]:
            one = log if rid == run_id else self._log(rid)
            lane = rid[len(run_id) + 1:]
            by_lane[lane] = [Step(lane, e.step, e.state, e.trigger, e.dest, e.t, e.payload, n)
                             for e, n in zip(one.events, one.counts)]
            if rid != run_id:
                lane_messages[lane] = [_message_dict(m) for m in one.messages]
        info = self._info(run_id)
        status = info.status if info is not None else StopReason.run_status(log.stop_reason, False)
        state = saved_of(log).state
        return RunRecord(run_id, log.meta, log.stop_reason, status, log.created or 0.0, log.updated or 0.0,
                         in_fork_order({k: v for k, v in by_lane.items() if v or not k}),
                         [_message_dict(m) for m in log.messages], lane_messages,
                         state if isinstance(state, dict) else {})

    def evaluations(self) -> list[EvalInfo]:
        """Every evaluation the store keeps, newest first, as ``Store.evaluations`` (none when the
        store does not keep evaluations)."""
        store = evals_of(self.checkpoint)
        return [] if store is None else list(self._read(store.list_evals))

    def evaluation(self, eval_id: str) -> EvalRecord:
        """The evaluation ``eval_id`` with its cases, as ``Store.evaluation``."""
        store = evals_of(self.checkpoint)
        try:
            if store is None:
                raise KeyError(eval_id)
            record: EvalRecord = self._read(lambda: store.load_eval(eval_id))
        except KeyError:
            raise EvalNotFound(f"no evaluation {eval_id!r} in {self.label}") from None
        return record

    def progress(self, run_id: str) -> tuple[int, str]:
        """The run's step count (its lanes' included) and its status, as ``Store.progress``."""
        log = self._log(run_id)
        n = len(log.events) + sum(len(self._log(rid).events) for rid in self._read(lambda: self.checkpoint.lanes(run_id)))
        info = self._info(run_id)
        return n, info.status if info is not None else StopReason.run_status(log.stop_reason, False)


def _message_dict(m: Message) -> ViewMessage:
    return {"role": m.role, "content": m.content, "metadata": dict(m.metadata or {})}


def open_view(target: str | Path) -> "Store | CheckpointView":
    """The viewer's reader of ``target``: ``Store`` for an SQLite file, ``CheckpointView`` over
    ``PostgresCheckpointer`` for a PostgreSQL URI (``StoreUnreadable`` when it cannot connect)."""
    if not is_dsn(target):
        return Store(target)
    try:
        return CheckpointView(open_checkpointer(target), store_label(target))
    except CheckpointStoreError as exc:
        raise StoreUnreadable(str(exc)) from None
