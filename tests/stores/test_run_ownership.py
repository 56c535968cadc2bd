"""One owner per run, resume checks what it resumes, and store errors that name the store."""
import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from fsmchat import Agent, AgentFlow, GroupChat, RoundRobinSwarm
from fsmchat.store.checkpoint import (CheckpointMismatch, CheckpointStoreError, MemoryCheckpointer, RunInProgress,
                                SqliteCheckpointer)
from support.checkpoints import chat, interrupt_after


def slow_chat():
    """The offline chat with a little model latency, so two resumes overlap."""
    return chat()


def counts(db, run_id):
    con = sqlite3.connect(db)
    try:
        return tuple(con.execute(f"SELECT COUNT(*) FROM {t} WHERE run_id=?", (run_id,)).fetchone()[0]
                     for t in ("events", "messages"))
    finally:
        con.close()


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_two_concurrent_resumes_one_refused_store_holds_the_uninterrupted_run(tmp_path, store, monkeypatch):
    full = chat().execute("pets?")
    cp = SqliteCheckpointer(tmp_path / "runs.db") if store == "sqlite" else MemoryCheckpointer()
    interrupt_after(chat(), "pets?", cp, "R", "post", 1)
    monkeypatch.setenv("FSMCHAT_OFFLINE_DELAY", "0.02")

    async def both():
        return await asyncio.gather(chat().aresume("R", cp), chat().aresume("R", cp), return_exceptions=True)

    first, second = asyncio.run(both())
    assert not isinstance(first, BaseException), first
    assert isinstance(second, RunInProgress) and "run 'R' is in progress elsewhere" in str(second)
    assert second.run_id == "R"
    assert [(m.role, m.content) for m in first.transcript] == [(m.role, m.content) for m in full.transcript]
    saved = cp.load("R")
    assert [(m.role, m.content) for m in saved.messages] == [(m.role, m.content) for m in full.transcript]
    assert saved.stop_reason == full.stop_reason
    # the lease is given back: a later resume rebuilds the finished run, no duplicate rows
    again = chat().resume("R", cp)
    assert [m.content for m in again.transcript] == [m.content for m in full.transcript]
    if store == "sqlite":
        assert counts(tmp_path / "runs.db", "R")[1] == len(full.transcript)


def test_a_second_execute_of_a_running_id_is_refused_before_any_call():
    cp = MemoryCheckpointer()
    calls = []

    async def slow(turn):
        calls.append(turn.agent)
        await asyncio.sleep(0.2)
        return "x"

    def rr():
        return RoundRobinSwarm(agents=[slow], max_loops=2)

    async def both():
        first = asyncio.ensure_future(rr().aexecute("go", checkpoint=cp, run_id="R"))
        while not calls:  # the first run holds the id and is inside its first call
            await asyncio.sleep(0.001)
        with pytest.raises(RunInProgress):
            await rr().aexecute("go", checkpoint=cp, run_id="R")
        n = len(calls)
        return await first, n

    res, calls_when_refused = asyncio.run(both())
    assert res.ok and calls_when_refused == 1 and len(calls) == 2  # the refused run made no call


HOLDER = textwrap.dedent('''
    import sys
    from fsmchat import RoundRobinSwarm
    from fsmchat.store.checkpoint import SqliteCheckpointer
    import time

    def slow(turn):
        print("TURN", flush=True)
        time.sleep(30)
        return "late"

    RoundRobinSwarm(agents=[slow], max_loops=1).execute("go", checkpoint=SqliteCheckpointer(sys.argv[1]), run_id="R")
''')


