"""Flow API for conversation scripts: where a step's output goes (post=, save_as=, append_to=),
template windows ({{xs[-3:]}}, {{transcript[-2:]}}), agents' private memory, and output_type."""
import pytest

from fsmchat import from_config
from fsmchat.errors import ConfigError
from fsmchat.flow import AgentFlow, Task, if_, loop, parallel
from fsmchat.testing import ScriptedModel, assert_trace_is_path


def run(flow, inp="the task"):
    r = flow.execute(inp)
    assert_trace_is_path(flow.graph, r)
    return r


def prompts(model, agent):
    """The last user message of each of the agent's requests (its prompt)."""
    return [req.messages[-1]["content"] for req in model.requests_of(agent)]


def test_post_false_keeps_the_reply_out_of_the_transcript_but_in_the_steps():
    m = ScriptedModel({"a": ["hello, I am a", "answer"]})
    a = m.agent("a")
    flow = AgentFlow(steps=[Task(agent=a, action="Introduce yourself", post=False), Task(agent=a, action="Go")])
    r = run(flow)
    assert [(x.role, x.content) for x in r.transcript] == [("a", "answer")]
    assert [(s["name"], s["output"], s["status"]) for s in r.output["steps"]] == [
        ("a", "hello, I am a", "completed"), ("a", "answer", "completed")]
    assert r.calls == 2


def test_save_as_and_append_to_bind_variables():
    m = ScriptedModel({"a": ["x1", "x2", "x3"], "b": ["y1"]})
    a, b = m.agent("a"), m.agent("b")
    flow = AgentFlow(steps=[
        Task(agent=a, action="one", save_as="first", append_to="xs"),
        Task(agent=a, action="two", append_to="xs"),
        Task(agent=a, action="three", append_to="xs"),
        Task(agent=b, action="first={{first}} window={{xs[-2:]}} head={{xs[0]}}")])
    r = run(flow)
    assert r.output["variables"]["xs"] == ["x1", "x2", "x3"]
    assert r.output["variables"]["first"] == "x1"
    assert prompts(m, "b") == ["first=x1 window=['x2', 'x3'] head=x1"]


def test_an_index_past_an_accumulators_end_fails_the_step_instead_of_being_sent_as_written():
    m = ScriptedModel({"a": ["x1"], "b": ["never asked"]})
    flow = AgentFlow(steps=[Task(agent=m.agent("a"), action="one", append_to="xs"),
                            Task(agent=m.agent("b"), action="gone={{xs[7]}}")])
    r = flow.execute("go")
    assert r.output["status"] == "failed" and prompts(m, "b") == []
    assert [e["reason"] for e in r.events if e["event"] == "template_error"] == [
        "index [7] is out of range for 'xs' (length 1)"]


def test_append_to_a_non_list_fails_loudly():
    m = ScriptedModel({"a": ["x1"]})
    flow = AgentFlow(steps=[Task(agent=m.agent("a"), action="one", append_to="xs")], variables={"xs": "text"})
    r = flow.execute("go")
    assert not r.ok and r.stop_reason == "error"
    assert "append_to='xs'" in str(r.error) and "holds a str, not a list" in str(r.error)


def test_transcript_window_is_the_python_list_of_the_last_posted_contents():
    m = ScriptedModel({"a": ["it's one", "two\nlines"], "b": ["done"]})
    a, b = m.agent("a"), m.agent("b")
    flow = AgentFlow(steps=[Task(agent=a, action="1"), Task(agent=a, action="2", post=True),
                            Task(agent=b, action="Look at {{transcript[-2:]}} and {{transcript[-1:]}}")])
    run(flow)
    assert prompts(m, "b") == ["""Look at ["it's one", 'two\\nlines'] and ['two\\nlines']"""]


def test_a_variable_named_transcript_wins_over_the_posted_contents():
    m = ScriptedModel({"a": ["r"]})
    flow = AgentFlow(steps=[Task(agent=m.agent("a"), action="{{transcript}}")], variables={"transcript": "mine"})
    run(flow)
    assert prompts(m, "a") == ["mine"]


def test_a_lone_list_condition_is_true_only_when_not_empty():
    m = ScriptedModel({"a": ["i1", "i2", "i3"]})
    a = m.agent("a")
    step = if_("{{ideas}}", [Task(agent=a, action="build on {{ideas[-3:]}}", append_to="ideas")],
               [Task(agent=a, action="suggest", append_to="ideas")])
    flow = AgentFlow(steps=[loop(step, over="rounds", var_name="r")], variables={"rounds": [1, 2, 3]})
    run(flow)
    assert prompts(m, "a") == ["suggest", "build on ['i1']", "build on ['i1', 'i2']"]


def test_memory_sends_each_agent_its_own_earlier_prompts_and_replies():
    m = ScriptedModel({"a": ["a-intro", "a-answer"], "b": ["b-intro", "b-answer"]})
    a, b = m.agent("a", system_prompt="You are a."), m.agent("b")
    flow = AgentFlow(memory=True, steps=[Task(agent=a, action="intro a", post=False),
                                         Task(agent=b, action="intro b", post=False),
                                         Task(agent=a, action="q1"), Task(agent=b)])
    run(flow)
    assert m.requests_of("a")[1].messages == [
        {"role": "system", "content": "You are a."},
        {"role": "user", "content": "intro a"}, {"role": "assistant", "content": "a-intro"},
        {"role": "user", "content": "q1"}]
    assert m.requests_of("b")[1].messages == [
        {"role": "user", "content": "intro b"}, {"role": "assistant", "content": "b-intro"},
        {"role": "user", "content": "a-answer"}]


