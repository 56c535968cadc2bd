"""Durable runs with per-step state deltas (issue 21 item 1, issue 18 time travel): what a
checkpoint costs per turn of a GroupChat, and what it writes.

GroupChat with three instant callable bidders (a and b alternate, c stays quiet; the workload of
``tests/test_flat_costs.py``), T = 100 / 1,000 / 3,000 turns, through ``pattern.execute`` (one
``asyncio.run`` per run, as a script calls it), three ways interleaved in one process: no
checkpoint, ``MemoryCheckpointer``, ``SqliteCheckpointer`` on a fresh temp file. Per turn = time
of the run / turns; wall and CPU time (``process_time``: other processes on a shared machine add
wall time, not CPU time), min and median of the repetitions. Then what the SQLite store wrote,
per turn: bytes of row data (event payloads and state deltas, message texts and metadata) and
pages appended to the WAL (auto-checkpoint off for that run), for the GroupChat, a one-on-one
debate (private memories grow every turn) and a flow whose Discussion's step records grow.

    .venv/bin/python bench/durable_deltas.py [--quick] [--write]
"""
from __future__ import annotations

import gc
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from common import cli_args, finish, machine_line, status
from fsmchat import AgentFlow, Bid, Discussion, GroupChat, OneOnOneDebate
from fsmchat.checkpoint import MemoryCheckpointer, SqliteCheckpointer

TURNS = (100, 1000, 3000)
SCORES = {"a": 0.9, "b": 0.8, "c": 0.0}


def bidder(name: str) -> Callable[[Any], Any]:
    def fn(turn: Any) -> Any:
        text = f"{name} says {len(turn.transcript)}"
        return Bid(SCORES[name], text) if getattr(turn, "kind", None) == "bid" else text
    fn.__name__ = name
    return fn


def group_chat(turns: int) -> GroupChat:
    return GroupChat(agents=[bidder(n) for n in SCORES], max_loops=turns + 1, threshold=0.1, recency_penalty=0.5)


def debate(turns: int) -> OneOnOneDebate:
    return OneOnOneDebate(agents=[bidder("a"), bidder("b")], max_loops=turns)


