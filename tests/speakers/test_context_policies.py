"""Context policies: every prompt counted against the model's input limit before it is sent; a prompt
over it refused (``context="full"``), cut to the task and the last n messages (``LastMessages``), or
kept short by a drawn compaction (``Summarize``), against a scripted model with a small window."""
import pytest

from fsmchat import Agent, Bid, GroupChat, RoundRobinSwarm, SqliteCheckpointer
from fsmchat.errors import ConfigError
from fsmchat.errors import ContextTooLong
from fsmchat.speakers.context import LastMessages, Summarize, count_tokens
from fsmchat.testing import Fail, ScriptedModel

ALPHA, BETA = " ".join(["alpha"] * 20), " ".join(["beta"] * 20)
BIDS_A = [Bid(0.9, f"a{i} {ALPHA}") for i in range(20)]
BIDS_B = [Bid(0.8, f"b{i} {BETA}") for i in range(20)]


def ask(name, other, sender, text):
    """The bid instruction GroupChat sends (written out here, not read from the code)."""
    return (f"You are {name} in a group chat with {other}. The latest message is from {sender}:\n\n{text}\n\n"
            "Decide whether to speak next. Call the respond tool exactly once: score (0..1) is how much you "
            "want the floor, message is your reply to the group, or an empty string to stay silent.")


def msg(role, content):
    return {"role": role, "content": content}


def test_full_refuses_a_prompt_over_the_limit_before_it_is_sent():
    m = ScriptedModel({"a": BIDS_A, "b": BIDS_B}, max_input_tokens=317)
    r = GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=8).execute("Discuss.")
    assert not r.ok and r.stop_reason == "error"
    assert isinstance(r.error, ContextTooLong)
    assert (r.error.agent, r.error.tokens, r.error.limit) == ("a", 322, 317)
    assert str(r.error) == (
        "agent 'a': the prompt has 322 tokens, over the input limit of 317 tokens (max_input_tokens of "
        f"'{m.model}' in litellm's model map); it was not sent. Keep the prompt within the window with a context "
        "policy on the agent or the pattern: context=LastMessages(n) (the task and the last n messages) or "
        "context=Summarize(agent=..., keep_last=k, at=0.8) (older messages summarised by one model call); "
        "context=\"full\" (the default) sends the whole conversation")
    # the transcript so far; the refused bids were never sent (4 turns of 2 bids)
    assert [x.content[:2] for x in r.transcript] == ["Di", "a0", "b1", "a2", "b3"]
    assert m.calls() == 8
    # each bid counted as sent: its messages, the respond tool and the tool choice (117 tokens of them)
    tokens = [(e["agent"], e["tokens"], e.get("refused", False)) for e in r.events if e["event"] == "prompt_tokens"]
    assert tokens == [("a", 193, False), ("b", 193, False), ("a", 240, False), ("b", 242, False), ("a", 268, False),
                      ("b", 268, False), ("a", 294, False), ("b", 296, False), ("a", 322, True), ("b", 322, True)]


def test_an_agents_declared_limit_is_used_and_named():
    m = ScriptedModel({"a": ["x" * 10], "b": ["y"]})
    swarm = RoundRobinSwarm(agents=[m.agent("a", max_input_tokens=20), m.agent("b")])
    r = swarm.execute("Plan the launch.")
    assert not r.ok and isinstance(r.error, ContextTooLong) and m.calls() == 0
    assert "(Agent(max_input_tokens=20))" in str(r.error) and r.error.limit == 20


def test_last_messages_on_an_agent_sends_the_task_and_the_last_n():
    m = ScriptedModel({"a": BIDS_A, "b": BIDS_B}, max_input_tokens=400)
    r = GroupChat(agents=[m.agent("a", context=LastMessages(2)), m.agent("b")], max_loops=5).execute("Discuss.")
    assert r.ok and [x.content[:2] for x in r.transcript] == ["Di", "a0", "b1", "a2", "b3"]
    assert m.requests_of("a")[3].messages == [
        msg("user", "Discuss."), msg("user", f"b: b1 {BETA}"), msg("assistant", f"a2 {ALPHA}"),
        msg("user", ask("a", "b", "a", f"a2 {ALPHA}"))]
    assert m.requests_of("b")[3].messages == [  # b keeps the whole conversation
        msg("user", "Discuss."), msg("user", f"a: a0 {ALPHA}"), msg("assistant", f"b1 {BETA}"),
        msg("user", f"a: a2 {ALPHA}"), msg("user", ask("b", "a", "a", f"a2 {ALPHA}"))]
    assert [e["policy"] for e in r.events if e["event"] == "prompt_tokens"][:2] == ["last_messages", "full"]


