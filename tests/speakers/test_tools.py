"""Agents that call tools while they speak: one speaking block in every pattern, tool rounds as drawn
graph states, schemas from plain Python, errors back to the model, budgets, and the wire format."""
import asyncio
import threading

import pytest

from fsmchat import (AgentFlow, Discussion, ExpertPanelDiscussion, GroupChat, Message, OneOnOneDebate,
                     RoundRobinSwarm, Tool, ToolError)
from fsmchat.speakers.tools import ToolSource, parse_docstring
from fsmchat.testing import Bid, ScriptedModel, ToolCall, assert_trace_is_path

RUNS: list[str] = []


def weather(city: str, unit: str = "C") -> str:
    """The weather in a city.

    Args:
        city: The city's name.
        unit: C or F.
    """
    RUNS.append(city)
    return f"sunny, 21{unit} in {city}"


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def broken(x: int) -> str:
    """Always fails."""
    raise RuntimeError("the service is down")


@pytest.fixture(autouse=True)
def _clear():
    RUNS.clear()


def swarm(script, tools=(weather,), **agent_kw):
    m = ScriptedModel(script)
    return m, RoundRobinSwarm(agents=[m.agent("a", tools=list(tools), **agent_kw), m.agent("b")])


def test_a_tool_call_runs_its_result_goes_back_with_matching_ids_and_the_reply_carries_the_call():
    m, rr = swarm({"a": [ToolCall("weather", {"city": "Oslo"}, id="c7"), "Sunny in Oslo."], "b": ["Noted."]})
    r = rr.execute("Weather?")
    assert r.ok and r.path == ["seed", "a", "tools_a", "a", "b", "stop"]
    assert RUNS == ["Oslo"] and r.calls == 3 == m.calls()
    assert_trace_is_path(rr.graph, r)
    first, second = m.requests_of("a")
    assert [t["function"]["name"] for t in first.tools] == ["weather"] and first.tool_choice == "auto"
    assert [m_["role"] for m_ in second.messages][-2:] == ["assistant", "tool"]
    call = second.messages[-2]["tool_calls"][0]
    assert (call["id"], call["function"]["name"], call["function"]["arguments"]) == ("c7", "weather", '{"city": "Oslo"}')
    assert second.messages[-1] == {"role": "tool", "tool_call_id": "c7", "content": "sunny, 21C in Oslo"}
    reply = r.transcript[1]
    assert reply.content == "Sunny in Oslo."
    (entry,) = reply.tool_calls
    assert (entry.id, entry.name, entry.arguments, entry.status, entry.result) == \
        ("c7", "weather", {"city": "Oslo", "unit": "C"}, "done", "sunny, 21C in Oslo")
    assert entry.duration_s is not None and entry.duration_s >= 0
    assert r.to_dict()["transcript"][1]["metadata"]["tool_calls"][0]["name"] == "weather"
    # the other agent sees the final reply only (no tool rows, no call)
    (b_req,) = m.requests_of("b")
    assert {"role": "user", "content": "a: Sunny in Oslo."} in b_req.messages
    assert not any(x.get("role") == "tool" for x in b_req.messages)


def test_share_tool_results_shows_the_calls_to_the_other_agents():
    m, rr = swarm({"a": [ToolCall("weather", {"city": "Oslo"}), "Sunny."], "b": ["Noted."]},
                  share_tool_results=True)
    assert rr.execute("Weather?").ok
    (b_req,) = m.requests_of("b")
    seen = [x["content"] for x in b_req.messages if x["content"].startswith("a:")]
    assert seen == ["a: Sunny.\n[a called weather(city='Oslo', unit='C') -> sunny, 21C in Oslo]"]


