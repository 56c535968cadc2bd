"""ExpertPanelDiscussion tests (docs/semantics.md "ExpertPanelDiscussion")."""
import asyncio

import pytest

from fsmchat import Agent
from fsmchat.errors import ModelCallError
from fsmchat.patterns.panel import ExpertPanelDiscussion, example_graph, expert_brief, moderator_brief
from fsmchat.testing import Fail, ScriptedModel, assert_calls, assert_path, assert_stop, assert_trace_is_path

TASK = "What are the ethical implications of AGI development?"
FEW = r"^At least two expert agents are required for a panel discussion\.$"
NO_MOD = r"^A moderator agent is required for panel discussion\.$"


def reply(req):
    return f"{req.agent}-{req.n}"


def panel_of(n, **kw):
    m = ScriptedModel(fn=reply)
    experts = [m.agent(f"E{i + 1}", f"You are expert {i + 1}.") for i in range(n)]
    return m, ExpertPanelDiscussion(agents=experts, moderator=m.agent("M", "You moderate."), **kw)


def test_defaults():
    p = ExpertPanelDiscussion()
    assert (p.max_rounds, p.agents, p.moderator, p.output_type) == (3, None, None, "str-all-except-first")


@pytest.mark.parametrize("experts, moderator, message", [
    (None, None, FEW), ([], "M", FEW), (["E1"], "M", FEW), (["E1", "E2"], None, NO_MOD),
])
def test_roster_errors_are_raised_at_construction_and_by_run(experts, moderator, message):
    m = ScriptedModel(fn=reply)
    agents = None if experts is None else [m.agent(e) for e in experts]
    if agents is not None or moderator is not None:  # a roster given: refused at once, exact reference text
        with pytest.raises(ValueError, match=message):
            ExpertPanelDiscussion(agents=agents, moderator=moderator and m.agent(moderator))
    panel = ExpertPanelDiscussion()
    panel.agents, panel.moderator = agents, moderator and m.agent(moderator)  # set later: run() checks again
    with pytest.raises(ValueError, match=message):
        panel.run(TASK)
    with pytest.raises(ValueError, match=message):
        panel.graph
    assert m.calls() == 0


def test_other_refusals_before_any_call():
    m = ScriptedModel(fn=reply)
    with pytest.raises(ValueError) as ei:
        ExpertPanelDiscussion(max_rounds=0)
    assert str(ei.value) == ("ExpertPanelDiscussion: max_rounds=0 is invalid: an int >= 1 (rounds of opener, expert "
                             "answers and synthesis)")
    with pytest.raises(ValueError, match="output_type='yaml' is not supported"):
        ExpertPanelDiscussion(output_type="yaml")
    with pytest.raises(ValueError, match="unique.*'E1'"):
        ExpertPanelDiscussion(agents=[m.agent("E1"), m.agent("E2")], moderator=m.agent("E1")).run(TASK)
    with pytest.raises(ValueError, match="task must be a non-empty string"):
        ExpertPanelDiscussion(agents=[m.agent("E1"), m.agent("E2")], moderator=m.agent("M")).run("")
    assert m.calls() == 0


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_schedule_calls_and_posts(n, rounds):
    m, panel = panel_of(n, max_rounds=rounds, output_type="list")
    experts = [f"E{i + 1}" for i in range(n)]
    r = panel.execute(TASK)
    assert_trace_is_path(panel.graph, r)
    assert r.error is None
    assert_path(r, ["brief"] + (["open_round"] + experts + ["synthesize"]) * rounds + ["stop"])
    assert_stop(r, "rounds")
    assert_calls(m, 1 + n + rounds * (n + 2))
    assert r.calls == 1 + n + rounds * (n + 2)
    assert [req.agent for req in m.requests] == ["M"] + experts + (["M"] + experts + ["M"]) * rounds
    assert [row["role"] for row in r.output] == (["M"] + experts + ["M"]) * rounds
    assert len(r.transcript) == rounds * (n + 2)
    # briefing replies (call 1 of each agent) are not posted
    assert r.output[0] == {"role": "M", "content": "M-2"} and r.output[1] == {"role": "E1", "content": "E1-2"}


def test_prompts_briefings_openers_and_synthesis():
    m, panel = panel_of(2, max_rounds=2)
    panel.execute(TASK)
    mod = m.requests_of("M")
    e1, e2 = m.requests_of("E1"), m.requests_of("E2")
    assert mod[0].prompt == moderator_brief("M", ["E1", "E2"])
    assert "E1, E2" in mod[0].prompt
    assert e1[0].prompt == expert_brief("E1", 0, ["E1", "E2"], "M")
    assert "Other experts: E2" in e1[0].prompt and "moderated by M" in e1[0].prompt
    assert "Other experts: E1" in e2[0].prompt
    # round 1: opener on the task; experts answer the opener; synthesis of labelled answers
    assert mod[1].prompt.startswith(f"Round 1: {TASK}")
    assert "M-2" in e1[1].prompt and "M-2" in e2[1].prompt
    assert "E1: E1-2\n\nE2: E2-2" in mod[2].prompt
    assert mod[2].prompt.endswith("\n\nE1: E1-2\n\nE2: E2-2")
    # round 2: the synthesis (M-3) is the topic
    assert mod[3].prompt.startswith("Round 2: M-3")
    assert "M-4" in e1[2].prompt
    assert mod[4].prompt.endswith("\n\nE1: E1-3\n\nE2: E2-3")