def test_group_chats_context_window_is_last_messages():
    def run(**kw):
        m = ScriptedModel({"a": BIDS_A, "b": BIDS_B})
        GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=5, **kw).execute("Discuss.")
        return [list(q.messages) for q in m.requests]

    windowed = run(context_window=1)
    assert windowed == run(context=LastMessages(1))
    assert windowed[-1] == [msg("user", "Discuss."), msg("user", f"a: a2 {ALPHA}"),
                            msg("user", ask("b", "a", "a", f"a2 {ALPHA}"))]
    assert GroupChat(agents=[Agent("a"), Agent("b")], context_window=3).context_policy == LastMessages(3)


def summarized_chat(m, **kw):
    # at 100 tokens of the conversation (0.3125 x 320); each bid also sends the respond tool (117 tokens)
    policy = Summarize(agent=m.agent("scribe", system_prompt="You summarise."), keep_last=1, at=0.3125)
    return GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=8, context=policy, **kw)


def test_summarize_compacts_in_a_drawn_state_and_the_agents_see_the_summary():
    m = ScriptedModel({"a": BIDS_A, "b": BIDS_B, "scribe": ["S1: a and b spoke.", "S2: still talking.", "S3."]},
                      max_input_tokens=320)
    chat = summarized_chat(m)
    assert list(chat.graph.states) == ["seed", "bid", "select", "post", "penalize", "stop", "compact_bid"]
    assert [(t.source, t.dest, t.label) for t in chat.graph.transitions if "compact_bid" in (t.source, t.dest)] == \
        [("bid", "compact_bid", "compact"), ("compact_bid", "bid", "next")]
    assert chat.max_calls() == 21  # 7 turns x 2 bids, and at most one compaction per turn
    r = chat.execute("Discuss.")
    assert r.ok and r.stop_reason == "max_loops" and len(r.transcript) == 8
    assert r.path[16:20] == ["penalize", "bid", "compact_bid", "bid"] and r.path.count("compact_bid") == 2
    assert m.calls("scribe") == 2 and m.calls() == 16  # 7 turns x 2 bids: the compactions are the only added calls
    assert m.requests_of("scribe")[0].messages == [
        msg("system", "You summarise."), msg("user", "Discuss."), msg("user", f"a: a0 {ALPHA}"),
        msg("user", f"b: b1 {BETA}"), msg("user", f"a: a2 {ALPHA}"),
        msg("user", "Summarise the conversation above for the participants who continue it: keep every decision, "
                    "open question, fact and name they need, in plain prose, as briefly as you can.")]
    assert m.requests_of("a")[4].messages == [
        msg("user", "Discuss."), msg("user", "Summary: S1: a and b spoke."), msg("user", f"b: b3 {BETA}"),
        msg("user", ask("a", "b", "b", f"b3 {BETA}"))]
    assert m.requests_of("scribe")[1].messages[1:5] == [  # the second folds the first summary in
        msg("user", "Discuss."), msg("user", "Summary: S1: a and b spoke."), msg("user", f"b: b3 {BETA}"), msg("user", f"a: a4 {ALPHA}")]
    compacted = [e for e in r.events if e["event"] == "compacted"]
    assert compacted == [{"event": "compacted", "state": "bid", "by": "scribe", "covers": [2, 4], "upto": 4,
                          "summary": "S1: a and b spoke."},
                         {"event": "compacted", "state": "bid", "by": "scribe", "covers": [5, 6], "upto": 6,
                          "summary": "S2: still talking."}]
    step = next(s for s in r.trace if s.state == "compact_bid")
    assert step.payload == {"by": "scribe", "covers": [2, 4]}
    tokens = [e["tokens"] for e in r.events if e["event"] == "prompt_tokens" and e["agent"] != "scribe"]
    assert tokens == [193, 193, 240, 242, 268, 268, 294, 296, 256, 254, 282, 282, 254, 252]  # under 320, flat


