"""Every store the store tests run over, by kind (``@pytest.mark.parametrize("store", STORES)``):
``open_store(**kw)`` opens one of that kind (PostgreSQL: a new database on the session's throwaway
server, ``tests/support/pg.py``), ``reopen(cp)`` the same store as another process would see it."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

import pytest

from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer

STORES = ("memory", "sqlite", "postgres")
CONFORMANCE = STORES + ("dict",)
"""The store conformance suite's stores: fsmchat's own and the third-party example (tests/support/dict_store.py)."""


def needs(cp: Any, *capabilities: str) -> None:
    """Skip the case on a store that does not declare ``capabilities`` (``fsmchat.store.protocol.Capabilities``)."""
    missing = [c for c in capabilities if not getattr(cp.capabilities, c)]
    if missing:
        pytest.skip(f"{type(cp).__name__} does not declare {', '.join(missing)}")


def reopen(cp: Any) -> Any:
    """The same store through a new connection (memory: the store itself)."""
    if isinstance(cp, SqliteCheckpointer):
        return SqliteCheckpointer(cp.path)
    if type(cp).__name__ == "PostgresCheckpointer":
        return type(cp)(cp.dsn)
    return cp


@pytest.fixture
def open_store(request: pytest.FixtureRequest, tmp_path: Any, store: str) -> Iterator[Callable[..., Any]]:
    """Opens a store of the kind ``store`` names (each call on a PostgreSQL test: the same database)."""
    opened: list[Any] = []
    dsn: list[str] = []

    def make(**kw: Any) -> Any:
        if store == "memory":
            cp: Any = MemoryCheckpointer(**kw)
        elif store == "dict":
            from support.dict_store import DictStore

            cp = DictStore()
        elif store == "sqlite":
            cp = SqliteCheckpointer(tmp_path / "runs.db", **kw)
        else:
            from fsmchat.store.postgres import PostgresCheckpointer

            if not dsn:
                dsn.append(request.getfixturevalue("pg_dsn"))
            cp = PostgresCheckpointer(dsn[0], **kw)
        opened.append(cp)
        return cp

    yield make
    for cp in opened:
        if hasattr(cp, "close"):
            cp.close()


def write(cp: Any, run_id: str, event: Any, messages: Any, state: Any, earlier: Any = (), fence: Any = None) -> None:
    """One commit of ``run_id`` as fsmchat's writer makes it (``fsmchat.store.writer.RunWriter``), by a
    new writer that starts from what the store holds (its first delta is the whole state)."""
    from fsmchat.store.writer import RunWriter

    saved = cp.load(run_id)
    RunWriter(cp, run_id, fence, len(saved.messages), len(saved.events)).commit(event, messages, state, earlier)
