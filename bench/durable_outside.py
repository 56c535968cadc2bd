"""A durable GroupChat turn timed from outside the project: a plain script over the public API.

Nothing of fsmchat's internals is imported or touched: ``GroupChat(...).execute("go")`` against
the same chat with ``checkpoint=SqliteCheckpointer(path)`` (a fresh file per run, the store's
open and ``close`` inside the clock), three instant callable bidders (a and b alternate, c stays
quiet: the workload of ``bench/durable_deltas.py``). CPU is ``time.process_time``; per turn = CPU
of the run / messages posted. Each repetition runs both cases, interleaved, after one warm-up run
of each; the figure is the fastest run of each case and the ratio of the two, for each T. The
store's open (a new file: its schema written) and close (the WAL checkpointed into the file) are
also timed on their own: a cost per store file, not per turn, that a run into a new file pays
once (at T=200 it is a fifth of the gap between the two); "the turn" is the run without them.

    .venv/bin/python bench/durable_outside.py [--reps N] [--turns T ...]
"""
from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from fsmchat import Bid, GroupChat, SqliteCheckpointer

SCORES = {"a": 0.9, "b": 0.8, "c": 0.0}


def bidder(name: str) -> Callable[[Any], Any]:
    def fn(turn: Any) -> Any:
        text = f"{name} says {len(turn.transcript)}"
        return Bid(SCORES[name], text) if getattr(turn, "kind", None) == "bid" else text
    fn.__name__ = name
    return fn


def chat(turns: int) -> GroupChat:
    return GroupChat(agents=[bidder(n) for n in SCORES], max_loops=turns + 1, threshold=0.1, recency_penalty=0.5)


def run(turns: int, tmp: Path | None) -> tuple[float, float, float, float]:
    """One run, uncheckpointed (``tmp`` None) or into a new SQLite file in ``tmp``: (CPU µs per
    message posted, the store's open and its close in CPU ms: 0 without a store, and CPU µs per
    message posted without the two)."""
    pattern = chat(turns)
    gc.collect()
    c0 = time.process_time()
    if tmp is None:
        res = pattern.execute("go")
        c1 = c2 = c0
    else:
        store = SqliteCheckpointer(tmp / f"{uuid.uuid4().hex}.db")
        c1 = time.process_time()
        res = pattern.execute("go", checkpoint=store)
        c2 = time.process_time()
        store.close()
    c3 = time.process_time()
    posted = sum(m.role != "User" for m in res.transcript)
    assert res.ok and turns - 3 < posted <= turns, (res.stop_reason, posted)
    return (c3 - c0) / posted * 1e6, (c1 - c0) * 1e3, (c3 - c2) * 1e3, (c2 - c1) / posted * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--turns", type=int, nargs="+", default=[200, 1500])
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fsmchat-outside-"))
    run(50, None), run(50, tmp)  # warm-up: imports, compiled graphs
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start, Python {sys.version.split()[0]}, "
          f"SQLite {sqlite3.sqlite_version}; fastest of {args.reps}, CPU µs per turn")
    for turns in args.turns:
        plain, durable = [], []
        for _ in range(args.reps):
            plain.append(run(turns, None)[0])
            durable.append(run(turns, tmp))
        best, base = min(d[0] for d in durable), min(plain)
        opened, closed = min(d[1] for d in durable), min(d[2] for d in durable)
        turn = min(d[3] for d in durable)
        print(f"T={turns}: no checkpoint {base:.0f}, SqliteCheckpointer {best:.0f}, ratio {best / base:.2f}x "
              f"(the store's open {opened:.2f} ms and close {closed:.2f} ms included; the turn without them "
              f"{turn:.0f}, {turn / base:.2f}x)")


if __name__ == "__main__":
    main()
