"""Layer 15, patterns: graph building blocks the patterns share.

``speaker_states`` declares one state per speaker (``bind`` makes a one-argument action of
``fn(ctx, i)``); the order speakers take turns in is ``fsmchat.graph.turns.add_turns``.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Collection, Sequence

from ..graph.state_graph import StateGraph, state_names
from ..speakers.human import Human


def people_in(speakers: Sequence[object]) -> set[str]:
    """The names of the ``Human`` participants among ``speakers``."""
    return {s.name for s in speakers if isinstance(s, Human)}


def bind(fn: Callable[..., object], *args: object) -> Callable[[object], object]:
    """``fn(ctx, *args)`` as a one-argument state action (name and docstring kept), so one
    small function serves a state per speaker: ``g.state("Analyst", bind(take_turn, 0))``."""
    if inspect.iscoroutinefunction(fn):
        async def async_action(ctx: object) -> object:
            return await fn(ctx, *args)
        return functools.update_wrapper(async_action, fn)

    def action(ctx: object) -> object:
        return fn(ctx, *args)
    return functools.update_wrapper(action, fn)


PERSON_NOTE = " (a person: waits for their message)"


def speaker_states(g: StateGraph, names: Sequence[str], action: Callable[..., object],
                   description: str = "{name}'s turn", reserved: Sequence[str] = (),
                   people: Collection[str] = ()) -> list[str]:
    """Declare one state per speaker, in roster order, whose action is ``action(ctx, i)``; returns
    the state names. State names avoid the graph's states so far and ``reserved`` (states declared
    later). The states of ``people`` (``Human`` names) are drawn as waiting for a person."""
    states = state_names(names, reserved=[*g.states, *reserved], fallback="speaker")
    for i, (state, name) in enumerate(zip(states, names)):
        person = name in people
        g.state(state, bind(action, i), description.format(name=name) + (PERSON_NOTE if person else ""),
                waits=person)
    return states

