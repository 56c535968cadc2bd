"""A pattern as a flow step (fsmchat.flow.pattern_step): ``AgentFlow(steps=[GroupChat(...), summarize])``
nests the pattern's graph like a Discussion's, runs it on the previous output, mirrors its messages
into the flow's transcript, counts its calls, travels in the flow's config, draws, checkpoints and
resumes."""
import json
import re

import pytest

from fsmchat import Agent, AgentFlow, Approve, Bid, GroupChat, Human, RoundRobinSwarm, from_config, loop
from fsmchat.errors import ConfigError
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer
from fsmchat.flow import PatternStep
from fsmchat.testing import ScriptedModel, answer, assert_calls, assert_path, assert_stop, assert_trace_is_path
from support.checkpoints import interrupt_after  # cancels a checkpointed run mid-way, as a kill would

TASK = "Cats or dogs?"
CHAT = ["group_chat.begin", "group_chat.seed"]
TURN = ["group_chat.bid", "group_chat.select", "group_chat.post", "group_chat.penalize"]


def summarize(ctx):
    return "summary: " + ctx.previous_output.replace("\n", " | ")


def opener(ctx):
    return f"Debate this: {ctx.input}"


def chat_of(scripts, **kw):
    m = ScriptedModel(scripts)
    return m, GroupChat(agents=[m.agent(n, system_prompt=f"You are {n}.") for n in scripts], **kw)


def test_group_chat_then_summarizer_runs_the_nested_graph_on_the_flow_input():
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0.1, ""), Bid(0.2, "")],
                       "b": [Bid(0.6, "b1"), Bid(0.7, "b2"), Bid(0.0, "")]}, max_loops=5)
    flow = AgentFlow(steps=[chat, summarize])
    r = flow.execute(TASK)
    assert r.error is None and r.stop_reason == "done"
    assert r.path == CHAT + TURN * 2 + ["group_chat.bid", "group_chat.select", "group_chat.stop", "group_chat.done",
                                        "summarize", "end"]
    assert_trace_is_path(flow.graph, r)
    # the chat's messages are the flow's, its task (the flow's input) is not posted again
    assert [(x.role, x.content) for x in r.transcript] == [("a", "a1"), ("b", "b2"), ("summarize", "summary: a1 | b2")]
    assert r.output["steps"] == [
        {"name": "group_chat", "output": "a1\nb2", "status": "completed", "stop_reason": "lull"},
        {"name": "summarize", "output": "summary: a1 | b2", "status": "completed"}]
    assert [e.trigger for e in r.trace if e.state == "group_chat.select"] == ["has_winner", "has_winner", "lull"]
    assert_calls(m, 6)  # 2 agents x 3 bid rounds
    assert r.calls == 6
    assert m.requests_of("a")[0].messages[1] == {"role": "user", "content": TASK}  # the task: the flow's input
    assert flow.max_calls() == 8 == chat.max_calls()  # 2 agents x (max_loops - 1) bid rounds


def test_the_task_is_the_previous_output_and_the_stop_reason_the_edge_into_the_final():
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0.9, "a2")], "b": [Bid(0.6, "b1"), Bid(0.7, "b2")]}, max_loops=3)
    r = AgentFlow(steps=[opener, chat]).execute(TASK)
    assert r.path == ["opener"] + CHAT + TURN * 2 + ["group_chat.stop", "group_chat.done", "end"]
    assert m.requests_of("b")[0].messages[1] == {"role": "user", "content": "Debate this: Cats or dogs?"}
    assert [(x.role, x.content) for x in r.transcript] == [("opener", "Debate this: Cats or dogs?"), ("a", "a1"),
                                                           ("b", "b2")]
    assert r.output["steps"][1] == {"name": "group_chat", "output": "a1\nb2", "status": "completed",
                                    "stop_reason": "max_loops"}
    assert r.output["output"] == "a1\nb2"  # the pattern's output is the step's, the flow's last
    assert [e.trigger for e in r.trace if e.state == "group_chat.penalize"] == ["under_cap", "max_loops"]


def pro(turn):
    return "Ship it."


def con(turn):
    return "Wait a week."


