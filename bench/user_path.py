"""User path: what users run -- ``GroupChat(...).run(task)``,
``RoundRobinSwarm(...).run(task)``, ``AgentFlow([Discussion(...)]).run()`` -- per turn, against a
plain asyncio floor doing the same conversation and against LangGraph's fastest idiomatic
spelling of it, measured in the same run; then the same with checkpoints: fsmchat's
``MemoryCheckpointer`` / ``SqliteCheckpointer`` against LangGraph's ``InMemorySaver`` /
``SqliteSaver`` (langgraph-checkpoint-sqlite, a file).

Participants are instant (a ``def`` returning a string or a ``Bid``), so only the machinery is
measured: the engine, the pattern layer, the transcript, the checkpoint. Both sides call the
same functions. LangGraph spellings tried, the fastest per row reported (all are printed):

- GroupChat: ``bid`` (every bidder called, the recency-adjusted best bid above the threshold chosen)
  and ``post`` (the winner's message appended, the recency window updated) as two nodes with
  conditional edges (``post`` or ``END``; ``bid`` or ``END`` at ``max_loops``); the transcript an
  ``Annotated[list, operator.add]`` channel. ``invoke`` with sync nodes, and ``ainvoke`` with
  async nodes (the bidders gathered).
- Round robin (RoundRobinSwarm and the flow's Discussion): a node per agent, a conditional edge
  per node, the transcript an ``operator.add`` channel; ``invoke`` (sync nodes) and ``ainvoke``
  (async nodes).

fsmchat runs through its sync entry points (``run``/``execute``, one ``asyncio.run`` each, as a
script calls them); LangGraph's ``invoke``/``ainvoke`` likewise once per conversation. Per turn =
wall time of the whole call / turns, median of the repetitions, cases interleaved.

    .venv/bin/python bench/user_path.py [--quick] [--write]
"""
from __future__ import annotations

import asyncio
import gc
import operator
import sqlite3
import statistics
import tempfile
import uuid
from pathlib import Path
from time import perf_counter
from typing import Annotated, Any, Callable, TypedDict

import engine_overhead as eo
from common import cli_args, finish, machine_line, version
from floors import group_chat_floor
from fsmchat import AgentFlow, Bid, Discussion, GroupChat, RoundRobinSwarm
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer
from fsmchat.models import Message

try:  # the [bench] extra
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph as LGStateGraph
except ImportError:  # pragma: no cover
    LGStateGraph = None
try:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
except ImportError:  # pragma: no cover
    SqliteSaver = AsyncSqliteSaver = None

NAMES = ("a", "b", "c")
SCORES = {"a": 0.9, "b": 0.8, "c": 0.0}  # a and b alternate (recency penalty 0.5, window 1); c stays quiet
GC_KW = dict(threshold=0.1, recency_penalty=0.5, recency_window=1)


# ---- the participants both sides call ----
def bidder(name: str) -> Callable[[Any], Any]:
    def fn(turn: Any) -> Any:
        if turn.kind == "bid":
            return Bid(SCORES[name], f"{name} says {len(turn.transcript)}")
        return f"{name} here"
    fn.__name__ = name
    return fn


def speaker(name: str) -> Callable[[Any], str]:
    def fn(_: Any) -> str:
        return f"{name} here"
    fn.__name__ = name
    return fn


# ---- fsmchat: what users run ----
def gc_pattern(turns: int) -> GroupChat:
    return GroupChat(agents=[bidder(n) for n in NAMES], max_loops=turns + 1, **GC_KW)


