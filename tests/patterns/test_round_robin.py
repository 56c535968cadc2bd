"""RoundRobinSwarm state-transition and conformance tests (docs/semantics.md "RoundRobinSwarm")."""
import asyncio
import json

import pytest

from fsmchat import Agent, Message, RunResult, TraceEvent
from fsmchat.errors import ModelCallError
from fsmchat.patterns.round_robin import RoundRobinSwarm, build_collaborative_task, build_turn_header, \
    compile_round_robin, example_graph
from fsmchat.testing import Fail, ScriptedModel, assert_calls, assert_path, assert_stop, assert_trace_is_path

TASK = "How should we approach building a new AI product?"
NAMES = ["Analyst", "Strategist", "Implementer"]
COLLAB = ("Review the transcript above and build on the prior speaker's contribution. Add your own perspective "
          "concisely; if you are the opening speaker, address the original task directly.\n\nYour response:")


def reply(req):
    return f"{req.agent}-{req.n}"


def swarm_of(names, **kw):
    m = ScriptedModel(fn=reply)
    return m, RoundRobinSwarm(agents=[m.agent(n, f"You are {n}.") for n in names], **kw)


def check(swarm, r):
    assert_trace_is_path(swarm.graph, r)
    assert r.error is None, r.error


def test_defaults():
    s = RoundRobinSwarm(agents=[Agent("a")])
    assert (s.name, s.description) == ("RoundRobinSwarm",
                                       "A swarm implementation that executes tasks in a round-robin fashion.")
    assert (s.verbose, s.max_loops, s.output_type) == (False, 1, "final")


@pytest.mark.parametrize("agents", [None, []])
def test_no_agents(agents):
    with pytest.raises(ValueError, match=r"^RoundRobinSwarm cannot be initialized without agents$"):
        RoundRobinSwarm(agents=agents)


@pytest.mark.parametrize("kw, message", [
    ({"max_loops": 0}, "RoundRobinSwarm: max_loops=0 is invalid: an int >= 1 (full passes over the roster)"),
    ({"max_loops": -2}, "RoundRobinSwarm: max_loops=-2 is invalid: an int >= 1 (full passes over the roster)"),
    ({"output_type": "yaml"}, "RoundRobinSwarm: output_type='yaml' is not supported; choose from"),
])
def test_bad_config_refused_before_any_call(kw, message):
    m = ScriptedModel(fn=reply)
    with pytest.raises(ValueError) as ei:
        RoundRobinSwarm(agents=[m.agent("a")], **kw)
    assert str(ei.value).startswith(message)
    assert m.calls() == 0


def test_duplicate_names_refused():
    with pytest.raises(ValueError, match="unique.*'a'"):
        RoundRobinSwarm(agents=[Agent("a"), Agent("a")])


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("loops", [1, 2, 3])
def test_schedule_calls_and_transcript(n, loops):
    names = [f"agent{i}" for i in range(n)]
    m, swarm = swarm_of(names, max_loops=loops, output_type="list")
    r = swarm.execute(TASK)
    check(swarm, r)
    assert_path(r, ["seed"] + names * loops + ["stop"])
    assert_stop(r, "max_loops")
    assert_calls(m, n * loops)
    assert r.calls == n * loops
    assert [req.agent for req in m.requests] == names * loops
    assert len(r.transcript) == 1 + n * loops
    assert r.output == [{"role": "User", "content": TASK}] + [
        {"role": name, "content": f"{name}-{k + 1}"} for k in range(loops) for name in names]
    for name in names:
        assert_calls(m, loops, name)


def test_exact_turn_prompts_three_agents_two_loops():
    m, swarm = swarm_of(NAMES, max_loops=2)
    check(swarm, swarm.execute(TASK))
    headers = [
        "You are Analyst, agent 1 of 3 in loop 1 of 2. Previous speaker: (none \u2014 you open the conversation). "
        "Next speaker: Strategist. Other participants: Strategist, Implementer.",
        "You are Strategist, agent 2 of 3 in loop 1 of 2. Previous speaker: Analyst. Next speaker: Implementer. "
        "Other participants: Analyst, Implementer.",
        "You are Implementer, agent 3 of 3 in loop 1 of 2. Previous speaker: Strategist. Next speaker: Analyst. "
        "Other participants: Analyst, Strategist.",
        "You are Analyst, agent 1 of 3 in loop 2 of 2. Previous speaker: Implementer. Next speaker: Strategist. "
        "Other participants: Strategist, Implementer.",
        "You are Strategist, agent 2 of 3 in loop 2 of 2. Previous speaker: Analyst. Next speaker: Implementer. "
        "Other participants: Analyst, Implementer.",
        "You are Implementer, agent 3 of 3 in loop 2 of 2. Previous speaker: Strategist. Next speaker: (none "
        "\u2014 you close the conversation). Other participants: Analyst, Strategist.",
    ]
    assert [req.prompt for req in m.requests] == [h + "\n\n" + COLLAB for h in headers]


