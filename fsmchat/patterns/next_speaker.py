"""Layer 15, patterns: who may speak next, as data, and the rule that stops a chat going round.

``allowed`` (who may follow whom) is a dict ``{speaker: [who may follow it]}`` or a networkx
``DiGraph`` (an edge ``a -> b``: ``b`` may follow ``a``). ``check_allowed`` checks it against the
roster once, at construction, and names what is wrong: a stranger, a speaker after whom no one may
speak (a dead end), a speaker no run can reach. The patterns that steer turns by a model
(``SelectorGroupChat``, ``Handoffs``) draw it: one edge per allowed pair.

The livelock rule (``repeated_cycle``): the last ``k x repeats`` messages are one block of ``k``
messages said ``repeats`` times over, the same speakers in the same order with the same texts,
for some ``k`` from 1 to the roster's size. The chat then stops with ``stop_reason="livelock"``: a
rule over the transcript, never a timer.
"""
from __future__ import annotations

import functools
import sys
from typing import Annotated, Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence, TypeGuard, TypeVar

from ..config.convert import ConfigWriter, Travels
from ..errors import ConfigError, ConfigTypeError
from ..graph.state_graph import reached
from ..models import Message, Transcript
from ..speakers.agent import Speaker

C = TypeVar("C")
V = TypeVar("V")


class DiGraphLike(Protocol):
    """What is read of a networkx ``DiGraph`` (networkx has no types)."""

    @property
    def nodes(self) -> Iterable[object]: ...

    @property
    def edges(self) -> Iterable[tuple[object, object]]: ...

    def successors(self, n: object) -> Iterable[object]: ...


class SteeredConfig(Protocol):
    """The stops a steered pattern's config holds (``SelectorConfig``, ``HandoffsConfig``)."""

    @property
    def until(self) -> Callable[[list[Message]], object] | None: ...

    @property
    def livelock_repeats(self) -> int | None: ...

    @property
    def max_turns(self) -> int: ...


class SteeredContext(Protocol):
    """What the stops read of a steered pattern's context."""

    @property
    def config(self) -> SteeredConfig: ...

    @property
    def transcript(self) -> Transcript: ...

    @property
    def speakers(self) -> list[Speaker]: ...

    @property
    def turn(self) -> int: ...


def check_allowed(allowed: object, names: Sequence[str], owner: str, *, start: str | None = None,
                  allow_repeat: bool = True) -> dict[str, list[str]] | None:
    """``allowed`` as ``{speaker: [who may follow it, in roster order]}`` (None: anyone may follow anyone).

    Args:
        allowed: A dict of names to lists of names, a networkx ``DiGraph`` of names, or None.
        names: The roster's names, in order.
        owner: Whose name a refusal is given in.
        start: Who opens (None: any speaker may), for the reachability check.
        allow_repeat: Whether a speaker may follow itself (an edge to itself is refused otherwise).

    Raises:
        ConfigTypeError: Not a dict or a DiGraph, or a value that is not a list of names.
        ConfigError: A name not in the roster, a dead end, a speaker no run reaches, a self-edge
            while ``allow_repeat`` is False.

    Examples:
        >>> from fsmchat.patterns.next_speaker import check_allowed
        >>> check_allowed({"planner": ["coder"], "coder": ["planner", "tester"], "tester": ["planner"]},
        ...               ["planner", "coder", "tester"], "SelectorGroupChat")
        {'planner': ['coder'], 'coder': ['planner', 'tester'], 'tester': ['planner']}
        >>> check_allowed({"planner": ["coder"], "coder": ["reviewer"]}, ["planner", "coder"], "SelectorGroupChat")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: SelectorGroupChat: allowed names 'reviewer', who is not a participant (participants: 'planner', 'coder')
    """
    if allowed is None:
        return None
    what = f"{owner}: allowed"
    if is_digraph(allowed):
        pairs = [(str(a), str(b)) for a, b in allowed.edges] if all(isinstance(n, str) for n in allowed.nodes) \
            else None
        if pairs is None:
            raise ConfigTypeError(f"{what}: a DiGraph's nodes must be the speakers' names (str)")
        heads = [str(n) for n in allowed.nodes]
    elif isinstance(allowed, Mapping):
        pairs, heads = [], []
        for a, follow in allowed.items():
            if not isinstance(a, str) or not isinstance(follow, (list, tuple, set, frozenset)) or \
                    not all(isinstance(b, str) for b in follow):
                raise ConfigTypeError(f"{what}: each entry is speaker name -> list of the names that may follow it, "
                                      f"got {a!r}: {follow!r}")
            heads.append(a)
            pairs += [(a, b) for b in follow]
    else:
        raise ConfigTypeError(f"{what}={allowed!r} is invalid: a dict {{speaker: [who may follow]}} or a networkx "
                              f"DiGraph, not a {type(allowed).__name__}")
    roster = set(names)
    strangers = list(dict.fromkeys(n for n in [*heads, *(x for p in pairs for x in p)] if n not in roster))
    if strangers:
        raise ConfigError(f"{what} names {_names(strangers)}, who {'is' if len(strangers) == 1 else 'are'} not "
                          f"{'a participant' if len(strangers) == 1 else 'participants'} (participants: {_names(names)})")
    selfish = [a for a, b in pairs if a == b]
    if selfish and not allow_repeat:
        raise ConfigError(f"{what} lets {_names(selfish)} follow itself, but allow_repeat=False; drop the edge or set "
                          "allow_repeat=True")
    follows = {n: [b for b in names if (n, b) in set(pairs)] for n in names}
    dead = [n for n in names if not follows[n]]
    if dead:
        raise ConfigError(f"{what}: no one may speak after {_names(dead)} (a dead end: the chat could not go on); "
                          "give each speaker at least one who may follow it (end a chat with until= or max_turns=)")
    openers = [start] if start is not None else list(names)
    seen = reached([(a, b) for a in names for b in follows[a]], openers)
    lost = [n for n in names if n not in seen]
    if lost:
        raise ConfigError(f"{what}: no run reaches {_names(lost)} from {start!r} (nobody may hand the floor to "
                          f"{'it' if len(lost) == 1 else 'them'}); add an edge to it, or leave it out")
    return follows


