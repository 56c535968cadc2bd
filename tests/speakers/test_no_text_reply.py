"""A 200 reply with no text (``content: null``, or only tool calls from an agent that has no
tools) is an invalid reply (a blank string is a turn, posted empty, as swarms, PraisonAI and AG2 do), over real HTTP (a local OpenAI-compatible server): retried like a
transient fault, then a ``ModelCallError`` saying so; nothing is posted, never an empty message
with ``ok`` True. In a GroupChat such a bid is an invalid bid (silent, with the reason)."""
import pytest
from support.openai_server import OpenAIServer, Reply, completion, per_agent, respond, text, tool_call

from fsmchat import Agent, AgentFlow, Discussion, ExpertPanelDiscussion, GroupChat, ModelCallError, \
    OneOnOneDebate, RoundRobinSwarm
from fsmchat.network import TurnFailed, wait_for_text_count
from fsmchat.speakers import llm
from fsmchat.testing import ScriptedModel
from support.hubs import TOPIC, arun, model_hub  # noqa: E402

NULL = Reply(body=completion({"role": "assistant", "content": None}))
BLANK = text("  \n")
TOOL_ONLY = tool_call("search", {"q": "x"})


@pytest.fixture
def server():
    srv = OpenAIServer(max_requests=80, max_lifetime=60).start()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    async def instantly(seconds):
        return None

    monkeypatch.setattr(llm, "retry_sleep", instantly)


def agent(srv, name, **kw):
    kw.setdefault("num_retries", 1)
    return Agent(name, system_prompt=f"You are {name}.", model="openai/test-model", api_base=srv.url + "/v1",
                 api_key="sk-test", timeout=10, **kw)


PATTERNS = {
    "round_robin": lambda s: RoundRobinSwarm(agents=[agent(s, "ok"), agent(s, "mute")], max_loops=1),
    "debate": lambda s: OneOnOneDebate(agents=[agent(s, "ok"), agent(s, "mute")], max_loops=2),
    "panel": lambda s: ExpertPanelDiscussion(agents=[agent(s, "ok"), agent(s, "mute")], moderator=agent(s, "mod"),
                                             max_rounds=1),
    "flow_agent_step": lambda s: AgentFlow(steps=[agent(s, "ok"), agent(s, "mute")]),
    "discussion": lambda s: AgentFlow(steps=[Discussion([agent(s, "ok"), agent(s, "mute")], rounds=1)]),
}


def test_a_blank_reply_is_an_empty_turn_not_a_failure(server):
    server.set_script(per_agent({"mute": [BLANK]}, default=text("fine")))
    r = PATTERNS["round_robin"](server).execute("topic")
    assert r.ok and r.stop_reason == "max_loops"
    assert [(m.role, m.content) for m in r.transcript[1:]] == [("ok", "fine"), ("mute", "")]
    assert len(server.requests_for("mute")) == 1  # not retried


@pytest.mark.parametrize("reply, reason", [(NULL, "content is None and there is no tool call"),
                                           (TOOL_ONLY, "only tool call(s) ['search'], and the agent has no tools")])
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_a_reply_with_no_text_fails_the_call_after_its_retries(server, pattern, reply, reason):
    server.set_script(per_agent({"mute": [reply, reply]}, default=text("fine")))
    r = PATTERNS[pattern](server).execute("topic")
    assert not r.ok and r.stop_reason == "error"
    err = r.error
    while not isinstance(err, ModelCallError):  # a flow step's failure names the step and chains the call's
        err = err.__cause__
    assert err.agent == "mute" and err.attempts == 2 and isinstance(err.cause, llm.NoReplyText)
    assert f"the reply has no text: {reason}" in str(err.cause)
    assert "NoReplyText: the reply has no text" in str(err)  # the message is one line (whitespace folded)
    assert len(server.requests_for("mute")) == 2  # the first attempt and its one retry
    assert "" not in [m.content for m in r.transcript] and "mute" not in [m.role for m in r.transcript]


def test_a_reply_with_no_text_then_text_is_posted(server):
    server.set_script(per_agent({"mute": [NULL, text("found my words")]}, default=text("fine")))
    r = RoundRobinSwarm(agents=[agent(server, "ok"), agent(server, "mute")], max_loops=1).execute("topic")
    assert r.ok and [m.content for m in r.transcript] == ["topic", "fine", "found my words"]
    assert r.calls == 2 and len(server.requests_for("mute")) == 2


def test_a_group_chat_bid_with_no_text_is_an_invalid_bid(server):
    server.set_script(per_agent({"mute": [NULL], "ok": [respond(0.9, "I speak"), respond(0.0, "")]},
                                default=respond(0.0, "")))
    r = GroupChat(agents=[agent(server, "ok"), agent(server, "mute")], max_loops=3).execute("topic")
    assert r.ok and r.stop_reason == "lull"
    assert [m.content for m in r.transcript] == ["topic", "I speak"]
    invalid = [e for e in r.events if e["event"] == "invalid_bid"]
    assert [(e["agent"], e["reason"]) for e in invalid] == [("mute", "the reply has no text and no respond call")]


def test_a_hub_reply_with_no_text_fails_the_turn():
    """A hub channel never sends an empty text: a blank reply fails the turn ("empty reply")."""
    async def body():
        m = ScriptedModel({"alice": [], "bob": ["", "   ", "never asked"]})
        hub, (alice, bob) = await model_hub(["alice", "bob"], m)
        ch = await alice.open(target=["bob"])
        await ch.send(TOPIC)
        with pytest.raises(TurnFailed, match=r"bob's turn 1 failed: empty reply"):
            await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=30)
        assert m.calls("bob") == 1  # a scripted agent has num_retries=0: one attempt, then the failure
        await hub.aclose()

    arun(body())
