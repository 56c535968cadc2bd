"""One store protocol, every store: memory, SQLite, PostgreSQL (a throwaway server, tests/support/pg.py) and
a third-party store in one small file (tests/support/dict_store.py) run the same cases; a case that needs a
capability (leases, history, lanes) is skipped on a store that does not declare it. Each case is written once and parametrised over ``STORES``; the lease and
fencing cases are in tests/stores/test_fencing.py, the several-messages commits in tests/stores/test_checkpoint.py."""
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from fsmchat import Agent, Bid, GroupChat, Human, RoundRobinSwarm, fork
from fsmchat.store.checkpoint import RunInProgress, lease_owner
from fsmchat.errors import CheckpointStoreError, ConfigTypeError
from fsmchat.models import Message, TraceEvent
from support.stores import CONFORMANCE, needs, reopen, write


def writer(turn):
    return "Draft: we launch in May."


def bidders(fail_at=0):
    """A GroupChat of two callable bidders taking turns; the ``fail_at``-th bid of b raises."""
    bids = {"n": 0}

    def a(turn):
        n = len(turn.transcript)
        return Bid(0.9 if n % 2 else 0.2, f"a says {n}") if turn.kind == "bid" else f"a says {n}"

    def b(turn):
        n = len(turn.transcript)
        if turn.kind == "bid":
            bids["n"] += 1
            if bids["n"] == fail_at:
                raise RuntimeError("b's tool is down")
            return Bid(0.2 if n % 2 else 0.9, f"b says {n}")
        return f"b says {n}"

    return GroupChat(agents=[a, b], max_loops=6, threshold=0.1)


def swarm():
    return RoundRobinSwarm(agents=[writer, Human("editor")])


@pytest.mark.parametrize("store", CONFORMANCE)
def test_a_waiting_run_is_listed_resumed_and_its_history_read_from_a_new_connection(open_store):
    cp = open_store()
    needs(cp, "history")
    assert swarm().execute("Announce the launch.", checkpoint=cp, run_id="launch").stop_reason == "interrupted"
    [info] = reopen(cp).list_runs()
    assert (info.run_id, info.pattern, info.task, info.status, info.messages) == (
        "launch", "RoundRobinSwarm", "Announce the launch.", "waiting", 2)
    done = swarm().resume("launch", reopen(cp), input="Approved: ship it.")
    assert [(m.role, m.content) for m in done.transcript] == [
        ("User", "Announce the launch."), ("writer", "Draft: we launch in May."), ("editor", "Approved: ship it.")]
    again = reopen(cp)
    saved = again.load("launch")
    assert saved.finished and saved.stop_reason == "max_loops"
    steps = again.history("launch")
    assert [s.message_count for s in steps][-1] == 3 and steps[0].message_count == 1
    assert again.list_runs()[0].status == "finished"
    assert swarm().resume("launch", again).output == "Approved: ship it."  # rebuilt, no call made


@pytest.mark.parametrize("store", CONFORMANCE)
def test_a_run_id_is_used_once(open_store):
    cp = open_store()
    cp.start("job", {"task": "one"})
    with pytest.raises(ValueError, match="run id 'job' is already checkpointed; resume it"):
        reopen(cp).start("job", {"task": "two"})
    assert reopen(cp).load("job").meta == {"task": "one"}
    with pytest.raises(KeyError, match="no checkpointed run 'nope'"):
        cp.load("nope")


@pytest.mark.parametrize("store", CONFORMANCE)
def test_lanes_are_the_runs_under_a_run_id_and_list_runs_leaves_them_out(open_store):
    cp = open_store()
    needs(cp, "history", "lanes")
    for run_id, meta in [("R", {"task": "t"}), ("R/1:a|0", {"parent": "R"}), ("R/1:a|0/2:b|1", {"parent": "R/1:a|0"}),
                         ("Rx", {"task": "u"}), ("R0", {"task": "v"}), ("Q/1:a|0", {"parent": "Q"})]:
        cp.start(run_id, meta)
    again = reopen(cp)
    assert again.lanes("R") == ["R/1:a|0", "R/1:a|0/2:b|1"]
    assert again.runs() == ["R", "R/1:a|0", "R/1:a|0/2:b|1", "Rx", "R0", "Q/1:a|0"]
    assert [r.run_id for r in again.list_runs()] == ["R0", "Rx", "R"]  # newest first