def test_a_resume_after_a_compaction_reuses_the_summary(tmp_path):
    db = str(tmp_path / "runs.db")
    m1 = ScriptedModel({"a": BIDS_A[:4] + [Fail(401)], "b": BIDS_B, "scribe": ["S1: a and b spoke."]}, id="ctx-resume",
                       max_input_tokens=320)
    r1 = summarized_chat(m1).execute("Discuss.", checkpoint=SqliteCheckpointer(db), run_id="long")
    assert not r1.ok and r1.path[-3:] == ["bid", "compact_bid", "bid"] and m1.calls("scribe") == 1
    m1.close()
    m2 = ScriptedModel({"a": BIDS_A[4:], "b": BIDS_B[4:], "scribe": ["S2: still talking."]}, id="ctx-resume",
                       max_input_tokens=320)
    r2 = summarized_chat(m2).resume("long", SqliteCheckpointer(db))
    assert r2.ok and r2.stop_reason == "max_loops" and len(r2.transcript) == 8
    # the stored summary is read, not asked for again: the one compaction of the resume is the next one
    assert m2.calls("scribe") == 1 and m2.calls() == 7
    assert m2.requests_of("a")[0].messages[:2] == [msg("user", "Discuss."), msg("user", "Summary: S1: a and b spoke.")]
    assert m2.requests_of("scribe")[0].messages[2] == msg("user", "Summary: S1: a and b spoke.")
    assert [e["summary"] for e in r2.events if e["event"] == "compacted"] == ["S1: a and b spoke.", "S2: still talking."]
    assert r2.path.count("compact_bid") == 2 and [x.content[:2] for x in r2.transcript] == \
        ["Di", "a0", "b1", "a2", "b3", "a4", "b5", "a6"]


def test_max_calls_and_budgets_count_compactions():
    m = ScriptedModel({"a": BIDS_A, "b": BIDS_B, "scribe": ["S1."] * 5}, max_input_tokens=320)
    chat = summarized_chat(m)
    assert chat.max_calls() == 21 and GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=8).max_calls() == 14
    r = chat.with_limits(max_model_calls=11).execute("Discuss.")  # 8 bids, the compaction, 2 bids, then refused
    assert r.stop_reason == "budget" and m.calls("scribe") == 1 and m.calls() == 11


def test_policies_are_checked_before_any_call():
    with pytest.raises(ConfigError, match=r"Agent: context='last' \(str\) is invalid: a context policy is \"full\""):
        Agent("a", context="last")
    with pytest.raises(ConfigError, match=r"LastMessages: n=0 is invalid: input should be greater than or equal to 1"):
        LastMessages(0)
    with pytest.raises(ConfigError, match=r"Summarize: agent='scribe' is invalid: the Agent that writes the summary"):
        Summarize(agent="scribe")
    with pytest.raises(ConfigError, match=r"Summarize: keep_last=-1 is invalid"):
        Summarize(agent=Agent("s"), keep_last=-1)
    with pytest.raises(ConfigError, match=r"GroupChat: context_window=2 and context=LastMessages\(n=3\) are both set: "
                                          r"context_window=N is context=LastMessages\(N\); give one of them"):
        GroupChat(agents=[Agent("a"), Agent("b")], context_window=2, context=LastMessages(3))
    m = ScriptedModel({"a": BIDS_A, "b": BIDS_B})  # no window declared: Summarize has nothing to compact at
    chat = GroupChat(agents=[m.agent("a"), m.agent("b")], context=Summarize(agent=m.agent("s")))
    with pytest.raises(ConfigError, match=r"GroupChat: agent 'a' follows Summarize, .* give the agent one "
                                          r"\(Agent\('a', max_input_tokens=N\)\)"):
        chat.execute("Discuss.")
    assert m.calls() == 0


def test_a_graph_without_summarize_is_unchanged():
    plain = GroupChat(agents=[Agent("a"), Agent("b")])
    windowed = GroupChat(agents=[Agent("a", context=LastMessages(2)), Agent("b")], context_window=4)
    assert plain.graph.to_dot() == windowed.graph.to_dot()


