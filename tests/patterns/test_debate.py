"""OneOnOneDebate and one_on_one_debate tests (docs/semantics.md "OneOnOneDebate / one_on_one_debate")."""
import asyncio
import base64

import pytest

from fsmchat import Agent
from fsmchat.errors import ModelCallError
from fsmchat.patterns.debate import OneOnOneDebate, compile_debate, example_function_graph, example_graph, \
    intro_prompt, one_on_one_debate
from fsmchat.testing import Fail, ScriptedModel, assert_calls, assert_path, assert_stop, assert_trace_is_path

TASK = "Is artificial intelligence consciousness possible?"
TWO_TEXT = "There must be exactly two agents in the dialogue."
TWO = r"^There must be exactly two agents in the dialogue\.$"
IMG = "https://example.com/chart.png"


def reply(req):
    return f"{req.agent}-{req.n}"


def debaters(m):
    return [m.agent("P1", "You are P1."), m.agent("P2", "You are P2.")]


def turns(max_loops):
    return [["turn_a", "turn_b"][k % 2] for k in range(max_loops)]


def test_defaults():
    d = OneOnOneDebate()
    assert (d.max_loops, d.agents, d.img, d.output_type, d.send_intros) == (1, None, None, "str-all-except-first",
                                                                           True)


@pytest.mark.parametrize("agents", [None, [], ["one"], ["a", "b", "c"]])
def test_exactly_two_agents_checked_at_construction_and_by_run(agents):
    m = ScriptedModel(fn=reply)
    roster = None if agents is None else [m.agent(n) for n in agents]
    if roster is not None:  # a roster given: refused at once, with swarms' exact text
        with pytest.raises(ValueError) as e:
            OneOnOneDebate(agents=roster)
        assert str(e.value) == TWO_TEXT
    debate = OneOnOneDebate()
    debate.agents = roster  # set later: run() checks again
    with pytest.raises(ValueError, match=TWO):
        debate.run(TASK)
    with pytest.raises(ValueError, match=TWO):
        debate.run_batch([TASK])
    with pytest.raises(ValueError, match=TWO):
        one_on_one_debate(task=TASK, agents=roster)
    assert m.calls() == 0


@pytest.mark.parametrize("kw, message", [
    ({"max_loops": 0}, "OneOnOneDebate: max_loops=0 is invalid: an int >= 1 (turns in all, alternating from "
                       "agents[0])"),
    ({"output_type": "yaml"}, "OneOnOneDebate: output_type='yaml' is not supported"),
])
def test_bad_config_refused(kw, message):
    with pytest.raises(ValueError) as ei:
        OneOnOneDebate(**kw)
    assert str(ei.value).startswith(message)


def test_bad_task_image_and_duplicate_names_refused_before_any_call(tmp_path):
    m = ScriptedModel(fn=reply)
    with pytest.raises(ValueError, match="task must be a non-empty string"):
        OneOnOneDebate(agents=debaters(m)).run("  ")
    with pytest.raises(ValueError, match="img=.*neither a URL"):
        OneOnOneDebate(agents=debaters(m), img=str(tmp_path / "missing.png")).run(TASK)
    with pytest.raises(ValueError, match="unique.*'P1'"):
        OneOnOneDebate(agents=[m.agent("P1"), m.agent("P1")]).run(TASK)
    assert m.calls() == 0


@pytest.mark.parametrize("max_loops", [1, 2, 3, 5])
def test_schedule_and_calls(max_loops):
    m = ScriptedModel(fn=reply)
    debate = OneOnOneDebate(max_loops=max_loops, agents=debaters(m), output_type="list")
    r = debate.execute(TASK)
    assert_trace_is_path(debate.graph, r)
    assert r.error is None
    assert_path(r, ["intro_a", "intro_b"] + turns(max_loops) + ["stop"])
    assert_stop(r, "max_loops")
    assert_calls(m, 2 + max_loops)
    assert r.calls == 2 + max_loops
    assert [req.agent for req in m.requests] == ["P1", "P2"] + [["P1", "P2"][k % 2] for k in range(max_loops)]
    # the task is not posted; each debater's intro reply (call 1) is not posted either
    assert r.output == [{"role": ["P1", "P2"][k % 2], "content": f"{['P1', 'P2'][k % 2]}-{k // 2 + 2}"}
                        for k in range(max_loops)]


