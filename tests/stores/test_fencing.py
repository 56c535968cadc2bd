"""Fenced ownership: every write of a run carries its owner's lease (a fencing token that only
grows) and is refused, in the same transaction, once another owner has taken the run over; a lost
or given-back lease is never taken again by its old holder. The paused-owner scenario: an owner
paused past its lease while a second process resumes the run to its end wakes up to ``LeaseLost``
before any model request, and the run stays exactly as the second owner left it."""
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

from fsmchat.store.checkpoint import (LEASE_TTL, Fence, LeaseLost, MemoryCheckpointer, RunInProgress,
                                      SqliteCheckpointer, lease_owner)
from fsmchat.errors import ConfigError, ConfigTypeError
from fsmchat.models import Message, TraceEvent
from fsmchat.testing import FunctionModel
from support.fencing import reply, swarm
from support.stores import STORES, reopen, write

TESTS = os.path.dirname(os.path.abspath(__file__))


# the run as its second owner leaves it (an uninterrupted run says the same)
FINAL = [("User", "go"), ("x", "x speaks at 2"), ("y", "y speaks at 3"), ("x", "x speaks at 4"),
         ("y", "y speaks at 5"), ("x", "x speaks at 6"), ("y", "y speaks at 7")]


def test_an_uninterrupted_run_is_the_final_transcript():
    chat, _ = swarm()
    assert [(m.role, m.content) for m in chat.execute("go").transcript] == FINAL


# ---- the store: tokens, fenced writes, renewals ----
@pytest.mark.parametrize("store", STORES)
def test_tokens_only_grow_and_a_replaced_owner_writes_nothing(open_store):
    cp = open_store()
    a, b = lease_owner(), lease_owner()
    ta = cp.acquire("R", a, 0.001)  # a lease that expires at once: as if its owner were paused
    fa = Fence("R", a, ta)
    cp.start("R", {"task": "go"}, fence=fa)
    write(cp, "R", TraceEvent(0, "seed", "next", "x", 0.0), [Message(role="User", content="go")], {"n": 1}, fence=fa)
    while True:  # the lease expires: b takes the run over (a is alive, so only expiry lets b in)
        try:
            tb = cp.acquire("R", b)
            break
        except RunInProgress:
            continue
    assert (ta, tb) == (1, 2)
    fb = Fence("R", b, tb)
    write(cp, "R", TraceEvent(1, "x", "next", "y", 0.1), [Message(role="x", content="b's")], {"n": 2}, fence=fb)
    with pytest.raises(LeaseLost, match=r"run 'R': this execute/resume no longer owns the run \(its fencing token 1; "
                                        r"the lease expired and was taken over by .*:.* \(fencing token 2\)\), so it "
                                        r"writes nothing more and sends no model request"):
        write(cp, "R", TraceEvent(1, "x", "next", "y", 0.1), [Message(role="x", content="a's")], {"n": 9}, fence=fa)
    for refused in (lambda: cp.renew(fa), lambda: cp.finish("R", "max_loops", fence=fa),
                    lambda: cp.start("R/1:par|1", {"parent": "R"}, fence=fa)):
        with pytest.raises(LeaseLost):
            refused()
    cp.release("R", b)
    with pytest.raises(LeaseLost, match=r"taken over and given back since \(fencing token 2\)"):
        cp.renew(fa)  # a lease given back by its new owner is not taken again by the old one
    with pytest.raises(LeaseLost, match=r"this owner gave the lease back"):
        cp.renew(fb)  # nor by the owner who gave it back
    assert cp.acquire("R", lease_owner()) == 3  # the next owner's token is larger still
    saved = reopen(cp).load("R")
    assert [m.content for m in saved.messages] == ["go", "b's"] and saved.stop_reason is None
    assert [e.state for e in saved.events] == ["seed", "x"] and saved.state == {"n": 2}
    assert "R/1:par|1" not in cp.runs()


@pytest.mark.parametrize("store", STORES)
def test_a_lease_given_back_is_never_taken_again_by_its_holder(open_store):
    from fsmchat.store.checkpoint import Lease

    cp = open_store()
    lease = Lease(cp, "R")
    lease.check()  # held: the check renews it
    lease.release()
    for again in (lease.check, lambda: cp.renew(lease.fence)):
        with pytest.raises(LeaseLost, match="this owner gave the lease back"):
            again()
    other = Lease(cp, "R")  # the run is free for a new owner, with a larger token
    assert (lease.fence.token, other.fence.token) == (1, 2)
    with pytest.raises(LeaseLost, match=r"taken over by .* \(fencing token 2\)"):
        cp.renew(lease.fence)