def test_requests_carry_the_typed_shared_conversation():
    m, swarm = swarm_of(NAMES, max_loops=2)
    swarm.execute(TASK)
    impl1, analyst2 = m.requests[2], m.requests[3]
    assert impl1.messages[:-1] == [
        {"role": "system", "content": "You are Implementer."},
        {"role": "user", "content": TASK},
        {"role": "user", "content": "Analyst: Analyst-1"},
        {"role": "user", "content": "Strategist: Strategist-1"},
    ]
    assert analyst2.messages[:-1] == [
        {"role": "system", "content": "You are Analyst."},
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": "Analyst-1"},
        {"role": "user", "content": "Strategist: Strategist-1"},
        {"role": "user", "content": "Implementer: Implementer-1"},
    ]
    assert analyst2.messages[-1]["role"] == "user"


def test_blank_system_prompt_is_omitted_and_reused_swarm_starts_empty():
    m = ScriptedModel(fn=reply)
    swarm = RoundRobinSwarm(agents=[m.agent("solo")], max_loops=1)
    assert swarm.run("first task") == "solo-1"
    assert swarm.run("second task") == "solo-2"
    assert m.requests[1].messages[:-1] == [{"role": "user", "content": "second task"}]


def test_single_agent_wraps_prev_and_next_to_itself():
    m, swarm = swarm_of(["Solo"], max_loops=2)
    r = swarm.execute(TASK)
    check(swarm, r)
    assert_path(r, ["seed", "Solo", "Solo", "stop"])
    assert [req.prompt.split("\n\n")[0] for req in m.requests] == [
        "You are Solo, agent 1 of 1 in loop 1 of 2. Previous speaker: (none \u2014 you open the conversation). "
        "Next speaker: Solo. Other participants: (none).",
        "You are Solo, agent 1 of 1 in loop 2 of 2. Previous speaker: Solo. Next speaker: (none \u2014 you close "
        "the conversation). Other participants: (none).",
    ]


def test_prompt_builders_are_exact():
    header = build_turn_header("Analyst", 1, 3, 1, 2, None, "Strategist", NAMES)
    assert header == ("You are Analyst, agent 1 of 3 in loop 1 of 2. Previous speaker: (none \u2014 you open the "
                      "conversation). Next speaker: Strategist. Other participants: Strategist, Implementer.")
    assert build_turn_header(agent_name="X", position=1, total=1, loop=1, max_loops=1) == (
        "You are X, agent 1 of 1 in loop 1 of 1. Previous speaker: (none \u2014 you open the conversation). "
        "Next speaker: (none \u2014 you close the conversation). Other participants: (none).")
    assert build_collaborative_task("", header) == header + "\n\n" + COLLAB
    assert build_collaborative_task("User: hi", "H") == "User: hi\n\nH\n\n" + COLLAB


@pytest.mark.parametrize("ot, expected", [
    ("final", "b-1"),
    ("last", "b-1"),
    ("str-all-except-first", "a-1\nb-1"),
    ("str", f"User: {TASK}\n\na: a-1\n\nb: b-1"),
    ("string", f"User: {TASK}\n\na: a-1\n\nb: b-1"),
    ("all", f"User: {TASK}\n\na: a-1\n\nb: b-1"),
    ("list", [{"role": "User", "content": TASK}, {"role": "a", "content": "a-1"}, {"role": "b", "content": "b-1"}]),
    ("dict", [{"role": "User", "content": TASK, "metadata": {}}, {"role": "a", "content": "a-1",
              "metadata": {"loop": 1}}, {"role": "b", "content": "b-1", "metadata": {"loop": 1}}]),
])
def test_output_types(ot, expected):
    m, swarm = swarm_of(["a", "b"], output_type=ot)
    assert swarm.run(TASK) == expected


def test_json_output():
    m, swarm = swarm_of(["a", "b"], max_loops=2, output_type="json")
    rows = json.loads(swarm.run(TASK))
    assert [r["role"] for r in rows] == ["User", "a", "b", "a", "b"]
    assert rows[3]["metadata"] == {"loop": 2}


def test_model_failure_mid_run_keeps_transcript_and_propagates():
    m = ScriptedModel({"Analyst": ["a1", "a2"], "Strategist": ["s1", Fail(400, "bad request")],
                       "Implementer": ["i1"]})
    swarm = RoundRobinSwarm(agents=[m.agent(n) for n in NAMES], max_loops=2)
    r = swarm.execute(TASK)
    assert_trace_is_path(swarm.graph, r)
    assert_stop(r, "error")
    assert_path(r, ["seed", "Analyst", "Strategist", "Implementer", "Analyst", "Strategist"])
    assert [x.content for x in r.transcript] == [TASK, "a1", "s1", "i1", "a2"]
    assert isinstance(r.error, ModelCallError) and "bad request" in str(r.error)
    assert r.trace[-1].trigger == "error" and "ModelCallError" in r.trace[-1].payload
    assert_calls(m, 5)

    m2 = ScriptedModel({"Analyst": ["a1"], "Strategist": [Fail(400, "bad request")]})
    swarm2 = RoundRobinSwarm(agents=[m2.agent("Analyst"), m2.agent("Strategist")])
    with pytest.raises(ModelCallError, match="Strategist") as ei:
        swarm2.run(TASK)
    assert [x.content for x in ei.value.fsmchat_result.transcript] == [TASK, "a1"]
    assert ei.value.fsmchat_result.stop_reason == "error"