@pytest.mark.parametrize("store", CONFORMANCE)
def test_a_fork_is_written_to_the_store_and_resumes(open_store):
    cp = open_store()
    needs(cp, "history", "lanes")
    swarm().execute("Announce the launch.", checkpoint=cp, run_id="launch")
    swarm().resume("launch", cp, input="Approved: ship it.")
    new = fork("launch", 1, reopen(cp), fork_id="launch-2")
    again = reopen(cp)
    assert again.load(new).meta["forked_from"] == {"run_id": "launch", "step": 1}
    assert [m.content for m in again.load(new).messages] == ["Announce the launch.", "Draft: we launch in May."]
    assert swarm().resume(new, again).stop_reason == "interrupted"  # the editor is asked again
    done = swarm().resume(new, again, input="Say June instead.")
    assert [m.content for m in done.transcript][-1] == "Say June instead."
    assert [m.content for m in reopen(cp).load("launch").messages][-1] == "Approved: ship it."  # untouched


@pytest.mark.parametrize("store", CONFORMANCE)
def test_two_owners_racing_for_one_run_get_it_once(open_store):
    """Two connections acquire the same free run at once: one gets token 1, the other is refused."""
    cp = open_store()
    needs(cp, "leases")
    other = reopen(cp)
    barrier = threading.Barrier(2)
    got, refused = [], []

    def take(store):
        barrier.wait()
        try:
            got.append(store.acquire("R", lease_owner()))
        except RunInProgress:
            refused.append(True)

    threads = [threading.Thread(target=take, args=(s,)) for s in (cp, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (got, refused) == ([1], [True])


@pytest.mark.parametrize("store", CONFORMANCE)
def test_a_commit_clears_the_stop_reason_and_counts_follow_the_rows(open_store):
    cp = open_store()
    cp.start("R", {})
    write(cp, "R", TraceEvent(0, "seed", "next", "x", 0.0), [Message(role="User", content="go")], {"n": 1})
    cp.finish("R", "interrupted")
    assert reopen(cp).load("R").stop_reason == "interrupted"
    later = reopen(cp)  # another process continues the run
    write(later, "R", TraceEvent(1, "x", "next", "end", 0.1), [Message(role="x", content="done")], {"n": 2})
    saved = reopen(cp).load("R")
    assert (saved.stop_reason, [m.content for m in saved.messages], saved.state) == (None, ["go", "done"], {"n": 2})
    assert [s.message_count for s in reopen(cp).history("R")] == [1, 2]


@pytest.mark.parametrize("store", CONFORMANCE)
def test_a_run_checkpointed_step_by_step_resumes_where_it_was_cut_and_a_finished_one_is_rebuilt(open_store):
    """The protocol itself (start, append, finish, log, load, history): no capability needed."""
    cp = open_store()
    assert swarm().execute("Announce the launch.", checkpoint=cp, run_id="launch").stop_reason == "interrupted"
    saved = reopen(cp).load("launch")
    assert (saved.stop_reason, saved.resume_at, [m.role for m in saved.messages]) == ("interrupted", "editor",
                                                                                    ["User", "writer"])
    done = swarm().resume("launch", reopen(cp), input="Approved: ship it.")
    assert [m.content for m in done.transcript] == ["Announce the launch.", "Draft: we launch in May.",
                                                    "Approved: ship it."]
    assert [(s.state, s.message_count) for s in reopen(cp).history("launch")] == [
        ("seed", 1), ("writer", 2), ("editor", 3), ("stop", 3)]
    assert swarm().resume("launch", reopen(cp)).output == "Approved: ship it."  # rebuilt, no call made


@pytest.mark.parametrize("store", CONFORMANCE)
def test_a_group_chat_cut_by_a_failure_resumes_to_the_uncut_transcript(open_store):
    cp = open_store()
    full = bidders().execute("pets?")
    cut = bidders(fail_at=3).execute("pets?", checkpoint=cp, run_id="cut")
    assert cut.stop_reason == "error" and reopen(cp).load("cut").stop_reason == "error"
    assert [m.content for m in bidders().resume("cut", reopen(cp)).transcript] == [m.content for m in full.transcript]


def test_a_postgres_store_refuses_a_non_str_dsn_and_an_unreachable_server(pg_cluster):
    from fsmchat.store.postgres import PostgresCheckpointer

    with pytest.raises(ConfigTypeError, match=r"dsn=5 is invalid: a libpq connection string or URI"):
        PostgresCheckpointer(5)
    closed = f"host=127.0.0.1 port={pg_cluster.port} user=fsmchat dbname=absent password=hunter2"
    with pytest.raises(CheckpointStoreError, match=r"checkpoint store PostgreSQL host=127.0.0.1 port=\d+ "
                                                   r"dbname=absent user=fsmchat: OperationalError") as err:
        PostgresCheckpointer(closed)
    assert "hunter2" not in str(err.value)


# ---- a run killed mid-turn on PostgreSQL resumes to the uninterrupted transcript ----
def chat():
    return GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs."),
                             Agent("c", system_prompt="You love birds and feathers.")], max_loops=8)


