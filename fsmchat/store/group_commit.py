"""Group commit for a power-loss-durable SQLite store (``SqliteCheckpointer(path, durability="fsync")``).

One writer thread owns a connection with ``synchronous=FULL``: a ``COMMIT`` returns only once the
write-ahead log is on disk (fsync), and with it every frame written before it by any connection
(a run's start and lease rows, written at ``synchronous=NORMAL`` by the store's own connection). Writes are queued from any thread (the event loop's included)
and each returns a ``Future`` that is done when its transaction is durable. While the thread
syncs, the writes queued meanwhile (several runs' turns) wait together and are committed in the
next transaction, so they share one fsync; each runs inside a savepoint, so one failing write
(a fence refused) is rolled back alone and its future gets the error.
"""
from __future__ import annotations

import queue
import sqlite3
import threading
from concurrent.futures import Future
from typing import Callable

Write = Callable[[sqlite3.Connection], None]


class GroupCommit:
    """The writer thread of one SQLite file.

    Attributes:
        writes: Writes committed (or refused) so far.
        syncs: Transactions committed so far: one fsync each.
        before_sync: Called on the writer thread once a write is queued, before the writes queued
            by then are gathered into one transaction and synced (None: nothing), e.g. to hold a
            sync in a test; the writer holds no lock meanwhile.
    """

    def __init__(self, path: str, timeout: float = 30.0) -> None:
        self.path, self.timeout = path, timeout
        self.writes = self.syncs = 0
        self.before_sync: Callable[[], None] | None = None
        self._queue: queue.SimpleQueue[tuple[Write, Future[None]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"fsmchat group commit {path}", daemon=True)
        self._thread.start()

    def submit(self, write: Write) -> Future[None]:
        """Queue ``write`` (run on the writer thread, inside a transaction); its future is done once
        that transaction is on disk, or has the write's error."""
        if not self._thread.is_alive():
            raise RuntimeError(f"the group commit of {self.path} is closed")
        done: Future[None] = Future()
        self._queue.put((write, done))
        return done

    def close(self) -> None:
        """Commit what is queued, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=self.timeout)
        db.execute("PRAGMA synchronous=FULL")
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    return
                if self.before_sync is not None:
                    self.before_sync()
                batch, stop = [first], False
                while not self._queue.empty():  # what was queued meanwhile shares this transaction
                    item = self._queue.get()
                    if item is None:
                        stop = True
                        break
                    batch.append(item)
                self._commit(db, batch)
                if stop:
                    return
        finally:
            db.close()

    def _commit(self, db: sqlite3.Connection, batch: list[tuple[Write, Future[None]]]) -> None:
        """One transaction for ``batch``: each write in a savepoint, then one COMMIT (one fsync)."""
        written: list[Future[None]] = []
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for _, done in batch:
                done.set_exception(exc)
            return
        for write, done in batch:
            db.execute("SAVEPOINT one_write")
            try:
                write(db)
            except BaseException as exc:
                db.execute("ROLLBACK TO one_write")
                db.execute("RELEASE one_write")
                done.set_exception(exc)
                continue
            db.execute("RELEASE one_write")
            written.append(done)
        self.writes += len(batch)
        try:
            db.execute("COMMIT")
        except BaseException as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            for done in written:
                done.set_exception(exc)
            return
        self.syncs += 1
        for done in written:
            done.set_result(None)
