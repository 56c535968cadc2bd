"""Durable runs: the store protocol and its stores (memory, SQLite, PostgreSQL), the run writer, the run log, time travel.

The modules, from the bottom up (each a row of docs/architecture.md's layer table):

- ``statelog``: the run log format (history steps, state deltas), which the engine writes;
- ``protocol``: the store protocol (``Store``, its ``Capabilities``, ``Commit`` rows, leases and
  fences) and the codec of working-state values (``register_codec``);
- ``group_commit``: the writer thread of a power-loss-durable SQLite store;
- ``writer``: the run writer and recorder (what a step commits, and when);
- ``checkpoint``: ``MemoryCheckpointer``, ``SqliteCheckpointer``, ``resume``; ``postgres``:
  ``PostgresCheckpointer``;
- ``timetravel``: a run's history and ``fork``.

The names below load on first use, so ``import fsmchat.store.statelog`` (the engine's) loads no store.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common.facade import lazy_exports

_MODULES = {  # each module -> the public names it defines
    ".protocol": ("LEASE_TTL", "Capabilities", "Codec", "Commit", "EvalInfo", "EvalRecord", "EvalStore", "Fence",
                  "HistoryStore", "LaneStore", "LeaseLost", "LeaseStore", "NotSerializable", "ReadsLog", "Row",
                  "RunInProgress", "RunInfo", "Saved", "Store", "check_store", "decode", "encode", "register_codec"),
    ".statelog": ("HistoryStep", "RunLog"),
    ".writer": ("Recorder", "RunWriter"),
    ".checkpoint": ("Checkpointer", "MemoryCheckpointer", "SqliteCheckpointer", "resume"),
    ".postgres": ("PostgresCheckpointer",),
    ".timetravel": ("ForkEdit", "ForkError", "fork"),
}
__all__ = ["LEASE_TTL", "Capabilities", "Codec", "Commit", "EvalInfo", "EvalRecord", "EvalStore", "Fence",
           "HistoryStore", "LaneStore", "LeaseLost", "LeaseStore", "NotSerializable", "ReadsLog", "Row", "RunInProgress",
           "RunInfo", "Saved", "Store", "check_store", "decode", "encode", "register_codec", "HistoryStep", "RunLog", "Recorder", "RunWriter",
           "Checkpointer", "MemoryCheckpointer", "SqliteCheckpointer", "resume", "PostgresCheckpointer", "ForkEdit",
           "ForkError", "fork"]
__getattr__, __dir__ = lazy_exports(__name__, _MODULES)

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly (``__all__`` re-exports them)
    from .checkpoint import Checkpointer, MemoryCheckpointer, SqliteCheckpointer, resume
    from .postgres import PostgresCheckpointer
    from .protocol import (LEASE_TTL, Capabilities, Codec, Commit, EvalInfo, EvalRecord, EvalStore, Fence,
                           HistoryStore, LaneStore, LeaseLost, LeaseStore, NotSerializable, ReadsLog, Row, RunInfo,
                           RunInProgress, Saved, Store, check_store, decode, encode, register_codec)
    from .statelog import HistoryStep, RunLog
    from .timetravel import ForkEdit, ForkError, fork
    from .writer import Recorder, RunWriter
