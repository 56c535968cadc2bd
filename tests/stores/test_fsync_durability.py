"""The power-loss-durable SQLite mode (``SqliteCheckpointer(path, durability="fsync")``): commits go
through one writer thread with ``synchronous=FULL``; a run's next step waits for its commit's
fsync without holding the event loop; concurrent runs' commits share fsyncs; every commit a run
went on from is in the file after the process is killed."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from fsmchat import RoundRobinSwarm
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.errors import ConfigError

CALLS = {"n": 0}


def counted(turn):
    CALLS["n"] += 1
    return f"step {CALLS['n']}"


def swarm(loops=3):
    return RoundRobinSwarm(agents=[counted], max_loops=loops)


def test_a_commit_waits_for_its_fsync_while_the_event_loop_goes_on(tmp_path):
    store = SqliteCheckpointer(tmp_path / "runs.db", durability="fsync")
    syncing, release = threading.Event(), threading.Event()

    def held_sync():  # on the writer thread, before each COMMIT (its fsync)
        syncing.set()
        release.wait()

    store.group.before_sync = held_sync
    CALLS["n"] = 0

    async def main():
        run = asyncio.create_task(swarm().aexecute("go", checkpoint=store, run_id="R"))
        while not syncing.is_set():
            await asyncio.sleep(0)
        ticks = 0
        for _ in range(50):  # the loop keeps running while the seed step's commit waits for its sync
            await asyncio.sleep(0)
            ticks += 1
        assert (ticks, run.done(), CALLS["n"]) == (50, False, 0)  # the run did not go on to its first turn
        release.set()
        return await run

    res = asyncio.run(main())
    assert res.stop_reason == "max_loops" and [m.content for m in res.transcript] == ["go", "step 1", "step 2",
                                                                                     "step 3"]
    store.close()
    saved = SqliteCheckpointer(tmp_path / "runs.db").load("R")
    assert (saved.stop_reason, len(saved.messages)) == ("max_loops", 4)


def test_concurrent_runs_share_fsyncs(tmp_path):
    store = SqliteCheckpointer(tmp_path / "runs.db", durability="fsync")
    started, first = threading.Event(), []

    def first_sync_waits():  # the first sync waits until every run has queued a commit
        if not first:
            first.append(True)
            started.wait()

    store.group.before_sync = first_sync_waits
    runs = 8
    queued = set()

    async def main():
        chats = [RoundRobinSwarm(agents=[counted], max_loops=3, name=f"chat{i}") for i in range(runs)]

        def observer(i):
            def obs(ev):
                queued.add(i)
                if len(queued) == runs:
                    started.set()
            return obs

        return await asyncio.gather(*(c.aexecute("go", checkpoint=store, run_id=f"R{i}", observers=[observer(i)])
                                      for i, c in enumerate(chats)))

    results = asyncio.run(main())
    assert all(r.stop_reason == "max_loops" for r in results)
    writes, syncs = store.group.writes, store.group.syncs
    store.close()
    assert writes == runs * 6  # per run: seed, three turns, stop, and its end
    assert syncs < writes, (syncs, writes)
    again = SqliteCheckpointer(tmp_path / "runs.db")
    assert [len(again.load(f"R{i}").messages) for i in range(runs)] == [4] * runs


KILLED = textwrap.dedent('''
    import asyncio, sys
    from fsmchat import RoundRobinSwarm
    from fsmchat.store.checkpoint import SqliteCheckpointer

    store = SqliteCheckpointer(sys.argv[1], durability="fsync")

    def agent(name):
        def speak(turn):
            # this step runs only after the previous step's commit is on disk: those messages are acknowledged
            print(name, len(turn.transcript), flush=True)
            return f"{name} {len(turn.transcript)}"
        speak.__name__ = name
        return speak

    async def main():
        await asyncio.gather(*(RoundRobinSwarm(agents=[agent(f"w{i}")], max_loops=10_000).aexecute(
            "go", checkpoint=store, run_id=f"R{i}") for i in range(4)))

    asyncio.run(main())
''')


def test_every_acknowledged_commit_is_in_the_file_after_a_sigkill(tmp_path):
    db = tmp_path / "runs.db"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(db)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    acked = {}
    for line in proc.stdout:
        name, count = line.split()
        acked[name] = int(count)
        if sum(acked.values()) >= 200:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = SqliteCheckpointer(db)
    stored = {f"w{i}": len(store.load(f"R{i}").messages) for i in range(4)}
    assert all(stored[name] >= count for name, count in acked.items()), (acked, stored)


def test_durability_is_normal_or_fsync(tmp_path):
    with pytest.raises(ConfigError, match=r"durability='full' is invalid: 'normal' \(survives a killed process\) "
                                          r"or 'fsync'"):
        SqliteCheckpointer(tmp_path / "runs.db", durability="full")
