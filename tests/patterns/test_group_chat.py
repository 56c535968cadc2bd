"""GroupChat state-transition and conformance tests (docs/semantics.md "GroupChat")."""
import asyncio
import time

import pytest

from fsmchat import RESPOND_TOOL, Agent, Bid, GroupChat
from fsmchat.testing import Delay, Empty, Fail, FunctionModel, ScriptedModel, ToolCall, assert_calls, assert_path, \
    assert_stop, assert_trace_is_path

TASK = "Should we prioritize AI development or AI regulation?"
LULL1 = ["seed", "bid", "select", "stop"]


def chat_of(scripts, **kw):
    m = ScriptedModel(scripts)
    agents = [m.agent(n, system_prompt=f"You are {n}.") for n in scripts]
    return m, GroupChat(agents=agents, **kw)


def check(chat, r):
    assert_trace_is_path(chat.graph, r)
    assert r.error is None


def test_defaults_and_exported_tool():
    m = ScriptedModel({})
    c = GroupChat(agents=[m.agent("a"), m.agent("b")])
    assert (c.name, c.description) == ("dynamic-groupchat", "Agents take turns; one speaker per turn.")
    assert (c.max_loops, c.threshold, c.recency_penalty, c.recency_window, c.idle_timeout) == (20, 0.5, 0.3, 1, 8.0)
    assert (c.output_type, c.auto_equip, c.verbose) == ("str-all-except-first", True, False)
    f = RESPOND_TOOL["function"]
    assert f["name"] == "respond"
    assert f["description"] == ("Decide whether to reply in the groupchat. Set score 0..1 for how much you want to "
                                "speak. If you don't want to speak, set message to empty string.")
    assert f["parameters"]["required"] == ["score", "message"]
    assert f["parameters"]["properties"]["score"] == {
        "type": "number", "minimum": 0, "maximum": 1,
        "description": "How much you want to respond (0 = silent, 1 = strongly want to)."}
    assert f["parameters"]["properties"]["message"] == {
        "type": "string", "description": "Your reply to the group, or empty string if you don't want to speak."}


@pytest.mark.parametrize("agents", [None, [], ["one"]])
def test_fewer_than_two_agents(agents):
    if agents == ["one"]:
        agents = [Agent("solo")]
    with pytest.raises(ValueError, match=r"^GroupChat requires at least 2 agents\.$"):
        GroupChat(agents=agents)


@pytest.mark.parametrize("kw, needle", [
    ({"threshold": 1.5}, "threshold"), ({"threshold": -0.1}, "threshold"),
    ({"recency_penalty": -1}, "recency_penalty"), ({"recency_window": -1}, "recency_window"),
    ({"max_loops": 0}, "max_loops"), ({"output_type": "yaml"}, "output_type"),
])
def test_bad_config_is_refused_before_any_call(kw, needle):
    m = ScriptedModel({})
    with pytest.raises(ValueError, match=needle):
        GroupChat(agents=[m.agent("a"), m.agent("b")], **kw)
    assert m.calls() == 0


def test_duplicate_names_refused():
    with pytest.raises(ValueError, match="unique.*'a'"):
        GroupChat(agents=[Agent("a"), Agent("a")])


def test_lull_on_first_turn():
    m, chat = chat_of({"a": [Bid(0.2, "meh")], "b": [Bid(0.0, "")]})
    r = chat.execute(TASK)
    check(chat, r)
    assert_path(r, LULL1)
    assert_stop(r, "lull")
    assert_calls(m, 2)
    assert [x.role for x in r.transcript] == ["User"]
    assert r.calls == 2


def test_max_loops_counts_the_seed():
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0.9, "a2")], "b": [Bid(0.6, "b1"), Bid(0.7, "b2")]}, max_loops=3)
    r = chat.execute(TASK)
    check(chat, r)
    assert_path(r, ["seed"] + ["bid", "select", "post", "penalize"] * 2 + ["stop"])
    assert_stop(r, "max_loops")
    assert [(x.role, x.content) for x in r.transcript] == [("User", TASK), ("a", "a1"), ("b", "b2")]
    assert_calls(m, 4)  # N x posts, no lull turn


def test_max_loops_one_makes_no_call():
    m, chat = chat_of({"a": [], "b": []}, max_loops=1)
    r = chat.execute(TASK)
    check(chat, r)
    assert_path(r, ["seed", "stop"])
    assert_stop(r, "max_loops")
    assert_calls(m, 0)
    assert r.output == ""