def test_the_tool_loop_is_drawn_and_graphs_without_tools_are_unchanged():
    plain = RoundRobinSwarm(agents=[ScriptedModel({}).agent("a"), ScriptedModel({}).agent("b")])
    _, tooled = swarm({})
    assert list(plain.graph.states) == ["seed", "a", "b", "stop"]
    assert list(tooled.graph.states) == ["seed", "a", "b", "stop", "tools_a", "approve_a"]
    edges = [(t.source, t.dest, t.label) for t in tooled.graph.transitions]
    assert edges == [("seed", "a", "next"), ("a", "tools_a", "tool_calls"), ("a", "b", "next"),
                     ("b", "a", "next_loop"), ("b", "stop", "max_loops"), ("tools_a", "approve_a", "needs_person"),
                     ("tools_a", "a", "next"), ("approve_a", "tools_a", "next")]
    assert "tools_a" in tooled.graph.to_mermaid() and "tools_a" not in plain.graph.to_mermaid()


def test_max_calls_counts_the_tool_rounds_of_each_turn():
    m = ScriptedModel({})
    rr = RoundRobinSwarm(agents=[m.agent("a", tools=[weather]), m.agent("b")], max_loops=2)
    assert rr.max_calls() == 2 * (1 + 5) + 2  # max_tool_rounds defaults to 5
    rr2 = RoundRobinSwarm(agents=[m.agent("a", tools=[weather], max_tool_rounds=2), m.agent("b")], max_loops=2)
    assert rr2.max_calls() == 2 * 3 + 2


def test_after_max_tool_rounds_the_model_must_answer_without_tools():
    script = {"a": [ToolCall("weather", {"city": "A"}), ToolCall("weather", {"city": "B"}), "Done."], "b": ["ok"]}
    m, rr = swarm(script, max_tool_rounds=2)
    r = rr.execute("go")
    assert r.ok and RUNS == ["A", "B"] and r.calls == 4 == rr.max_calls() - 0
    assert [q.tool_choice for q in m.requests_of("a")] == ["auto", "auto", "none"]
    m2, rr2 = swarm({"a": [ToolCall("weather", {"city": "A"}), ToolCall("weather", {"city": "B"})], "b": ["ok"]},
                    max_tool_rounds=1)
    r2 = rr2.execute("go")
    assert not r2.ok and r2.stop_reason == "error" and isinstance(r2.error, ToolError)
    assert "still asked for tools (weather) after max_tool_rounds=1" in str(r2.error)
    assert [x.content for x in r2.transcript] == ["go"]


def test_schema_from_signature_hints_and_docstring():
    spec = Tool(weather).spec()
    assert spec == {"type": "function", "function": {
        "name": "weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "additionalProperties": False,
                       "properties": {"city": {"type": "string", "description": "The city's name."},
                                      "unit": {"type": "string", "description": "C or F.", "default": "C"}},
                       "required": ["city"]}}}
    t = Tool(add, name="plus", description="Sum.", approval=True, idempotent=True, timeout_s=2)
    assert (t.name, t.description, t.approval, t.idempotent, t.timeout_s) == ("plus", "Sum.", True, True, 2)
    assert parse_docstring("Do it.\n\nArgs:\n    x (int): the x.\n") == ("Do it.", {"x": "the x."})
    with pytest.raises(TypeError, match=r"parameter 'kw' is \*args/\*\*kwargs"):
        Tool(lambda **kw: 1, name="bad")
    with pytest.raises(ValueError, match="name='no spaces' is invalid"):
        Tool(add, name="no spaces")


def test_sync_and_async_tools_run_concurrently_with_results_in_call_order():
    started, release = [], asyncio.Event()

    async def slow(tag: str) -> str:
        """Waits until both calls started."""
        started.append(tag)
        if len(started) == 2:
            release.set()
        await release.wait()  # a run that called them one by one would never get here for the first
        return f"r-{tag}"

    calls = [ToolCall("slow", {"tag": "x"}, id="1"), ToolCall("slow", {"tag": "y"}, id="2"),
             ToolCall("add", {"a": 2, "b": "3"}, id="3")]
    m, rr = swarm({"a": [calls, "All done."], "b": ["ok"]}, tools=[slow, add])
    r = rr.execute("go")
    assert r.ok, r.error
    assert [(e.id, e.result) for e in r.transcript[1].tool_calls] == [("1", "r-x"), ("2", "r-y"), ("3", "5")]
    tool_rows = [x for x in m.requests_of("a")[1].messages if x["role"] == "tool"]
    assert [(x["tool_call_id"], x["content"]) for x in tool_rows] == [("1", "r-x"), ("2", "r-y"), ("3", "5")]