def test_tokens_are_counted_offline_with_an_estimate_where_a_tokenizer_would_be_downloaded():
    messages = [msg("user", "Hello there, how are you today?")]
    # cl100k_base for models whose tokenizer would be downloaded (o200k_base, Llama 3's): nothing is fetched
    assert count_tokens("gpt-4o-mini", messages) == count_tokens("meta-llama/Llama-3-8b", messages) == 15
    assert count_tokens("claude-2", messages) == 15  # Anthropic's bundled tokenizer


def test_policies_travel_in_configs_and_are_written_only_when_set():
    from fsmchat import from_config
    from fsmchat.config import to_config
    chat = GroupChat(agents=[Agent("a", context=LastMessages(3), max_input_tokens=900), Agent("b")],
                     context=Summarize(agent=Agent("s"), keep_last=2, at=0.7))
    d = to_config(chat).model_dump()
    assert d["context"]["policy"] == "summarize" and d["context"]["agent"]["name"] == "s"
    assert d["agents"][0]["context"] == {"policy": "last_messages", "n": 3, "agent": None, "keep_last": None,
                                         "at": None}
    assert d["agents"][0]["max_input_tokens"] == 900 and "context" not in d["agents"][1]
    back = from_config(d)
    assert back.context == Summarize(agent=Agent("s"), keep_last=2, at=0.7)
    assert back.config.agents[0].context == LastMessages(3) and back.config.agents[0].max_input_tokens == 900


def test_the_viewer_shows_the_counted_tokens_and_the_compaction(tmp_path):
    from fsmchat.ui import Store
    from fsmchat.ui.view import run_view
    db = str(tmp_path / "runs.db")
    m = ScriptedModel({"a": BIDS_A, "b": BIDS_B, "scribe": ["S1: a and b spoke.", "S2: still talking."]},
                      max_input_tokens=320)
    summarized_chat(m).execute("Discuss.", checkpoint=SqliteCheckpointer(db), run_id="viewed")
    view = run_view(Store(db).run("viewed"), 0)
    assert view["usage"]["prompt_tokens"] == {"calls": 16, "max": 296, "last": 252, "limit": 320, "compactions": 2}
    assert [s["state"] for s in view["steps"]].count("compact_bid") == 2
    assert [e["summary"] for e in view["events"] if e["event"] == "compacted"] == ["S1: a and b spoke.",
                                                                                  "S2: still talking."]


def test_an_agents_own_summarize_is_drawn_in_its_state_and_refused_where_nothing_is_drawn():
    m = ScriptedModel({"a": ["a1"], "b": ["b1"]}, max_input_tokens=500)
    policy = Summarize(agent=m.agent("s"))
    swarm = RoundRobinSwarm(agents=[m.agent("a", context=policy), m.agent("b")])
    assert list(swarm.graph.states) == ["seed", "a", "b", "stop", "compact_a"] and swarm.max_calls() == 3
    from fsmchat import AgentFlow
    with pytest.raises(ConfigError, match=r"AgentFlow: agent 'a' follows Summarize, but AgentFlow draws no compaction "
                                          r"for it .*a flow's Task step sends one prompt, no conversation to compact"):
        AgentFlow(steps=[m.agent("a", context=policy)]).execute("Plan.")
    assert m.calls() == 0


def summarized_flow(m):
    from fsmchat import AgentFlow
    from fsmchat.flow import Discussion
    policy = Summarize(agent=m.agent("scribe", system_prompt="You summarise."), keep_last=1, at=0.5)
    return AgentFlow(steps=[Discussion(agents=[m.agent("a", context=policy), m.agent("b", context=policy)],
                                       rounds=3, name="talk")])


def turns(*names):
    return [f"{n}{i} {ALPHA if n == 'a' else BETA}" for n in names for i in range(10)]


