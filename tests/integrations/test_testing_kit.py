"""fsmchat.testing as users see it: scripted models, assertions, snapshots, cassettes, the plugin."""
import json

import pytest

from fsmchat import Agent, Bid, GroupChat, StateGraph
from fsmchat.testing import ANY, ANY_ID, ANY_TIME, Cassette, CassetteMiss, Delay, Fail, FunctionModel, \
    ScriptedModel, assert_calls, assert_graph_matches, assert_path, assert_stop, assert_trace, cassette

TASK = "cats or dogs?"


def two_agents():
    return [Agent("a", system_prompt="You argue for cats."), Agent("b", system_prompt="You argue for dogs.")]


def test_assert_path_wildcards_and_diff():
    run = ["seed", "bid", "select", "post", "penalize", "bid", "select", "stop"]
    assert_path(run, ["seed", "*", "stop"])
    assert_path(run, ["seed", "bid", "*", "select", "stop"])
    assert_path(["a", "a", "a", "b"], ["a+", "b"])
    assert_path(run, ["seed", "b?d", "*"])
    with pytest.raises(AssertionError) as e:
        assert_path(run, ["seed", "bid", "select", "lull"])
    msg = str(e.value)
    assert "expected: ['seed', 'bid', 'select', 'lull']" in msg and "+post" in msg and "-lull" in msg


def test_assert_stop_and_calls_messages():
    m = ScriptedModel({"a": [Bid(0.1, "")], "b": [Bid(0.1, "")]})
    r = GroupChat(agents=[m.agent("a"), m.agent("b")]).execute(TASK)
    assert_stop(r, "lull")
    assert_calls(m, 1, agent="a")
    with pytest.raises(AssertionError, match=r"stop reason 'lull', expected 'max_loops'"):
        assert_stop(r, "max_loops")
    with pytest.raises(AssertionError, match=r"agent 'a' made 1 model call\(s\), expected 3"):
        assert_calls(m, 3, agent="a")


def test_matchers_and_assert_trace():
    m = ScriptedModel({"a": [Bid(0.1, "")], "b": [Bid(0.1, "")]})
    r = GroupChat(agents=[m.agent("a"), m.agent("b")]).execute(TASK)
    assert_trace(r, [{"state": "seed", "trigger": "under_cap", "t": ANY_TIME},
                     {"state": "bid", "dest": "select", "payload": {"a": 0.1, "b": 0.1}},
                     {"state": "select", "trigger": "lull", "payload": ANY},
                     {"state": "stop", "trigger": None}])
    assert "call_1" == ANY_ID and "two words" != ANY_ID and -1 != ANY_TIME
    with pytest.raises(AssertionError, match="trace mismatch"):
        assert_trace(r, [{"state": "seed"}])


def test_scripted_model_records_and_scripts_errors_and_delays():
    m = ScriptedModel({"a": [Fail(429, "slow down", retry_after=0), Delay(0.01, Bid(0.9, "hi")), Bid(0, "")],
                       "b": [Bid(0, ""), Bid(0, "")]})
    chat = GroupChat(agents=[m.agent("a", num_retries=1), m.agent("b")])
    r = chat.execute(TASK)
    assert [x.content for x in r.transcript] == [TASK, "hi"]
    assert [q.n for q in m.requests_of("a")] == [1, 2, 3]
    assert r.calls == 4 and m.calls() == 5  # one logical call was retried once
    assert m.requests_of("a")[0].tool_choice == {"type": "function", "function": {"name": "respond"}}


def test_function_model_computes_from_request():
    fm = FunctionModel(lambda req: Bid(0.9, f"{req.agent} #{req.n}") if req.n == 1 and req.agent == "b"
                       else Bid(0, ""))
    r = GroupChat(agents=[fm.agent("a"), fm.agent("b")], output_type="final").run(TASK)
    assert r == "b #1"


def test_scripted_models_do_not_leak_between_instances():
    m1 = ScriptedModel({"a": [Bid(0.9, "one")]})
    m2 = ScriptedModel({"a": [Bid(0.9, "two")]})
    assert m1.model != m2.model
    with pytest.raises(AssertionError, match="made call #1 but its script has only 0"):
        GroupChat(agents=[m1.agent("a"), ScriptedModel({"b": []}).agent("b")]).run(TASK)
    assert m2.calls() == 0


def test_graph_snapshot(tmp_path, monkeypatch):
    snap = tmp_path / "gc.dot"
    chat = GroupChat(agents=two_agents())
    assert_graph_matches(chat, snap)  # created
    assert_graph_matches(chat.graph, snap)  # matches
    g = StateGraph("group_chat").state("seed").final("stop")
    g.edge("seed", "stop")
    with pytest.raises(AssertionError, match=r"no longer matches .*--fsmchat-update-graphs") as e:
        assert_graph_matches(g, snap)
    assert "-\tseed -> bid" in str(e.value)
    monkeypatch.setenv("FSMCHAT_UPDATE_GRAPHS", "1")
    assert_graph_matches(g, snap)
    assert snap.read_text() == g.to_dot()


def test_cassette_records_then_replays_identically(tmp_path):
    path = tmp_path / "chat.json"
    with cassette(path) as rec:
        first = GroupChat(agents=two_agents(), max_loops=5).execute(TASK)
    assert rec.mode == "record" and len(rec.interactions) == first.calls
    stored = json.loads(path.read_text())
    assert "api_key" not in path.read_text()
    assert stored["interactions"][0]["request"]["tools"][0]["function"]["name"] == "respond"
    with cassette(path) as rep:
        again = GroupChat(agents=two_agents(), max_loops=5).execute(TASK)
    assert rep.mode == "replay" and rep.unused == 0
    assert (again.path, again.transcript, again.stop_reason) == (first.path, first.transcript, first.stop_reason)


def test_cassette_fails_loudly_on_unknown_request(tmp_path):
    path = tmp_path / "chat.json"
    with cassette(path):
        GroupChat(agents=two_agents(), max_loops=3).execute(TASK)
    with cassette(path, mode="replay"):
        with pytest.raises(CassetteMiss, match=r"no recorded response for agent 'a'.*last message"):
            GroupChat(agents=two_agents(), max_loops=3).run("a different task")
    with pytest.raises(FileNotFoundError, match="record it first"):
        Cassette(tmp_path / "missing.json", mode="replay")


def test_cassette_keeps_secrets_out(tmp_path):
    path = tmp_path / "s.json"
    agents = [Agent("a", system_prompt="x", api_key="sk-SECRET-123"), Agent("b", system_prompt="y",
                                                                            api_key="sk-SECRET-123")]
    with cassette(path):
        GroupChat(agents=agents, max_loops=2).execute(TASK)
    assert "SECRET" not in path.read_text()


def test_plugin_fixtures(scripted_model, fsm_run, cassette, tmp_path):
    m = scripted_model({"a": [Bid(0.9, "hi"), Bid(0, "")], "b": [Bid(0, ""), Bid(0, "")]})
    r = fsm_run(GroupChat(agents=[m.agent("a"), m.agent("b")]), TASK)
    assert [x.content for x in r.transcript] == [TASK, "hi"]
    c = cassette("fixture_demo", mode="record")
    assert c.path.name == "fixture_demo.json" and c.path.parent.name == "test_testing_kit"