def test_the_concurrency_cap_holds():
    running, peak = [0], [0]

    async def probe(i: int) -> int:
        """Counts the calls running at once."""
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0)
        running[0] -= 1
        return i

    calls = [ToolCall("probe", {"i": i}, id=str(i)) for i in range(5)]
    m, rr = swarm({"a": [calls, "ok"], "b": ["ok"]}, tools=[probe], max_parallel_tools=2)
    assert rr.execute("go").ok
    assert peak[0] == 2


def test_invalid_arguments_an_unknown_tool_and_a_raising_tool_go_back_to_the_model_with_events():
    calls = [ToolCall("weather", {"town": "Oslo"}, id="1"), ToolCall("nope", {}, id="2"),
             ToolCall("broken", {"x": 1}, id="3")]
    m, rr = swarm({"a": [calls, "Sorry."], "b": ["ok"]}, tools=[weather, broken])
    r = rr.execute("go")
    assert r.ok and RUNS == []  # the invalid call never ran
    results = {x["tool_call_id"]: x["content"] for x in m.requests_of("a")[1].messages if x["role"] == "tool"}
    assert results["1"].startswith("error: invalid arguments for weather: city: Field required; town: Extra inputs")
    assert results["2"] == "error: unknown tool 'nope'; the tools are: broken, weather"
    assert results["3"] == "error: RuntimeError: the service is down"
    assert [(e["event"], e["tool"]) for e in r.events] == [("tool_error", "weather"), ("tool_error", "nope"),
                                                            ("tool_error", "broken")]
    assert [e.status for e in r.transcript[1].tool_calls] == ["error", "error", "error"]


def test_on_tool_error_stop_ends_the_run_with_a_tool_error_and_the_transcript():
    m = ScriptedModel({"a": ["first"], "b": [ToolCall("broken", {"x": 1})]})
    rr = RoundRobinSwarm(agents=[m.agent("a"), m.agent("b", tools=[broken], on_tool_error="stop")])
    r = rr.execute("go")
    assert not r.ok and r.stop_reason == "error" and isinstance(r.error, ToolError)
    assert "tool 'broken' of agent 'b' failed: RuntimeError: the service is down" in str(r.error)
    assert [x.content for x in r.transcript] == ["go", "first"]


def test_a_schema_dict_without_a_function_is_offered_and_calling_it_ends_the_run():
    schema = {"type": "function", "function": {"name": "lookup", "description": "Look up.",
                                               "parameters": {"type": "object", "properties": {}}}}
    m = ScriptedModel({"a": [ToolCall("lookup", {})]})
    rr = RoundRobinSwarm(agents=[m.agent("a", tools_list_dictionary=[schema])])
    assert list(rr.graph.states) == ["seed", "a", "stop"]  # nothing to run: no loop drawn
    r = rr.execute("go")
    assert m.requests_of("a")[0].tools == [schema]
    assert not r.ok and isinstance(r.error, ToolError)
    assert "called tool 'lookup', which has no function" in str(r.error)


def test_max_tool_calls_is_a_budget():
    calls = [ToolCall("weather", {"city": c}, id=c) for c in "AB"]
    m, rr = swarm({"a": [ToolCall("weather", {"city": "Z"}), calls, "x"], "b": ["ok"]})
    r = rr.with_limits(max_tool_calls=2).execute("go")
    assert r.stop_reason == "budget" and RUNS == ["Z"]  # the two calls would cross it: neither ran
    assert r.path[-1] == "over_budget"