def discussion_flow(turns: int) -> AgentFlow:
    return AgentFlow(steps=[Discussion([bidder("a"), bidder("b")], rounds=turns // 2)])


def store_of(kind: str, tmp: Path) -> Any:
    if kind == "sqlite":
        return SqliteCheckpointer(tmp / f"{uuid.uuid4().hex}.db")
    return MemoryCheckpointer() if kind == "memory" else None


def once(kind: str, turns: int, tmp: Path) -> tuple[float, float]:
    """One GroupChat run: (wall µs per turn, CPU µs per turn)."""
    chat, store = group_chat(turns), store_of(kind, tmp)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    res = chat.execute("go", checkpoint=store) if store is not None else chat.execute("go")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert res.ok and len(res.transcript) == turns + 1, (res.stop_reason, len(res.transcript))
    if kind == "sqlite":
        store.close()
    return wall / turns * 1e6, cpu / turns * 1e6


def written(make: Callable[[int], Any], turns: int, tmp: Path) -> tuple[float, float]:
    """(bytes of row data, WAL pages) the SQLite store wrote per turn of ``make(turns)``."""
    path = tmp / f"{uuid.uuid4().hex}.db"
    store = SqliteCheckpointer(path)
    store._db.execute("PRAGMA wal_autocheckpoint=0")
    res = make(turns).execute("go", checkpoint=store)
    assert res.ok, res.error
    pages = store._db.execute("PRAGMA wal_checkpoint").fetchone()[1]
    store.close()
    con = sqlite3.connect(path)
    rows = con.execute("SELECT SUM(LENGTH(COALESCE(delta, '')) + LENGTH(COALESCE(payload, ''))) FROM events"
                       ).fetchone()[0] + con.execute("SELECT SUM(LENGTH(content) + LENGTH(metadata)) FROM messages"
                                                     ).fetchone()[0]
    con.close()
    return rows / turns, pages / turns


def measure(reps: int) -> tuple[str, list[dict[str, Any]]]:
    tmp = Path(tempfile.mkdtemp(prefix="fsmchat-bench-"))
    kinds = ("none", "memory", "sqlite")
    for kind in kinds:  # warm-up: imports, compiled graphs
        once(kind, 50, tmp)
    got: dict[tuple[str, int], list[tuple[float, float]]] = {(k, t): [] for k in kinds for t in TURNS}
    for _ in range(reps):
        for turns in TURNS:
            for kind in kinds:
                got[kind, turns].append(once(kind, turns, tmp))

    def stat(kind: str, turns: int, i: int, fn: Callable[[list[float]], float]) -> float:
        return fn([x[i] for x in got[kind, turns]])

    lo, hi = TURNS[0], TURNS[-1]
    lines = [machine_line(reps, f"SQLite {sqlite3.sqlite_version}") + " µs per turn of a GroupChat "
             "(3 instant callable bidders), min / median of the repetitions, cases interleaved.", "",
             "| case | " + " | ".join(f"T={t} wall | T={t} CPU" for t in TURNS) + f" | CPU T={hi} / T={lo} | "
             f"CPU / no checkpoint (T={hi}) |", "|---|" + "---:|" * (2 * len(TURNS) + 2)]
    labels = {"none": "no checkpoint", "memory": "MemoryCheckpointer", "sqlite": "SqliteCheckpointer (file)"}
    for kind in kinds:
        cells = [f"{stat(kind, t, 0, min):.0f} / {stat(kind, t, 0, statistics.median):.0f} | "
                 f"{stat(kind, t, 1, min):.0f} / {stat(kind, t, 1, statistics.median):.0f}" for t in TURNS]
        growth = stat(kind, hi, 1, min) / stat(kind, lo, 1, min)
        ratio = stat(kind, hi, 1, min) / stat("none", hi, 1, min)
        lines.append(f"| {labels[kind]} | " + " | ".join(cells) + f" | {growth:.2f} | {ratio:.2f}x |")
    flat = stat("sqlite", hi, 1, min) / stat("sqlite", lo, 1, min) <= 1.1
    within = stat("sqlite", hi, 1, min) <= 2 * stat("none", hi, 1, min)
    lines += ["", f"- Goal (issue 21: SQLite-checkpointed per-turn CPU flat from T={lo} to T={hi}, <= 10% growth, "
              f"and <= 2x the uncheckpointed run): flat {status(flat)}, <= 2x {status(within)} (fastest runs).", "",
              "What the SQLite store writes per turn (row data: event payloads, state deltas, message texts "
              "and metadata; pages appended to the WAL):", "",
              "| workload | " + " | ".join(f"T={t} bytes | T={t} pages" for t in TURNS) + " |",
              "|---|" + "---:|" * (2 * len(TURNS))]
    rows_out = []
    for name, make in (("GroupChat", group_chat), ("OneOnOneDebate (private memories)", debate),
                       ("AgentFlow with a Discussion", discussion_flow)):
        per = [written(make, t, tmp) for t in TURNS]
        lines.append(f"| {name} | " + " | ".join(f"{b:.0f} | {p:.2f}" for b, p in per) + " |")
        rows_out.append({"target": "Durable deltas", "measure": f"{name}: bytes written per turn, T={lo} / T={hi}",
                         "fsmchat": f"{per[0][0]:.0f} / {per[-1][0]:.0f}", "floor": None, "langgraph": None,
                         "ratio": "", "goal": "flat", "ok": per[-1][0] <= per[0][0] * 1.05 + 8,
                         "command": ".venv/bin/python bench/durable_deltas.py --write"})
    for t in TURNS:
        rows_out.append({"target": "Durable deltas", "measure": f"GroupChat + SqliteCheckpointer, CPU µs/turn, T={t}",
                         "fsmchat": round(stat("sqlite", t, 1, min), 1), "floor": round(stat("none", t, 1, min), 1),
                         "langgraph": None, "ratio": f"{stat('sqlite', t, 1, min) / stat('none', t, 1, min):.2f}x "
                         "the uncheckpointed run", "goal": "flat, <= 2x uncheckpointed", "ok": flat and within,
                         "command": ".venv/bin/python bench/durable_deltas.py --write"})
    return "\n".join(lines), rows_out


def main() -> None:
    args = cli_args(__doc__, "3 repetitions instead of 7")
    text, rows = measure(3 if args.quick else 7)
    finish("durable_deltas", {"durable_deltas": text}, rows, args.write)


if __name__ == "__main__":
    main()