def test_intros_then_replies_are_the_prompts_and_memory_is_private():
    m = ScriptedModel(fn=reply)
    debate = OneOnOneDebate(max_loops=4, agents=debaters(m))
    debate.execute(TASK)
    assert [req.prompt for req in m.requests] == [
        intro_prompt("P1", "P2"), intro_prompt("P2", "P1"), TASK, "P1-2", "P2-2", "P1-3"]
    assert "P1" in intro_prompt("P2", "P1") and "debate against P1" in intro_prompt("P2", "P1")
    p2_second = m.requests_of("P2")[2]  # P2's second debate turn: answers P1-3
    assert p2_second.messages == [
        {"role": "system", "content": "You are P2."},
        {"role": "user", "content": intro_prompt("P2", "P1")},
        {"role": "assistant", "content": "P2-1"},
        {"role": "user", "content": "P1-2"},
        {"role": "assistant", "content": "P2-2"},
        {"role": "user", "content": "P1-3"},
    ]
    p1_first_turn = m.requests_of("P1")[1]
    assert p1_first_turn.messages[1:] == [
        {"role": "user", "content": intro_prompt("P1", "P2")}, {"role": "assistant", "content": "P1-1"},
        {"role": "user", "content": TASK}]


@pytest.mark.parametrize("ot, expected", [
    ("str-all-except-first", "P2-2\nP1-3"),
    ("str", "P1: P1-2\n\nP2: P2-2\n\nP1: P1-3"),
    ("all", "P1: P1-2\n\nP2: P2-2\n\nP1: P1-3"),
    ("list", [{"role": "P1", "content": "P1-2"}, {"role": "P2", "content": "P2-2"}, {"role": "P1", "content": "P1-3"}]),
    ("dict", [{"role": "P1", "content": "P1-2", "metadata": {"turn": 1}},
              {"role": "P2", "content": "P2-2", "metadata": {"turn": 2}},
              {"role": "P1", "content": "P1-3", "metadata": {"turn": 3}}]),
    ("final", "P1-3"),
    ("last", "P1-3"),
    ("json", '[{"role": "P1", "content": "P1-2", "metadata": {"turn": 1}}, {"role": "P2", "content": "P2-2", '
             '"metadata": {"turn": 2}}, {"role": "P1", "content": "P1-3", "metadata": {"turn": 3}}]'),
])
def test_output_types(ot, expected):
    m = ScriptedModel(fn=reply)
    assert OneOnOneDebate(max_loops=3, agents=debaters(m), output_type=ot).run(TASK) == expected


def test_image_rides_on_every_call_but_not_in_memory():
    m = ScriptedModel(fn=reply)
    OneOnOneDebate(max_loops=2, agents=debaters(m), img=IMG).run(TASK)
    assert len(m.requests) == 4
    for req in m.requests:
        last = req.messages[-1]["content"]
        assert last[1] == {"type": "image_url", "image_url": {"url": IMG}}
        assert all(isinstance(msg["content"], str) for msg in req.messages[:-1])
    assert m.requests[2].messages[-1]["content"][0] == {"type": "text", "text": TASK}


def test_local_image_is_sent_as_a_data_url(tmp_path):
    png = tmp_path / "x.png"
    png.write_bytes(b"\x89PNG fake")
    m = ScriptedModel(fn=reply)
    one_on_one_debate(max_loops=1, task=TASK, agents=debaters(m), img=str(png))
    url = m.requests[0].messages[-1]["content"][1]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()


def test_failure_mid_debate_keeps_transcript():
    m = ScriptedModel({"P1": ["hi", "p1 opening", "p1 again"], "P2": ["hi", Fail(400, "bad request")]})
    debate = OneOnOneDebate(max_loops=3, agents=debaters(m), output_type="list")
    r = debate.execute(TASK)
    assert_trace_is_path(debate.graph, r)
    assert_stop(r, "error")
    assert_path(r, ["intro_a", "intro_b", "turn_a", "turn_b"])
    assert [(x.role, x.content) for x in r.transcript] == [("P1", "p1 opening")]
    m2 = ScriptedModel({"P1": ["x", "y"], "P2": [Fail(400)]})
    with pytest.raises(ModelCallError, match="P2") as ei:
        OneOnOneDebate(max_loops=3, agents=debaters(m2)).run(TASK)
    assert ei.value.fsmchat_result.transcript == [] and ei.value.fsmchat_result.path[-1] == "intro_b"