def test_tools_run_under_the_runs_deadline_and_their_own_timeout():
    gate = asyncio.Event()

    async def hang() -> str:
        """Never returns."""
        await gate.wait()
        return "never"

    m, rr = swarm({"a": [ToolCall("hang", {}), "gave up"], "b": ["ok"]}, tools=[Tool(hang, timeout_s=0.01)])
    r = rr.execute("go")
    # the limit that fired is named: the tool's own timeout, not the run's deadline_s (none was set)
    assert r.ok and r.transcript[1].tool_calls[0].error == \
        "timed out: tool 'hang' was cancelled at its timeout (Tool(timeout_s=0.01))"

    def stuck() -> str:
        """Blocks its thread."""
        threading.Event().wait(5)
        return "never"

    m, rr = swarm({"a": [ToolCall("stuck", {}), "gave up"], "b": ["ok"]}, tools=[Tool(stuck, timeout_s=0.01)])
    r = rr.with_limits(deadline_s=60).execute("go")  # the earlier of the two limits fires, and is named
    assert r.transcript[1].tool_calls[0].error == ("timed out: tool 'stuck' was still running at its timeout "
                                                   "(Tool(timeout_s=0.01)); it was abandoned in its worker thread "
                                                   "(a sync callable cannot be stopped)")


def test_group_chat_bidder_calls_tools_before_it_bids():
    m = ScriptedModel({"a": [ToolCall("weather", {"city": "Oslo"}), Bid(0.9, "Sunny in Oslo."), Bid(0.1, "")],
                       "b": [Bid(0.2, "Hm."), Bid(0.1, "")]})
    chat = GroupChat(agents=[m.agent("a", tools=[weather]), m.agent("b")], max_loops=3)
    r = chat.execute("Weather?")
    assert r.ok, r.error
    assert r.path[:6] == ["seed", "bid", "tools_bid", "bid", "select", "post"]
    assert RUNS == ["Oslo"] and m.calls("b") == 2  # b's bid was asked once that turn, not again after a's tools
    first, second, _ = m.requests_of("a")
    assert [t["function"]["name"] for t in first.tools] == ["weather", "respond"]
    assert first.tool_choice == "required"
    assert second.messages[-1]["role"] == "tool"
    assert r.transcript[1].content == "Sunny in Oslo." and r.transcript[1].tool_calls[0].name == "weather"
    assert [(e["event"], e["agent"]) for e in r.events if e["event"] == "bid_tools"] == [("bid_tools", "a")]


def test_group_chat_forces_respond_once_the_rounds_are_used():
    m = ScriptedModel({"a": [ToolCall("weather", {"city": "X"}), Bid(0.9, "X it is.")], "b": [Bid(0.1, "")]})
    chat = GroupChat(agents=[m.agent("a", tools=[weather], max_tool_rounds=1), m.agent("b")], max_loops=2)
    assert chat.execute("go").ok
    assert [q.tool_choice for q in m.requests_of("a")] == ["required", {"type": "function",
                                                                        "function": {"name": "respond"}}]


def test_group_chat_without_tools_sends_what_it_sent_before():
    m = ScriptedModel({"a": [Bid(0.9, "Hi.")], "b": [Bid(0.1, "")]})
    r = GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=2).execute("go")
    assert r.path == ["seed", "bid", "select", "post", "penalize", "stop"]
    assert m.requests_of("a")[0].tool_choice == {"type": "function", "function": {"name": "respond"}}


def test_flow_agent_steps_and_discussion_turns_take_tool_rounds():
    m = ScriptedModel({"w": [ToolCall("weather", {"city": "Rome"}), "Rome is sunny."],
                       "x": [ToolCall("add", {"a": 1, "b": 2}), "3 it is."], "y": ["Agreed."]})
    flow = AgentFlow(steps=[m.agent("w", tools=[weather]),
                            Discussion([m.agent("x", tools=[add]), m.agent("y")], rounds=1, name="talk")])
    r = flow.execute("go")
    assert r.ok, r.error
    assert r.path == ["w", "tools_w", "w", "talk.begin", "talk.turn", "talk.tools_turn", "talk.turn", "talk.turn",
                      "talk.done", "end"]
    assert_trace_is_path(flow.graph, r)
    assert flow.max_calls() == 6 + 6 + 1
    assert RUNS == ["Rome"]


