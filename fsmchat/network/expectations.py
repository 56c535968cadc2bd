"""Channel expectations, evaluated on the hub's clock: ``turn_within(120s, warn)`` and
``turn_within(600s, hide)`` are a discussion's defaults (declared by AG2, evaluated here).

``turn_within(s)`` is violated when the expected speaker has not spoken ``s`` seconds after its
turn began (the channel opened, or the previous text was accepted). Each violation is reported
once per turn. ``warn`` notifies the channel and the listeners; ``hide`` also hides the stalled
channel from ``hub.list_channels()`` until its next text.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from .graphs import LIFECYCLE_ACTIVE, ChannelContext

ACTIONS = ("warn", "hide")


def parse_seconds(value: float | int | str) -> float:
    """``120``, ``120.0``, ``"120s"``, ``"10m"``, ``"1h"`` -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*", str(value))
        if not m:
            raise ValueError(f"duration {value!r} must be a number of seconds or like '120s', '10m', '1h'")
        seconds = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be finite and positive, got {value!r}")
    return seconds


@dataclass(frozen=True)
class Expectation:
    """A named expectation with its threshold and what to do when it is violated.

    Made by ``turn_within``; give a list to ``client.open(..., expectations=[...])``.

    Attributes:
        name: What is expected (``"turn_within"``).
        seconds: Its threshold, on the hub's clock.
        action: ``"warn"`` (notify the channel and the listeners) or ``"hide"`` (also hide the
            stalled channel from ``hub.list_channels()`` until its next text).

    Examples:
        >>> from fsmchat.network import Expectation
        >>> Expectation("turn_within", 120.0)
        Expectation(name='turn_within', seconds=120.0, action='warn')
    """

    name: str
    seconds: float
    action: str = "warn"


def turn_within(seconds: float | int | str, action: str = "warn") -> Expectation:
    """The expected speaker must speak within ``seconds`` of its turn starting.

    A turn starts when the channel opens or the previous text is accepted; each violation is
    reported once per turn (an ``EV_EXPECTATION_VIOLATED`` envelope and an ``expectation``
    event), when the hub's sweep runs.

    Args:
        seconds: The threshold: a number of seconds, or ``"120s"``, ``"10m"``, ``"1h"``.
        action: ``"warn"`` or ``"hide"``.

    Raises:
        ValueError: Another action, or a duration that is not positive.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub, ManualClock, turn_within
        >>> turn_within("2m")
        Expectation(name='turn_within', seconds=120.0, action='warn')
        >>> clock = ManualClock()
        >>> async def main():
        ...     async with Hub(clock=clock) as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"], expectations=[turn_within(30, "hide")])
        ...         clock.advance(31)
        ...         late = hub.check_expectations()
        ...         return [(e.agent_id, e.data["waited"]) for e in late], hub.list_channels()
        >>> asyncio.run(main())
        ([('alice', 31.0)], [])
    """
    if action not in ACTIONS:
        raise ValueError(f"turn_within action {action!r} not supported; choose from {list(ACTIONS)}")
    return Expectation("turn_within", parse_seconds(seconds), action)


DEFAULT_EXPECTATIONS: tuple[Expectation, ...] = (turn_within(120, "warn"), turn_within(600, "hide"))
"""A discussion's default expectations: ``turn_within(120s, warn)`` and ``turn_within(600s, hide)``.

Declared by AG2, evaluated on the hub's clock; ``client.open(..., expectations=[])``
turns them off.

Examples:
    >>> from fsmchat.network import DEFAULT_EXPECTATIONS
    >>> [(e.seconds, e.action) for e in DEFAULT_EXPECTATIONS]
    [(120.0, 'warn'), (600.0, 'hide')]
"""


@dataclass(frozen=True)
class Violation:
    """One expectation found violated (before the hub acts on it)."""

    index: int
    expectation: Expectation
    speaker: str
    turn: int
    waited: float


def due(ctx: ChannelContext, expected: str, now: float,
        expectations: Sequence[Expectation] | None = None) -> list[Violation]:
    """The violations of ``ctx``'s expectations at ``now`` not reported yet (pure: changes nothing)."""
    if ctx.state != LIFECYCLE_ACTIVE:
        return []
    waited = now - ctx.turn_started
    out = []
    for i, exp in enumerate(ctx.expectations if expectations is None else expectations):
        if exp.name == "turn_within" and waited >= exp.seconds and (i, ctx.turn_count) not in ctx.fired:
            out.append(Violation(i, exp, expected, ctx.turn_count, waited))
    return out