def test_recency_penalty_moves_the_floor():
    # a bids 0.9 twice; after speaking, 0.9-0.3=0.6 < b's 0.7, so b takes the floor.
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0.9, "a2"), Bid(0.0, "")],
                       "b": [Bid(0.6, "b1"), Bid(0.7, "b2"), Bid(0.0, "")]})
    r = chat.execute(TASK)
    check(chat, r)
    assert [x.role for x in r.transcript] == ["User", "a", "b"]
    assert_stop(r, "lull")
    assert_calls(m, 6)  # N x (posts + 1)
    assert r.transcript[1].metadata == {"score": 0.9}


def test_repeat_speaker_still_wins_after_penalty():
    m, chat = chat_of({"a": [Bid(0.95, "a1"), Bid(0.95, "a2"), Bid(0.1, "")],
                       "b": [Bid(0.6, "b1"), Bid(0.6, "b2"), Bid(0.1, "")]})
    r = chat.execute(TASK)
    assert [x.content for x in r.transcript[1:]] == ["a1", "a2"]  # 0.95-0.3=0.65 > 0.6
    assert_calls(m, 6)


def test_penalty_applied_once_and_window():
    # window 2: a and b both recent; raw 0.9 and 0.85 -> 0.6 and 0.55; c at 0.58 loses to a.
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0.1, ""), Bid(0.9, "a3"), Bid(0, "")],
                       "b": [Bid(0.2, ""), Bid(0.9, "b2"), Bid(0.85, "b3"), Bid(0, "")],
                       "c": [Bid(0.2, ""), Bid(0.2, ""), Bid(0.58, "c3"), Bid(0, "")]}, recency_window=2)
    r = chat.execute(TASK)
    assert [x.content for x in r.transcript[1:]] == ["a1", "b2", "a3"]
    assert_stop(r, "lull")


def test_ties_go_to_the_earlier_agent():
    m, chat = chat_of({"a": [Bid(0.8, "a1"), Bid(0, "")], "b": [Bid(0.8, "b1"), Bid(0, "")]})
    r = chat.execute(TASK)
    assert [x.role for x in r.transcript] == ["User", "a"]


def test_bid_exactly_at_threshold_loses():
    m, chat = chat_of({"a": [Bid(0.5, "a1")], "b": [Bid(0.5, "b1")]})
    r = chat.execute(TASK)
    assert_path(r, LULL1)
    assert_stop(r, "lull")


def test_whitespace_only_message_is_ignored():
    # (its script for "a" used to hold one answer for two turns: the exhausted script was hidden
    # as a silent bid, and the test passed by accident)
    m, chat = chat_of({"a": [Bid(1.0, "   \n "), Bid(0, "")], "b": [Bid(0.6, "b1"), Bid(0, "")]})
    r = chat.execute(TASK)
    assert r.ok and r.stop_reason == "lull"
    assert [x.role for x in r.transcript] == ["User", "b"]


@pytest.mark.parametrize("item, reason", [
    ("plain text", "no tool call"),
    (ToolCall("respond", "{not json"), "not JSON"),
    (ToolCall("shout", {"score": 1, "message": "x"}), "not respond"),
    (ToolCall("respond", {"score": "high", "message": "x"}), "not a number"),
    (ToolCall("respond", {"score": "nan", "message": "x"}), "score 'nan' is not a number"),
    (Empty(), "no choices"),
    (Fail(500, "server down"), "model call failed"),  # transient; a 400 ends the run (test_honest_failures.py)
])
def test_malformed_bids_are_silent_and_recorded(item, reason):
    m, chat = chat_of({"a": [item], "b": [Bid(0.1, "")]})
    r = chat.execute(TASK)
    check(chat, r)
    assert_stop(r, "lull")
    assert [e["agent"] for e in r.events] == ["a"]
    assert reason in r.events[0]["reason"]
    assert_calls(m, 2)


def test_score_out_of_range_is_clamped_and_flagged():
    m, chat = chat_of({"a": [ToolCall("respond", {"score": 7, "message": "loud"}), Bid(0, "")],
                       "b": [Bid(0.1, ""), Bid(0, "")]})
    r = chat.execute(TASK)
    assert r.transcript[1].metadata == {"score": 1.0}
    assert "outside 0..1" in r.events[0]["reason"]


