"""Where a hub keeps channel logs and channel states. ``MemoryKnowledgeStore`` keeps them in memory,
``SQLiteKnowledgeStore`` in a file a later hub resumes from."""
from __future__ import annotations

import json
import os
import sqlite3
from typing import Protocol

from .events import Envelope


class KnowledgeStore(Protocol):
    """The hub's persistence seam: an append-only log per channel plus the channel's latest state.

    An object with these four methods will do (``Hub.open(store)``); ``MemoryKnowledgeStore``
    is the one shipped.

    Examples:
        >>> from fsmchat.network import KnowledgeStore, MemoryKnowledgeStore
        >>> class Notebook:  # a store of your own: write-through to any backend
        ...     def __init__(self):
        ...         self.inner = MemoryKnowledgeStore()
        ...     def append(self, channel_id, envelope):
        ...         self.inner.append(channel_id, envelope)
        ...     def read(self, channel_id):
        ...         return self.inner.read(channel_id)
        ...     def put_state(self, channel_id, state):
        ...         self.inner.put_state(channel_id, state)
        ...     def get_state(self, channel_id):
        ...         return self.inner.get_state(channel_id)
        >>> store: KnowledgeStore = Notebook()
        >>> store.read("discussion-1")
        []
    """

    def append(self, channel_id: str, envelope: Envelope) -> None:
        """Add ``envelope`` at the end of the channel's log."""

    def read(self, channel_id: str) -> list[Envelope]:
        """The channel's envelopes, in order (empty for an unknown channel)."""

    def put_state(self, channel_id: str, state: dict[str, object]) -> None:
        """Replace the channel's state snapshot."""

    def get_state(self, channel_id: str) -> dict[str, object] | None:
        """The channel's latest state snapshot, None when it has none."""


class MemoryKnowledgeStore:
    """In-memory store: per channel, the accepted envelopes in order and the latest state snapshot.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub, MemoryKnowledgeStore
        >>> store = MemoryKnowledgeStore()
        >>> async def main():
        ...     async with await Hub.open(store) as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         await channel.send("Topic: should every developer learn Rust?")
        >>> asyncio.run(main())
        >>> store.channels(), [e.event_type for e in store.read("discussion-1")]
        (['discussion-1'], ['channel.invite', 'channel.invite_ack', 'channel.opened', 'text'])
        >>> store.get_state("discussion-1")["expected_next_speaker"]
        'bob'
    """

    def __init__(self) -> None:
        self._logs: dict[str, list[Envelope]] = {}
        self._states: dict[str, dict[str, object]] = {}

    def append(self, channel_id: str, envelope: Envelope) -> None:
        """Add ``envelope`` at the end of the channel's log."""
        self._logs.setdefault(channel_id, []).append(envelope)

    def read(self, channel_id: str) -> list[Envelope]:
        """The channel's envelopes, in order (a copy; empty for an unknown channel)."""
        return list(self._logs.get(channel_id, ()))

    def put_state(self, channel_id: str, state: dict[str, object]) -> None:
        """Replace the channel's state snapshot (a copy is kept)."""
        self._states[channel_id] = dict(state)

    def get_state(self, channel_id: str) -> dict[str, object] | None:
        """The channel's latest state snapshot (a copy), None when it has none."""
        s = self._states.get(channel_id)
        return dict(s) if s is not None else None

    def channels(self) -> list[str]:
        """Every channel with a log or a state, in the order first seen."""
        return list(dict.fromkeys([*self._logs, *self._states]))

    def __repr__(self) -> str:
        return f"MemoryKnowledgeStore({len(self._logs)} channel logs)"


class SQLiteKnowledgeStore:
    """A store in one SQLite file, whose channel logs and states outlive the process.

    A hub opened on the same file later resumes its channels (``hub.resume_channel(channel_id)``).

    Each envelope and each state is its own transaction (WAL journal), written before the hub goes
    on: what a channel committed is there after the process is killed.

    Args:
        path: The database file (created, with its tables, when missing).

    Examples:
        >>> import asyncio, os, tempfile
        >>> from fsmchat import Hub
        >>> from fsmchat.network import SQLiteKnowledgeStore
        >>> path = os.path.join(tempfile.mkdtemp(), "hub.db")
        >>> async def main():
        ...     async with await Hub.open(SQLiteKnowledgeStore(path)) as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         await channel.send("Topic: should every developer learn Rust?")
        >>> asyncio.run(main())
        >>> again = SQLiteKnowledgeStore(path)  # another process could read it the same way
        >>> again.channels(), [e.event_type for e in again.read("discussion-1")][-1]
        (['discussion-1'], 'text')
        >>> again.get_state("discussion-1")["expected_next_speaker"]
        'bob'
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # a commit survives the process (not a power cut) unsynced
        self._db.execute("CREATE TABLE IF NOT EXISTS envelopes (channel TEXT NOT NULL, seq INTEGER NOT NULL, "
                         "body TEXT NOT NULL, PRIMARY KEY (channel, seq))")
        self._db.execute("CREATE TABLE IF NOT EXISTS states (channel TEXT PRIMARY KEY, body TEXT NOT NULL)")

    def append(self, channel_id: str, envelope: Envelope) -> None:
        """Add ``envelope`` at the end of the channel's log (committed when this returns)."""
        self._db.execute("INSERT INTO envelopes VALUES (?, ?, ?)",
                         (channel_id, envelope.seq, json.dumps(envelope.to_dict(), ensure_ascii=False)))

    def read(self, channel_id: str) -> list[Envelope]:
        """The channel's envelopes, in order (empty for an unknown channel)."""
        rows = self._db.execute("SELECT body FROM envelopes WHERE channel = ? ORDER BY seq", (channel_id,))
        return [Envelope.from_dict(json.loads(body)) for (body,) in rows]

    def put_state(self, channel_id: str, state: dict[str, object]) -> None:
        """Replace the channel's state snapshot (committed when this returns)."""
        self._db.execute("INSERT OR REPLACE INTO states VALUES (?, ?)", (channel_id, json.dumps(state)))

    def get_state(self, channel_id: str) -> dict[str, object] | None:
        """The channel's latest state snapshot, None when it has none."""
        row = self._db.execute("SELECT body FROM states WHERE channel = ?", (channel_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def channels(self) -> list[str]:
        """Every channel with a state, in the order first stored."""
        return [c for (c,) in self._db.execute("SELECT channel FROM states ORDER BY rowid")]

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __repr__(self) -> str:
        return f"SQLiteKnowledgeStore({self.path!r})"