@pytest.mark.parametrize("store", STORES)
def test_a_refused_commit_writes_no_row_of_it(open_store, store):
    cp = open_store()
    old = Fence("R", lease_owner(), cp.acquire("R", lease_owner()))  # an owner the store never gave this token
    new = Fence("R", "other", 0)
    with pytest.raises(LeaseLost):
        cp.start("R", {}, fence=old)
    assert cp.runs() == []
    cp.start("R", {"task": "go"})
    for fence in (old, new):
        for messages in ([], [Message(role="x", content="1")], [Message(role="x", content="1"),
                                                                 Message(role="y", content="2")]):
            with pytest.raises(LeaseLost):
                write(cp, "R", TraceEvent(0, "seed", "next", "x", 0.0), messages, {"n": 1}, fence=fence,
                          earlier=[TraceEvent(0, "a", "next", "seed", 0.0)] if len(messages) == 2 else ())
    saved = reopen(cp).load("R")
    assert (saved.events, saved.messages, saved.state) == ([], [], None)
    if store != "memory":  # no row of them in the database either
        con = sqlite3.connect(cp.path) if store == "sqlite" else cp._db
        assert [con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("events", "messages")] == [0, 0]


@pytest.mark.parametrize("bad, kind", [(0, ConfigError), (-1, ConfigError), (float("inf"), ConfigError),
                                       (True, ConfigTypeError), ("30", ConfigTypeError), (None, ConfigTypeError)])
@pytest.mark.parametrize("store", STORES)
def test_lease_ttl_is_a_positive_number_of_seconds(open_store, bad, kind):
    with pytest.raises(kind, match=r"lease_ttl=.* is invalid: seconds a run's lease lasts without renewal, a "
                                   r"positive number \(default 30\)"):
        open_store(lease_ttl=bad)


@pytest.mark.parametrize("store", STORES)
def test_the_store_lease_ttl_is_the_lease_runs_take(tmp_path, store, open_store):
    cp = open_store(lease_ttl=120)
    seen = []

    def watch(ev):
        if ev.state == "x" and not seen:
            held = cp.leases["R"] if store == "memory" else tuple(sqlite3.connect(tmp_path / "runs.db").execute(
                "SELECT owner, expires FROM leases WHERE run_id='R'").fetchone()) if store == "sqlite" else \
                cp._db.execute("SELECT owner, expires FROM leases WHERE run_id='R'").fetchone()
            seen.append(held)

    chat, _ = swarm()
    chat.execute("go", checkpoint=cp, run_id="R", observers=[watch])
    created = cp.rows["R"].created if store == "memory" else cp.log("R").created
    assert 110 < seen[0][1] - created < 130  # (a 30 s default lease would end ~90 s earlier)


# ---- the paused owner ----
def expire(cp, store, db=None):
    """Simulate the owner's pause past its lease at the default TTL: move its expiry back by more
    than ``LEASE_TTL`` (what the clock would have done while the owner slept)."""
    if store == "memory":
        owner, expires = cp.leases["R"]
        cp.leases["R"] = (owner, expires - LEASE_TTL - 1)
    else:
        con = sqlite3.connect(db)
        con.execute("UPDATE leases SET expires = expires - ? WHERE run_id='R'", (LEASE_TTL + 1,))
        con.commit()
        con.close()


def take_over(chat, cp):
    """The second owner resumes the run to its end, as soon as the first one's lease has expired
    (the refused attempts write nothing); returns its result."""
    while True:
        try:
            return chat.resume("R", cp)
        except RunInProgress:
            continue


def stored(cp):
    saved = cp.load("R")
    return [(m.role, m.content) for m in saved.messages], [(e.state, e.trigger, e.dest) for e in saved.events], \
        saved.stop_reason, saved.state


@pytest.mark.parametrize("ttl", ["short", "default"])
@pytest.mark.parametrize("pause", ["after_a_commit", "inside_a_model_call"])
def test_a_paused_owner_wakes_to_lease_lost_in_memory(ttl, pause):
    cp = MemoryCheckpointer(lease_ttl=0.01) if ttl == "short" else MemoryCheckpointer()
    paused, wake = threading.Event(), threading.Event()

    def pausing_reply(request):
        if pause == "inside_a_model_call" and request.agent == "y" and len(request.messages) == 5 \
                and not paused.is_set():
            paused.set()
            wake.wait()
        return reply(request)

    def pause_after_commit(ev):
        if pause == "after_a_commit" and ev.state == "x" and ev.dest == "y" and ev.step == 3 and not paused.is_set():
            paused.set()
            wake.wait()

    chat, model = swarm(pausing_reply)
    outcome = {}

    def first_owner():
        try:
            outcome["result"] = chat.execute("go", checkpoint=cp, run_id="R", observers=[pause_after_commit])
        except BaseException as exc:  # what the woken owner gets
            outcome["error"] = exc

    a = threading.Thread(target=first_owner)
    a.start()
    paused.wait()
    if ttl == "default":
        expire(cp, "memory")
    done = take_over(chat, cp)  # (one model object: its requests are every request, both owners')
    assert [(m.role, m.content) for m in done.transcript] == FINAL and done.stop_reason == "max_loops"
    left, requests = stored(cp), model.calls()
    wake.set()
    a.join()
    assert "result" not in outcome and isinstance(outcome["error"], LeaseLost), outcome
    assert model.calls() == requests  # the woken owner sent no request
    assert stored(cp) == left and left[0] == FINAL and left[2] == "max_loops"  # exactly as the second owner left it
    assert chat.resume("R", cp).transcript == done.transcript  # and it resumes as finished