def test_callable_debater_error_propagates_with_transcript():
    def pro(turn):
        return f"pro says no to: {turn.instruction}"

    def con(turn):
        if turn.history and len(turn.history) > 2:
            raise RuntimeError("con broke")
        return "con rebuts"

    with pytest.raises(RuntimeError, match="con broke") as ei:
        one_on_one_debate(max_loops=4, task=TASK, agents=[pro, con], send_intros=True)
    result = ei.value.fsmchat_result
    assert [x.content for x in result.transcript] == [f"pro says no to: {TASK}", "con rebuts",
                                                      "pro says no to: con rebuts"]
    assert result.path[-1] == "turn_b" and result.stop_reason == "error"


@pytest.mark.parametrize("max_loops", [1, 2, 3])
def test_function_form_has_no_intros(max_loops):
    m = ScriptedModel(fn=reply)
    out = one_on_one_debate(max_loops=max_loops, task=TASK, agents=debaters(m), output_type="list")
    assert_calls(m, max_loops)
    assert [req.prompt for req in m.requests] == [TASK] + [f"{['P1', 'P2'][k % 2]}-{k // 2 + 1}"
                                                           for k in range(max_loops - 1)]
    assert out == [{"role": ["P1", "P2"][k % 2], "content": f"{['P1', 'P2'][k % 2]}-{k // 2 + 1}"}
                   for k in range(max_loops)]
    # the second debater remembers only its own side: the prompts it got and its replies
    if max_loops >= 3:
        assert m.requests[2].messages[1:] == [{"role": "user", "content": TASK},
                                              {"role": "assistant", "content": "P1-1"},
                                              {"role": "user", "content": "P2-1"}]


def test_function_form_trace_and_default_output():
    m = ScriptedModel(fn=reply)
    debate = OneOnOneDebate(max_loops=3, agents=debaters(m), send_intros=False)
    r = debate.execute(TASK)
    assert_trace_is_path(debate.graph, r)
    assert_path(r, ["turn_a", "turn_b", "turn_a", "stop"])
    assert r.output == "P2-1\nP1-2"
    assert one_on_one_debate(max_loops=2, task=TASK, agents=debaters(m)) == "P2-2"


@pytest.mark.parametrize("task", [None, "", "   "])
def test_function_form_needs_a_task(task):
    m = ScriptedModel(fn=reply)
    with pytest.raises(ValueError, match=r"^one_on_one_debate needs task=: the opening message sent to agents\[0\]"):
        one_on_one_debate(max_loops=2, task=task, agents=debaters(m))
    assert m.calls() == 0


def test_reused_debate_starts_with_empty_memories():
    m = ScriptedModel(fn=reply)
    debate = OneOnOneDebate(max_loops=1, agents=debaters(m), send_intros=False)
    debate.run("first")
    debate.run("second")
    assert m.requests[1].messages[1:] == [{"role": "user", "content": "second"}]


def test_run_batch_and_arun():
    m = ScriptedModel(fn=lambda req: f"{req.agent} on {req.messages[-1]['content']}")
    debate = OneOnOneDebate(max_loops=2, agents=debaters(m), output_type="final", send_intros=False)
    assert debate.run_batch(["t1", "t2"]) == ["P2 on P1 on t1", "P2 on P1 on t2"]
    assert asyncio.run(debate.arun("t3")) == "P2 on P1 on t3"


def test_graph_shapes():
    g = example_graph()
    assert list(g.states) == ["intro_a", "intro_b", "turn_a", "turn_b", "stop"]
    assert [(t.source, t.dest, t.label) for t in g.transitions] == [
        ("intro_a", "intro_b", "next"), ("intro_b", "turn_a", "next"),
        ("turn_a", "turn_b", "turns_remain"), ("turn_a", "stop", "max_loops"),
        ("turn_b", "turn_a", "turns_remain"), ("turn_b", "stop", "max_loops")]
    assert "Philosopher1" in g.states["intro_a"].description
    f = example_function_graph()
    assert list(f.states) == ["turn_a", "turn_b", "stop"] and f.initial == "turn_a"
    assert compile_debate().validate().states["turn_b"].description == "agents[1] answers agents[0]'s reply"
    assert OneOnOneDebate().graph.validate() is not None  # drawable before the roster is known
    assert OneOnOneDebate(agents=[Agent("A"), Agent("B")]).graph.states["turn_a"].description.startswith("A ")