def test_debate_and_panel_turns_take_tool_rounds():
    m = ScriptedModel({"p": ["intro ok", ToolCall("add", {"a": 1, "b": 1}), "Two."], "q": ["intro ok", "No."]})
    d = OneOnOneDebate(agents=[m.agent("p", tools=[add]), m.agent("q")], max_loops=2)
    r = d.execute("1+1?")
    assert r.ok and [x.content for x in r.transcript] == ["Two.", "No."]
    assert "tools_turn_a" in r.path and r.transcript[0].tool_calls[0].result == "2"
    m2 = ScriptedModel({"mod": ["ok", "Round 1: weather", "Synth."], "e1": ["ok", ToolCall("weather", {"city": "Oslo"}),
                                                                       "Sunny."], "e2": ["ok", "Rain."]})
    panel = ExpertPanelDiscussion(agents=[m2.agent("e1", tools=[weather]), m2.agent("e2")], moderator=m2.agent("mod"),
                                  max_rounds=1)
    r2 = panel.execute("Weather?")
    assert r2.ok, r2.error
    assert [x.content for x in r2.transcript] == ["Round 1: weather", "Sunny.", "Rain.", "Synth."]
    assert RUNS == ["Oslo"]


class ListedTools:
    """A tool source: started once per run, listed once, stopped when the run ends."""

    name = "listed"

    def __init__(self):
        self.log = []

    async def start(self):
        self.log.append("start")

    async def tools(self):
        self.log.append("tools")
        return [Tool(add)]

    async def stop(self):
        self.log.append("stop")


def test_a_tool_source_is_started_listed_and_stopped_once_per_run():
    src = ListedTools()
    assert isinstance(src, ToolSource)
    m = ScriptedModel({"a": [ToolCall("add", {"a": 1, "b": 1}), "2", ToolCall("add", {"a": 2, "b": 2}), "4"],
                       "b": ["ok", "ok"]})
    rr = RoundRobinSwarm(agents=[m.agent("a", tools=[src]), m.agent("b")], max_loops=2)
    assert "tools_a" in rr.graph.states
    r = rr.execute("go")
    assert r.ok and src.log == ["start", "tools", "stop"]
    assert [x.content for x in r.transcript] == ["go", "2", "ok", "4", "ok"]


def test_bad_tools_are_refused_before_any_call():
    from fsmchat.errors import ConfigError
    with pytest.raises(ConfigError, match="two tools are named 'weather'"):
        ScriptedModel({}).agent("a", tools=[weather, Tool(weather)])
    with pytest.raises(ConfigError, match="a tool is a function, a Tool"):
        ScriptedModel({}).agent("a", tools=[3])


def test_message_tool_calls_is_empty_without_tools():
    assert Message(role="a", content="x").tool_calls == []


def test_stream_shows_the_tool_step_and_the_reply_with_its_calls():
    from fsmchat import TraceEvent

    m, rr = swarm({"a": [ToolCall("weather", {"city": "Oslo"}, id="s1"), "Sunny."], "b": ["ok"]})
    items = list(rr.stream("Weather?"))
    tool_steps = [e for e in items if isinstance(e, TraceEvent) and e.state == "tools_a"]
    assert [e.payload for e in tool_steps] == [[{"agent": "a", "id": "s1", "name": "weather",
                                                 "arguments": {"city": "Oslo", "unit": "C"}, "status": "done",
                                                 "result": "sunny, 21C in Oslo",
                                                 "duration_s": tool_steps[0].payload[0]["duration_s"]}]]
    posted = [e for e in items if isinstance(e, Message) and e.role == "a"]
    assert [c.name for c in posted[0].tool_calls] == ["weather"]


