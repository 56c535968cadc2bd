"""Durable runs with per-step state deltas: what a
checkpoint costs per turn of each pattern, and what it writes.

GroupChat (three instant callable bidders: a and b alternate, c stays quiet; the workload of
``tests/engine/test_flat_costs.py``), RoundRobinSwarm and an AgentFlow with a Discussion (three instant
callables each), T = 100 / 1,000 / 3,000 turns, through ``pattern.execute`` (one ``asyncio.run``
per run, as a script calls it), three ways interleaved in one process: no checkpoint,
``MemoryCheckpointer``, ``SqliteCheckpointer`` on a fresh temp file. Per turn = time of the run /
messages posted; wall and CPU time (``process_time``: other processes on a shared machine add wall
time, not CPU time), min and median of the repetitions. Then what the SQLite store wrote, per
turn: bytes of row data (event payloads and state deltas, message texts and metadata) and pages
appended to the WAL (auto-checkpoint off for that run), for the three, a one-on-one debate
(private memories grow every turn) and a flow whose Discussion's step records and lines grow.

With ``--against REF`` it also measures REF's GroupChat beside this tree's, in the same run (child
processes alternating, each importing its own fsmchat).

    .venv/bin/python bench/durable_deltas.py [--quick] [--write] [--against REF]
"""
from __future__ import annotations

import gc
import json
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from common import child_in, cli_args, finish, machine_line, status, trees_against
from fsmchat import AgentFlow, Bid, Discussion, GroupChat, OneOnOneDebate, RoundRobinSwarm, statelog
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer

TURNS = (100, 1000, 3000)
RATIO_GOALS = {("GroupChat", "memory"): 2.0, ("GroupChat", "sqlite"): 2.5}  # checkpointed / uncheckpointed CPU
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