def test_callable_participant_error_propagates_with_transcript():
    def first(turn):
        return "opening"

    def broken(turn):
        raise RuntimeError("user bug")

    swarm = RoundRobinSwarm(agents=[first, broken])
    with pytest.raises(RuntimeError, match="user bug") as ei:
        swarm.run(TASK)
    result = ei.value.fsmchat_result
    assert [x.content for x in result.transcript] == [TASK, "opening"]
    assert_trace_is_path(swarm.graph, result)


def test_run_batch_is_independent_and_ordered():
    def fn(req):
        return f"{req.agent} on {req.messages[0]['content']} after {len(req.messages)} messages"

    m = ScriptedModel(fn=fn)
    swarm = RoundRobinSwarm(agents=[m.agent("a"), m.agent("b")])
    assert swarm.run_batch(["t1", "t2", "t3"], max_concurrency=2) == [
        "b on t1 after 3 messages", "b on t2 after 3 messages", "b on t3 after 3 messages"]
    assert_calls(m, 6)


def test_arun_and_stream():
    m, swarm = swarm_of(["a", "b"], max_loops=2)

    async def go():
        out = await swarm.arun(TASK)
        items = [x async for x in swarm.stream(TASK)]
        return out, items

    out, items = asyncio.run(go())
    assert out == "b-2"
    assert isinstance(items[-1], RunResult)
    assert [x.content for x in items if isinstance(x, Message)] == [TASK, "a-3", "b-3", "a-4", "b-4"]
    assert [x.state for x in items if isinstance(x, TraceEvent)] == items[-1].path
    assert_trace_is_path(swarm.graph, items[-1])


def test_verbose_prints_each_post(capsys):
    m, swarm = swarm_of(["a", "b"], verbose=True)
    swarm.run(TASK)
    out = capsys.readouterr().out
    assert "a-1" in out and "b-1" in out and TASK in out


def test_graph_draws_one_state_per_speaker():
    g = example_graph()
    assert list(g.states) == ["seed", "Analyst", "Strategist", "Implementer", "stop"]
    assert [(t.source, t.dest, t.label) for t in g.transitions] == [
        ("seed", "Analyst", "next"), ("Analyst", "Strategist", "next"), ("Strategist", "Implementer", "next"),
        ("Implementer", "Analyst", "next_loop"), ("Implementer", "stop", "max_loops")]
    assert g.states["stop"].reason == "max_loops"
    assert "[next_loop]" in g.to_mermaid()
    solo = compile_round_robin(["x"]).validate()
    assert [(t.source, t.dest) for t in solo.transitions] == [("seed", "x"), ("x", "x"), ("x", "stop")]
    assert solo.to_mermaid().count("x --> x") == 1


def test_awkward_names_get_distinct_states():
    m, swarm = swarm_of(["seed", "gpt-4.1 bot", "gpt_4_1_bot", "stop"])
    assert list(swarm.graph.states) == ["seed", "seed_2", "gpt_4_1_bot", "gpt_4_1_bot_2", "stop_2", "stop"]
    r = swarm.execute(TASK)
    check(swarm, r)
    assert [x.role for x in r.transcript] == ["User", "seed", "gpt-4.1 bot", "gpt_4_1_bot", "stop"]


def test_a_run_validates_and_flattens_its_graph_once(monkeypatch):
    """A new swarm per task (an eval's factory) compiles its graph once: validated once, flattened
    once, the flat form shared by the checks (``waits_for_people``), the engine and the result."""
    from fsmchat.graph.state_graph import StateGraph

    counts = {"validate": 0, "inline": 0}
    validate, inline = StateGraph.validate, StateGraph._inline

    def counted_validate(self):
        counts["validate"] += 1
        return validate(self)

    def counted_inline(*args):
        counts["inline"] += 1
        return inline(*args)

    monkeypatch.setattr(StateGraph, "validate", counted_validate)
    monkeypatch.setattr(StateGraph, "_inline", staticmethod(counted_inline))
    m, swarm = swarm_of(["a", "b"])
    r = swarm.execute("Plan it.")
    assert r.ok and r.path == ["seed", "a", "b", "stop"]
    assert r.graph is swarm.graph and counts == {"validate": 1, "inline": 1}
