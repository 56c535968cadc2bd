"""Where a hub keeps channel logs and channel states. ``MemoryKnowledgeStore`` keeps them in memory."""
from __future__ import annotations

from typing import Any, Protocol

from .events import Envelope


class KnowledgeStore(Protocol):
    """The hub's persistence seam: an append-only log per channel plus the channel's latest state."""

    def append(self, channel_id: str, envelope: Envelope) -> None: ...

    def read(self, channel_id: str) -> list[Envelope]: ...

    def put_state(self, channel_id: str, state: dict[str, Any]) -> None: ...

    def get_state(self, channel_id: str) -> dict[str, Any] | None: ...


class MemoryKnowledgeStore:
    """In-memory store: per channel, the accepted envelopes in order and the latest state snapshot."""

    def __init__(self) -> None:
        self._logs: dict[str, list[Envelope]] = {}
        self._states: dict[str, dict[str, Any]] = {}

    def append(self, channel_id: str, envelope: Envelope) -> None:
        self._logs.setdefault(channel_id, []).append(envelope)

    def read(self, channel_id: str) -> list[Envelope]:
        return list(self._logs.get(channel_id, ()))

    def put_state(self, channel_id: str, state: dict[str, Any]) -> None:
        self._states[channel_id] = dict(state)

    def get_state(self, channel_id: str) -> dict[str, Any] | None:
        s = self._states.get(channel_id)
        return dict(s) if s is not None else None

    def channels(self) -> list[str]:
        return list(dict.fromkeys([*self._logs, *self._states]))

    def __repr__(self) -> str:
        return f"MemoryKnowledgeStore({len(self._logs)} channel logs)"