def round_robin(turns: int) -> RoundRobinSwarm:
    return RoundRobinSwarm(agents=[bidder(n) for n in SCORES], max_loops=turns // 3)


def flow_discussion(turns: int) -> AgentFlow:
    return AgentFlow(steps=[Discussion([bidder(n) for n in SCORES], rounds=turns // 3)])


PATTERNS = {"GroupChat": group_chat, "RoundRobinSwarm": round_robin, "AgentFlow + Discussion": flow_discussion}


def store_of(kind: str, tmp: Path) -> Any:
    if kind == "sqlite":
        return SqliteCheckpointer(tmp / f"{uuid.uuid4().hex}.db")
    return MemoryCheckpointer() if kind == "memory" else None


def once(make: Callable[[int], Any], kind: str, turns: int, tmp: Path) -> tuple[float, float]:
    """One run of ``make(turns)``: (wall µs per message posted, CPU µs per message posted)."""
    pattern, store = make(turns), store_of(kind, tmp)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    res = pattern.execute("go", checkpoint=store) if store is not None else pattern.execute("go")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    posted = sum(m.role != "User" for m in res.transcript)  # the task is not a turn
    assert res.ok and turns - 3 < posted <= turns, (res.stop_reason, posted)  # round robins: whole rounds of 3
    if kind == "sqlite":
        store.close()
    return wall / posted * 1e6, cpu / posted * 1e6


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
    for make in PATTERNS.values():  # warm-up: imports, compiled graphs
        for kind in kinds:
            once(make, kind, 50, tmp)
    got: dict[tuple[str, str, int], list[tuple[float, float]]] = {
        (p, k, t): [] for p in PATTERNS for k in kinds for t in TURNS}
    for _ in range(reps):
        for turns in TURNS:
            for name, make in PATTERNS.items():
                for kind in kinds:
                    got[name, kind, turns].append(once(make, kind, turns, tmp))

    def stat(name: str, kind: str, turns: int, i: int, fn: Callable[[list[float]], float]) -> float:
        return fn([x[i] for x in got[name, kind, turns]])

    lo, hi = TURNS[0], TURNS[-1]
    lines = [machine_line(reps, f"SQLite {sqlite3.sqlite_version}") + " µs per turn (message posted), 3 instant "
             "callable participants, min / median of the repetitions, cases interleaved.", "",
             "| pattern | case | " + " | ".join(f"T={t} wall | T={t} CPU" for t in TURNS) + f" | CPU T={hi} / T={lo} | "
             f"CPU / no checkpoint (T={hi}) |", "|---|---|" + "---:|" * (2 * len(TURNS) + 2)]
    labels = {"none": "no checkpoint", "memory": "MemoryCheckpointer", "sqlite": "SqliteCheckpointer (file)"}
    goals, rows_out = [], []
    for name in PATTERNS:
        for kind in kinds:
            cells = [f"{stat(name, kind, t, 0, min):.0f} / {stat(name, kind, t, 0, statistics.median):.0f} | "
                     f"{stat(name, kind, t, 1, min):.0f} / {stat(name, kind, t, 1, statistics.median):.0f}"
                     for t in TURNS]
            growth = stat(name, kind, hi, 1, min) / stat(name, kind, lo, 1, min)
            ratio = stat(name, kind, hi, 1, min) / stat(name, "none", hi, 1, min)
            lines.append(f"| {name} | {labels[kind]} | " + " | ".join(cells) + f" | {growth:.2f} | {ratio:.2f}x |")
        for kind in ("memory", "sqlite"):
            flat = stat(name, kind, hi, 1, min) / stat(name, kind, lo, 1, min) <= 1.1
            most = RATIO_GOALS.get((name, kind))
            within = most is None or stat(name, kind, hi, 1, min) <= most * stat(name, "none", hi, 1, min)
            goals.append(f"- {name} + {labels[kind]}: flat {status(flat)}" +
                         (f", <= {most:g}x {status(within)}." if most is not None else "."))
            for t in TURNS:
                rows_out.append({"target": "Durable deltas",
                                 "measure": f"{name} + {labels[kind].split(' ')[0]}, CPU µs/turn, T={t}",
                                 "fsmchat": round(stat(name, kind, t, 1, min), 1),
                                 "floor": round(stat(name, "none", t, 1, min), 1), "langgraph": None,
                                 "ratio": f"{stat(name, kind, t, 1, min) / stat(name, 'none', t, 1, min):.2f}x "
                                          "the uncheckpointed run",
                                 "goal": "flat" + (f", <= {most:g}x uncheckpointed" if most is not None else ""),
                                 "ok": flat and within, "command": ".venv/bin/python bench/durable_deltas.py --write"})
    lines += ["", f"Goals (fastest runs): checkpointed per-turn CPU flat from T={lo} to T={hi} (<= 10% growth) for "
              "every pattern; a GroupChat's checkpointed turn <= 2x its uncheckpointed turn with the "
              "MemoryCheckpointer and <= 2.5x with SQLite (the single-step patterns' ratio goals are retired: "
              "their uncheckpointed turn of instant callables is no turn a user runs):", "", *goals, "",
              "What the SQLite store writes per turn (row data: event payloads, state deltas, message texts "
              "and metadata; pages appended to the WAL):", "",
              "| workload | " + " | ".join(f"T={t} bytes | T={t} pages" for t in TURNS) + " |",
              "|---|" + "---:|" * (2 * len(TURNS))]
    for name, make in (*PATTERNS.items(), ("OneOnOneDebate (private memories)", debate),
                       ("AgentFlow with a Discussion of two", discussion_flow)):
        per = [written(make, t, tmp) for t in TURNS]
        lines.append(f"| {name} | " + " | ".join(f"{b:.0f} | {p:.2f}" for b, p in per) + " |")
        rows_out.append({"target": "Durable deltas", "measure": f"{name}: bytes written per turn, T={lo} / T={hi}",
                         "fsmchat": f"{per[0][0]:.0f} / {per[-1][0]:.0f}", "floor": None, "langgraph": None,
                         "ratio": "", "goal": "flat", "ok": per[-1][0] <= per[0][0] * 1.05 + 8,
                         "command": ".venv/bin/python bench/durable_deltas.py --write"})
    return "\n".join(lines), rows_out


class DumpsPerValue:
    """statelog's encoder replaced by ``json.dumps`` with the same options per value (which builds
    an encoder per call): what keeping one encoder saves."""

    def encode(self, obj: Any) -> str:
        return json.dumps(obj, default=repr, separators=(",", ":"))


def encoder_kept(reps: int, turns: int = 3000) -> tuple[str, list[dict[str, Any]]]:
    """A checkpointed GroupChat with statelog's one encoder and with ``json.dumps`` per value, interleaved."""
    tmp = Path(tempfile.mkdtemp(prefix="fsmchat-bench-"))
    real, cases = statelog._ENCODER, {"one encoder": None, "json.dumps per value": DumpsPerValue()}
    cpu: dict[tuple[str, str], list[float]] = {(c, k): [] for c in cases for k in ("none", "memory", "sqlite")}
    try:
        for _ in range(reps):
            for case, enc in cases.items():
                statelog._ENCODER = real if enc is None else enc  # type: ignore[assignment]
                for kind in ("none", "memory", "sqlite"):
                    cpu[case, kind].append(once(group_chat, kind, turns, tmp)[1])
    finally:
        statelog._ENCODER = real
    best = {key: min(v) for key, v in cpu.items()}
    lines = [f"Kept: statelog's one JSON encoder, made once. GroupChat CPU µs per turn at T={turns}, fastest of "
             f"{reps}, cases interleaved in one process:", "",
             "| statelog encodes with | no checkpoint | MemoryCheckpointer | ratio | SqliteCheckpointer | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for case in cases:
        b = {k: best[case, k] for k in ("none", "memory", "sqlite")}
        lines.append(f"| {case} | {b['none']:.0f} | {b['memory']:.0f} | {b['memory'] / b['none']:.2f}x | "
                     f"{b['sqlite']:.0f} | {b['sqlite'] / b['none']:.2f}x |")
    one, per = best["one encoder", "sqlite"], best["json.dumps per value", "sqlite"]
    rows = [{"target": "Durable deltas", "measure": f"kept: one JSON encoder, GroupChat + SQLite CPU µs/turn, T={turns}",
             "fsmchat": round(one, 1), "floor": None, "langgraph": None,
             "ratio": f"json.dumps per value: {per:.1f}", "goal": "report", "ok": None,
             "command": ".venv/bin/python bench/durable_deltas.py --write"}]
    return "\n".join(lines), rows


def child_main(turns: int, reps: int) -> None:
    """In a child process: a GroupChat's CPU µs per turn, no checkpoint / memory / SQLite
    interleaved, fastest of ``reps`` runs each after a warm-up (one JSON line)."""
    tmp = Path(tempfile.mkdtemp(prefix="fsmchat-bench-"))
    kinds = ("none", "memory", "sqlite")
    for kind in kinds:
        once(group_chat, kind, 50, tmp)
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(reps):
        for kind in kinds:
            cpu[kind].append(once(group_chat, kind, turns, tmp)[1])
    print(json.dumps({k: min(v) for k, v in cpu.items()}))


def against(ref: str, reps: int, turns: int = 3000) -> str:
    """This tree's checkpointed GroupChat beside ``ref``'s, alternating child processes."""
    with trees_against(ref) as trees:
        got: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
        for _ in range(reps):
            for name, tree in trees.items():
                got[name].append(child_in(tree, "durable_deltas.py", turns, 3))
    lines = [f"GroupChat CPU µs per turn at T={turns}, this tree against `{ref}` in the same run: child processes "
             f"alternating, fastest of {reps} x 3 runs each (ratios: to the same tree's uncheckpointed turn).", "",
             "| fsmchat | no checkpoint | MemoryCheckpointer | ratio | SqliteCheckpointer | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, runs in got.items():
        best = {k: min(r[k] for r in runs) for k in ("none", "memory", "sqlite")}
        lines.append(f"| {name} | {best['none']:.0f} | {best['memory']:.0f} | {best['memory'] / best['none']:.2f}x "
                     f"| {best['sqlite']:.0f} | {best['sqlite'] / best['none']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(int(sys.argv[2]), int(sys.argv[3]))
        return
    args = cli_args(__doc__, "3 repetitions instead of 7", against=True)
    text, rows = measure(3 if args.quick else 7)
    kept, kept_rows = encoder_kept(3 if args.quick else 5)
    sections = {"durable_deltas": text, "durable_encoder": kept}
    rows += kept_rows
    if args.against:
        sections["durable_against"] = against(args.against, 3 if args.quick else 5)
    finish("durable_deltas", sections, rows, args.write)


if __name__ == "__main__":
    main()
