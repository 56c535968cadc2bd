"""Fault injection over real HTTP: a local OpenAI-compatible server scripted with every fault;
GroupChat and a Discussion flow each get the documented outcome, the exact request count (no hidden
SDK retries), no hang past the deadline, and no posted message lost."""
import time

import pytest
from support.openai_server import OpenAIServer, drop, empty_choices, error, malformed_tool_call, per_agent, respond, text, \
    tool_call

from fsmchat import Agent, AgentFlow, Discussion, GroupChat, ModelCallError, Task

SILENT = respond(0.0, "")
HANG_GUARD = 600  # seconds the server lives at most (a hang guard, never a verdict)
LATE = 3600  # a reply this late comes only if a timeout or deadline failed to cut the request


@pytest.fixture
def server():
    srv = OpenAIServer(max_requests=60, max_lifetime=HANG_GUARD).start()
    yield srv
    srv.stop()


def agent(srv, name, **kw):
    kw.setdefault("num_retries", 1)
    kw.setdefault("timeout", 60)  # an answered request never meets it, however loaded the machine
    return Agent(name, system_prompt=f"You are {name}.", model="openai/test-model", api_base=srv.url + "/v1",
                 api_key="sk-test", tool_mode="native", **kw)


# fault, replies for alice's 2nd call on, alice requests in turn 2, posted in turn 2?, invalid-bid reason
BID_FAULTS = {
    "500": ([error(500), error(500)], 2, False, "InternalServerError"),
    "503_once_then_ok": ([error(503, retry_after=0), respond(0.95, "second")], 2, True, None),
    "429_retry_after": ([error(429, retry_after=0.3), respond(0.95, "second")], 2, True, None),
    "slower_than_timeout": ([respond(0.8, "late").after(LATE), respond(0.8, "late").after(LATE)], 2, False, "Timeout"),
    "dropped_connection": ([drop(), respond(0.95, "second")], 2, True, None),
    "malformed_json": ([malformed_tool_call()], 1, False, "not JSON"),
    "wrong_tool_name": ([tool_call("shout", {"score": 0.9, "message": "x"})], 1, False, "not respond"),
    "text_not_tool": ([text("I would like to talk")], 1, False, "no tool call"),
    "score_high": ([tool_call("respond", {"score": "high", "message": "x"})], 1, False, "not a number"),
    "score_7": ([tool_call("respond", {"score": 7, "message": "loud"})], 1, True, "outside 0..1"),
    "empty_choices": ([empty_choices()], 1, False, "no choices"),
}


@pytest.mark.parametrize("fault", list(BID_FAULTS))
def test_group_chat_under_fault(server, fault):
    replies, alice_turn2, posts_again, reason = BID_FAULTS[fault]
    timeout = 0.5 if fault == "slower_than_timeout" else 60
    server.set_script(per_agent({"alice": [respond(0.9, "first"), *replies], "bob": []}, default=SILENT))
    chat = GroupChat(agents=[agent(server, "alice", timeout=timeout), agent(server, "bob")], max_loops=10)
    t = time.perf_counter()
    r = chat.execute("topic")
    wall = time.perf_counter() - t
    assert r.error is None and r.stop_reason == "lull"
    contents = [m.content for m in r.transcript]
    assert contents[:2] == ["topic", "first"]  # the post made before the fault is kept
    assert (len(contents) == 3) == posts_again
    alice = len(server.requests_for("alice"))
    turns = 3 if posts_again else 2
    assert alice == 1 + alice_turn2 + (1 if posts_again else 0)
    assert len(server.requests_for("bob")) == turns
    invalid = [e for e in r.events if e["event"] == "invalid_bid"]
    if reason is None:
        assert invalid == []
    else:
        assert invalid and reason in invalid[0]["reason"]
    if fault == "429_retry_after":
        assert wall >= 0.3
    if fault == "slower_than_timeout":  # both attempts were cut by the 0.5 s timeout: the replies come an hour late
        assert "late" not in contents
    server.assert_clean()


FLOW_FAULTS = {
    "500": ([error(500), error(500)], 2, "failed"),
    "503_once_then_ok": ([error(503, retry_after=0), text("bob speaks")], 2, "completed"),
    "429_retry_after": ([error(429, retry_after=0.2), text("bob speaks")], 2, "completed"),
    "slower_than_timeout": ([text("late").after(LATE), text("late").after(LATE)], 2, "failed"),
    "dropped_connection": ([drop(), text("bob speaks")], 2, "completed"),
    "empty_choices": ([empty_choices()], 1, "failed"),
    "bad_request_400": ([error(400)], 1, "request_error"),  # no retry can fix it: the run ends, either policy
}


@pytest.mark.parametrize("policy", ["stop", "continue"])
@pytest.mark.parametrize("fault", list(FLOW_FAULTS))
def test_discussion_flow_under_fault(server, fault, policy):
    replies, bob_requests, outcome = FLOW_FAULTS[fault]
    server.set_script(per_agent({"alice": [text("alice speaks")], "bob": replies}, default=text("spare")))
    timeout = 0.5 if fault == "slower_than_timeout" else 60
    bob = Task(agent=agent(server, "bob", timeout=timeout), on_error=policy)
    after = agent(server, "alice")
    flow = AgentFlow(steps=[Discussion([agent(server, "alice"), bob], rounds=1), Task(agent=after, name="after")])
    r = flow.execute("topic")
    out = r.output
    assert out["steps"][0] == {"name": "alice", "output": "alice speaks", "status": "completed"}
    assert len(server.requests_for("bob")) == bob_requests
    if outcome == "request_error":
        assert out["status"] == "failed" and not r.ok and r.stop_reason == "error"
        assert isinstance(r.error, ModelCallError) and r.error.kind == "bad_request" and r.error.agent == "bob"
        assert out["steps"][1]["name"] == "bob" and out["steps"][1]["status"] == "failed"
        assert len(server.requests) == 2  # alice's turn and bob's refused request; nothing after it
    elif outcome == "completed":
        assert out["status"] == "completed" and out["steps"][1]["output"] == "bob speaks"
    elif policy == "stop":
        assert out["status"] == "failed" and "step 'bob' failed" in out["error"]
        assert [s["name"] for s in out["steps"]] == ["alice", "bob"]  # `after` never ran
        assert out["variables"]["discussion_transcript"] == "alice: alice speaks"
    else:
        assert out["status"] == "completed" and out["steps"][1]["status"] == "failed"
        assert out["steps"][-1]["name"] == "after"
    server.assert_clean()


def test_deadline_bounds_a_hanging_model(server):
    server.set_script(per_agent({"alice": [respond(0.9, "first"), respond(0.9, "x").after(LATE)]}, default=SILENT))
    chat = GroupChat(agents=[agent(server, "alice", num_retries=3, timeout=30), agent(server, "bob")], max_loops=10)
    chat.with_limits(deadline_s=5.0)  # time for the first answer on a loaded machine; the second never comes in time
    r = chat.execute("topic")
    assert r.stop_reason == "deadline" and [m.content for m in r.transcript] == ["topic", "first"]
