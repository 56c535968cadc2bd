"""Calls-per-step budgets: overhead must not creep back unnoticed (issue 9, target 7).

Not a timing: cProfile counts the Python function calls (and builtins) the engine makes, which is
deterministic for instant agents (no await ever suspends, so the event loop adds nothing) and
does not depend on the machine's speed or load. The per-step number is the marginal count,
``(calls at 2T - calls at T) / T``, so the run's fixed cost (compiling is cached, start-up,
result) does not blur it; the fixed part has its own, looser budget.

If a change legitimately needs more calls, raise the budget in the same commit and say why; if
it saves calls, lower it (keep ~15% headroom over the measured number, printed on failure).
Measured when committed: engine 48 calls/step, 32 per run; GroupChat 303 calls/bidding turn (3
callable agents); what a checkpoint adds per turn (issue 21): an AgentFlow's Discussion 87 calls
(MemoryCheckpointer) / 94 (SqliteCheckpointer), a RoundRobinSwarm 40 / 49.
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
from fsmchat.checkpoint import MemoryCheckpointer, SqliteCheckpointer
from fsmchat.engine import run_graph
from fsmchat.graph import StateGraph

# measured 48 (91 before the QuietTransition and QuietEvent of transitions' `transition_cls` and
# `event_cls`, which skip debug logging and empty callback walks): every step goes through the Machine's public API since the one-runner
# change (39 with the earlier private lean Transition/Event classes, which bypassed it)
ENGINE_CALLS_PER_STEP = 55
ENGINE_CALLS_PER_RUN = 50  # measured 12 (fixed part: start, stop, result)
# the Python calls a checkpoint adds per turn (the snapshot, its delta, the recorder and the store), measured
# (was, before the commit path was trimmed: 117 / 126 and 53 / 62)
CHECKPOINT_CALLS_PER_TURN = {("flow", "memory"): 100, ("flow", "sqlite"): 108,  # measured 87 and 94
                             ("round_robin", "memory"): 46, ("round_robin", "sqlite"): 56}  # measured 40 and 49
GROUP_CHAT_CALLS_PER_TURN = 350  # measured 303 (623 with asyncio.gather's three tasks per bid round and the
# full Transition.execute); 3 agents: bids run inline (gather_eager), bid, select, post, penalize steps

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


def test_engine_calls_per_step_within_budget() -> None:
    g = round_robin()
    engine_calls(g, 3)  # prepare the machine once (cached on the graph)
    T = 300
    a, b = engine_calls(g, T), engine_calls(g, 2 * T)
    per_step = (b - a) / T
    fixed = a - per_step * T
    assert per_step <= ENGINE_CALLS_PER_STEP, (
        f"the engine makes {per_step:.1f} Python calls per step, over the budget of {ENGINE_CALLS_PER_STEP} "
        f"(cProfile, round robin of 3 instant agents, {T} and {2 * T} steps: {a} and {b} calls). Find the new "
        "calls with bench/engine_overhead.py's profile, or raise the budget here with a reason.")
    assert fixed <= ENGINE_CALLS_PER_RUN, (
        f"a run costs {fixed:.0f} Python calls besides its steps, over the budget of {ENGINE_CALLS_PER_RUN}")


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


def test_group_chat_calls_per_turn_within_budget() -> None:
    group_chat_calls(3)
    a, b = group_chat_calls(11), group_chat_calls(21)
    per_turn = (b - a) / 10
    assert per_turn <= GROUP_CHAT_CALLS_PER_TURN, (
        f"a GroupChat bidding turn (3 callable agents) makes {per_turn:.1f} Python calls, over the budget of "
        f"{GROUP_CHAT_CALLS_PER_TURN} (cProfile; 10 and 20 turns: {a} and {b} calls). Profile "
        "bench/scale.py to find them, or raise the budget here with a reason.")


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


@pytest.mark.parametrize("kind, store", sorted(CHECKPOINT_CALLS_PER_TURN))
def test_a_checkpointed_turn_adds_calls_within_budget_and_as_many_at_1000_turns_as_at_100(kind, store, tmp_path):
    """Deterministic (cProfile counts, instant callables): a commit's Python work is the snapshot,
    its delta and one store write, the same at T=100 as at T=1,000; the budget keeps it from
    creeping back (issue 21: a checkpointed turn within 2x an uncheckpointed one)."""
    run_calls(kind, store, 30, tmp_path)  # first-call paths (imports, the store's schema) outside the count
    plain = calls_per_turn(kind, None, 99, tmp_path)
    small = calls_per_turn(kind, store, 99, tmp_path) - plain
    large = calls_per_turn(kind, store, 999, tmp_path) - calls_per_turn(kind, None, 999, tmp_path)
    budget = CHECKPOINT_CALLS_PER_TURN[kind, store]
    assert large <= small + 0.1, (  # (a few list and dict resizes over 300 turns)
        f"a {kind} turn's checkpoint costs {small:.2f} calls at T=100 but {large:.2f} at T=1,000")
    assert small <= budget, (
        f"checkpointing a {kind} turn to {store} adds {small:.1f} Python calls (a turn without it makes "
        f"{plain:.1f}), over the budget of {budget}; find them with cProfile over bench/user_path.py's "
        "run_fsmchat, or raise the budget here with a reason")