def test_the_viewer_and_the_report_show_the_call_block(tmp_path):
    from fsmchat.store.checkpoint import SqliteCheckpointer
    from fsmchat.ui import Store, write_report
    from fsmchat.ui.view import run_view

    m, rr = swarm({"a": [ToolCall("weather", {"city": "Oslo"}), "Sunny."], "b": ["ok"]})
    db = tmp_path / "runs.db"
    rr.execute("Weather?", checkpoint=SqliteCheckpointer(db), run_id="w")
    view = run_view(Store(db).run("w"), 0)
    (shown,) = [x for x in view["messages"] if x["role"] == "a"]
    assert shown["tool_calls"][0] | {"duration_s": 0} == {"name": "weather", "arguments": {"city": "Oslo", "unit": "C"},
                                                          "status": "done", "result": "sunny, 21C in Oslo",
                                                          "error": None, "duration_s": 0}
    assert "tool_calls" not in [x for x in view["messages"] if x["role"] == "b"][0]
    page = write_report(db, "w", tmp_path / "w.html").read_text()
    assert "sunny, 21C in Oslo" in page and "function toolCall(c)" in page


def test_the_live_view_prints_a_line_per_call():
    import io

    from fsmchat.cli.live import LiveRun

    m, rr = swarm({"a": [ToolCall("weather", {"city": "Oslo"}), "Sunny."], "b": ["ok"]})
    out = io.StringIO()
    live = LiveRun(out=out, status=False)
    rr.execute("Weather?", on_message=[live.on_message])
    lines = out.getvalue().splitlines()
    assert lines[1] == "a: Sunny."
    assert lines[2].startswith("  tool weather(city='Oslo', unit='C') -> sunny, 21C in Oslo (")


def test_the_viewers_bid_table_shows_a_bidders_tool_calls(tmp_path):
    from fsmchat.store.checkpoint import SqliteCheckpointer
    from fsmchat.ui import Store
    from fsmchat.ui.view import run_view

    m = ScriptedModel({"a": [ToolCall("weather", {"city": "Oslo"}), Bid(0.9, "Sunny."), Bid(0.1, "")],
                       "b": [Bid(0.2, "Hm."), Bid(0.1, "")]})
    db = tmp_path / "runs.db"
    GroupChat(agents=[m.agent("a", tools=[weather]), m.agent("b")], max_loops=3).execute(
        "Weather?", checkpoint=SqliteCheckpointer(db), run_id="g")
    first = run_view(Store(db).run("g"), 0)["turns"][0]
    a, b = first["agents"]
    assert [c["name"] for c in a["tools"]] == ["weather"] and "tools" not in b
    assert first["winner"] == "a"


def test_a_hub_agent_takes_its_tool_rounds_through_the_channels_turn_graph_and_may_close_with_its_tools():
    from fsmchat import EV_TEXT, Hub, ManualClock, MemoryKnowledgeStore, wait_for_text_count

    async def body():
        m = ScriptedModel({"alice": [], "bob": [ToolCall("weather", {"city": "Oslo"}),
                                                ToolCall("close_channel", {"reason": "answered"}), "Sunny in Oslo."]})
        hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=ManualClock())
        alice = await hub.register(m.agent("alice"))
        await hub.register(m.agent("bob", "You are bob.", tools=[weather]), close_tool=True)
        ch = await alice.open(target=["bob"])
        await ch.send("Weather in Oslo?")
        await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=5)
        await hub.drain(timeout=5)
        said = [(e.sender, e.text) for e in hub.read_log(ch.channel_id) if e.event_type == EV_TEXT]
        assert said == [("alice", "Weather in Oslo?"), ("bob", "Sunny in Oslo.")]
        assert RUNS == ["Oslo"] and hub.close_reason(ch.channel_id) == "answered"
        assert hub.runs(ch.channel_id)[1].path == ["awaiting_alice", "awaiting_bob", "tools_awaiting_bob",
                                                   "awaiting_bob", "tools_awaiting_bob", "awaiting_bob", "awaiting_alice",
                                                   "closed"]
        first = m.requests_of("bob")[0]
        assert [t["function"]["name"] for t in first.tools] == ["weather", "close_channel"]
        await hub.aclose()

    asyncio.run(body())


def test_a_tool_still_running_at_the_runs_deadline_stops_the_run_there():
    never = asyncio.Event()

    async def hang() -> str:
        """Waits for an event that never comes."""
        await never.wait()
        return "never"

    m, rr = swarm({"a": [ToolCall("hang", {}), "x"], "b": ["ok"]}, tools=[hang])
    r = rr.with_limits(deadline_s=0.2).execute("go")
    assert r.stop_reason == "deadline" and r.path[:3] == ["seed", "a", "tools_a"]
    assert [x.content for x in r.transcript] == ["go"]