def is_digraph(value: object) -> TypeGuard[DiGraphLike]:
    """Whether ``value`` is a networkx ``DiGraph`` (networkx is not imported for it: a DiGraph
    exists only once its user imported networkx)."""
    nx = sys.modules.get("networkx")
    return nx is not None and isinstance(value, nx.DiGraph)


def _names(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)


def repeated_cycle(messages: Sequence[Message], repeats: int, longest: int) -> int | None:
    """The length ``k`` of a block of messages the transcript ends by saying ``repeats`` times
    over (same speakers, same order, same texts), the shortest ``k <= longest``; None if none.

    Examples:
        >>> from fsmchat import Message
        >>> rows = [Message(role=r, content=t) for r, t in
        ...         [("User", "Go."), ("a", "x"), ("b", "y"), ("a", "x"), ("b", "y"), ("a", "x"), ("b", "y")]]
        >>> repeated_cycle(rows, 3, 2), repeated_cycle(rows, 4, 2), repeated_cycle(rows[:-1], 3, 2)
        (2, None, None)
    """
    n = len(messages)
    for k in range(1, longest + 1):
        span = k * repeats
        if span > n:
            return None
        tail = messages[n - span:]
        if all(tail[i].role == tail[i % k].role and tail[i].content == tail[i % k].content for i in range(k, span)):
            return k
    return None


def allowed_data(w: ConfigWriter, value: object, what: str) -> dict[str, list[str]] | None:
    """``allowed`` as a config holds it: ``{name: [names]}`` (a DiGraph's edges, in its order)."""
    if value is None:
        return None
    if is_digraph(value):
        return {str(a): [str(b) for b in value.successors(a)] for a in value.nodes}
    if not isinstance(value, Mapping):  # check_allowed refused it when the config was made
        raise ConfigTypeError(f"{what}: allowed={value!r} is invalid: a dict {{speaker: [who may follow]}} or a "
                              "networkx DiGraph")
    return {str(a): [str(b) for b in follow] for a, follow in value.items()}


AllowedField = Annotated[Any, Travels(Optional[dict[str, list[str]]], allowed_data, lambda r, d: d)]
"""The type of an ``allowed`` field: a dict or a DiGraph, written as a dict of lists."""


def named_guard(fn: Callable[[C, int], bool], i: int) -> Callable[[C], bool]:
    """``fn(ctx, i)`` as a guard with ``fn``'s name and docstring (one small function for a guard per speaker)."""
    def guard(ctx: C) -> bool:
        return fn(ctx, i)
    return functools.update_wrapper(guard, fn)


def renamed(kwargs: Mapping[str, V], aliases: Mapping[str, str], owner: str) -> dict[str, V]:
    """``kwargs`` with the reference libraries' spellings (``aliases``: theirs -> ours) renamed;
    both spellings at once are refused."""
    out = dict(kwargs)
    for theirs, ours in aliases.items():
        if theirs in out:
            if ours in out:
                raise ConfigTypeError(f"{owner}() got both {theirs}= and {ours}= (the same option); give one")
            out[ours] = out.pop(theirs)
    return out


# ---- the stops both steered patterns check after each turn (their configs hold until, livelock_repeats, max_turns) ----
def until_met(ctx: SteeredContext) -> bool:
    """the until condition holds"""
    fn = ctx.config.until
    return fn is not None and bool(fn(ctx.transcript.messages))


def livelocked(ctx: SteeredContext) -> bool:
    """a cycle of speakers said the same texts livelock_repeats times"""
    n = ctx.config.livelock_repeats
    return n is not None and repeated_cycle(ctx.transcript.messages[1:], n, len(ctx.speakers)) is not None


def turns_used(ctx: SteeredContext) -> bool:
    """max_turns turns were taken"""
    return bool(ctx.turn >= ctx.config.max_turns)