def test_request_forces_respond_and_carries_typed_conversation():
    m, chat = chat_of({"a": [Bid(0.9, "hello b"), Bid(0, "")], "b": [Bid(0.1, ""), Bid(0, "")]})
    chat.execute(TASK)
    a2, b2 = m.requests_of("a")[1], m.requests_of("b")[1]
    assert a2.tools == [RESPOND_TOOL]
    assert a2.tool_choice == {"type": "function", "function": {"name": "respond"}}
    assert a2.messages[0] == {"role": "system", "content": "You are a."}
    assert a2.messages[1:3] == [{"role": "user", "content": TASK}, {"role": "assistant", "content": "hello b"}]
    assert b2.messages[1:3] == [{"role": "user", "content": TASK}, {"role": "user", "content": "a: hello b"}]
    assert "You are b" in b2.prompt and "a" in b2.prompt and "hello b" in b2.prompt


def test_auto_equip_false_without_tool_never_takes_the_floor():
    m = ScriptedModel({"a": [Bid(0.99, "a1")], "b": [Bid(0.1, "")]})
    chat = GroupChat(agents=[m.agent("a"), m.agent("b", tools=[RESPOND_TOOL])], auto_equip=False)
    r = chat.execute(TASK)
    assert_stop(r, "lull")
    assert m.requests_of("a")[0].tool_choice is None
    assert m.requests_of("b")[0].tool_choice == {"type": "function", "function": {"name": "respond"}}


def test_slow_agents_bid_concurrently():
    """Each bid stays in its model call until every agent's bid call has started: with bids asked one
    after another the first would wait alone (then, after a hang guard, answer having seen 1 of 5)."""
    n = 5
    started, seen = set(), []
    give_up = time.monotonic() + 120  # only ends a wait that concurrent bids never reach

    def bid(req):
        started.add(req.agent)

        def wait(_req):
            if len(started) < n and time.monotonic() < give_up:
                return Delay(0.005, wait)
            seen.append(len(started))  # how many bid calls were in flight when this one answered
            return Bid(0.1, "")
        return wait(req)

    m = FunctionModel(bid)
    chat = GroupChat(agents=[m.agent(f"x{i}", system_prompt=f"You are x{i}.") for i in range(n)])
    r = chat.execute(TASK)
    assert_stop(r, "lull")
    assert_calls(m, n)
    assert seen == [n] * n, f"the bids were not all in flight at once: {seen}"


def test_callables_are_participants():
    def eager(turn):
        return Bid(0.9, "from a function") if len(turn.transcript) == 1 else Bid(0, "")

    async def shy(turn):
        return Bid(0.2, "")

    chat = GroupChat(agents=[eager, shy], output_type="list")
    assert chat.run(TASK) == [{"role": "User", "content": TASK}, {"role": "eager", "content": "from a function"}]


@pytest.mark.parametrize("ot, expected", [
    ("str-all-except-first", "a1\nb1"),
    ("str", f"User: {TASK}\n\na: a1\n\nb: b1"),
    ("all", f"User: {TASK}\n\na: a1\n\nb: b1"),
    ("list", [{"role": "User", "content": TASK}, {"role": "a", "content": "a1"}, {"role": "b", "content": "b1"}]),
    ("final", "b1"),
    ("last", "b1"),
])
def test_output_types(ot, expected):
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0.1, ""), Bid(0, "")],
                       "b": [Bid(0.1, ""), Bid(0.9, "b1"), Bid(0, "")]}, output_type=ot)
    assert chat.run(TASK) == expected


def test_dict_and_json_output_carry_metadata():
    import json
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0, "")], "b": [Bid(0.1, ""), Bid(0, "")]}, output_type="dict")
    rows = chat.run(TASK)
    assert rows[1] == {"role": "a", "content": "a1", "metadata": {"score": 0.9}}
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0, "")], "b": [Bid(0.1, ""), Bid(0, "")]}, output_type="json")
    assert json.loads(chat.run(TASK))[1]["metadata"] == {"score": 0.9}


def test_run_batch_is_independent_and_ordered():
    def fn(req):
        first = len(req.messages) == 3  # system, seed, instruction
        topic = req.messages[1]["content"]
        return Bid(0.9, f"{req.agent} on {topic}") if first and req.agent == "a" else Bid(0, "")

    m = ScriptedModel(fn=fn)
    chat = GroupChat(agents=[m.agent("a", "A"), m.agent("b", "B")], output_type="final")
    assert chat.run_batch(["t1", "t2", "t3"], max_concurrency=2) == ["a on t1", "a on t2", "a on t3"]
    assert m.calls() == 3 * 2 * 2


def test_script_exhaustion_fails_loudly():
    m, chat = chat_of({"a": [Bid(0.9, "a1")], "b": [Bid(0.1, ""), Bid(0.1, "")]})
    with pytest.raises(AssertionError, match=r"agent 'a' made call #2 but its script has only 1"):
        chat.run(TASK)


