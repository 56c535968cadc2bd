"""``{{name}}`` templates in prompts, system prompts and questions are filled or refused, never
sent as written: a name no step can set, or an index out of range of a value no step changes, is
refused when the flow is built (ConfigError naming the template and the known names); a name or
index only known at run time fails its step when filled, with a ``template_error`` event and no
model call."""
import pytest

from fsmchat import AgentFlow, Discussion, Task, loop
from fsmchat.errors import ConfigError
from fsmchat.flow.context import TemplateError
from fsmchat.testing import ScriptedModel


def test_an_unknown_name_is_refused_when_the_flow_is_built():
    m = ScriptedModel({"writer": ["never asked"]})
    with pytest.raises(ConfigError) as err:
        AgentFlow(steps=[m.agent("writer", system_prompt="You write about {{topic}}."),
                         Task(agent=m.agent("editor"), action="Edit {{draft}} for {{missing}}", save_as="final")],
                  variables={"topic": "rust"})
    assert str(err.value) == (
        "AgentFlow 'flow': step 'editor': template {{draft}} names no variable; the known ones are final, input, "
        "previous_output, previous_result, topic, transcript (declare it in variables= or set it in an earlier step)")
    assert m.calls() == 0


def test_an_index_out_of_range_of_a_static_value_is_refused_when_the_flow_is_built():
    m = ScriptedModel({"writer": ["never asked"]})
    with pytest.raises(ConfigError, match=r"template \{\{items\[999\]\}\} indexes out of range: 'items' is "
                                          r"\['a', 'b', 'c'\] \(length 3\), and no step changes it"):
        AgentFlow(steps=[Task(agent=m.agent("writer"), action="Write on {{items[999]}}")],
                  variables={"items": ["a", "b", "c"]})
    assert m.calls() == 0


def test_names_steps_set_and_in_range_indexes_are_filled():
    m = ScriptedModel({"writer": ["a draft"], "editor": ["edited"]})
    flow = AgentFlow(steps=[Task(agent=m.agent("writer"), action="On {{items[-1]}} for {{input}}", save_as="draft"),
                            loop(steps=[Task(agent=m.agent("editor"), action="Edit {{draft}} ({{item}}, "
                                                                              "{{loop_index}})")], over="items")],
                     variables={"items": ["z"]})
    r = flow.execute("go")
    assert r.ok, r.error
    assert [q.messages[-1]["content"] for q in m.requests] == ["On z for go", "Edit a draft (z, 0)"]


def late(ctx):
    ctx.variables["parts"] = ["only one"]
    return "set"


@pytest.mark.parametrize("template, reason", [
    ("Write {{parts[5]}}", "index [5] is out of range for 'parts' (length 1)"),
    ("Write {{nowhere}}", "'nowhere' is not set; known now: input, parts, previous_output, previous_result, "
                          "transcript"),
])
def test_a_dynamic_name_or_index_fails_its_step_with_an_event_before_the_model_call(template, reason):
    m = ScriptedModel({"writer": ["never asked"]})
    r = AgentFlow(steps=[late, Task(agent=m.agent("writer"), action=template)]).execute("go")
    assert not r.ok and r.stop_reason == "error" and m.calls() == 0
    assert isinstance(r.error.__cause__, TemplateError)
    written = template.split(" ", 1)[1]
    assert str(r.error) == f"step 'writer' failed: TemplateError: step 'writer': template {written} cannot be " \
                           f"filled: {reason}"
    assert [e for e in r.events if e["event"] == "template_error"] == [
        {"event": "template_error", "where": "step 'writer'", "template": written, "reason": reason}]


def test_a_discussion_speakers_topic_and_system_prompt_are_checked_too():
    m = ScriptedModel({"a": ["x"], "b": ["y"]})
    with pytest.raises(ConfigError, match=r"the system_prompt of agent 'b': template \{\{stance\}\} names no "
                                          "variable"):
        AgentFlow(steps=[Discussion([m.agent("a"), m.agent("b", system_prompt="You argue {{stance}}.")], rounds=1)])
    r = AgentFlow(steps=[late, Discussion([Task(agent=m.agent("a"), action="On {{parts[3]}}"), m.agent("b")],
                                          rounds=1)]).execute("go")
    assert not r.ok and m.calls() == 0
    assert [e["template"] for e in r.events if e["event"] == "template_error"] == ["{{parts[3]}}"]