def test_memories_are_private():
    m, panel = panel_of(2, max_rounds=2)
    panel.execute(TASK)
    e2_round2 = m.requests_of("E2")[2]
    assert [msg["role"] for msg in e2_round2.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert e2_round2.messages[2:5] == [{"role": "assistant", "content": "E2-1"},
                                       {"role": "user", "content": m.requests_of("E2")[1].prompt},
                                       {"role": "assistant", "content": "E2-2"}]
    assert not any("E1-" in str(msg["content"]) for msg in e2_round2.messages)  # experts never hear each other
    mod_round2 = m.requests_of("M")[3]
    assert len(mod_round2.messages) == 1 + 2 * 3 + 1  # system, brief+open+synth pairs, the opener prompt


@pytest.mark.parametrize("ot, expected", [
    ("str-all-except-first", "E1-2\nE2-2\nM-3"),
    ("str", "M: M-2\n\nE1: E1-2\n\nE2: E2-2\n\nM: M-3"),
    ("list", [{"role": "M", "content": "M-2"}, {"role": "E1", "content": "E1-2"}, {"role": "E2", "content": "E2-2"},
              {"role": "M", "content": "M-3"}]),
    ("final", "M-3"),
    ("last", "M-3"),
])
def test_output_types(ot, expected):
    m, panel = panel_of(2, max_rounds=1, output_type=ot)
    assert panel.run(TASK) == expected


def test_dict_and_json_carry_round_and_phase():
    import json
    m, panel = panel_of(2, max_rounds=1, output_type="dict")
    rows = panel.run(TASK)
    assert [r["metadata"] for r in rows] == [{"round": 1, "phase": "open"}, {"round": 1, "phase": "answer"},
                                             {"round": 1, "phase": "answer"}, {"round": 1, "phase": "synthesis"}]
    m, panel = panel_of(2, max_rounds=1, output_type="json")
    assert json.loads(panel.run(TASK))[3] == {"role": "M", "content": "M-3",
                                              "metadata": {"round": 1, "phase": "synthesis"}}


def test_expert_failure_mid_round_keeps_transcript():
    m = ScriptedModel({"M": ["ok", "opening"], "E1": ["ok", "e1 answer"], "E2": ["ok", Fail(400, "bad request")]})
    panel = ExpertPanelDiscussion(agents=[m.agent("E1"), m.agent("E2")], moderator=m.agent("M"), max_rounds=2)
    r = panel.execute(TASK)
    assert_trace_is_path(panel.graph, r)
    assert_stop(r, "error")
    assert_path(r, ["brief", "open_round", "E1", "E2"])
    assert [(x.role, x.content) for x in r.transcript] == [("M", "opening"), ("E1", "e1 answer")]
    m2 = ScriptedModel({"M": ["ok", "opening"], "E1": ["ok", "e1 answer"], "E2": ["ok", Fail(400, "bad request")]})
    panel2 = ExpertPanelDiscussion(agents=[m2.agent("E1"), m2.agent("E2")], moderator=m2.agent("M"))
    with pytest.raises(ModelCallError, match="E2") as ei:
        panel2.run(TASK)
    assert [x.content for x in ei.value.fsmchat_result.transcript] == ["opening", "e1 answer"]
    assert ei.value.fsmchat_result.stop_reason == "error"


def test_callable_moderator_error_propagates_with_transcript():
    def moderator(turn):
        if turn.instruction.startswith("Synthesize"):
            raise RuntimeError("moderator lost the thread")
        return "moderator speaks"

    panel = ExpertPanelDiscussion(agents=[lambda t: "x", Agent("E2", model="offline")], moderator=moderator)
    with pytest.raises(RuntimeError, match="lost the thread") as ei:
        panel.run(TASK)
    result = ei.value.fsmchat_result
    assert [x.role for x in result.transcript] == ["moderator", "<lambda>", "E2"]
    assert_trace_is_path(panel.graph, result)


def test_run_batch_and_arun():
    m, panel = panel_of(2, max_rounds=1, output_type="final")
    out = panel.run_batch(["t1", "t2"])
    assert len(out) == 2 and all(o.startswith("M-") for o in out)
    assert asyncio.run(panel.arun("t3")).startswith("M-")
    assert_calls(m, 3 * (1 + 2 + 4))


def test_graph_has_one_state_per_expert():
    g = example_graph()
    assert list(g.states) == ["brief", "open_round", "AI_Expert", "Ethics_Expert", "Neuroscience_Expert",
                              "synthesize", "stop"]
    assert [(t.source, t.dest, t.label) for t in g.transitions][-2:] == [
        ("synthesize", "open_round", "rounds_remain"), ("synthesize", "stop", "rounds")]
    assert g.states["stop"].reason == "rounds"
    m, panel = panel_of(3)
    assert list(panel.graph.states)[2:5] == ["E1", "E2", "E3"]
