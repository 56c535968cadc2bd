"""Clocks for the hub: the real monotonic clock, and a manual one tests and simulations advance."""
from __future__ import annotations

import time
from typing import Callable

Clock = Callable[[], float]


def monotonic() -> float:
    """Seconds from ``time.monotonic`` (the hub's default clock)."""
    return time.monotonic()


class ManualClock:
    """A clock that only moves when told: ``clock()`` reads it, ``clock.advance(s)`` moves it.

    Give it to ``Hub.open(..., clock=clock)`` to make TTLs and expectations deterministic.

    Args:
        start: Its first reading, in seconds.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub, ManualClock
        >>> clock = ManualClock()
        >>> async def main():
        ...     async with Hub(clock=clock) as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"], ttl="10m")
        ...         clock.advance(599)
        ...         before = hub.expire_due()
        ...         clock.advance(1)
        ...         return before, hub.expire_due(), channel.state, channel.close_reason
        >>> asyncio.run(main())
        ([], ['discussion-1'], 'expired', 'ttl')
    """

    def __init__(self, start: float = 0.0):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` and return the new reading (``ValueError`` if negative)."""
        if seconds < 0:
            raise ValueError(f"a clock only moves forward; got advance({seconds})")
        self.now += seconds
        return self.now

    def __repr__(self) -> str:
        return f"ManualClock({self.now})"
