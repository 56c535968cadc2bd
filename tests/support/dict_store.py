"""A third-party store in one small file: runs kept in plain dicts of lists, no leases, no history.

fsmchat's writer hands it each commit ready to keep (``fsmchat.store.protocol.Commit``: event rows with their
transcript length and state delta, and the new messages), so the store never encodes state; it
passes the store conformance suite (tests/stores/test_store_conformance.py) with the capabilities it
declares. Written as the docs' "Writing a store" example would be."""
from __future__ import annotations

from typing import Any

from fsmchat.models import Message, TraceEvent
from fsmchat.store.statelog import RunLog
from fsmchat.store.protocol import Capabilities, Commit, Fence, ReadsLog, already_used


class DictStore(ReadsLog):
    """Each run as a dict: its meta, stop reason, event rows and messages (lists)."""

    capabilities = Capabilities()  # no leases, no run list, no lanes

    def __init__(self) -> None:
        self.runs_by_id: dict[str, dict[str, Any]] = {}

    def start(self, run_id: str, meta: dict[str, Any], fence: Fence | None = None) -> None:
        if run_id in self.runs_by_id:
            raise ValueError(already_used(run_id))
        self.runs_by_id[run_id] = {"meta": dict(meta), "stop": None, "events": [], "counts": [], "deltas": [],
                                   "messages": []}

    def append(self, run_id: str, commit: Commit, fence: Fence | None = None) -> None:
        run = self.runs_by_id[run_id]
        for row in commit.rows:
            run["events"].append(row.event)
            run["counts"].append(row.messages)
            run["deltas"].append(row.delta)
        run["messages"].extend(commit.messages)
        run["stop"] = None

    def finish(self, run_id: str, stop_reason: str, fence: Fence | None = None, state: str | None = None) -> None:
        self.runs_by_id[run_id]["stop"] = stop_reason

    def log(self, run_id: str) -> RunLog:
        if run_id not in self.runs_by_id:
            raise KeyError(f"no checkpointed run {run_id!r}")
        run = self.runs_by_id[run_id]
        events: list[TraceEvent] = list(run["events"])
        messages: list[Message] = list(run["messages"])
        return RunLog(run_id, dict(run["meta"]), run["stop"], events, list(run["counts"]), list(run["deltas"]),
                      messages, where="DictStore")
