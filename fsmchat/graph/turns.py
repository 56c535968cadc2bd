"""Turn taking, written once: whose turn ``t`` is, how many turns a run may take, and the edges
that pass the turn on in a ``StateGraph``.

Every pattern where speakers take turns in a fixed order counts them with ``TurnOrder`` and draws
them with ``add_turns``: ``RoundRobinSwarm`` (one state per speaker), ``OneOnOneDebate`` (two turn
states, the bound checked after every turn), ``ExpertPanelDiscussion`` (a round of opener, one
state per expert and the synthesis), the flow's ``Discussion`` (one ``turn`` state every speaker's
turn runs in, with ``until`` checked after each) and a hub channel's turn graph (one
``awaiting_<p>`` state per participant, advanced by ``text`` events). The other ways of choosing
who speaks are not an order: GroupChat's bids (every agent bids, the best bid speaks) and a
Discussion's ``select=`` (a function names each turn's speaker).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TypeVar, Union

from .state_graph import C, Guard, StateGraph

K = TypeVar("K")  # the context of the graph the turns are drawn in
Exit = tuple[str, Guard[C], str]
"""An exit checked after every turn, before the turn passes on: (destination, guard, label);
``Exit[ChannelContext]``'s guard reads a ``ChannelContext``."""
TurnState = Union[str, tuple[str, str]]
"""A turn's state, or (the state it runs in, the state it is checked in)."""


@dataclass(frozen=True)
class TurnOrder:
    """Whose turn it is: ``n`` speakers in a fixed order, taking turns from speaker ``first`` on.

    Turn ``t`` (0-based) goes to speaker ``(first + t) % n`` in round ``t // n + 1``. A run takes
    at most ``rounds`` x ``n`` turns and at most ``max_turns`` (neither given: the turns go on until
    something else ends them, as a hub channel's do until it closes).

    Attributes:
        n: How many speakers take turns (at least 1).
        rounds: Full passes over the speakers (None: no bound).
        first: The index of the speaker of turn 0.
        max_turns: An exact cap on turns (a channel's ``max_texts``; None: none).

    Raises:
        ValueError: ``n``, ``rounds`` or ``max_turns`` below 1, or ``first`` not a speaker index.

    Examples:
        >>> rr = TurnOrder(3, rounds=2)
        >>> [rr.speaker(t) for t in range(6)], rr.round(4), rr.limit
        ([0, 1, 2, 0, 1, 2], 2, 6)
        >>> rr.prev(0), rr.next(4), rr.next(5), rr.left(5), rr.left(6)
        (None, 2, None, True, False)
        >>> TurnOrder(3, first=1).speaker(2)
        0
    """

    n: int
    rounds: int | None = None
    first: int = 0
    max_turns: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"TurnOrder: n={self.n} is invalid: turn taking needs at least one speaker")
        if self.rounds is not None and self.rounds < 1:
            raise ValueError(f"TurnOrder: rounds={self.rounds} is invalid: at least 1, or None for no bound")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"TurnOrder: max_turns={self.max_turns} is invalid: at least 1, or None for no cap")
        if not 0 <= self.first < self.n:
            raise ValueError(f"TurnOrder: first={self.first} is invalid: a speaker index in 0..{self.n - 1}")

    @property
    def limit(self) -> int | None:
        """The most turns a run takes (None: no bound)."""
        caps = [c for c in (None if self.rounds is None else self.rounds * self.n, self.max_turns) if c is not None]
        return min(caps) if caps else None

    def speaker(self, t: int) -> int:
        """The index of turn ``t``'s speaker."""
        return (self.first + t) % self.n

    def round(self, t: int) -> int:
        """Turn ``t``'s round (1-based)."""
        return t // self.n + 1

    def left(self, t: int) -> bool:
        """Whether turn ``t`` may be taken (``t`` turns were taken so far)."""
        limit = self.limit
        return limit is None or t < limit

    def prev(self, t: int) -> int | None:
        """The index of the speaker before turn ``t`` (None for the first turn)."""
        return self.speaker(t - 1) if t > 0 else None

    def next(self, t: int) -> int | None:
        """The index of the speaker after turn ``t`` (None when ``t`` is the last turn)."""
        return self.speaker(t + 1) if self.left(t + 1) else None


def add_turns(g: StateGraph[K], turns: Sequence[TurnState], *, exits: Sequence[Exit[K]] = (),
              more: Guard[K] | None = None, exhausted: tuple[str, str] | None = None, label: str | None = None,
              every_turn: bool = False) -> StateGraph[K]:
    """Draw the edges that pass the turn on between states already declared in ``g``.

    After each turn, in this order: the ``exits``, then the next turn's state. From the last turn
    back to the first the edge is guarded by ``more`` and followed by the fallback ``exhausted``
    (with ``every_turn``, every edge to the next turn is: a bound on turns, not on rounds, may
    end the run after any speaker); without ``more`` the turns go round until an exit is taken.

    Args:
        g: The graph holding the turn states.
        turns: The turn states in speaking order: one state per speaker, or a single state every
            speaker's turn runs in. A turn given as (run, check) runs in the first state and passes
            to the second, where its exits are checked (a Discussion's ``check_until``).
        exits: (destination, guard, label) edges tried after every turn, before the turn passes on.
        more: The guard "another turn is left", on the edge from the last turn back to the first
            (None: no bound).
        exhausted: (destination, label): where the turns end when ``more`` is false.
        label: The label of the edges to the next turn (by default the guard's name, else ``next``).
        every_turn: Check ``more`` after every turn, not only after the last of a round.

    Returns:
        The graph.

    Raises:
        ValueError: No turn states, or ``more`` without ``exhausted``.

    Examples:
        >>> from fsmchat import StateGraph
        >>> def loops_left(ctx):
        ...     return ctx["t"] < 4
        >>> g = StateGraph("rr").state("a").state("b").final("stop")
        >>> g = add_turns(g, ["a", "b"], more=loops_left, exhausted=("stop", "rounds"))
        >>> [(t.source, t.dest, t.label) for t in g.transitions]
        [('a', 'b', 'next'), ('b', 'a', 'loops_left'), ('b', 'stop', 'rounds')]
        >>> g = StateGraph("duel").state("a").state("b").final("stop")
        >>> g = add_turns(g, ["a", "b"], more=loops_left, exhausted=("stop", "max_loops"), every_turn=True)
        >>> [(t.source, t.dest, t.label) for t in g.transitions]
        [('a', 'b', 'loops_left'), ('a', 'stop', 'max_loops'), ('b', 'a', 'loops_left'), ('b', 'stop', 'max_loops')]
    """
    if not turns:
        raise ValueError("add_turns needs at least one turn state")
    if more is not None and exhausted is None:
        raise ValueError("add_turns: more= needs exhausted=(state, label), where the turns end when none is left")
    pairs = [(t, t) if isinstance(t, str) else t for t in turns]
    for i, (run, check) in enumerate(pairs):
        if check != run:
            g.edge(run, check)
        for dest, guard, name in exits:
            g.edge(check, dest, when=guard, label=name)
        following = pairs[(i + 1) % len(pairs)][0]
        if more is None or (i + 1 < len(pairs) and not every_turn):
            g.edge(check, following, label=label)
        else:
            assert exhausted is not None
            g.edge(check, following, when=more, label=label)
            g.edge(check, exhausted[0], label=exhausted[1])
    return g