def test_round_robin_step_output_type_and_a_final_state_reason():
    swarm = RoundRobinSwarm(agents=[pro, con], max_loops=2, output_type="list")
    r = AgentFlow(steps=[swarm]).execute("Release today?")
    assert r.path == ["round_robin.begin", "round_robin.seed"] + ["round_robin.pro", "round_robin.con"] * 2 + \
        ["round_robin.stop", "round_robin.done", "end"]
    step = r.output["steps"][0]
    assert step["stop_reason"] == "max_loops"
    assert json.loads(step["output"]) == [{"role": "User", "content": "Release today?"},
                                          {"role": "pro", "content": "Ship it."},
                                          {"role": "con", "content": "Wait a week."},
                                          {"role": "pro", "content": "Ship it."},
                                          {"role": "con", "content": "Wait a week."}]
    assert [x.metadata for x in r.transcript] == [{"loop": 1}, {"loop": 1}, {"loop": 2}, {"loop": 2}]


def test_in_a_loop_each_pass_runs_the_pattern_afresh():
    swarm = RoundRobinSwarm(agents=[pro, con])
    flow = AgentFlow(steps=[loop(swarm, over=["a", "b"])])
    r = flow.execute("go")
    one = ["loop.body.round_robin.begin", "loop.body.round_robin.seed", "loop.body.round_robin.pro",
           "loop.body.round_robin.con", "loop.body.round_robin.stop", "loop.body.round_robin.done", "loop.body.done"]
    assert r.path == ["loop.begin", "loop.next"] + one + ["loop.next"] + one + ["loop.next", "loop.end", "loop.done",
                                                                               "end"]
    assert [s["stop_reason"] for s in r.output["steps"]] == ["max_loops", "max_loops"]
    assert [x.content for x in r.transcript] == ["Ship it.", "Wait a week."] * 2
    assert flow.max_calls() == 4 == 2 * swarm.max_calls()  # the swarm's bound, once per pass
    assert_trace_is_path(flow.graph, r)


def test_names_kinds_and_the_drawing():
    m, chat = chat_of({"a": [], "b": []})
    named = GroupChat(name="triage", agents=[m.agent("c"), m.agent("d")])
    flow = AgentFlow(steps=[chat, GroupChat(agents=[m.agent("e"), m.agent("f")]), named])
    assert [s.name for s in flow.config.steps] == ["group_chat", "group_chat", "triage"]
    assert repr(flow.config.steps[0]) == "PatternStep('group_chat', pattern=GroupChat)"
    states = list(flow.graph.flatten().states)
    assert states[:8] == ["group_chat.begin", "group_chat.seed", "group_chat.bid", "group_chat.select",
                          "group_chat.post", "group_chat.penalize", "group_chat.stop", "group_chat.done"]
    assert "group_chat_2.bid" in states and "triage.bid" in states
    mmd = flow.graph.to_mermaid()
    assert "    state group_chat {\n" in mmd and "        group_chat_select --> group_chat_stop : lull\n" in mmd
    assert "        group_chat_stop --> group_chat_done\n" in mmd
    dot = flow.graph.to_dot()
    assert "subgraph cluster_group_chat {" in dot and "GroupChat of a, b on the previous output" in dot


def test_config_round_trip_keeps_the_pattern_kind_and_runs_the_same():
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0.0, "")], "b": [Bid(0.6, "b1"), Bid(0.0, "")]}, max_loops=4)
    flow = AgentFlow(steps=[chat, summarize])
    cfg = flow.to_config()
    data = cfg.model_dump(mode="json")
    assert [s["kind"] for s in data["steps"]] == ["group_chat", "callable"]
    assert data["steps"][0]["max_loops"] == 4 and data["steps"][0]["models"] == []
    assert len(data["models"]) == 1  # the scripted model ships once, with the flow
    back = from_config(json.dumps(data), allow=["test_pattern_step"])
    assert isinstance(back.config.steps[0], PatternStep) and back.config.steps[0].pattern.max_loops == 4
    r = back.execute(TASK)
    assert r.path == CHAT + TURN + ["group_chat.bid", "group_chat.select", "group_chat.stop", "group_chat.done",
                                    "summarize", "end"]
    assert r.output["output"] == "summary: a1"
    assert back.to_config().model_dump(mode="json") == data