def test_a_direct_reply_runs_its_tool_rounds_in_place_and_refuses_an_approval():
    from fsmchat import Turn

    m = ScriptedModel({"a": [ToolCall("weather", {"city": "Rome"}), "Sunny in Rome."],
                       "p": [ToolCall("weather", {"city": "Rome"})]})
    turn = Turn("a", [Message(role="User", content="Rome?")], "Answer.")
    assert asyncio.run(m.agent("a", tools=[weather]).reply(turn)) == "Sunny in Rome." and RUNS == ["Rome"]
    with pytest.raises(ToolError, match="needs a person's approval, which a direct call cannot ask for"):
        asyncio.run(m.agent("p", tools=[Tool(weather, approval=True)]).reply(Turn("p", turn.transcript, "Answer.")))
    assert RUNS == ["Rome"]


def test_a_tool_round_in_a_briefing_asks_no_one_twice_and_remembers_each_reply_once():
    m = ScriptedModel({"mod": ["brief ok", "Round 1: go", "Synth."], "e1": [ToolCall("add", {"a": 1, "b": 1}),
                                                                           "brief ok", "One."], "e2": ["ok", "Two."]})
    panel = ExpertPanelDiscussion(agents=[m.agent("e1", tools=[add]), m.agent("e2")], moderator=m.agent("mod"),
                                  max_rounds=1)
    r = panel.execute("Go?")
    assert r.ok, r.error
    assert r.path[:4] == ["brief", "tools_brief", "brief", "open_round"]
    assert (m.calls("mod"), m.calls("e1"), m.calls("e2")) == (3, 3, 2)  # the moderator was briefed once
    memory = r.context.memory
    assert [x["content"] for x in memory["mod"]][1::2] == ["brief ok", "Round 1: go", "Synth."]
    assert [x["content"] for x in memory["e1"]][1::2] == ["brief ok", "One."]


def test_a_tool_given_a_json_schema_has_its_arguments_checked_before_it_runs():
    ran = []
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "unit": {"enum": ["C", "F"]}},
              "required": ["n"], "additionalProperties": False}
    t = Tool(lambda **kw: ran.append(kw) or "ok", name="remote", description="A remote tool.", parameters=schema)
    from fsmchat.speakers.tools import ToolArgumentsError
    with pytest.raises(ToolArgumentsError, match=r"invalid arguments for remote: n: expected integer, got str; "
                                                 r"unit: 'K' is not one of \['C', 'F'\]; x: not a parameter"):
        t.check_arguments({"n": "2", "unit": "K", "x": 1})
    with pytest.raises(ToolArgumentsError, match="n: required"):
        t.check_arguments({})
    with pytest.raises(ToolArgumentsError, match="n: expected integer, got bool"):
        t.check_arguments({"n": True})
    assert t.check_arguments('{"n": 3, "unit": "C"}') == {"n": 3, "unit": "C"} and ran == []


# ---- GroupChat bidders in JSON mode: refused, never silently without their tools ----
JSON_BIDDER = ("GroupChat: agent 'a' has tools but bids in JSON mode ({why}): a JSON-mode bid is the model's text, "
               "which cannot call tools, so they would never run. Use tool_mode='native' (the default: its tools "
               "and respond are offered as function calls) with a model that supports tools, or give the agent "
               "no tools")


def test_a_groupchat_bidder_with_tools_in_json_mode_is_refused_before_any_model_call():
    m = ScriptedModel({"a": [Bid(0.9, "x")], "b": [Bid(0.1, "")]})
    with pytest.raises(ToolError) as err:
        GroupChat(agents=[m.agent("a", tools=[weather], tool_mode="json"), m.agent("b")])
    assert str(err.value) == JSON_BIDDER.format(why="tool_mode='json'") and err.value.agent == "a"
    assert m.calls() == 0
    GroupChat(agents=[m.agent("a", tool_mode="json"), m.agent("b")])  # without tools JSON mode is fine


