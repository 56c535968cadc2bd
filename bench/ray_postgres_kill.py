"""A Ray batch of 1,000 GroupChats over 2 local workers sharing one PostgreSQL store
(``checkpoint_dir="postgresql://..."``), one worker SIGKILLed mid-batch while a task of it is inside a
model call: the batch's wall time, and the check that every chat finished exactly once (one run per
task in the store, each transcript and stop reason that of an uninterrupted local run). The chats are
those of ``tests/integrations/test_ray_requeue.py`` (3 agents on a ``FunctionModel``, ``max_loops=3``); the server
is a throwaway local cluster (``tests/support/pg.py``, default durability: fsync on).

    .venv/bin/python bench/ray_postgres_kill.py [--chats N]
"""
from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.pg import Cluster, _bin_dir  # noqa: E402
from support.requeue import chat  # noqa: E402

from fsmchat.store.postgres import PostgresCheckpointer  # noqa: E402
from fsmchat.config import config_digest  # noqa: E402
from fsmchat.patterns.distributed import execute_batch, run_id_for, shutdown, start_local_ray  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chats", type=int, default=1000)
    n = ap.parse_args().chats
    folder = Path(tempfile.mkdtemp(prefix="fsmchat-ray-pg-"))
    hold = n // 2
    tasks = [f"topic {i}" for i in range(n)]
    tasks[hold] = f"hold {folder} topic"
    (folder / "release").write_text("")
    local = [chat().execute(t) for t in tasks]
    expected = [([(m.role, m.content) for m in r.transcript], r.stop_reason) for r in local]
    (folder / "release").unlink()
    bin_dir = _bin_dir()
    assert bin_dir is not None, "PostgreSQL's server is not installed"
    cluster = Cluster(bin_dir, fsync=True)
    cluster.start()
    try:
        dsn = cluster.dsn()
        kv = dict(part.split("=", 1) for part in dsn.split())
        uri = f"postgresql://{kv['user']}@{kv['host']}:{kv['port']}/{kv['dbname']}"
        start_local_ray(num_cpus=2, log_to_driver=False)
        gc, box = chat(), {}
        t0 = time.perf_counter()
        runner = threading.Thread(target=lambda: box.update(report=execute_batch(
            gc, tasks, workers=2, max_concurrency_per_worker=16, checkpoint_dir=uri)))
        runner.start()
        while not (folder / "pid").exists():
            assert runner.is_alive(), box
            time.sleep(0.05)
        killed_at = time.perf_counter() - t0
        os.kill(int((folder / "pid").read_text()), signal.SIGKILL)
        (folder / "release").write_text("")
        runner.join()
        wall = time.perf_counter() - t0
        report = box["report"]
        cp = PostgresCheckpointer(dsn)
        digest = config_digest(gc.to_config())
        ids = [run_id_for(digest, i, t) for i, t in enumerate(tasks)]
        runs = {r.run_id: r for r in cp.list_runs()}
        once = sorted(runs) == sorted(ids) and all(
            ([(m.role, m.content) for m in cp.load(rid).messages], cp.load(rid).stop_reason) == want
            for rid, want in zip(ids, expected))
        cp.close()
        shutdown()
    finally:
        cluster.stop()
    print(f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores (load average "
          f"{os.getloadavg()[0]:.2f} at the end), {platform.machine()}, Python {platform.python_version()}.")
    print(f"{n} GroupChats, 2 Ray workers, one PostgreSQL store; worker SIGKILLed {killed_at:.1f} s in "
          f"(task {hold} held in a model call)")
    print(f"wall {wall:.1f} s incl. start-up {report.startup_s:.1f} s; batch {wall - report.startup_s:.1f} s, "
          f"{n / (wall - report.startup_s):.0f} chats/s; dead workers {report.dead_workers}, re-queued chunks "
          f"{report.requeued_chunks}; completed {report.completed}, failed {report.failed}; "
          f"every chat finished exactly once: {'yes' if once else 'NO'}")


if __name__ == "__main__":
    main()
