"""The power-loss-durable SQLite mode: what ``SqliteCheckpointer(path, durability="fsync")`` costs
per GroupChat turn, beside WAL + ``synchronous=NORMAL`` (the default) and the memory store.

GroupChat of three instant callable bidders (the workload of ``durable_deltas.py``), T turns,
through ``pattern.aexecute``; wall and CPU (``process_time``) µs per turn (message posted), cases
interleaved, min / median of the repetitions. The fsync mode is also run with N chats at once on
one event loop (``asyncio.gather``): its commits are batched by the writer thread (group commit),
so the fsyncs per commit fall below 1 and the wall time per turn with them. Wall time is what an
fsync costs (the process waits for the disk); CPU time is fsmchat's own work.

    .venv/bin/python bench/durable_fsync.py [--quick] [--write]
"""
from __future__ import annotations

import asyncio
import gc
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from common import cli_args, finish, machine_line, median

from fsmchat import Bid, GroupChat
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer

SCORES = {"a": 0.9, "b": 0.8, "c": 0.05}


def bidder(name: str) -> Callable[[Any], Any]:
    def fn(turn: Any) -> Any:
        text = f"{name} says {len(turn.transcript)}"
        return Bid(SCORES[name], text) if turn.kind == "bid" else text
    fn.__name__ = name
    return fn


def group_chat(turns: int) -> GroupChat:
    return GroupChat(agents=[bidder(n) for n in SCORES], max_loops=turns + 1, threshold=0.1, recency_penalty=0.5)


def store_of(case: str, folder: Path) -> Any:
    path = folder / f"{uuid.uuid4().hex}.db"
    return {"no checkpoint": lambda: None, "MemoryCheckpointer": MemoryCheckpointer,
            "SQLite WAL + NORMAL": lambda: SqliteCheckpointer(path),
            "SQLite fsync (FULL, group commit)": lambda: SqliteCheckpointer(path, durability="fsync")}[case]()


def one(case: str, turns: int, chats: int, folder: Path) -> tuple[float, float, float | None]:
    """(wall µs, CPU µs) per turn over ``chats`` concurrent chats, and fsyncs per commit (fsync mode)."""
    store = store_of(case, folder)
    patterns = [group_chat(turns) for _ in range(chats)]

    async def run() -> list[Any]:
        return await asyncio.gather(*(p.aexecute("go", checkpoint=store, run_id=f"r{i}") if store is not None
                                      else p.aexecute("go") for i, p in enumerate(patterns)))

    gc.collect()
    w0, c0 = time.perf_counter(), time.process_time()
    results = asyncio.run(run())
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    posted = sum(len(r.transcript) - 1 for r in results)
    per_commit = None
    if isinstance(store, SqliteCheckpointer) and store.group is not None:
        per_commit = store.group.syncs / max(store.group.writes, 1)
    if hasattr(store, "close"):
        store.close()
    return wall / posted * 1e6, cpu / posted * 1e6, per_commit


CASES = ("no checkpoint", "MemoryCheckpointer", "SQLite WAL + NORMAL", "SQLite fsync (FULL, group commit)")


def measure(reps: int, turns: int, concurrent: int) -> tuple[str, list[dict[str, Any]]]:
    runs: dict[tuple[str, int], list[tuple[float, float, float | None]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(reps):
            for chats in (1, concurrent):
                for case in CASES:
                    runs.setdefault((case, chats), []).append(one(case, turns, chats, Path(tmp)))
    base = {chats: min(r[1] for r in runs[("no checkpoint", chats)]) for chats in (1, concurrent)}
    lines = [machine_line(reps), "",
             f"GroupChat, 3 instant bidders, T={turns} turns per chat; µs per turn, min / median of {reps}.", "",
             "| case | chats at once | wall | CPU | CPU / no checkpoint | fsyncs per commit |",
             "|---|---:|---:|---:|---:|---:|"]
    rows = []
    for chats in (1, concurrent):
        for case in CASES:
            rs = runs[(case, chats)]
            wall, cpu = [r[0] for r in rs], [r[1] for r in rs]
            syncs = [r[2] for r in rs if r[2] is not None]
            per = f"{median(syncs):.2f}" if syncs else "-"
            lines.append(f"| {case} | {chats} | {min(wall):.0f} / {median(wall):.0f} | {min(cpu):.0f} / "
                         f"{median(cpu):.0f} | {min(cpu) / base[chats]:.2f}x | {per} |")
            rows.append({"case": case, "chats": chats, "wall_us": min(wall), "cpu_us": min(cpu),
                         "fsyncs_per_commit": median(syncs) if syncs else None})
    return "\n".join(lines), rows


def main() -> None:
    args = cli_args(__doc__, "fewer repetitions and turns")
    text, rows = measure(2 if args.quick else 5, 200 if args.quick else 1000, 8)
    print(text)
    finish("durable_fsync", {"durable_fsync": text}, rows, args.write)


if __name__ == "__main__":
    main()
