"""The counts a hub keeps per channel and per participant (``hub.stats(channel_id)``, ``client.stats``)."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class TurnStats:
    """Counts of the default handlers (per channel on the hub, per participant on its client)."""

    texts: int = 0  # accepted texts (the hub's count for a channel; a client's own for a client)
    deliveries: int = 0  # texts delivered to default handlers
    skipped_deliveries: int = 0  # deliveries that were not the receiver's turn: no model call
    model_calls: int = 0
    replies: int = 0  # model replies accepted as texts
    wasted_calls: int = 0  # model calls whose reply the channel no longer took (closed/expired meanwhile)
    turn_failures: int = 0  # empty or failed replies
    rejected_sends: int = 0

    def copy(self) -> "TurnStats":
        return TurnStats(**{f.name: getattr(self, f.name) for f in fields(self)})

    def add(self, name: str) -> None:
        """One more of count ``name``; ``ValueError`` naming the counts for anything else."""
        if name not in COUNTS:
            raise ValueError(f"TurnStats has no count {name!r}; its counts: {list(COUNTS)}")
        setattr(self, name, getattr(self, name) + 1)


COUNTS: tuple[str, ...] = tuple(f.name for f in fields(TurnStats))
