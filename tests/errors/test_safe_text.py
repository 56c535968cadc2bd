"""Text is safe to store: lone surrogates are repaired where text enters (with an event), one message
adds at most ``max_message_chars``, and a checkpoint write failing mid-run still yields the result."""
import sqlite3

import pytest

from support.openai_server import OpenAIServer, per_agent, respond

from fsmchat import Agent, AgentFlow, Bid, GroupChat, Limits, RoundRobinSwarm, Task
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer
from fsmchat.testing import ScriptedModel

BAD = "bad \udc80 reply"
FIXED = "bad \ufffd reply"


def stored(db, run_id):
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT content FROM messages WHERE run_id=? ORDER BY seq", (run_id,))]
    finally:
        con.close()


def test_the_documented_default_cap():
    assert Limits().max_message_chars == 200_000
    with pytest.raises(ValueError, match="max_message_chars"):
        Limits(max_message_chars=0)


def test_a_lone_surrogate_in_a_model_reply_is_repaired_and_the_checkpointed_run_finishes(tmp_path):
    m = ScriptedModel({"a": [BAD, "ok"]})
    db = tmp_path / "runs.db"
    res = RoundRobinSwarm(agents=[Agent("a", model=m.model)], max_loops=2).execute(
        "go", checkpoint=SqliteCheckpointer(db), run_id="R")
    assert res.ok and res.stop_reason == "max_loops" and res.path == ["seed", "a", "a", "stop"]
    assert [x.content for x in res.transcript] == ["go", FIXED, "ok"]
    assert res.events == [{"event": "text_repaired", "role": "a", "replaced": 1}]
    assert stored(db, "R") == ["go", FIXED, "ok"]
    again = RoundRobinSwarm(agents=[Agent("a", model=m.model)], max_loops=2).resume("R", SqliteCheckpointer(db))
    assert [x.content for x in again.transcript] == ["go", FIXED, "ok"] and len(m.requests) == 2


def test_a_lone_surrogate_in_the_task_is_repaired_before_the_run_id_is_taken(tmp_path):
    m = ScriptedModel({"a": ["fine"]})
    db = tmp_path / "runs.db"
    cp = SqliteCheckpointer(db)
    res = RoundRobinSwarm(agents=[Agent("a", model=m.model)], max_loops=1).execute(
        "go \ud800 now", checkpoint=cp, run_id="T")
    assert res.ok and [x.content for x in res.transcript] == ["go \ufffd now", "fine"]
    assert res.events == [{"event": "text_repaired", "role": "task", "replaced": 1}]
    assert cp.load("T").meta["task"] == "go \ufffd now" and stored(db, "T") == ["go \ufffd now", "fine"]
    # what the model was sent is the repaired text
    assert m.requests[0].messages[-2]["content"] == "go \ufffd now"


def test_bids_callables_and_flow_steps_are_repaired_too(tmp_path):
    m = ScriptedModel({"a": [Bid(0.9, "two \udc80\udc81"), Bid(0.0, "")], "b": [Bid(0.1, ""), Bid(0.0, "")]})
    res = GroupChat(agents=[Agent("a", model=m.model), Agent("b", model=m.model)], max_loops=3).execute(
        "pets?", checkpoint=SqliteCheckpointer(tmp_path / "g.db"), run_id="G")
    assert res.ok and res.stop_reason == "lull"
    assert [x.content for x in res.transcript] == ["pets?", "two \ufffd\ufffd"]
    assert {"event": "text_repaired", "role": "a", "replaced": 2} in res.events

    rr = RoundRobinSwarm(agents=[lambda turn: "x\udfff"], max_loops=1).execute(
        "go", checkpoint=SqliteCheckpointer(tmp_path / "c.db"), run_id="C")
    assert rr.ok and rr.transcript[-1].content == "x\ufffd"

    flow = AgentFlow(steps=[Task(lambda ctx: "t \udc80", name="t"), Task(lambda ctx: ctx.previous_result + "!", name="u")])
    fr = flow.execute("go", checkpoint=SqliteCheckpointer(tmp_path / "f.db"), run_id="F")
    assert fr.ok and fr.output["output"] == "t \ufffd!"
    assert [s["output"] for s in fr.context.steps] == ["t \ufffd", "t \ufffd!"]
    assert fr.events == [{"event": "text_repaired", "role": "t", "replaced": 1}]


def test_a_lone_surrogate_over_http_is_repaired():
    with OpenAIServer(max_requests=10, max_lifetime=30) as srv:
        srv.set_script(per_agent({"alice": [respond(0.9, "hi \udc80"), respond(0.0, "")],
                                  "bob": [respond(0.0, ""), respond(0.0, "")]}))
        agents = [Agent(n, model="openai/test-model", api_base=srv.url + "/v1", api_key="sk-test",
                        tool_mode="native", num_retries=0, timeout=120) for n in ("alice", "bob")]
        res = GroupChat(agents=agents, max_loops=4).execute("plan", checkpoint=MemoryCheckpointer())
        srv.assert_clean()
    assert res.ok and [x.content for x in res.transcript] == ["plan", "hi \ufffd"]
    assert {"event": "text_repaired", "role": "alice", "replaced": 1} in res.events


def test_one_message_adds_at_most_max_message_chars():
    m = ScriptedModel({"a": ["x" * 25, "short"]})
    chat = RoundRobinSwarm(agents=[Agent("a", model=m.model)], max_loops=2).with_limits(max_message_chars=10)
    res = chat.execute("go")
    assert res.ok and [x.content for x in res.transcript] == ["go", "x" * 10, "short"]
    assert res.events == [{"event": "message_truncated", "role": "a", "chars": 25, "kept": 10}]
    # the next request saw the cut text, not the whole reply
    assert m.requests[1].messages[-2]["content"] == "x" * 10


def test_a_task_over_the_cap_is_refused_before_any_call():
    m = ScriptedModel({"a": ["never"]})
    chat = RoundRobinSwarm(agents=[Agent("a", model=m.model)], max_loops=1).with_limits(max_message_chars=5)
    with pytest.raises(ValueError, match=r"RoundRobinSwarm.run\(task\): the task has 6 characters, over "
                                         r"max_message_chars=5; shorten it or raise the cap"):
        chat.execute("abcdef")
    assert m.requests == []


class FailingStore(MemoryCheckpointer):
    """A store that breaks (disk full) after a few commits, including in the engine's error path."""

    def __init__(self, ok_commits):
        super().__init__()
        self.left = ok_commits

    def append(self, run_id, commit, fence=None):
        if self.left <= 0:
            raise sqlite3.OperationalError("database or disk is full")
        self.left -= 1
        return super().append(run_id, commit, fence)

    def finish(self, run_id, stop_reason, fence=None, state=None):
        raise sqlite3.OperationalError("database or disk is full")


def test_a_checkpoint_that_fails_mid_run_still_yields_the_result_with_the_error():
    m = ScriptedModel({"a": ["one", "two", "three"]})
    res = RoundRobinSwarm(agents=[Agent("a", model=m.model)], max_loops=3).execute(
        "go", checkpoint=FailingStore(ok_commits=2), run_id="D")
    assert not res.ok and res.stop_reason == "error"
    assert isinstance(res.error, sqlite3.OperationalError) and "disk is full" in str(res.error)
    assert [x.content for x in res.transcript][:2] == ["go", "one"]
