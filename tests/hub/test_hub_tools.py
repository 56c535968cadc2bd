"""Hub channels speak through the one speaking block: an agent with tools is drawn with its tool loop
in the channel's turn graph, each tool call and each result is committed to the channel's log
before the model is asked again, a call that needs approval waits at the drawn wait point until
``hub.decide_tool_call``, and a tool source (an MCP server) is started once per hub and stopped by
``aclose``."""
import asyncio

import pytest

from fsmchat import Approve, Edit, EV_TEXT, Hub, ManualClock, MemoryKnowledgeStore, Reject, Say, Tool, \
    wait_for_text_count
from fsmchat.network import EV_TOOL_CALLS, EV_TOOL_DECISION, EV_TOOL_RESULT, ProtocolError, TurnFailed, turn_graph
from fsmchat.speakers.tools import ToolArgumentsError
from fsmchat.testing import ScriptedModel, ToolCall

RUNS: list[str] = []


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    RUNS.append(city)
    return f"sunny in {city}"


def broken(city: str) -> str:
    """Always fails."""
    raise RuntimeError("the service is down")


@pytest.fixture(autouse=True)
def _clear():
    RUNS.clear()


class RecordingStore(MemoryKnowledgeStore):
    """Notes, for each envelope appended, how many model calls bob had made by then."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.appended: list[tuple[str, int]] = []

    def append(self, channel_id, envelope):
        self.appended.append((envelope.event_type, len(self.model.requests_of("bob"))))
        super().append(channel_id, envelope)


async def _open(model, bob_tools, store=None, **bob_kw):
    hub = await Hub.open(store or MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=ManualClock())
    alice = await hub.register(model.agent("alice"))
    await hub.register(model.agent("bob", "You are bob.", tools=bob_tools, **bob_kw))
    ch = await alice.open(target=["bob"], knobs={"max_texts": 2})
    return hub, ch


def test_a_hub_agents_turn_graph_draws_its_tool_loop_and_one_without_tools_is_unchanged():
    m = ScriptedModel({})
    g = turn_graph(["alice", "bob"], max_texts=4, speakers={"bob": m.agent("bob", tools=[weather])})
    assert list(g.states) == ["awaiting_alice", "awaiting_bob", "closed", "expired", "tools_awaiting_bob",
                              "approve_awaiting_bob"]
    edges = [(t.source, t.label, t.dest) for t in g.transitions if "tools" in t.source + t.dest
             or "approve" in t.source + t.dest]
    assert edges == [
        ("awaiting_bob", "tool_calls", "tools_awaiting_bob"),
        ("tools_awaiting_bob", "close", "closed"), ("tools_awaiting_bob", "expire", "expired"),
        ("tools_awaiting_bob", "needs_person", "approve_awaiting_bob"), ("tools_awaiting_bob", "next", "awaiting_bob"),
        ("approve_awaiting_bob", "close", "closed"), ("approve_awaiting_bob", "expire", "expired"),
        ("approve_awaiting_bob", "next", "tools_awaiting_bob")]
    assert g.states["approve_awaiting_bob"].waits is False
    approving = turn_graph(["alice", "bob"], speakers={"bob": m.agent("bob", tools=[Tool(weather, approval=True)])})
    assert approving.states["approve_awaiting_bob"].waits is True
    drawn = approving.to_mermaid().splitlines()
    loop = ["    awaiting_bob --> tools_awaiting_bob : [tool_calls]",
            "    tools_awaiting_bob --> approve_awaiting_bob : [needs_person]",
            "    tools_awaiting_bob --> awaiting_bob",
            "    approve_awaiting_bob --> tools_awaiting_bob"]
    assert [ln for ln in drawn if ln in loop] == loop
    assert "    class approve_awaiting_bob waits" in drawn
    plain = turn_graph(["alice", "bob"], max_texts=4, speakers={"bob": m.agent("bob")})
    bare = turn_graph(["alice", "bob"], max_texts=4)
    assert [(t.source, t.label, t.dest) for t in plain.transitions] == \
        [(t.source, t.label, t.dest) for t in bare.transitions]
    assert list(plain.states) == ["awaiting_alice", "awaiting_bob", "closed", "expired"]


def test_the_channels_tool_loop_is_drawn_as_every_patterns_and_its_states_run_the_same_actions():
    from fsmchat import RoundRobinSwarm

    m = ScriptedModel({})
    bob = m.agent("bob", tools=[Tool(weather, approval=True)])
    hub = turn_graph(["alice", "bob"], speakers={"bob": bob})
    rr = RoundRobinSwarm(agents=[m.agent("alice"), bob]).graph
    ends = ("close", "expire")  # a channel may end while a tool runs or a call waits

    def tool_loop(g, prefix):
        return [(t.source.replace(prefix, ""), t.label, t.dest.replace(prefix, "")) for t in g.transitions
                if t.label not in ends and t.source.startswith(("tools_", "approve_", prefix + "bob"))
                and t.dest.startswith(("tools_", "approve_", prefix + "bob"))]

    assert tool_loop(hub, "awaiting_") == tool_loop(rr, "") == [
        ("bob", "tool_calls", "tools_bob"), ("tools_bob", "needs_person", "approve_bob"), ("tools_bob", "next", "bob"),
        ("approve_bob", "next", "tools_bob")]
    for state in ("tools_awaiting_bob", "approve_awaiting_bob"):  # the pattern's own actions, not none
        assert hub.states[state].action.__qualname__ == rr.states[state.replace("awaiting_", "")].action.__qualname__
    assert hub.states["awaiting_bob"].action is None  # the agent's handler speaks; the channel steps the rest


def test_each_tool_result_is_committed_to_the_log_before_the_next_model_call():
    async def body():
        m = ScriptedModel({"alice": [], "bob": [ToolCall("weather", {"city": "Oslo"}, id="c1"), "Sunny in Oslo."]})
        store = RecordingStore(m)
        hub, ch = await _open(m, [weather], store)
        await ch.send("Weather in Oslo?")
        await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=30)
        kinds = [(k, n) for k, n in store.appended if k.startswith("fsmchat.tool") or k == EV_TEXT]
        assert kinds == [(EV_TEXT, 0), (EV_TOOL_CALLS, 1), (EV_TOOL_RESULT, 1), (EV_TEXT, 2)]
        log = hub.read_log(ch.channel_id)
        [calls] = [e for e in log if e.event_type == EV_TOOL_CALLS]
        assert calls.sender == "bob" and calls.audience == ()
        assert calls.data == {"speaker": "bob", "calls": [{"id": "c1", "name": "weather",
                                                           "arguments": {"city": "Oslo"}, "status": "asked"}],
                              "message": {"role": "assistant", "content": None, "tool_calls": [  # as the wire has it
                                  {"id": "c1", "type": "function",
                                   "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]}}
        [result] = [e for e in log if e.event_type == EV_TOOL_RESULT]
        assert {k: result.data[k] for k in ("speaker", "id", "name", "status", "result")} == {
            "speaker": "bob", "id": "c1", "name": "weather", "status": "done", "result": "sunny in Oslo"}
        reply = [e for e in log if e.event_type == EV_TEXT][-1]
        assert reply.text == "Sunny in Oslo." and [c["result"] for c in reply.data["tool_calls"]] == ["sunny in Oslo"]
        second = m.requests_of("bob")[1]
        assert second.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "sunny in Oslo"}
        _, turns = hub.runs(ch.channel_id)
        assert turns.path == ["awaiting_alice", "awaiting_bob", "tools_awaiting_bob", "awaiting_bob", "closed"]
        assert RUNS == ["Oslo"]
        await hub.aclose()

    asyncio.run(body())


async def _approval(answer, script_after):
    m = ScriptedModel({"alice": [], "bob": [ToolCall("weather", {"city": "Oslo"}, id="c1"), *script_after]})
    hub, ch = await _open(m, [Tool(weather, approval=True)])
    asked = asyncio.Event()
    heard = []
    hub.listen(lambda e: (heard.append(e), asked.set()) if e.kind == "tool_approval" else None)
    await ch.send("Weather in Oslo?")
    await asked.wait()
    waiting = hub.waiting_call(ch.channel_id)
    assert RUNS == [] and hub.runs(ch.channel_id)[1].state == "approve_awaiting_bob"
    await hub.decide_tool_call(ch.channel_id, answer)
    await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=30)
    log = hub.read_log(ch.channel_id)
    await hub.aclose()
    return m, heard, waiting, log, hub.runs(ch.channel_id)[1].path


def test_a_hub_tool_call_that_needs_approval_waits_and_runs_once_approved():
    m, heard, waiting, log, path = asyncio.run(_approval(Approve(), ["Sunny in Oslo."]))
    assert {k: waiting[k] for k in ("speaker", "tool", "arguments", "call_id")} == {
        "speaker": "bob", "tool": "weather", "arguments": {"city": "Oslo"}, "call_id": "c1"}
    assert waiting["prompt"] == "bob asks to call weather(city='Oslo'): run it?"
    assert [e.agent_id for e in heard] == ["bob"]
    assert RUNS == ["Oslo"]
    [decision] = [e for e in log if e.event_type == EV_TOOL_DECISION]
    assert decision.data["decision"] == "approve"
    assert path == ["awaiting_alice", "awaiting_bob", "tools_awaiting_bob", "approve_awaiting_bob",
                    "tools_awaiting_bob", "awaiting_bob", "closed"]


def test_a_rejected_hub_tool_call_does_not_run_and_its_reason_goes_to_the_model():
    m, _, _, log, _ = asyncio.run(_approval(Reject("not today"), ["I may not look it up."]))
    assert RUNS == []
    assert m.requests_of("bob")[1].messages[-1] == {"role": "tool", "tool_call_id": "c1",
                                                    "content": "rejected: not today"}
    assert [e.text for e in log if e.event_type == EV_TEXT][-1] == "I may not look it up."


def test_an_edited_hub_tool_call_runs_with_the_edited_arguments():
    m, _, _, log, _ = asyncio.run(_approval(Edit(arguments={"city": "Bergen"}), ["Sunny in Bergen."]))
    assert RUNS == ["Bergen"]
    assert m.requests_of("bob")[1].messages[-1]["content"] == "sunny in Bergen"


def test_a_said_result_is_the_calls_result_without_running_it():
    m, _, _, _, _ = asyncio.run(_approval(Say("rain"), ["Rain in Oslo."]))
    assert RUNS == [] and m.requests_of("bob")[1].messages[-1]["content"] == "rain"


def test_edited_arguments_the_schema_refuses_are_an_error_and_the_call_keeps_waiting():
    async def body():
        m = ScriptedModel({"alice": [], "bob": [ToolCall("weather", {"city": "Oslo"}), "Sunny."]})
        hub, ch = await _open(m, [Tool(weather, approval=True)])
        asked = asyncio.Event()
        hub.listen(lambda e: asked.set() if e.kind == "tool_approval" else None)
        await ch.send("Weather?")
        await asked.wait()
        with pytest.raises(ToolArgumentsError):
            await hub.decide_tool_call(ch.channel_id, Edit(arguments={"town": 3}))
        assert hub.waiting_call(ch.channel_id)["tool"] == "weather" and RUNS == []
        await hub.decide_tool_call(ch.channel_id, Approve())
        await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=30)
        assert RUNS == ["Oslo"]
        with pytest.raises(ProtocolError, match="no tool call waits"):
            await hub.decide_tool_call(ch.channel_id, Approve())
        await hub.aclose()

    asyncio.run(body())


def test_a_failing_tool_under_on_tool_error_stop_fails_the_turn_with_a_tool_error():
    async def body():
        m = ScriptedModel({"alice": [], "bob": [ToolCall("broken", {"city": "Oslo"}), "unused"]})
        hub, ch = await _open(m, [broken], on_tool_error="stop")
        errors = []
        hub.listen(lambda e: errors.append(e.data["error"]) if e.kind == "tool_error" else None)
        await ch.send("Weather?")
        with pytest.raises(TurnFailed, match="ToolError: tool 'broken' of agent 'bob' failed"):
            await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=30)
        assert errors == ["RuntimeError: the service is down"]
        assert [e.data["status"] for e in hub.read_log(ch.channel_id) if e.event_type == EV_TOOL_RESULT] == ["error"]
        assert len(m.requests_of("bob")) == 1
        await hub.aclose()

    asyncio.run(body())


def test_every_tool_turn_commits_its_calls_and_results_even_when_the_model_reuses_call_ids():
    async def body():
        m = ScriptedModel({"alice": ["And in Bergen?"],  # every call is the default id call_1
                           "bob": [ToolCall("weather", {"city": "Oslo"}), "Sunny in Oslo.",
                                   ToolCall("weather", {"city": "Bergen"}), "Sunny in Bergen."]})
        hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=ManualClock())
        alice = await hub.register(m.agent("alice"))
        await hub.register(m.agent("bob", tools=[weather]))
        ch = await alice.open(target=["bob"], knobs={"max_texts": 4})
        await ch.send("Weather in Oslo?")
        await wait_for_text_count(hub, ch.channel_id, expected=4, timeout=30)
        log = hub.read_log(ch.channel_id)
        await hub.aclose()
        return [(e.event_type, e.data.get("id") or [c["id"] for c in e.data.get("calls", [])] or e.text)
                for e in log if e.event_type.startswith("fsmchat.tool") or e.event_type == EV_TEXT]

    assert asyncio.run(body()) == [
        (EV_TEXT, "Weather in Oslo?"), (EV_TOOL_CALLS, ["call_1"]), (EV_TOOL_RESULT, "call_1"),
        (EV_TEXT, "Sunny in Oslo."), (EV_TEXT, "And in Bergen?"), (EV_TOOL_CALLS, ["call_1"]),
        (EV_TOOL_RESULT, "call_1"), (EV_TEXT, "Sunny in Bergen.")]
    assert RUNS == ["Oslo", "Bergen"]


def test_a_waiting_call_is_asked_for_and_decided_as_in_a_group_chat():
    from fsmchat import Bid, GroupChat, MemoryCheckpointer

    gm = ScriptedModel({"bob": [ToolCall("weather", {"city": "Oslo"}, id="c1"), Bid(0.9, "I may not look it up.")],
                        "carol": [Bid(0.1, "No idea.")]})
    chat = GroupChat(agents=[gm.agent("bob", tools=[Tool(weather, approval=True)]), gm.agent("carol")], max_loops=2)
    store = MemoryCheckpointer()
    paused = chat.execute("Weather in Oslo?", checkpoint=store, run_id="g")
    assert paused.pending.state == "approve_bid"
    done = chat.resume("g", store, input=Reject("not today"))
    assert done.ok and RUNS == []

    hm, _, waiting, log, path = asyncio.run(_approval(Reject("not today"), ["I may not look it up."]))
    assert RUNS == [] and path[-3:] == ["tools_awaiting_bob", "awaiting_bob", "closed"]
    pending = paused.pending
    assert {k: waiting[k] for k in ("prompt", "allowed")} == {"prompt": pending.prompt, "allowed": pending.allowed} \
        == {"prompt": "bob asks to call weather(city='Oslo'): run it?", "allowed": {
            "approve": "run the call as proposed",
            "edit": "run it with these arguments instead (checked against the tool's schema)",
            "reject": "do not run it; the reason goes to the model as the call's result"}}
    assert {k: waiting[k] for k in ("speaker", "tool", "arguments", "call_id")} == pending.proposed
    rejected = {"role": "tool", "tool_call_id": "c1", "content": "rejected: not today"}
    assert gm.requests_of("bob")[1].messages[-1] == hm.requests_of("bob")[1].messages[-1] == rejected
