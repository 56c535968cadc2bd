"""The counts a hub keeps per channel and per participant (``hub.stats(channel_id)``, ``client.stats``)."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class TurnStats:
    """Counts of the default handlers (per channel on the hub, per participant on its client).

    Attributes:
        texts: Accepted texts (the hub's count for a channel; a client's own for a client).
        deliveries: Texts delivered to default handlers.
        skipped_deliveries: Deliveries that were not the receiver's turn: no model call.
        model_calls: Model calls the handlers made.
        replies: Model replies accepted as texts.
        wasted_calls: Model calls whose reply the channel no longer took (closed or expired meanwhile).
        turn_failures: Empty or failed replies.
        rejected_sends: Sends the channel refused.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub, wait_for_text_count
        >>> def alice(turn):
        ...     return "Yes: memory safety pays off."
        >>> def bob(turn):
        ...     return "Only for systems work."
        >>> async def main():
        ...     async with Hub() as hub:
        ...         a, b = await hub.register(alice), await hub.register(bob)
        ...         channel = await a.open(target=["bob"], knobs={"max_texts": 4})
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         await wait_for_text_count(hub, channel.channel_id, expected=4)
        ...         return hub.stats(channel.channel_id), b.stats.model_calls
        >>> asyncio.run(main())
        (TurnStats(texts=4, deliveries=3, skipped_deliveries=0, model_calls=3, replies=3, wasted_calls=0,
                   turn_failures=0, rejected_sends=0), 2)
    """

    texts: int = 0  # accepted texts (the hub's count for a channel; a client's own for a client)
    deliveries: int = 0  # texts delivered to default handlers
    skipped_deliveries: int = 0  # deliveries that were not the receiver's turn: no model call
    model_calls: int = 0
    replies: int = 0  # model replies accepted as texts
    wasted_calls: int = 0  # model calls whose reply the channel no longer took (closed/expired meanwhile)
    turn_failures: int = 0  # empty or failed replies
    rejected_sends: int = 0

    def copy(self) -> "TurnStats":
        """A copy of the counts."""
        return TurnStats(**{f.name: getattr(self, f.name) for f in fields(self)})

    def add(self, name: str) -> None:
        """One more of count ``name``; ``ValueError`` naming the counts for anything else."""
        if name not in COUNTS:
            raise ValueError(f"TurnStats has no count {name!r}; its counts: {list(COUNTS)}")
        setattr(self, name, getattr(self, name) + 1)


COUNTS: tuple[str, ...] = tuple(f.name for f in fields(TurnStats))