def test_user_code_error_keeps_transcript():
    def boom(turn):
        if len(turn.transcript) > 1:
            raise RuntimeError("user bug")
        return Bid(0.9, "first")

    chat = GroupChat(agents=[boom, lambda t: Bid(0, "")])
    r = chat.execute(TASK)
    assert_stop(r, "error")
    assert [x.content for x in r.transcript] == [TASK, "first"]
    with pytest.raises(RuntimeError, match="user bug") as ei:
        chat.run(TASK)
    assert [x.content for x in ei.value.fsmchat_result.transcript] == [TASK, "first"]


def test_cancelled_run_keeps_transcript():
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Delay(10, Bid(0, ""))], "b": [Bid(0.1, ""), Delay(10, Bid(0, ""))]})

    async def go():
        task = asyncio.ensure_future(chat.aexecute(TASK))
        while len(m.requests_of("a")) < 2 or len(m.requests_of("b")) < 2:  # both are inside their second bid
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as ei:
            await task
        return ei.value.fsmchat_result

    r = asyncio.run(go())
    assert r.stop_reason == "cancelled"
    assert [x.content for x in r.transcript] == [TASK, "a1"]
    assert r.path[-1] == "bid"


def test_stream_yields_events_and_posts_in_order():
    from fsmchat import Message, RunResult, TraceEvent
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0, "")], "b": [Bid(0.1, ""), Bid(0, "")]})

    async def go():
        return [x async for x in chat.stream(TASK)]

    items = asyncio.run(go())
    kinds = [type(x).__name__ for x in items]
    assert kinds[0] == "Message" and isinstance(items[-1], RunResult)
    posts = [x.content for x in items if isinstance(x, Message)]
    assert posts == [TASK, "a1"]
    states = [x.state for x in items if isinstance(x, TraceEvent)]
    assert states == items[-1].path


def test_group_chat_graph_shape():
    g = GroupChat(agents=[Agent("a"), Agent("b")]).graph
    edges = [(t.source, t.dest, t.label) for t in g.transitions]
    assert edges == [("seed", "bid", "under_cap"), ("seed", "stop", "max_loops"), ("bid", "select", "next"),
                     ("select", "post", "has_winner"), ("select", "stop", "lull"), ("post", "penalize", "next"),
                     ("penalize", "bid", "under_cap"), ("penalize", "stop", "max_loops")]


def test_context_window_shows_the_task_and_the_last_messages():
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0.1, ""), Bid(0.9, "a3"), Bid(0, "")],
                       "b": [Bid(0.1, ""), Bid(0.9, "b2"), Bid(0.1, ""), Bid(0, "")]})
    chat = GroupChat(agents=chat.agents, context_window=2)
    r = chat.execute(TASK)
    assert [x.content for x in r.transcript] == [TASK, "a1", "b2", "a3"]
    last = m.requests_of("b")[3].messages  # system, task, b2 (own), a3, instruction
    assert [x["content"] for x in last[1:-1]] == [TASK, "b2", "a: a3"]
    with pytest.raises(ValueError, match="context_window"):
        GroupChat(agents=chat.agents, context_window=0)


def test_a_users_own_litellm_provider_is_kept_and_used():
    from fsmchat.speakers.llm import get_litellm

    lm = get_litellm()

    class Mine(lm.CustomLLM):
        async def acompletion(self, *args, **kwargs):
            return lm.ModelResponse(choices=[{"message": {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "respond",
                                                             "arguments": '{"score": 0.9, "message": "mine"}'}}]},
                                              "finish_reason": "tool_calls"}])

    entry = {"provider": "my-own-llm", "custom_handler": Mine()}
    lm.custom_provider_map.append(entry)
    try:
        # a model litellm does not know bids through the forced tool call by default (no tool_mode needed)
        chat = GroupChat(agents=[Agent("x", model="my-own-llm/any", num_retries=0),
                                 ScriptedModel({"y": [Bid(0, ""), Bid(0, "")]}).agent("y")], max_loops=2)
        assert [m_.content for m_ in chat.execute(TASK).transcript] == [TASK, "mine"]
        json_mode = GroupChat(agents=[Agent("x", model="my-own-llm/any", num_retries=0, tool_mode="json"),
                                      ScriptedModel({"y": [Bid(0, "")]}).agent("y")], max_loops=2).execute(TASK)
        assert "set the agent's tool_mode='native'" in json_mode.events[0]["reason"]
        providers = [p["provider"] for p in lm.custom_provider_map]
        assert "my-own-llm" in providers and "fsmchat-offline" in providers and "fsmchat-scripted" in providers
    finally:
        lm.custom_provider_map.remove(entry)
