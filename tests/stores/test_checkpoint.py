"""Checkpoints and resume: deltas per transition, resume equals an uninterrupted run, crash safety."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fsmchat import Agent, AgentFlow, Discussion, RoundRobinSwarm, loop
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer
from fsmchat.testing import assert_trace_is_path
from support.checkpoints import chat, interrupt_after
from support.stores import STORES, reopen, write

ROOT = Path(__file__).resolve().parents[2]


def flow():
    critic = Agent("critic", system_prompt="Critique this item: {{item}}")
    author = Agent("author", system_prompt="Revise this item: {{item}}")
    return AgentFlow(steps=[loop(steps=[Discussion([critic, author], rounds=2)], over="items")],
                     variables={"items": ["draft A", "draft B"]})


@pytest.mark.parametrize("make, task, state", [(chat, "pets?", "post"), (flow, "Refine each draft", "loop.body.discussion.turn"),
                                               (lambda: RoundRobinSwarm(agents=[Agent("x", system_prompt="You plan."),
                                                                                Agent("y", system_prompt="You build.")],
                                                                        max_loops=3), "ship it", "x")])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_resume_equals_uninterrupted_run(tmp_path, make, task, state, k):
    full = make().execute(task)
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    interrupt_after(make(), task, cp, "run1", state, k)
    saved = cp.load("run1")
    assert saved.stop_reason == "cancelled" and not saved.finished
    assert [m.content for m in saved.messages] == [m.content for m in full.transcript[:len(saved.messages)]]
    pattern = make()
    resumed = pattern.resume("run1", cp)
    assert [(m.role, m.content) for m in resumed.transcript] == [(m.role, m.content) for m in full.transcript]
    assert resumed.path == full.path and resumed.stop_reason == full.stop_reason
    assert resumed.output == full.output and resumed.calls == full.calls
    assert_trace_is_path(pattern.graph, resumed)
    again = make().resume("run1", cp)  # a finished run is rebuilt, not re-run
    assert again.transcript == resumed.transcript and again.calls == resumed.calls
    assert again.path == full.path  # the interrupted step is not walked twice


def test_each_transition_appends_deltas_only(tmp_path):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    r = chat().execute("pets?", checkpoint=cp, run_id="d")
    db = sqlite3.connect(tmp_path / "runs.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    n_events = db.execute("SELECT COUNT(*) FROM events WHERE run_id='d'").fetchone()[0]
    n_msgs = db.execute("SELECT COUNT(*) FROM messages WHERE run_id='d'").fetchone()[0]
    assert n_events == len(r.trace) and n_msgs == len(r.transcript)  # each message stored once
    (state,) = db.execute("SELECT state FROM states WHERE run_id='d'").fetchone()
    assert len(state) < 2000  # a small working-state snapshot, not the transcript
    assert r.run_id == "d" and cp.load("d").stop_reason == r.stop_reason


def test_memory_checkpointer_plugs_in():
    cp = MemoryCheckpointer()
    full = chat().execute("pets?")
    interrupt_after(chat(), "pets?", cp, "m", "post", 2)
    assert chat().resume("m", cp).transcript == full.transcript


def test_unknown_run_id():
    with pytest.raises(KeyError, match="no checkpointed run 'nope'"):
        chat().resume("nope", MemoryCheckpointer())


CRASH_SCRIPT = textwrap.dedent('''
    import sys
    from fsmchat import Agent, GroupChat
    from fsmchat.store.checkpoint import SqliteCheckpointer
    chat = GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs."),
                             Agent("c", system_prompt="You love birds and feathers.")], max_loops=8)
    def said(m):
        print(m.role, flush=True)
    chat.execute("pets?", checkpoint=SqliteCheckpointer(sys.argv[1]), run_id="crash", on_message=[said])
    print("DONE", flush=True)
''')


@pytest.mark.parametrize("k", [2, 4])
def test_sigkill_mid_run_then_resume(tmp_path, k):
    full = chat().execute("pets?")
    assert len(full.transcript) > k
    script = tmp_path / "crash.py"
    script.write_text(CRASH_SCRIPT)
    db = tmp_path / "crash.db"
    env = {**os.environ, "FSMCHAT_OFFLINE_DELAY": "0.05"}
    proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True, env=env)
    posted = []
    try:
        for line in proc.stdout:
            posted.append(line.strip())
            if len(posted) == k:
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL and "DONE" not in posted
    cp = SqliteCheckpointer(db)
    saved = cp.load("crash")
    assert saved.stop_reason is None  # it never finished
    roles = [m.role for m in saved.messages]
    assert roles == posted[:len(roles)] and len(roles) >= k - 1  # each committed post exactly once
    old_path = [e.state for e in saved.events]
    pattern = chat()
    resumed = pattern.resume("crash", cp)
    assert resumed.path[:len(old_path)] == old_path
    assert [(m.role, m.content) for m in resumed.transcript] == [(m.role, m.content) for m in full.transcript]
    assert resumed.stop_reason == full.stop_reason
    assert_trace_is_path(pattern.graph, resumed)


MID_TURN_SCRIPT = textwrap.dedent('''
    import os, sys
    from fsmchat import Agent, GroupChat
    from fsmchat.store.checkpoint import SqliteCheckpointer
    chat = GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs."),
                             Agent("c", system_prompt="You love birds and feathers.")], max_loops=8)
    bids = []
    def killed_after_the_bid_round(ev):  # the process dies mid-turn: bids in, the winner not posted yet
        if ev.state == "bid" and ev.dest == "select":
            bids.append(ev)
            if len(bids) == int(sys.argv[2]):
                os.kill(os.getpid(), 9)
    chat.execute("pets?", checkpoint=SqliteCheckpointer(sys.argv[1]), run_id="mid", observers=[killed_after_the_bid_round])
''')


@pytest.mark.parametrize("k", [1, 3])
def test_a_run_killed_mid_turn_resumes_to_the_same_transcript_paying_only_the_uncommitted_turn(tmp_path, k):
    """A GroupChat turn is one commit: killed after its bid round, the run has nothing of that turn
    stored; the resume runs it again (its bids included: they were never committed) and the
    committed turns are not asked again."""
    full = chat().execute("pets?")
    script = tmp_path / "mid.py"
    script.write_text(MID_TURN_SCRIPT)
    db = tmp_path / "mid.db"
    proc = subprocess.run([sys.executable, str(script), str(db), str(k)], env={**os.environ}, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    cp = SqliteCheckpointer(db)
    saved = cp.load("mid")
    assert saved.stop_reason is None and saved.resume_at == ("bid" if k == 1 else "penalize")
    assert [e.state for e in saved.events][-1] == ("seed" if k == 1 else "post")
    assert [m.content for m in saved.messages] == [m.content for m in full.transcript[:k]]  # the task, k - 1 posts
    assert saved.state["stats"]["calls"] == 3 * (k - 1)  # three bids per committed turn
    resumed = chat().resume("mid", cp)
    assert [(m.role, m.content) for m in resumed.transcript] == [(m.role, m.content) for m in full.transcript]
    assert resumed.calls == full.calls == 3 * (len(full.transcript) - 1)  # no committed bid asked twice
    assert resumed.path == full.path and resumed.stop_reason == full.stop_reason


def discussion_flow(after=None):
    steps = [Discussion([Agent("x", system_prompt="You plan."), Agent("y", system_prompt="You build.")], rounds=3)]
    if after is not None:
        steps.append(after)
    steps.append(lambda ctx: f"summary of {len(ctx.variables['discussion_transcript'])} chars: "
                             f"{ctx.variables['discussion_transcript'][-30:]}")
    return AgentFlow(steps=steps)


def test_a_discussions_transcript_variable_is_stored_as_its_lines_and_rebuilt_on_resume(tmp_path):
    full = discussion_flow().execute("ship it")
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    interrupt_after(discussion_flow(), "ship it", cp, "D", "discussion.turn", 4)
    saved = cp.load("D")
    lines = saved.state["frames"]["1"]["lines"]
    assert len(lines) == 4 and lines[0].startswith("x: ") and lines[1].startswith("y: ")
    assert "discussion_transcript" not in saved.state["variables"]  # stored once, as the lines
    assert saved.state["joined"] == {"discussion_transcript": 1}
    resumed = discussion_flow().resume("D", cp)
    assert resumed.output == full.output and resumed.output["variables"]["discussion_transcript"] == "\n".join(
        m.role + ": " + m.content for m in full.transcript[:6])  # the six turns, not the summary after them
    assert [m.content for m in resumed.transcript] == [m.content for m in full.transcript]


def test_a_transcript_variable_set_by_a_step_is_stored_as_set(tmp_path):
    def edit(ctx):
        ctx.variables["discussion_transcript"] = "edited"
        return "edited it"

    cp = MemoryCheckpointer()
    res = discussion_flow(after=edit).execute("ship it", checkpoint=cp, run_id="E")
    state = cp.load("E").state
    assert state["variables"]["discussion_transcript"] == "edited" and "joined" not in state
    assert res.output["output"] == "summary of 6 chars: edited"


def test_a_flow_checkpointed_by_an_older_fsmchat_resumes(tmp_path):
    """An older fsmchat stored a flow's frames as {"__dict__": [[id, frame]]} and the discussion's
    transcript as a variable (no "joined"): such a state still restores and resumes."""
    full = discussion_flow().execute("ship it")
    db = tmp_path / "runs.db"
    cp = SqliteCheckpointer(db)
    interrupt_after(discussion_flow(), "ship it", cp, "O", "discussion.turn", 3)
    state = cp.load("O").state
    frame = state["frames"]["1"]
    old = {**state, "frames": {"__dict__": [[1, frame]]},
           "variables": {**state["variables"], "discussion_transcript": "\n".join(frame["lines"])}}
    del old["joined"]
    con = sqlite3.connect(db)
    seq = con.execute("SELECT MAX(seq) FROM events WHERE run_id='O' AND delta IS NOT NULL AND delta != '-'").fetchone()[0]
    con.execute("UPDATE events SET delta = ? WHERE run_id='O' AND seq = ?", (json.dumps({"all": old}), seq))
    con.commit()
    con.close()
    assert cp.load("O").state == old
    resumed = discussion_flow().resume("O", cp)
    assert resumed.output == full.output
    assert [m.content for m in resumed.transcript] == [m.content for m in full.transcript]


def build_for_resume():
    c = chat()
    c.factory = "test_checkpoint:build_for_resume"
    return c


def test_top_level_resume_uses_the_stored_factory():
    import fsmchat

    cp = MemoryCheckpointer()
    full = chat().execute("pets?")
    interrupt_after(build_for_resume(), "pets?", cp, "f", "post", 1)
    assert cp.load("f").meta["factory"] == "test_checkpoint:build_for_resume"
    assert fsmchat.resume("f", cp, allow=["test_checkpoint"]).transcript == full.transcript
    cp2 = MemoryCheckpointer()
    interrupt_after(chat(), "pets?", cp2, "g", "post", 1)
    with pytest.raises(ValueError, match="without a factory"):
        fsmchat.resume("g", cp2)
    assert fsmchat.resume("g", cp2, pattern=chat()).transcript == full.transcript


def test_a_run_id_is_used_once(tmp_path):
    for cp in (SqliteCheckpointer(tmp_path / "r.db"), MemoryCheckpointer()):
        chat().execute("task one", checkpoint=cp, run_id="job")
        for _ in range(2):  # the refused run gives its lease back: the next attempt is refused the same way
            with pytest.raises(ValueError, match="run id 'job' is already checkpointed; resume it"):
                chat().execute("task two", checkpoint=cp, run_id="job")
        assert cp.load("job").meta["task"] == "task one"


# ---- store conformance: one commit that carries several messages ----
def reopened(cp, tmp_path):
    """The same store as a later process sees it (SQLite, PostgreSQL: a new connection)."""
    return reopen(cp)


@pytest.mark.parametrize("store", STORES)
def test_a_commit_to_an_ended_run_reopens_it_held_steps_and_all(tmp_path, open_store):
    # a resumed run's first commit (here: two held steps, then the step) clears its stop reason,
    # in the commit's own transaction; the run's end is written again when it ends
    from fsmchat.models import Message, TraceEvent

    cp = open_store()
    cp.start("R", {"task": "go"})
    write(cp, "R", TraceEvent(0, "seed", "next", "ask", 0.0), [Message(role="User", content="go")], {"n": 1})
    cp.finish("R", "interrupted")
    assert reopened(cp, tmp_path).load("R").stop_reason == "interrupted"
    write(cp, "R", TraceEvent(3, "post", "next", "end", 0.3), [Message(role="a", content="A")], {"n": 2},
          earlier=[TraceEvent(1, "bid", "next", "select", 0.1), TraceEvent(2, "select", "next", "post", 0.2)])
    saved = reopened(cp, tmp_path).load("R")
    assert saved.stop_reason is None and not saved.finished
    assert [e.state for e in saved.events] == ["seed", "bid", "select", "post"] and saved.state == {"n": 2}
    cp.finish("R", "done")
    assert reopened(cp, tmp_path).load("R").stop_reason == "done"
    write(cp, "R", TraceEvent(4, "end", "next", "more", 0.4), [], {"n": 3})  # a step alone
    assert reopened(cp, tmp_path).load("R").stop_reason is None


@pytest.mark.parametrize("store", STORES)
def test_a_commit_carrying_several_messages_stores_each_of_them_in_order(tmp_path, open_store):
    from fsmchat.models import Message, TraceEvent

    cp = open_store()
    cp.start("R", {"task": "go"})
    write(cp, "R", TraceEvent(0, "seed", "next", "fork", 0.0), [Message(role="User", content="go")], {"n": 1})
    joined = [Message(role="left", content="L1"), Message(role="right", content="R1", metadata={"score": 0.5}), Message(role="left", content="L2"),
              Message(role="right", content="R2")]
    write(cp, "R", TraceEvent(2, "fork", "next", "sum", 0.2), joined, {"n": 2},
              earlier=[TraceEvent(1, "wait", "next", "fork", 0.1)])
    write(cp, "R", TraceEvent(3, "sum", "next", "end", 0.3), [Message(role="sum", content="S")], {"n": 3})
    cp.finish("R", "done")
    saved = reopened(cp, tmp_path).load("R")
    assert [(m.role, m.content, m.metadata) for m in saved.messages] == [
        ("User", "go", {}), ("left", "L1", {}), ("right", "R1", {"score": 0.5}), ("left", "L2", {}),
        ("right", "R2", {}), ("sum", "S", {})]
    assert [s.message_count for s in reopened(cp, tmp_path).history("R")] == [1, 1, 5, 6]
    assert [e.state for e in saved.events] == ["seed", "wait", "fork", "sum"] and saved.state == {"n": 3}


@pytest.mark.parametrize("store", STORES)
def test_a_parallel_join_commit_keeps_every_branch_message(tmp_path, open_store):
    """A flow's parallel join posts both branches' messages in one commit; the store keeps all four."""
    from fsmchat.flow import parallel
    from fsmchat.testing import ScriptedModel

    sm = ScriptedModel({"a1": ["x"], "a2": ["y"], "b1": ["z"], "b2": ["w"]})
    a1, a2, b1, b2 = (Agent(n, model=sm.model) for n in ("a1", "a2", "b1", "b2"))
    fan = AgentFlow(steps=[parallel([Discussion([a1, a2], rounds=1, name="left"),
                                     Discussion([b1, b2], rounds=1, name="right")]), lambda ctx: "joined"])
    cp = open_store()
    res = fan.execute("go", checkpoint=cp, run_id="R")
    log = reopened(cp, tmp_path).log("R")
    assert [(e.state, n) for e, n in zip(log.events, log.counts)] == [("parallel", 4), ("lambda", 5), ("end", 5)]
    assert [(m.role, m.content) for m in log.messages] == [("a1", "x"), ("a2", "y"), ("b1", "z"), ("b2", "w"),
                                                          ("<lambda>", "joined")]
    again = fan.resume("R", reopened(cp, tmp_path))  # rebuilt from the store: the same transcript
    assert [m.content for m in again.transcript] == [m.content for m in res.transcript] == ["x", "y", "z", "w", "joined"]