def test_another_process_is_refused_while_the_owner_lives_and_takes_over_once_it_died(tmp_path):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    db = tmp_path / "runs.db"
    proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "TURN"  # the owner is inside its first turn
        cp = SqliteCheckpointer(db)
        other = RoundRobinSwarm(agents=[lambda turn: "mine"], max_loops=1)
        other_fp = RoundRobinSwarm(agents=[_slow_named()], max_loops=1)
        with pytest.raises(RunInProgress, match=r"run 'R' is in progress elsewhere \(lease held by "):
            other_fp.resume("R", cp)
        assert counts(db, "R") == (1, 1)  # nothing written by the refused resume
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        res = other_fp.resume("R", cp)  # the dead owner's lease is taken over at once
        assert res.ok and [m.content for m in res.transcript] == ["go", "fast"]
        del other
    finally:
        if proc.poll() is None:
            proc.kill()


def _slow_named():
    def slow(turn):
        return "fast"
    return slow


# ---- resume checks what it resumes ----
def interrupted_chat(cp):
    interrupt_after(chat(), "pets?", cp, "R", "post", 1)


def test_resume_with_other_agents_is_refused_and_writes_nothing(tmp_path):
    db = tmp_path / "runs.db"
    cp = SqliteCheckpointer(db)
    interrupted_chat(cp)
    before = counts(db, "R")
    others = GroupChat(agents=[Agent("a", system_prompt="x"), Agent("z", system_prompt="y"),
                               Agent("c", system_prompt="w")], max_loops=8)
    with pytest.raises(CheckpointMismatch, match=r"run 'R' was checkpointed by a different GroupChat than the "
                                                 r"GroupChat resuming it; .*speakers: stored \[\['a', "):
        others.resume("R", cp)
    assert counts(db, "R") == before
    with pytest.raises(CheckpointMismatch, match=r"pattern: stored 'GroupChat', now 'RoundRobinSwarm'"):
        RoundRobinSwarm(agents=[Agent("a")]).resume("R", cp)
    with pytest.raises(CheckpointMismatch, match=r"pattern: stored 'GroupChat', now 'AgentFlow'"):
        AgentFlow(steps=[lambda ctx: "x"]).resume("R", cp)
    with pytest.raises(CheckpointMismatch, match=r"limits: stored None"):
        chat().with_limits(max_model_calls=3).resume("R", cp)
    assert counts(db, "R") == before
    assert chat().resume("R", cp).ok  # the pattern that started it resumes it


# ---- store errors ----
def test_store_errors_name_the_store_and_what_to_do(tmp_path):
    bad = tmp_path / "corrupt.db"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(CheckpointStoreError, match=rf"checkpoint store {bad}: DatabaseError: file is not a database; "
                                                   r"the file is corrupted or not SQLite"):
        SqliteCheckpointer(bad)
    missing = tmp_path / "no" / "such" / "dir" / "runs.db"
    with pytest.raises(CheckpointStoreError, match=rf"checkpoint store {missing}: OperationalError: unable to open "
                                                   r"database file; the file or its directory is not writable"):
        SqliteCheckpointer(missing)
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE runs (x)")
    con.commit()
    con.close()
    with pytest.raises(CheckpointStoreError, match=rf"checkpoint store {other}: not an fsmchat checkpoint database"):
        SqliteCheckpointer(other)


def test_a_read_only_store_loads_and_rebuilds_finished_runs(tmp_path):
    db = tmp_path / "runs.db"
    cp = SqliteCheckpointer(db)
    full = chat().execute("pets?", checkpoint=cp, run_id="done")
    interrupted = MemoryCheckpointer()
    cp.close()
    size = db.stat().st_size
    ro = SqliteCheckpointer(db, read_only=True)
    rebuilt = chat().resume("done", ro)
    assert [m.content for m in rebuilt.transcript] == [m.content for m in full.transcript]
    assert rebuilt.stop_reason == full.stop_reason
    with pytest.raises(CheckpointStoreError, match=r"is read-only: it can load and rebuild finished runs, but cannot "
                                                   r"run or resume"):
        chat().execute("again", checkpoint=ro, run_id="new")
    assert db.stat().st_size == size and interrupted.data == {}