OWNER = textwrap.dedent('''
    import os, signal, sys
    sys.path.insert(0, os.path.dirname(sys.argv[4]))  # tests/ (the support package)
    from fsmchat.store.checkpoint import LEASE_TTL, SqliteCheckpointer
    from support.fencing import reply, swarm

    db, pause, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
    seen = {"paused": False}

    def pause_here():
        seen["paused"] = True
        print("PAUSED", model.calls(), flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # paused, as by a debugger, a swap storm or a VM freeze

    def pausing_reply(request):
        if pause == "inside_a_model_call" and request.agent == "y" and len(request.messages) == 5 \\
                and not seen["paused"]:
            pause_here()
        return reply(request)

    def pause_after_commit(ev):
        if pause == "after_a_commit" and ev.state == "x" and ev.dest == "y" and ev.step == 3 and not seen["paused"]:
            pause_here()

    chat, model = swarm(pausing_reply)
    try:
        chat.execute("go", checkpoint=SqliteCheckpointer(db, lease_ttl=ttl), run_id="R", observers=[pause_after_commit])
        print("RAN TO THE END", model.calls(), flush=True)
    except Exception as exc:
        print("WOKE TO", type(exc).__name__, model.calls(), flush=True)
''')


def dump(db):
    con = sqlite3.connect(db)
    try:
        return list(con.iterdump())
    finally:
        con.close()


@pytest.mark.parametrize("ttl", ["short", "default"])
@pytest.mark.parametrize("pause", ["after_a_commit", "inside_a_model_call"])
def test_a_sigstopped_owner_wakes_to_lease_lost_and_the_run_stays_as_the_second_owner_left_it(tmp_path, ttl, pause):
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    db = tmp_path / "runs.db"
    proc = subprocess.Popen([sys.executable, str(script), str(db), pause, "0.01" if ttl == "short" else str(LEASE_TTL),
                             TESTS], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert line[0] == "PAUSED", (line, proc.stderr.read() if proc.poll() is not None else "")
        calls_before = int(line[1])
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)  # the owner is stopped, its lease unrenewed
        cp = SqliteCheckpointer(db)
        if ttl == "default":
            with pytest.raises(RunInProgress):  # the paused owner still holds the run
                swarm()[0].resume("R", cp)
            expire(cp, "sqlite", db)
        done = take_over(swarm()[0], cp)
        assert [(m.role, m.content) for m in done.transcript] == FINAL and done.stop_reason == "max_loops"
        left = dump(db)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    woke = out.split()
    assert woke[:3] == ["WOKE", "TO", "LeaseLost"], (out, err[-2000:])
    assert int(woke[3]) == calls_before  # not one request after waking
    assert dump(db) == left  # nothing written: the run is exactly as the second owner left it
    saved = SqliteCheckpointer(db).load("R")
    assert [(m.role, m.content) for m in saved.messages] == FINAL and saved.stop_reason == "max_loops"


def bidding(request):
    """Bids for a GroupChat: the agent whose turn it is (by the conversation's length) bids high."""
    names = ["a", "b", "c"]
    turn = len(request.messages)
    if request.tool_choice is not None or request.response_format is not None:
        from fsmchat import Bid
        return Bid(0.9 if names[turn % 3] == request.agent else 0.2, f"{request.agent} bids at {turn}")
    return f"{request.agent} at {turn}"


def test_a_paused_group_chat_owner_sends_no_bid_after_waking():
    """The paused owner's next step is a bid round: each of its three requests is refused before it is sent."""
    from fsmchat import GroupChat

    model = FunctionModel(bidding, id="fenced-chat")
    chat = GroupChat(agents=[model.agent(n) for n in ("a", "b", "c")], max_loops=4)
    cp = MemoryCheckpointer()
    paused, wake = threading.Event(), threading.Event()

    def pause_after_the_first_post(ev):
        if ev.state == "post" and ev.dest is not None and not paused.is_set():
            paused.set()
            wake.wait()

    outcome = {}

    def first_owner():
        try:
            outcome["result"] = chat.execute("pets?", checkpoint=cp, run_id="R", observers=[pause_after_the_first_post])
        except BaseException as exc:
            outcome["error"] = exc

    a = threading.Thread(target=first_owner)
    a.start()
    paused.wait()
    expire(cp, "memory")
    done = take_over(chat, cp)
    assert [(m.role, m.content) for m in done.transcript] == [("User", "pets?"), ("c", "c bids at 2"),
                                                              ("a", "a bids at 3"), ("b", "b bids at 4")]
    assert done.stop_reason == "max_loops" and done.calls == 9  # three bid rounds, the first one by the first owner
    left, requests = stored(cp), model.calls()
    wake.set()
    a.join()
    assert isinstance(outcome.get("error"), LeaseLost), outcome
    assert model.calls() == requests and stored(cp) == left  # no bid sent, nothing written