KILLED = textwrap.dedent('''
    import os, sys
    from fsmchat import Agent, GroupChat
    from fsmchat.store.postgres import PostgresCheckpointer
    chat = GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs."),
                             Agent("c", system_prompt="You love birds and feathers.")], max_loops=8)
    bids = []
    def killed_after_the_bid_round(ev):  # dies mid-turn: bids in, the winner not posted yet
        if ev.state == "bid" and ev.dest == "select":
            bids.append(ev)
            if len(bids) == int(sys.argv[2]):
                os.kill(os.getpid(), 9)
    chat.execute("pets?", checkpoint=PostgresCheckpointer(sys.argv[1]), run_id="mid",
                 observers=[killed_after_the_bid_round])
''')


@pytest.mark.parametrize("k", [1, 3])
def test_a_group_chat_killed_mid_turn_on_postgres_resumes_to_the_same_transcript(tmp_path, pg_dsn, k):
    from fsmchat.store.postgres import PostgresCheckpointer

    full = chat().execute("pets?")
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    proc = subprocess.run([sys.executable, str(script), pg_dsn, str(k)], env={**os.environ}, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    cp = PostgresCheckpointer(pg_dsn)
    saved = cp.load("mid")
    assert saved.stop_reason is None and saved.resume_at == ("bid" if k == 1 else "penalize")
    assert [m.content for m in saved.messages] == [m.content for m in full.transcript[:k]]  # the task, k - 1 posts
    assert saved.state["stats"]["calls"] == 3 * (k - 1)  # three bids per committed turn
    resumed = chat().resume("mid", cp)  # the dead owner's lease (this host, no such process) is taken at once
    assert [(m.role, m.content) for m in resumed.transcript] == [(m.role, m.content) for m in full.transcript]
    assert resumed.calls == full.calls == 3 * (len(full.transcript) - 1)  # no committed bid asked twice
    assert resumed.path == full.path and resumed.stop_reason == full.stop_reason
    assert reopen(cp).load("mid").finished


def test_a_postgres_takeover_waits_for_a_write_in_flight_then_refuses_the_old_owner(pg_dsn):
    """A write holds its run's lease row FOR SHARE for its whole transaction: a new owner's acquire
    (the old lease expired) waits for it instead of slipping in between the check and the rows, and
    the old owner's next write is refused."""
    import psycopg

    from fsmchat.store.checkpoint import Fence, LeaseLost
    from fsmchat.store.postgres import _HOLDS, PostgresCheckpointer  # the check every write opens with

    cp = PostgresCheckpointer(pg_dsn)
    a = lease_owner()
    fa = Fence("R", a, cp.acquire("R", a, 0.001))  # expires at once: as if its owner were paused
    cp.start("R", {}, fence=fa)
    writer = psycopg.connect(pg_dsn)  # the old owner's commit, mid-transaction, after its fence check
    assert writer.execute(_HOLDS, ("R", a, fa.token)).fetchone() == (1,)
    other = PostgresCheckpointer(pg_dsn)
    got = []
    taker = threading.Thread(target=lambda: got.append(other.acquire("R", lease_owner())))
    taker.start()
    watch = psycopg.connect(pg_dsn, autocommit=True)
    while not watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                            "query LIKE 'SELECT owner, expires, token FROM leases%%'").fetchone()[0]:
        assert taker.is_alive() and got == [], "the takeover did not wait for the write in flight"
    writer.commit()  # the old owner's write ends: the takeover goes ahead
    taker.join()
    assert got == [2]
    with pytest.raises(LeaseLost, match=r"taken over by .* \(fencing token 2\)"):
        write(cp, "R", TraceEvent(0, "seed", "next", "x", 0.0), [Message(role="User", content="late")], {"n": 1},
                  fence=fa)
    assert reopen(cp).load("R").messages == []
    for con in (writer, watch):
        con.close()


def test_a_store_is_checked_against_the_protocol_and_the_capabilities_it_declares():
    from fsmchat.store.protocol import Capabilities
    from support.dict_store import DictStore

    class OldProtocol:  # start, commit, finish, load: what stores implemented before the writer made the rows
        def start(self, run_id, meta): ...

        def commit(self, run_id, event, messages, state): ...

        def finish(self, run_id, stop_reason): ...

        def load(self, run_id): ...

    with pytest.raises(ConfigTypeError, match=r"has commit\(run_id, event, messages, state\), the older protocol"):
        swarm().execute("go", checkpoint=OldProtocol())

    class ClaimsLeases(DictStore):
        capabilities = Capabilities(leases=True)

    with pytest.raises(ConfigTypeError, match=r"it lacks acquire, renew, release for the capabilities it declares"):
        swarm().execute("go", checkpoint=ClaimsLeases())
