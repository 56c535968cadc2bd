"""Flat per-step work: the Python calls a step, a turn or a checkpoint makes stay the same as a run
grows (T=1,000 against T=100).

Not a timing: cProfile counts the Python function calls (and builtins) the engine makes, which is
deterministic for instant agents (no await ever suspends, so the event loop adds nothing) and
does not depend on the machine's speed or load. The per-step number is the marginal count,
``(calls at T + 300 - calls at T) / 300``, so the run's fixed cost (start-up, result) does not
blur it. There are no absolute budgets: what a step costs is measured in bench/ (CPU time); these
tests catch work that grows with the length of the run.
"""
from __future__ import annotations

import asyncio
import cProfile
import gc
import pstats
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from fsmchat import AgentFlow, Bid, Discussion, GroupChat, RoundRobinSwarm
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer
from fsmchat.engine import run_graph
from fsmchat.graph import StateGraph

NAMES = ("A", "B", "C")


@dataclass
class Ctx:
    T: int
    t: int = 0
    rows: list[tuple[str, int]] = field(default_factory=list)


def make_agent(name: str) -> Callable[[Ctx], Any]:
    async def agent(ctx: Ctx) -> str:
        """an instant agent: posts one row"""
        ctx.rows.append((name, ctx.t))
        ctx.t += 1
        return name
    return agent


def more(ctx: Ctx) -> bool:
    return ctx.t < ctx.T


def round_robin() -> StateGraph:
    """A -> B -> C -> A while ``more``, else -> stop (the engine-overhead benchmark's graph)."""
    g = StateGraph("round_robin_budget")
    for name in NAMES:
        g.state(name, make_agent(name))
    g.final("stop")
    for i, name in enumerate(NAMES):
        g.edge(name, NAMES[(i + 1) % len(NAMES)], when=more, label="more")
        g.edge(name, "stop", label="turns")
    return g


def engine_calls(g: StateGraph, T: int) -> int:
    async def go() -> int:
        ctx = Ctx(T)
        prof = cProfile.Profile()
        prof.enable()
        res = await run_graph(g, ctx)
        prof.disable()
        assert res.stop_reason == "turns" and len(ctx.rows) == T, (res.stop_reason, res.error)
        return pstats.Stats(prof).total_calls  # type: ignore[attr-defined]
    return asyncio.run(go())


def engine_calls_per_step(g: StateGraph, start: int) -> float:
    """The marginal Python calls per step from ``start`` to ``start + 300`` steps."""
    return (engine_calls(g, start + 300) - engine_calls(g, start)) / 300


def test_an_engine_step_makes_as_many_calls_at_1000_steps_as_at_100() -> None:
    g = round_robin()
    engine_calls(g, 3)  # prepare the machine once (cached on the graph)
    small, large = engine_calls_per_step(g, 100), engine_calls_per_step(g, 1000)
    assert large <= small + 0.1, (
        f"an engine step makes {small:.2f} Python calls at T=100 but {large:.2f} at T=1,000 (cProfile, round "
        "robin of 3 instant agents): some per-step work grows with the run")


def test_engine_call_count_is_deterministic() -> None:
    g = round_robin()
    engine_calls(g, 3)
    assert engine_calls(g, 100) == engine_calls(g, 100)


def bidder(name: str) -> Callable[[Any], Bid]:
    def agent(turn: Any) -> Bid:
        return Bid(0.9, f"{name} speaks")
    agent.__name__ = name
    return agent


def group_chat_calls(max_loops: int) -> int:
    chat = GroupChat(agents=[bidder(n) for n in NAMES], max_loops=max_loops)
    chat.graph  # compile outside the count

    async def go() -> int:
        prof = cProfile.Profile()
        prof.enable()
        res = await chat.aexecute("Plan the launch.")
        prof.disable()
        assert res.stop_reason == "max_loops" and len(res.transcript) == max_loops, (res.stop_reason, res.error)
        return pstats.Stats(prof).total_calls  # type: ignore[attr-defined]
    return asyncio.run(go())


def test_a_group_chat_turn_makes_as_many_calls_at_1000_turns_as_at_100() -> None:
    group_chat_calls(3)
    small = (group_chat_calls(400) - group_chat_calls(100)) / 300
    large = (group_chat_calls(1300) - group_chat_calls(1000)) / 300
    assert large <= small + 0.1, (
        f"a GroupChat bidding turn (3 callable agents) makes {small:.2f} Python calls at T=100 but {large:.2f} "
        "at T=1,000 (cProfile): some per-turn work grows with the transcript")


# ---- what a checkpoint adds to a turn ----
def speaker(name: str) -> Callable[[Any], str]:
    def agent(turn: Any) -> str:
        return f"{name} says {len(turn.transcript)}"
    agent.__name__ = name
    return agent


def checkpointed(kind: str, turns: int) -> Any:
    if kind == "flow":
        return AgentFlow(steps=[Discussion([speaker(n) for n in NAMES], rounds=turns // 3)])
    return RoundRobinSwarm(agents=[speaker(n) for n in NAMES], max_loops=turns // 3)


def run_calls(kind: str, store: str | None, turns: int, tmp_path: Any) -> tuple[int, int]:
    """(Python calls, messages posted) of one run of ``turns`` turns, checkpointed to ``store``."""
    pattern = checkpointed(kind, turns)
    pattern.graph  # compile outside the count
    cp: Any = None if store is None else MemoryCheckpointer() if store == "memory" else \
        SqliteCheckpointer(tmp_path / f"{kind}-{turns}.db")
    gc.collect()
    gc.disable()  # (a collection may run Python finalizers of what other tests left behind: not ours to count)
    prof = cProfile.Profile()
    try:
        prof.enable()
        res = pattern.execute("go", checkpoint=cp)
        prof.disable()
    finally:
        gc.enable()
    posted = sum(m.role != "User" for m in res.transcript)  # (a round robin's transcript starts with the task)
    assert res.ok and posted == turns, (res.stop_reason, res.error, posted)
    return pstats.Stats(prof).total_calls, posted  # type: ignore[attr-defined]


def calls_per_turn(kind: str, store: str | None, start: int, tmp_path: Any) -> float:
    """The marginal Python calls per turn from ``start`` to ``start + 300`` turns."""
    (a, na), (b, nb) = run_calls(kind, store, start, tmp_path), run_calls(kind, store, start + 300, tmp_path)
    return (b - a) / (nb - na)


@pytest.mark.parametrize("kind, store", [("flow", "memory"), ("flow", "sqlite"), ("round_robin", "memory"),
                                         ("round_robin", "sqlite")])
def test_a_checkpointed_turn_adds_as_many_calls_at_1000_turns_as_at_100(kind, store, tmp_path):
    """Deterministic (cProfile counts, instant callables): a commit's Python work is the snapshot,
    its delta and one store write, the same at T=100 as at T=1,000."""
    run_calls(kind, store, 30, tmp_path)  # first-call paths (imports, the store's schema) outside the count
    small = calls_per_turn(kind, store, 99, tmp_path) - calls_per_turn(kind, None, 99, tmp_path)
    large = calls_per_turn(kind, store, 999, tmp_path) - calls_per_turn(kind, None, 999, tmp_path)
    assert large <= small + 0.1, (  # (a few list and dict resizes over 300 turns)
        f"a {kind} turn's checkpoint costs {small:.2f} calls at T=100 but {large:.2f} at T=1,000")
