"""A Ray batch writing one PostgreSQL store from every worker (``checkpoint_dir="postgresql://..."``),
with a worker SIGKILLed while a task of it is inside a model call: its chunks are re-queued on the
live worker, which continues the dead worker's runs in the same store, and every chat is finished
exactly once (one run per task in the store, each transcript that of an uninterrupted local run).
The kill waits on the held task's pid file, never on the clock (``HANG_GUARD`` only fails a hung run)."""
import os
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from support.pg import pg_cluster, pg_dsn  # noqa: E402,F401 - fixtures
from support.requeue import HANG_GUARD, HOLD, chat  # noqa: E402

from fsmchat import PostgresCheckpointer  # noqa: E402
from fsmchat.patterns.distributed import execute_batch, run_id_for  # noqa: E402
from fsmchat.config import config_digest  # noqa: E402

N = 40


pytestmark = pytest.mark.usefixtures("local_ray")  # tests/integrations/conftest.py


def uri(dsn):
    kv = dict(part.split("=", 1) for part in dsn.split())
    return f"postgresql://{kv['user']}@{kv['host']}:{kv['port']}/{kv['dbname']}"


def test_a_ray_batch_on_one_postgres_store_survives_a_killed_worker_and_finishes_each_chat_once(tmp_path, pg_dsn):
    tasks = [f"topic {i}" for i in range(N)]
    tasks[HOLD] = f"hold {tmp_path} topic"
    (tmp_path / "release").write_text("")
    local = [chat().execute(t) for t in tasks]  # uninterrupted, in this process
    expected = [([(m.role, m.content) for m in r.transcript], r.stop_reason) for r in local]
    (tmp_path / "release").unlink()

    store, box, gc = uri(pg_dsn), {}, chat()
    runner = threading.Thread(target=lambda: box.update(report=execute_batch(
        gc, tasks, workers=2, max_concurrency_per_worker=4, chunk_size=5, checkpoint_dir=store)))
    runner.start()
    pid_file = tmp_path / "pid"
    hung = time.monotonic() + HANG_GUARD
    while not pid_file.exists() and runner.is_alive():
        assert time.monotonic() < hung, f"hung: no worker reached the held task in {HANG_GUARD} s"
        time.sleep(0.05)
    assert pid_file.exists(), f"the batch ended without running the held task: {box}"
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    (tmp_path / "release").write_text("")
    runner.join(timeout=HANG_GUARD)
    assert not runner.is_alive(), f"hung: the batch did not end {HANG_GUARD} s after the kill"
    report = box["report"]

    assert report.dead_workers == 1 and report.requeued_chunks >= 1
    assert report.failed == 0 and report.completed == N
    assert [o.index for o in report.outcomes] == list(range(N))
    cp = PostgresCheckpointer(pg_dsn)
    try:
        runs = {r.run_id: r for r in cp.list_runs()}
        digest = config_digest(gc.to_config())
        ids = [run_id_for(digest, i, t) for i, t in enumerate(tasks)]
        assert sorted(runs) == sorted(ids)  # one run per task, every worker's in the one store
        for rid, want in zip(ids, expected):
            saved = cp.load(rid)  # no message written twice, each ended as it would uninterrupted
            assert ([(m.role, m.content) for m in saved.messages], saved.stop_reason) == want
    finally:
        cp.close()
    again = execute_batch(gc, tasks, executor="local", checkpoint_dir=store)  # all finished: no model call
    assert again.resumed == N and again.model_calls == 0
