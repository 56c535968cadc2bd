"""A durable GroupChat turn on PostgreSQL beside SQLite: the workload of ``bench/durable_deltas.py``
(three instant callable bidders, one commit per turn), T = 100 / 1,000 turns through
``pattern.execute``, interleaved in one process: ``SqliteCheckpointer`` on a fresh temp file and
``PostgresCheckpointer`` on a fresh database of a local server started for the run (Debian's
``postgresql``, ``initdb`` in a temp dir, 127.0.0.1, default durability: fsync and
``synchronous_commit`` on; ``tests/support/pg.py`` starts it). Per turn = time of the run / messages
posted; wall and CPU time of this process (the server's own CPU is not in it), median of the
repetitions.

    .venv/bin/python bench/durable_postgres.py [--reps N]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from durable_deltas import group_chat  # noqa: E402
from support.pg import Cluster, _bin_dir  # noqa: E402

from fsmchat.store.checkpoint import SqliteCheckpointer  # noqa: E402
from fsmchat.store.postgres import PostgresCheckpointer  # noqa: E402

TURNS = (100, 1000)


def one(turns: int, store: object) -> tuple[float, float]:
    chat = group_chat(turns)
    w, c = time.perf_counter(), time.process_time()
    res = chat.execute("go", checkpoint=store, run_id=uuid.uuid4().hex)
    w, c = time.perf_counter() - w, time.process_time() - c
    n = len(res.transcript) - 1
    return w / n * 1e6, c / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    bin_dir = _bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL's server is not installed (apt-get install postgresql)")
    cluster = Cluster(bin_dir, fsync=True)
    cluster.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for turns in TURNS:
                got: dict[str, list[tuple[float, float]]] = {"sqlite": [], "postgres": []}
                for _ in range(args.reps):
                    sq = SqliteCheckpointer(Path(tmp) / f"{uuid.uuid4().hex}.db")
                    got["sqlite"].append(one(turns, sq))
                    sq.close()
                    pg = PostgresCheckpointer(cluster.dsn())
                    got["postgres"].append(one(turns, pg))
                    pg.close()
                for kind, rows in got.items():
                    wall = statistics.median(r[0] for r in rows)
                    cpu = statistics.median(r[1] for r in rows)
                    print(f"GroupChat + {kind:8s} T={turns:5d}: wall {wall:8.1f} µs/turn, CPU {cpu:7.1f} µs/turn")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
