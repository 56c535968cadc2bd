"""Ray's dead-worker requeue: a worker process killed while it runs a chunk (a task of it is held
inside a model call, so the kill is mid-chunk, not between chunks) has its chunks re-run on the
live worker; every task ends exactly once, with the results of a local run. Without the requeue
the held task's chunk ends as ``WorkerLost`` failures and this test fails."""
import os
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from fsmchat.patterns.distributed import execute_batch  # noqa: E402
from support.requeue import HANG_GUARD, HOLD, chat  # noqa: E402

N = 40


pytestmark = pytest.mark.usefixtures("local_ray")  # tests/integrations/conftest.py


def test_a_worker_killed_mid_chunk_has_its_chunks_rerun_once(tmp_path):
    tasks = [f"topic {i}" for i in range(N)]
    tasks[HOLD] = f"hold {tmp_path} topic"
    (tmp_path / "release").write_text("")
    expected = chat().run_batch(tasks)  # the local batch (nothing is held: released already)
    (tmp_path / "release").unlink()

    progress = []
    box = {}
    runner = threading.Thread(target=lambda: box.update(report=execute_batch(
        chat(), tasks, workers=2, max_concurrency_per_worker=4, chunk_size=5, on_progress=progress.append)))
    runner.start()
    pid_file = tmp_path / "pid"
    hung = time.monotonic() + HANG_GUARD
    while not pid_file.exists() and runner.is_alive():  # until the held task is inside a model call on a worker
        assert time.monotonic() < hung, f"hung: no worker reached the held task in {HANG_GUARD} s"
        time.sleep(0.05)
    assert pid_file.exists(), f"the batch ended without running the held task: {box}"
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    (tmp_path / "release").write_text("")  # the re-run of the held task on the live worker may finish
    runner.join(timeout=HANG_GUARD)
    assert not runner.is_alive(), f"hung: the batch did not end {HANG_GUARD} s after the kill"
    report = box["report"]

    assert report.dead_workers == 1 and report.requeued_chunks >= 1
    assert [o.index for o in report.outcomes] == list(range(N))  # one outcome per task, in order
    assert report.failed == 0 and report.completed == N
    assert report.results == expected
    held = report.outcomes[HOLD]
    assert held.ok and held.worker != "" and progress[-1].done == N
    assert len(progress[-1].live) == 1 and held.worker.startswith(str(progress[-1].live[0]))