def test_a_discussion_in_a_flow_compacts_and_its_speakers_see_the_summary():
    m = ScriptedModel({"a": turns("a"), "b": turns("b"), "scribe": ["S1: a and b spoke."]}, max_input_tokens=200)
    flow = summarized_flow(m)
    talk = flow.graph.states["talk"].subgraph
    assert list(talk.states) == ["begin", "turn", "done", "compact_turn"]
    assert [(t.source, t.dest, t.label) for t in talk.transitions if "compact_turn" in (t.source, t.dest)] == \
        [("turn", "compact_turn", "compact"), ("compact_turn", "turn", "next")]
    assert flow.max_calls() == 12  # 3 rounds x 2 turns, and at most one compaction per turn
    r = flow.execute("Plan.")
    assert r.ok and r.path == ["talk.begin"] + ["talk.turn"] * 5 + ["talk.compact_turn"] + ["talk.turn"] * 2 + \
        ["talk.done", "end"]
    assert m.calls("scribe") == 1 and m.calls() == 7 and r.calls == 7  # 6 turns and the one compaction
    assert m.requests_of("scribe")[0].messages == [
        msg("system", "You summarise."), msg("user", f"a: a0 {ALPHA}"), msg("user", f"b: b0 {BETA}"),
        msg("user", f"a: a1 {ALPHA}"),
        msg("user", "Summarise the conversation above for the participants who continue it: keep every decision, "
                    "open question, fact and name they need, in plain prose, as briefly as you can.")]
    assert m.requests_of("a")[2].messages == [msg("user", (
        f"Plan.\n\nSummary of the discussion so far:\nS1: a and b spoke.\n\nLatest turns:\nb: b1 {BETA}\n\n"
        "You are a. Respond to the latest turn and move the discussion forward."))]
    assert m.requests_of("b")[2].messages == [msg("user", (
        f"Plan.\n\nSummary of the discussion so far:\nS1: a and b spoke.\n\nLatest turns:\nb: b1 {BETA}\n"
        f"a: a2 {ALPHA}\n\nYou are b. Respond to the latest turn and move the discussion forward."))]
    assert [e for e in r.events if e["event"] == "compacted"] == [
        {"event": "compacted", "state": "turn", "by": "scribe", "covers": [1, 3], "upto": 3,
         "summary": "S1: a and b spoke."}]
    tokens = [e["tokens"] for e in r.events if e["event"] == "prompt_tokens"]
    assert tokens == [17, 53, 78, 103, 135, 67, 92]  # the scribe's 135, then the turns shrink
    assert r.usage["counted_prompt_tokens"] == 545 and r.usage["max_prompt_tokens"] == 135


def test_a_flow_resumed_after_a_compaction_reuses_the_summary(tmp_path):
    db = str(tmp_path / "runs.db")
    m1 = ScriptedModel({"a": [f"a0 {ALPHA}", f"a1 {ALPHA}", Fail(401)], "b": turns("b"),
                        "scribe": ["S1: a and b spoke."]}, id="flow-ctx-resume", max_input_tokens=200)
    r1 = summarized_flow(m1).execute("Plan.", checkpoint=SqliteCheckpointer(db), run_id="long")
    assert not r1.ok and r1.path[-2:] == ["talk.compact_turn", "talk.turn"] and m1.calls("scribe") == 1
    m1.close()
    m2 = ScriptedModel({"a": [f"a2 {ALPHA}"], "b": [f"b2 {BETA}"], "scribe": ["never asked"]}, id="flow-ctx-resume",
                       max_input_tokens=200)
    r2 = summarized_flow(m2).resume("long", SqliteCheckpointer(db))
    assert r2.ok and r2.path.count("talk.compact_turn") == 1
    assert m2.calls("scribe") == 0 and m2.calls() == 2  # the stored summary is read, not asked for again
    assert m2.requests_of("a")[0].messages == [msg("user", (
        f"Plan.\n\nSummary of the discussion so far:\nS1: a and b spoke.\n\nLatest turns:\nb: b1 {BETA}\n\n"
        "You are a. Respond to the latest turn and move the discussion forward."))]
    assert [x.content[:2] for x in r2.transcript] == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_usage_holds_the_counted_prompt_tokens_only_when_calls_were_counted():
    m = ScriptedModel({"a": [f"a0 {ALPHA}"], "b": [f"b0 {BETA}"]}, max_input_tokens=500)
    r = RoundRobinSwarm(agents=[m.agent("a"), m.agent("b")], max_loops=1).execute("Discuss.")
    assert r.ok and [e["tokens"] for e in r.events if e["event"] == "prompt_tokens"] == [89, 117]
    assert r.usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30,
                       "counted_prompt_tokens": 206, "max_prompt_tokens": 117}
    plain = ScriptedModel({"a": [f"a0 {ALPHA}"], "b": [f"b0 {BETA}"]})  # no window declared: nothing counted
    r = RoundRobinSwarm(agents=[plain.agent("a"), plain.agent("b")], max_loops=1).execute("Discuss.")
    assert r.ok and r.usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