def test_refusals_say_what_is_allowed():
    m, chat = chat_of({"a": [], "b": []})
    with pytest.raises(ConfigError) as e:
        AgentFlow(steps=[AgentFlow(steps=[summarize])])
    assert str(e.value) == ("AgentFlow as a flow step: a flow cannot be a step of a flow; put its steps in this flow "
                            "(a list of steps runs in order; repeat, if_ and loop nest them)")
    with pytest.raises(ConfigError, match=r"^GroupChat as a flow step: its limits \(.*\) do not apply inside a flow; "
                                          r"set them on the flow \(flow.with_limits\(...\)\), which counts the "
                                          r"pattern's calls$"):
        AgentFlow(steps=[chat.with_limits(max_model_calls=5)])
    flow = AgentFlow(steps=[summarize]).to_config().model_dump(mode="json")
    flow["steps"] = [{"kind": "sing"}]
    with pytest.raises(ConfigError) as e:
        from_config(flow)
    text = str(e.value)  # (another test module may have registered kinds of its own: both lists grow)
    assert "flow step kind='sing' is invalid: one of ['agent', 'callable', 'discussion', 'human', 'if', 'loop', " \
           "'parallel', 'repeat', 'route', 'task'" in text
    assert re.search(r"\], or a pattern's kind \(a pattern run as a step\): \['[^]]*'group_chat', '[^]]*"
                     r"'round_robin'[^]]*\]", text), text


def test_an_empty_previous_output_fails_the_flow_before_any_call():
    m, chat = chat_of({"a": [], "b": []})

    def nothing(ctx):
        return ""

    r = AgentFlow(steps=[nothing, chat]).execute(TASK)
    assert r.stop_reason == "error" and r.path[-1] == "group_chat.begin"
    assert str(r.error) == "GroupChat.run(task): task must be a non-empty string, got ''"
    assert_calls(m, 0)


def cats_and_dogs():
    return AgentFlow(steps=[GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                                              Agent("b", system_prompt="You argue for dogs."),
                                              Agent("c", system_prompt="You love birds and feathers.")],
                                      max_loops=6), summarize])


@pytest.mark.parametrize("k", [1, 3])
def test_killed_mid_pattern_then_resumed_equals_an_uninterrupted_run(tmp_path, k):
    full = cats_and_dogs().execute("pets?")
    assert full.output["steps"][0]["stop_reason"] == "max_loops" and full.calls == 15
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    interrupt_after(cats_and_dogs(), "pets?", cp, "r", "group_chat.post", k)  # killed mid-chat
    saved = cp.load("r")
    assert saved.stop_reason == "cancelled" and len(saved.messages) == k  # k posts committed, mid-pattern
    flow = cats_and_dogs()
    resumed = flow.resume("r", cp)
    assert resumed.path == full.path and resumed.stop_reason == "done"
    assert [(x.role, x.content) for x in resumed.transcript] == [(x.role, x.content) for x in full.transcript]
    assert resumed.output == full.output and resumed.calls == full.calls
    assert_trace_is_path(flow.graph, resumed)


def test_a_person_in_the_chat_waits_and_the_flow_resumes_with_their_message():
    m = ScriptedModel({"a": [Bid(0.9, "a1"), Bid(0.0, "")]})
    chat = GroupChat(agents=[Human("Dana"), m.agent("a")], max_loops=4)
    flow = AgentFlow(steps=[chat, summarize])
    with pytest.raises(Exception, match="must be checkpointed"):
        flow.execute(TASK)
    done = answer(flow, TASK, ["I pick cats.", Approve(), Approve()])
    assert [p.state for p in done.asked] == ["group_chat.claim_Dana"] * 3
    r = done.result
    assert_path(r, CHAT + ["group_chat.claim_Dana", "group_chat.penalize", "group_chat.claim_Dana", "group_chat.bid",
                           "group_chat.select", "group_chat.post", "group_chat.penalize", "group_chat.claim_Dana",
                           "group_chat.bid", "group_chat.select", "group_chat.stop", "group_chat.done", "summarize",
                           "end"])
    assert_stop(r, "done")
    assert [(x.role, x.content) for x in r.transcript] == [("Dana", "I pick cats."), ("a", "a1"),
                                                           ("summarize", "summary: I pick cats. | a1")]
    assert_trace_is_path(flow.graph, r)


def test_memory_checkpointer_resume_of_a_finished_run_rebuilds_it():
    m, chat = chat_of({"a": [Bid(0.9, "a1"), Bid(0.0, "")], "b": [Bid(0.6, "b1"), Bid(0.0, "")]}, max_loops=4)
    flow, cp = AgentFlow(steps=[chat, summarize]), MemoryCheckpointer()
    first = flow.execute(TASK, checkpoint=cp, run_id="x")
    again = flow.resume("x", cp)
    assert again.path == first.path and again.output == first.output
    assert_calls(m, 4)  # the rebuilt run made no call