RESUMER = textwrap.dedent('''
    import os, sys
    sys.path.insert(0, os.path.dirname(sys.argv[2]))  # tests/ (the support package)
    from fsmchat.store.checkpoint import RunInProgress, SqliteCheckpointer
    from support.checkpoints import chat
    try:
        res = chat().resume("R", SqliteCheckpointer(sys.argv[1]))
        print("OK", res.stop_reason, len(res.transcript), flush=True)
    except RunInProgress as exc:
        print("REFUSED", exc.run_id, flush=True)
''')


def test_two_processes_resume_one_run_the_store_ends_with_the_uninterrupted_run(tmp_path):
    full = chat().execute("pets?")
    db = tmp_path / "runs.db"
    interrupt_after(chat(), "pets?", SqliteCheckpointer(db), "R", "post", 1)
    script = tmp_path / "resume.py"
    script.write_text(RESUMER)
    env = dict(os.environ, FSMCHAT_OFFLINE_DELAY="0.05")
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    procs = [subprocess.Popen([sys.executable, str(script), str(db), tests_dir], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    lines = sorted(o[0].strip() for o in outs)
    # both started while the other ran: one continued the run, the other was refused at once
    # (had the second started after the first ended, it would have rebuilt the finished run)
    assert lines[0] == f"OK {full.stop_reason} {len(full.transcript)}"
    assert lines[1] in ("REFUSED R", lines[0])
    saved = SqliteCheckpointer(db).load("R")
    assert [(m.role, m.content) for m in saved.messages] == [(m.role, m.content) for m in full.transcript]
    # the full path once, plus the one record of the interruption (the cancelled step, dest None):
    # the observer's cancel() after the first post is taken at the next step boundary, before penalize
    assert [e.state for e in saved.events if e.dest is not None] + ["stop"] == full.path
    assert [(e.state, e.dest) for e in saved.events if e.dest is None] == [("penalize", None), ("stop", None)]
    assert saved.stop_reason == full.stop_reason and counts(db, "R") == (len(full.trace) + 1, len(full.transcript))
    rebuilt = chat().resume("R", SqliteCheckpointer(db))
    assert rebuilt.path == full.path and rebuilt.calls == full.calls


PG_HOLDER = textwrap.dedent('''
    import sys, time
    from fsmchat import RoundRobinSwarm
    from fsmchat.store.postgres import PostgresCheckpointer

    def first(turn):
        return "one"

    def second(turn):
        print("TURN", flush=True)  # "one" is committed: the test kills this process here
        time.sleep(60)
        return "never"

    RoundRobinSwarm(agents=[first, second], max_loops=1).execute(
        "go", checkpoint=PostgresCheckpointer(sys.argv[1]), run_id="pg-race")
''')


def test_two_competing_resumes_of_a_sigkilled_run_on_postgres_one_wins_once(tmp_path, pg_dsn):
    from fsmchat.store.postgres import PostgresCheckpointer

    script = tmp_path / "holder.py"
    script.write_text(PG_HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), pg_dsn], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "TURN"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    asked: list[str] = []

    def first(turn):
        asked.append("first")
        return "one"

    async def second(turn):
        asked.append("second")
        await asyncio.sleep(0.05)  # the winner is inside its turn while the other resume asks for the run
        return "two"

    def resume(cp):
        return RoundRobinSwarm(agents=[first, second], max_loops=1).aresume("pg-race", cp)

    async def both():
        a, b = PostgresCheckpointer(pg_dsn), PostgresCheckpointer(pg_dsn)  # two connections, two owners
        return await asyncio.gather(resume(a), resume(b), return_exceptions=True)

    results = asyncio.run(both())
    won = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, RunInProgress)]
    assert len(won) == 1 and len(refused) == 1, results
    assert "run 'pg-race' is in progress elsewhere" in str(refused[0])
    assert [m.content for m in won[0].transcript] == ["go", "one", "two"] and won[0].ok
    assert asked == ["second"]  # the committed turn was not asked again; the cut one once
    saved = PostgresCheckpointer(pg_dsn).load("pg-race")
    assert [m.content for m in saved.messages] == ["go", "one", "two"] and saved.stop_reason == won[0].stop_reason