def rr_pattern(turns: int) -> RoundRobinSwarm:
    return RoundRobinSwarm(agents=[speaker(n) for n in NAMES], max_loops=turns // 3)


def flow_pattern(turns: int) -> AgentFlow:
    return AgentFlow(steps=[Discussion(agents=[speaker(n) for n in NAMES], rounds=turns // 3)])


def run_fsmchat(make: Callable[[int], Any], turns: int, store: str | None) -> int:
    """One conversation through the public sync API; returns the messages posted."""
    pattern = make(turns)
    cp: Any = None
    if store == "memory":
        cp = MemoryCheckpointer()
    elif store == "sqlite":
        cp = SqliteCheckpointer(Path(tempfile.mkdtemp(prefix="fsmchat-bench-")) / "runs.db")
    res = pattern.execute("go", checkpoint=cp)
    assert res.ok, (res.stop_reason, res.error)
    n = len(res.transcript)
    if store == "sqlite":
        cp.close()
    return n


# ---- the floors: the same conversations as plain asyncio loops ----
def floor_bidders() -> list[Callable[[Any], Any]]:
    def make(name: str) -> Callable[[Any], Any]:
        async def agent(turn: Any) -> Bid:
            return Bid(SCORES[name], f"{name} says {len(turn[1])}")
        agent.__name__ = name
        return agent
    return [make(n) for n in NAMES]


def run_floor_gc(turns: int) -> int:
    rows = asyncio.run(group_chat_floor("go", floor_bidders(), turns + 1, **GC_KW))
    return len(rows)


def run_floor_rr(turns: int) -> int:
    async def go() -> int:
        rows = [Message(role="User", content="go")]
        fns = [speaker(n) for n in NAMES]
        for t in range(turns):
            rows.append(Message(role=NAMES[t % 3], content=fns[t % 3](rows)))
        return len(rows)
    return asyncio.run(go())


# ---- LangGraph: the same conversations, its idiomatic spellings ----
class GCState(TypedDict):
    rows: Annotated[list, operator.add]
    recent: list
    winner: Any
    T: int


def lg_group_chat(is_async: bool, checkpointer: Any = None) -> Any:
    """Two nodes per turn: ``bid`` (score, adjust, choose) and ``post`` (append, penalize)."""
    fns = {n: bidder(n) for n in NAMES}

    class Turn:
        __slots__ = ("kind", "transcript")

        def __init__(self, rows: list) -> None:
            self.kind, self.transcript = "bid", rows

    def choose(s: GCState, bids: list[Any]) -> dict[str, Any]:
        best, best_score = None, GC_KW["threshold"]
        for n, b in zip(NAMES, bids):
            adj = b.score - (GC_KW["recency_penalty"] if n in s["recent"] else 0.0)
            if adj > best_score:
                best, best_score = (n, b.message), adj
        return {"winner": best}

    def bid_sync(s: GCState) -> dict[str, Any]:
        turn = Turn(s["rows"])
        return choose(s, [fns[n](turn) for n in NAMES])

    async def bid_async(s: GCState) -> dict[str, Any]:
        turn = Turn(s["rows"])

        async def one(n: str) -> Any:
            return fns[n](turn)
        return choose(s, await asyncio.gather(*(one(n) for n in NAMES)))

    def post(s: GCState) -> dict[str, Any]:
        name, text = s["winner"]
        return {"rows": [(name, text)], "recent": [name]}

    async def post_async(s: GCState) -> dict[str, Any]:
        return post(s)

    g = LGStateGraph(GCState)
    g.add_node("bid", bid_async if is_async else bid_sync)
    g.add_node("post", post_async if is_async else post)
    g.add_edge(START, "bid")
    g.add_conditional_edges("bid", lambda s: "post" if s["winner"] is not None else END, ["post", END])
    g.add_conditional_edges("post", lambda s: "bid" if len(s["rows"]) < s["T"] else END, ["bid", END])
    return g.compile(checkpointer=checkpointer)


def lg_round_robin(is_async: bool, checkpointer: Any = None) -> Any:
    """target 1's LangGraph round robin, its agents saying what the fsmchat participants say"""
    fns = {n: speaker(n) for n in eo.NAMES}  # its agents are named A, B, C
    return eo.build_langgraph(checkpointer, sync=not is_async, say=lambda name, s: fns[name](s["rows"]))


def lg_saver(store: str | None) -> tuple[Any, Callable[[], None]]:
    if store == "memory":
        return InMemorySaver(), lambda: None
    if store == "sqlite":
        conn = sqlite3.connect(str(Path(tempfile.mkdtemp(prefix="lg-bench-")) / "lg.db"), check_same_thread=False)
        return SqliteSaver(conn), conn.close
    return None, lambda: None


def run_langgraph(kind: str, is_async: bool, turns: int, store: str | None) -> int:
    build = lg_group_chat if kind == "group_chat" else lg_round_robin
    state: dict[str, Any] = ({"rows": [("User", "go")], "recent": [], "winner": None, "T": turns + 1}
                             if kind == "group_chat" else {"rows": [("User", "go")], "t": 0, "T": turns})
    config: dict[str, Any] = {"recursion_limit": 3 * turns + 10}
    if store is not None:
        config["configurable"] = {"thread_id": uuid.uuid4().hex}
    if is_async and store == "sqlite":  # SqliteSaver is sync only; its async sibling is AsyncSqliteSaver
        async def go() -> dict[str, Any]:
            path = Path(tempfile.mkdtemp(prefix="lg-bench-")) / "lg.db"
            async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
                return await build(True, saver).ainvoke(state, config)
        return len(asyncio.run(go())["rows"])
    saver, close = lg_saver(store)
    app = build(is_async, saver)
    out = asyncio.run(app.ainvoke(state, config)) if is_async else app.invoke(state, config)
    close()
    return len(out["rows"])


# ---- the table ----
KINDS = {"GroupChat": ("group_chat", gc_pattern, run_floor_gc),
         "RoundRobinSwarm": ("round_robin", rr_pattern, run_floor_rr),
         "AgentFlow + Discussion": ("round_robin", flow_pattern, run_floor_rr)}


def cases(store: str | None) -> dict[str, dict[str, Callable[[int], int]]]:
    """Per conversation kind: its runners by column (fsmchat, floor, each LangGraph spelling)."""
    out: dict[str, dict[str, Callable[[int], int]]] = {}
    for label, (lg_kind, make, floor) in KINDS.items():
        row: dict[str, Callable[[int], int]] = {"fsmchat": lambda T, make=make: run_fsmchat(make, T, store)}
        if store is None:
            row["floor"] = floor
        if LGStateGraph is not None and (store != "sqlite" or SqliteSaver is not None):
            row["LangGraph invoke"] = lambda T, k=lg_kind: run_langgraph(k, False, T, store)
            row["LangGraph ainvoke"] = lambda T, k=lg_kind: run_langgraph(k, True, T, store)
        out[label] = row
    return out


def measure(fn: Callable[[int], int], turns: int) -> float:
    gc.collect()
    t0 = perf_counter()
    n = fn(turns) - 1  # messages posted after the task
    dt = perf_counter() - t0
    assert turns - 3 < n <= turns, (n, turns)  # round robins run whole rounds of 3
    return dt / n * 1e6


def table(store: str | None, turns: tuple[int, ...], reps: int) -> tuple[str, list[dict[str, Any]]]:
    runs = cases(store)
    for row in runs.values():  # warm-up: imports, compiled graphs, caches
        for fn in row.values():
            fn(turns[0])
    times: dict[tuple[str, str, int], list[float]] = {}
    for _ in range(reps):
        for T in turns:
            for label, row in runs.items():
                for col, fn in row.items():
                    times.setdefault((label, col, T), []).append(measure(fn, T))
    us = {k: statistics.median(v) for k, v in times.items()}
    what = {None: "no checkpoint", "memory": "in-memory checkpoint (fsmchat MemoryCheckpointer, LangGraph "
            "InMemorySaver)", "sqlite": "SQLite checkpoint, a file (fsmchat SqliteCheckpointer, LangGraph "
            "SqliteSaver)"}[store]
    cols = [c for c in next(iter(runs.values()))]
    head = ["conversation", "T"] + [f"{c} µs/turn" for c in cols] + \
        (["fsmchat / floor"] if store is None else []) + ["fastest LangGraph / fsmchat"]
    lines = [f"**{what}**", "", "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    rows: list[dict[str, Any]] = []
    for label, row in runs.items():
        for T in turns:
            cells = [f"{us[label, c, T]:.1f}" for c in cols]
            lgs = {c: us[label, c, T] for c in cols if c.startswith("LangGraph")}
            fastest = min(lgs, key=lgs.get) if lgs else None
            ratio = lgs[fastest] / us[label, "fsmchat", T] if fastest else None
            extra = [f"{us[label, 'fsmchat', T] / us[label, 'floor', T]:.1f}x"] if store is None else []
            lines.append(f"| {label} | {T} | " + " | ".join(cells + extra) +
                         f" | {f'{ratio:.1f}x ({fastest[10:]})' if fastest else 'n/a'} |")
            if T == turns[-1]:
                rows.append({"target": "User path" + ("" if store is None else f" ({store} checkpoint)"),
                             "measure": f"{label}.run, µs/turn, N=3 instant participants, T={T}"
                                        + ("" if store is None else f", {store} checkpoint"),
                             "fsmchat": round(us[label, "fsmchat", T], 1),
                             "floor": round(us[label, "floor", T], 1) if store is None else None,
                             "langgraph": round(lgs[fastest], 1) if fastest else None,
                             "ratio": f"fastest LangGraph spelling ({fastest[10:]}) {ratio:.1f}x slower"
                                      if fastest else "",
                             "goal": "report",
                             "ok": None, "command": ".venv/bin/python bench/user_path.py --write",
                             "lg_ratio": round(ratio, 1) if ratio else None,
                             "floor_ratio": round(us[label, "fsmchat", T] / us[label, "floor", T], 2)
                                            if store is None else None})
    return "\n".join(lines), rows


def main() -> None:
    args = cli_args(__doc__, "3 repetitions at T = 100 and 1,000 instead of 7 up to 3,000")
    reps = 3 if args.quick else 7
    turns = (100, 1000) if args.quick else (100, 1000, 3000)
    parts, rows = [machine_line(reps, f"langgraph {version('langgraph')}, langgraph-checkpoint-sqlite "
                                      f"{version('langgraph-checkpoint-sqlite')}")], []
    plain: dict[tuple[str, int], float] = {}
    for store in (None, "memory", "sqlite"):
        text, r = table(store, turns, reps)
        parts.append(text)
        rows += r
        for row in r:
            if store is None:
                plain[row["measure"].split(".run")[0], 0] = row["fsmchat"]
            else:
                base = plain.get((row["measure"].split(".run")[0], 0))
                if base:
                    row["ratio"] += f"; {row['fsmchat'] / base:.1f}x its own uncheckpointed run"
    finish("user_path", {"user_path": "\n\n".join(parts)}, rows, args.write)


if __name__ == "__main__":
    main()