def test_without_memory_every_call_is_one_prompt():
    m = ScriptedModel({"a": ["a-intro", "a-answer"]})
    a = m.agent("a")
    run(AgentFlow(steps=[Task(agent=a, action="intro", post=False), Task(agent=a, action="q1")]))
    assert m.requests_of("a")[1].messages == [{"role": "user", "content": "q1"}]


def test_memory_of_parallel_branches_is_merged_in_declaration_order():
    m = ScriptedModel({"a": ["a0", "a1", "a2", "a3"]})
    a = m.agent("a")
    flow = AgentFlow(memory=True, steps=[Task(agent=a, action="p0", post=False),
                                         parallel([Task(agent=a, action="p1"), Task(agent=a, action="p2")]),
                                         Task(agent=a, action="p3")])
    run(flow)
    assert [x["content"] for x in m.requests_of("a")[3].messages] == ["p0", "a0", "p1", "a1", "p2", "a2", "p3"]


def test_output_type_formats_the_transcript():
    m = ScriptedModel({"a": ["intro", "r1", "r2", "r3"]})
    a = m.agent("a")
    steps = [Task(agent=a, action="hi", post=False), Task(agent=a, action="1"), Task(agent=a, action="2"),
             Task(agent=a, action="3")]
    r = run(AgentFlow(steps=steps, output_type="str-all-except-first"))
    assert r.output["output"] == "r2\nr3"
    m2 = ScriptedModel({"a": ["intro", "r1", "r2", "r3"]})
    a2 = m2.agent("a")
    steps2 = [Task(agent=a2, action="hi", post=False), Task(agent=a2, action="1")]
    assert run(AgentFlow(steps=steps2, output_type="str")).output["output"] == "a: r1"
    assert run(AgentFlow(steps=[Task(agent=ScriptedModel({"a": ["z"]}).agent("a"))])).output["output"] == "z"


def test_bad_options_are_refused_when_built():
    m = ScriptedModel({})
    a = m.agent("a")
    with pytest.raises(ConfigError, match=r"output_type='text' is not supported"):
        AgentFlow(steps=[a], output_type="text")
    with pytest.raises(TypeError, match=r"memory='yes' is invalid"):
        AgentFlow(steps=[a], memory="yes")
    with pytest.raises(ConfigError, match=r"Task: save_as='1st' is invalid: a variable name"):
        Task(agent=a, save_as="1st")
    with pytest.raises(TypeError, match=r"Task: append_to=3 is invalid"):
        Task(agent=a, append_to=3)
    with pytest.raises(TypeError, match=r"Task: post='no' is invalid"):
        Task(agent=a, post="no")


def test_config_round_trip_keeps_the_new_options():
    m = ScriptedModel({"a": ["x"]})
    flow = AgentFlow(steps=[Task(agent=m.agent("a"), action="hi", post=False, save_as="s", append_to="xs")],
                     memory=True, output_type="final")
    back = from_config(flow.to_config())
    t = back.steps[0]
    assert (t.post, t.save_as, t.append_to, back.memory, back.output_type) == (False, "s", "xs", True, "final")


def test_a_resumed_run_keeps_the_memories_of_the_steps_before_the_interrupt(tmp_path):
    import asyncio

    from fsmchat.store.checkpoint import SqliteCheckpointer

    def make(m):
        a = m.agent("a")
        return AgentFlow(memory=True, name="mem", steps=[Task(agent=a, action="intro", post=False, name="intro"),
                                                         Task(agent=a, action="q1", name="q1"),
                                                         Task(agent=a, action="q2", name="q2")])

    cp = SqliteCheckpointer(tmp_path / "runs.db")
    first = ScriptedModel({"a": ["hi", "r1", "never"]})

    async def go():
        me = asyncio.current_task()

        def obs(ev):
            if ev.state == "q1" and ev.dest is not None:
                me.cancel()
        with pytest.raises(asyncio.CancelledError):
            await make(first).aexecute("go", checkpoint=cp, run_id="m", observers=[obs])
    asyncio.run(go())
    assert first.calls() == 2
    first.close()
    second = ScriptedModel({"a": ["r2"]}, id=first.id)  # the same model name: the same flow resumes
    flow = make(second)
    resumed = flow.resume("m", cp)
    assert resumed.ok and resumed.output["output"] == "r2"
    assert [x["content"] for x in second.requests_of("a")[0].messages] == ["intro", "hi", "q1", "r1", "q2"]


def test_flow_input_starts_a_carried_variable_and_travels_in_a_config():
    from fsmchat import flow_input

    m = ScriptedModel({"a": ["next topic", "last"]})
    a = m.agent("a")
    step = Task(agent=a, action="Talk about {{topic}}", save_as="topic")
    flow = AgentFlow(steps=[Task(handler=flow_input, post=False, save_as="topic"), step, step])
    r = run(flow, "the first topic")
    assert prompts(m, "a") == ["Talk about the first topic", "Talk about next topic"]
    assert [x.content for x in r.transcript] == ["next topic", "last"]
    assert from_config(flow.to_config()).steps[0].handler is flow_input


def test_the_diagram_shows_a_step_prompt_and_where_its_output_goes():
    m = ScriptedModel({})
    a = m.agent("a")
    flow = AgentFlow(steps=[Task(agent=a, name="intro", action="Introduce\n yourself", post=False),
                            Task(agent=a, action="Review {{work}} " + "x" * 80 + " {{transcript[-2:]}}",
                                 save_as="work", append_to="all"),
                            a])
    states = flow.graph.flatten().states
    assert states["intro"].description == "agent a\nasked: Introduce yourself\nnot posted"
    assert states["a"].description == ("agent a\nasked: Review {{work}} " + "x" * 44 + "… {{transcript[-2:]}}\n"
                                       "saves {{work}}, appends to {{all}}")
    assert states["a_2"].description == "agent a"