def test_a_bidder_with_tools_whose_model_fell_back_to_json_mode_ends_the_run_with_a_tool_error(monkeypatch):
    from fsmchat.speakers import llm

    m = ScriptedModel({"a": [Bid(0.9, "x")], "b": [Bid(0.1, "")]})
    a = m.agent("a", tools=[weather])
    monkeypatch.setitem(llm._tool_modes, llm.resolve_model(a.model), "json")  # a provider refused tools earlier
    r = GroupChat(agents=[a, m.agent("b")], max_loops=3).execute("Weather?")
    assert not r.ok and isinstance(r.error, ToolError)
    assert str(r.error) == JSON_BIDDER.format(why=f"its model {a.model!r} refused tools earlier in this process")
    assert m.requests_of("a") == [] and RUNS == []


def test_a_long_result_is_cut_at_max_result_chars_the_cut_said_and_an_event_recorded():
    def dump() -> str:
        """Dumps a lot."""
        return "x" * 2_000_000

    m, rr = swarm({"a": [ToolCall("dump", {}, id="d1"), "ok"], "b": ["ok"]}, tools=[Tool(dump, max_result_chars=1000)])
    r = rr.execute("go")
    sent = m.requests_of("a")[1].messages[-1]["content"]  # what the model read
    assert sent == "x" * 1000 + ("\n[truncated by fsmchat: the result had 2,000,000 characters, the first 1,000 are "
                                 "shown (Tool(max_result_chars=1000))]")
    assert r.transcript[1].tool_calls[0].result == sent
    assert [e for e in r.events if e["event"] == "tool_result_truncated"] == [
        {"event": "tool_result_truncated", "agent": "a", "tool": "dump", "call_id": "d1", "chars": 2_000_000,
         "kept": 1000}]
    assert Tool(dump).max_result_chars == 50_000 and Tool(dump, max_result_chars=None).max_result_chars is None
    for bad in ("1000", True, 0, 2.5):
        with pytest.raises((TypeError, ValueError), match=r"Tool 'dump': max_result_chars=.* is invalid: a positive int"):
            Tool(dump, max_result_chars=bad)


def test_a_secret_across_the_cut_is_masked_whole():
    key = "Q7w9E2r4T6y8U1i3"  # no shape: masked only as the agent's known credential, whole or not at all

    def leak() -> str:
        """Leaks."""
        return "a" * 995 + key + "b" * 100

    m = ScriptedModel({"a": [ToolCall("leak", {}), "ok"], "b": ["ok"]})
    rr = RoundRobinSwarm(agents=[m.agent("a", api_key=key, tools=[Tool(leak, max_result_chars=1000)]), m.agent("b")],
                         max_loops=1)
    rr.execute("go")
    sent = m.requests_of("a")[1].messages[-1]["content"]
    assert sent.startswith("a" * 995 + "***bb") and "Q7w9E" not in sent


@pytest.mark.parametrize("schema, problem", [
    ({"type": "bogus"}, "not a JSON schema: at type: 'bogus' is not valid under any of the given schemas (a type is "
                        "one of string, integer, number, boolean, array, object, null, or a list of them)"),
    ({"type": "object", "properties": {"a": {"type": "strin"}}},
     "not a JSON schema: at properties/a/type: 'strin' is not valid under any of the given schemas (a type is one of "
     "string, integer, number, boolean, array, object, null, or a list of them)"),
    ({"type": "object", "required": "a"}, "not a JSON schema: at required: 'a' is not of type 'array'"),
    ({"type": "string"}, 'the schema of an object of arguments ({"type": "object", "properties": {...}}); its type '
                         "is 'string'"),
])
def test_a_given_schema_is_checked_against_the_json_schema_metaschema_at_construction(schema, problem):
    from fsmchat.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        Tool(lambda a: a, name="t", parameters=schema)
    assert str(e.value) == f"Tool 't': parameters={schema!r} is invalid: {problem}"
    assert Tool(None, name="t", parameters={"type": "object", "properties": {"a": {"type": "string"}}}).parameters
