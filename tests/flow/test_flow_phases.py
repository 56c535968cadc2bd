"""A phase router over a user's list: ``loop(over=[...])`` (a literal list fixed when the flow is
built) and ``route(on="var")`` (the key equal to a variable, exactly); ``max_calls()`` counts each
pass with its item known."""
import pytest

from fsmchat import from_config
from fsmchat.flow import AgentFlow, StepResult, Task, loop, route
from fsmchat.testing import ScriptedModel, assert_trace_is_path


def phase_flow(m, phases, default=True):
    a, b = m.agent("a"), m.agent("b")
    body = route({"one": [Task(agent=a, action="one")],
                  "two": [Task(agent=a, action="two"), Task(agent=b, action="two b")]},
                 default=[Task(agent=b, action="other {{phase}}")] if default else None, on="phase")
    return AgentFlow(steps=[loop(body, over=phases, var_name="phase")])


def test_route_on_takes_the_key_equal_to_the_variable_case_sensitively():
    m = ScriptedModel({"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"]})
    flow = phase_flow(m, ["two", "one", "One", "one two"])
    r = flow.execute("go")
    assert_trace_is_path(flow.graph, r)
    assert [q.prompt for q in m.requests] == ["two", "two b", "one", "other One", "other one two"]
    assert r.calls == 5 and r.stop_reason == "done"
    misses = [e for e in r.events if e["event"] == "route_no_match"]
    assert [(e["on"], e["value"]) for e in misses] == [("phase", "One"), ("phase", "one two")]


def test_route_on_draws_equality_guards():
    m = ScriptedModel({})
    dot = phase_flow(m, ["one"]).graph.to_dot()
    assert "phase_is_one" in dot and "phase_is_two" in dot and "says_one" not in dot


def test_without_on_the_route_still_searches_the_previous_output():
    m = ScriptedModel({"a": ["I say TWO here", "done"]})
    a = m.agent("a")
    flow = AgentFlow(steps=[Task(agent=a, action="pick"),
                            route({"one": [Task(agent=a, action="was one")],
                                   "two": [Task(agent=a, action="was two")]})])
    flow.execute("go")
    assert [q.prompt for q in m.requests] == ["pick", "was two"]


@pytest.mark.parametrize("phases, calls", [(["one", "two", "two", "x"], 1 + 2 + 2 + 1), (["one"], 1), ([], 0),
                                           (["x", "y"], 2)])
def test_max_calls_counts_each_listed_item_s_branch(phases, calls):
    m = ScriptedModel({})
    assert phase_flow(m, phases).max_calls() == calls
    assert phase_flow(m, phases, default=False).max_calls() == calls - sum(p not in ("one", "two") for p in phases)


def test_max_calls_is_the_worst_branch_when_the_body_may_rewrite_the_variable():
    m = ScriptedModel({})
    a = m.agent("a")

    def rewrite(ctx):
        return StepResult("x", variables={"phase": "two"})

    body = [rewrite, route({"one": [Task(agent=a, action="1")], "two": [a, a]}, on="phase")]
    flow = AgentFlow(steps=[loop(body, over=["one", "one"], var_name="phase")])
    assert flow.max_calls() == 4  # a plain route's worst case (2) per pass: the callable may set phase


def test_a_literal_list_runs_the_same_items_every_run_and_zero_items_run_nothing():
    m = ScriptedModel({"a": ["r1", "r2", "r3", "r4"]})
    a = m.agent("a")
    flow = AgentFlow(steps=[loop(Task(agent=a, action="round {{round}}"), over=[1, 2], var_name="round")])
    assert flow.max_calls() == 2
    assert flow.execute("go").calls == 2 and flow.execute("again").calls == 2
    assert [q.prompt for q in m.requests] == ["round 1", "round 2", "round 1", "round 2"]
    empty = AgentFlow(steps=[loop(Task(agent=a, action="never"), over=[], var_name="round")])
    r = empty.execute("go")
    assert (r.calls, r.stop_reason, len(m.requests)) == (0, "done", 4)


def test_dotted_on_reads_into_a_dict_item():
    m = ScriptedModel({"a": ["x"]})
    a = m.agent("a")
    flow = AgentFlow(steps=[loop(route({"go": [Task(agent=a, action="{{p.label}}")]}, on="p.name"),
                                 over=[{"name": "go", "label": "GO!"}, {"name": "stay", "label": "-"}], var_name="p")])
    assert flow.max_calls() == 1
    flow.execute("t")
    assert [q.prompt for q in m.requests] == ["GO!"]


def test_bad_on_is_refused_and_the_options_travel_in_a_config():
    m = ScriptedModel({"a": ["x"]})
    with pytest.raises(Exception, match=r"route: on='a b' is invalid: a variable name"):
        route({"k": [m.agent("a")]}, on="a b")
    flow = phase_flow(m, ["one", "two"])
    back = from_config(flow.to_config())
    lp = back.steps[0]
    assert (lp.over, lp.steps[0].on) == (["one", "two"], "phase")
    assert back.max_calls() == 3
