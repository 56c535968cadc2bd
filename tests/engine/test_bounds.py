"""``max_calls()`` is the true worst case of a flow, rule by rule: each test below pins one rule with
a run that reaches its bound exactly, so a mutation of that rule (max instead of sum, select
ignored, retries ignored, ...) fails a plain test; a property test checks calls <= bound on
random flows."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsmchat import Agent
from fsmchat.flow import AgentFlow, Discussion, Task, if_, loop, parallel, repeat, route
from fsmchat.testing import Fail, FunctionModel, ScriptedModel


def agents(model, *names, retries=0):
    return [Agent(n, model=model, num_retries=retries) for n in names]


def test_parallel_is_the_sum_of_its_branches():
    m = ScriptedModel({"a": ["a1", "a2"], "b": ["b1", "b2"], "c": ["c1"]})
    a, b, c = agents(m.model, "a", "b", "c")
    flow = AgentFlow(steps=[parallel([Discussion([a, b], rounds=2, name="talk"), c])])
    assert flow.max_calls() == 5  # 2 x 2 + 1 (a max over branches would say 4)
    r = flow.execute("go")
    assert r.ok and r.calls == 5 == m.calls()


def test_discussion_with_select_is_rounds_x_speakers_x_costliest():
    # a retries (Task on_error="retry", 2 retries) and select always picks a: 2 rounds x 2 turns x 3
    script = [Fail(500), Fail(500), "a1", Fail(500), Fail(500), "a2", Fail(500), Fail(500), "a3",
              Fail(500), Fail(500), "a4"]
    m = ScriptedModel({"a": script, "b": []})
    a, b = agents(m.model, "a", "b")
    ta = Task(agent=a, on_error="retry", max_retries=2, retry_delay=0)
    d = Discussion([ta, b], rounds=2, select=lambda t, ctx: ta, name="talk")
    flow = AgentFlow(steps=[d])
    assert flow.max_calls() == 12  # without select: 2 x (3 + 1) = 8
    r = flow.execute("go")
    assert r.ok, r.error
    assert r.calls == 12 == m.calls("a") and m.calls("b") == 0
    no_select = AgentFlow(steps=[Discussion([ta, b], rounds=2, name="talk")])
    assert no_select.max_calls() == 8


def test_task_retries_count_and_requests_count_agent_retries():
    m = ScriptedModel({"a": [Fail(500), Fail(500), "ok"]})
    (a,) = agents(m.model, "a")
    flow = AgentFlow(steps=[Task(agent=a, on_error="retry", max_retries=2, retry_delay=0)])
    assert flow.max_calls() == 3
    r = flow.execute("go")
    assert r.ok and r.calls == 3
    m2 = ScriptedModel({"a": [Fail(500), Fail(500), "ok"]})
    (a2,) = agents(m2.model, "a", retries=2)  # litellm-level retries inside one call
    flow2 = AgentFlow(steps=[a2])
    assert flow2.max_calls() == 1 and flow2.max_calls(requests=True) == 3
    r2 = flow2.execute("go")
    assert r2.ok and r2.calls == 1 and m2.calls("a") == 3  # one call, three requests


def test_route_and_if_take_the_costliest_branch_repeat_multiplies():
    m = FunctionModel(lambda req: "fine")
    a, b, c = agents(m.model, "a", "b", "c")
    flow = AgentFlow(steps=[route({"x": [a, b, c], "y": [a]}, default=[b, c])])
    assert flow.max_calls() == 3
    flow2 = AgentFlow(steps=[if_(lambda ctx: True, [a], [b, c])])
    assert flow2.max_calls() == 2
    flow3 = AgentFlow(steps=[repeat(a, max_iterations=4)])
    assert flow3.max_calls() == 4
    r = flow3.execute("go")
    assert r.calls == 4  # no until: every iteration runs


def test_loop_length_must_be_given_or_declared():
    m = FunctionModel(lambda req: "fine")
    (a,) = agents(m.model, "a")
    flow = AgentFlow(steps=[loop(a, over="found", name="each")])
    with pytest.raises(ValueError, match=r"loop 'each' iterates over 'found', a list only known when it runs; "
                                         r"declare loop\(\.\.\., max_items=N\)"):
        flow.max_calls()
    assert flow.max_calls(found=7) == 7


def test_max_items_bounds_the_loop_and_refuses_a_longer_list_before_its_body_runs():
    """The bug the issue found: a list set at run time made 20 calls against a bound of 2."""
    from fsmchat.flow import StepResult

    m = FunctionModel(lambda req: "fine")
    (a,) = agents(m.model, "a")
    grow = lambda ctx: StepResult("grown", variables={"items": list(range(20))})  # noqa: E731
    flow = AgentFlow(steps=[grow, loop(a, over="items", name="each", max_items=2)], variables={"items": [1, 2]})
    assert flow.max_calls() == 2
    r = flow.execute("go")
    assert not r.ok and r.calls == 0 and m.calls() == 0
    assert "loop 'each': 'items' holds 20 items, over its max_items=2" in str(r.error)
    ok = AgentFlow(steps=[loop(a, over="items", name="each", max_items=2)], variables={"items": [1, 2]}).execute("go")
    assert ok.ok and ok.calls == 2


def test_pattern_bounds_count_requests_per_agent_retries():
    from fsmchat import ExpertPanelDiscussion, GroupChat, OneOnOneDebate, RoundRobinSwarm

    m = FunctionModel(lambda req: "fine")
    a, b = Agent("a", model=m.model, num_retries=0), Agent("b", model=m.model, num_retries=3)
    c = Agent("c", model=m.model, num_retries=1)
    assert GroupChat(agents=[a, b], max_loops=5).max_calls() == 8
    assert GroupChat(agents=[a, b], max_loops=5).max_calls(requests=True) == 4 * 1 + 4 * 4
    assert RoundRobinSwarm(agents=[a, b], max_loops=2).max_calls(requests=True) == 2 * 1 + 2 * 4
    # intros 1 each, then 3 turns from a: a speaks 2, b 1
    assert OneOnOneDebate(max_loops=3, agents=[a, b]).max_calls() == 5
    assert OneOnOneDebate(max_loops=3, agents=[a, b]).max_calls(requests=True) == 3 * 1 + 2 * 4
    panel = ExpertPanelDiscussion(max_rounds=2, agents=[a, b], moderator=c)
    assert panel.max_calls() == 1 + 2 + 2 * (2 + 2)
    assert panel.max_calls(requests=True) == (1 + 2 * 2) * 2 + (1 + 2) * 1 + (1 + 2) * 4


# ---- random flows: calls made never exceed the bound ----
def leaf(model, name):
    return Agent(name, model=model, num_retries=0)


def discussion(speakers, rounds, select_last, name):
    """A Discussion; with ``select_last`` a selector that always picks the last speaker."""
    select = (lambda t, ctx: speakers[-1]) if select_last else None
    return Discussion(speakers, rounds=rounds, select=select, name=name)


def flows(model):
    names = iter(f"s{i}" for i in range(10_000))
    step = st.deferred(lambda: st.one_of(
        st.builds(lambda: leaf(model, next(names))),
        st.builds(lambda n, r, sel: discussion([leaf(model, next(names)) for _ in range(n)], r, sel,
                                               f"d{next(names)}"),
                  st.integers(2, 3), st.integers(1, 2), st.booleans()),
        st.builds(lambda xs: parallel(xs, name=f"p{next(names)}"), st.lists(step, min_size=1, max_size=2)),
        st.builds(lambda xs, it: repeat(xs, max_iterations=it, name=f"r{next(names)}"),
                  st.lists(step, min_size=1, max_size=2), st.integers(1, 2)),
        st.builds(lambda xs: loop(steps=xs, over="items", name=f"l{next(names)}"),
                  st.lists(step, min_size=1, max_size=2)),
        st.builds(lambda t, e: if_(lambda ctx: "yes" in str(ctx.previous_result), t, e, name=f"i{next(names)}"),
                  st.lists(step, min_size=1, max_size=2), st.lists(step, min_size=1, max_size=2)),
    ))
    return st.lists(step, min_size=1, max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), n_items=st.integers(0, 3))
def test_random_flows_stay_within_their_bound(data, n_items):
    m = FunctionModel(lambda req: "yes" if req.n % 2 else "no")
    steps = data.draw(flows(m.model))
    flow = AgentFlow(steps=steps, variables={"items": list(range(n_items))})
    bound = flow.max_calls(items=n_items)
    r = flow.execute("go")
    assert r.ok, r.error
    assert r.calls <= bound, (r.calls, bound)
    assert r.context.stats.attempts <= flow.max_calls(items=n_items, requests=True)


# ---- tools: each turn of an agent with tools counts 1 + max_tool_rounds calls ----
RESPOND_FORCED = {"type": "function", "function": {"name": "respond"}}


def echo(x: int) -> int:
    """Return x."""
    return x


def greedy(req):
    """A model that calls a tool whenever it may, then answers (bids when asked to)."""
    from fsmchat.testing import Bid, ToolCall

    names = [t["function"]["name"] for t in req.tools or []]
    if [n for n in names if n != "respond"] and req.tool_choice not in ("none", RESPOND_FORCED):
        return ToolCall("echo", {"x": req.n}, id=f"c{req.n}")
    if "respond" in names:
        return Bid(0.6, f"bid {req.n}")
    return f"reply {req.n}"


def tooled(model, name, tools, rounds):
    return Agent(name, model=model, num_retries=0, tools=[echo] if tools else [], max_tool_rounds=rounds)


def test_a_turn_with_tools_reaches_its_bound_exactly():
    """A model that takes every tool round it may: round robin makes exactly max_calls() calls."""
    from fsmchat import RoundRobinSwarm

    m = FunctionModel(greedy)
    rr = RoundRobinSwarm(agents=[tooled(m.model, "a", True, 3), tooled(m.model, "b", False, 3)], max_loops=2)
    assert rr.max_calls() == 2 * 4 + 2
    r = rr.execute("go")
    assert r.ok and r.calls == 10 == m.calls()
    assert rr.max_calls(requests=True) == 10


def test_retries_multiply_the_tool_rounds_of_a_turn():
    from fsmchat import RoundRobinSwarm

    m = FunctionModel(greedy)
    a = Agent("a", model=m.model, num_retries=2, tools=[echo], max_tool_rounds=1)
    assert RoundRobinSwarm(agents=[a], max_loops=3).max_calls(requests=True) == 3 * 2 * 3


def patterns_with_tools(model):
    from fsmchat import ExpertPanelDiscussion, GroupChat, OneOnOneDebate, RoundRobinSwarm

    names = iter(f"t{i}" for i in range(10_000))

    def roster(flags, rounds):
        return [tooled(model, next(names), f, r) for f, r in zip(flags, rounds)]

    flags = st.lists(st.booleans(), min_size=2, max_size=3)
    rounds = st.lists(st.integers(0, 2), min_size=3, max_size=3)
    return st.one_of(
        st.builds(lambda f, r, n: RoundRobinSwarm(agents=roster(f, r), max_loops=n), flags, rounds, st.integers(1, 2)),
        st.builds(lambda f, r, n: GroupChat(agents=roster(f, r), max_loops=n), flags, rounds, st.integers(1, 3)),
        st.builds(lambda f, r, n: OneOnOneDebate(agents=roster(f[:2], r), max_loops=n), flags, rounds,
                  st.integers(1, 3)),
        st.builds(lambda f, r, n: ExpertPanelDiscussion(agents=roster(f, r), moderator=roster([f[0]], r)[0],
                                                        max_rounds=n), flags, rounds, st.integers(1, 2)),
        st.builds(lambda f, r, n: AgentFlow(steps=[roster(f[:1], r)[0], Discussion(roster(f, r), rounds=n,
                                                                                   name=f"d{next(names)}")]),
                  flags, rounds, st.integers(1, 2)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_patterns_with_tools_stay_within_their_bound(data):
    m = FunctionModel(greedy)
    pattern = data.draw(patterns_with_tools(m.model))
    bound = pattern.max_calls()
    r = pattern.execute("go")
    assert r.ok, r.error
    assert r.calls <= bound, (type(pattern).__name__, r.calls, bound)
    assert r.context.stats.attempts <= pattern.max_calls(requests=True)
    if type(pattern).__name__ in ("RoundRobinSwarm", "OneOnOneDebate", "ExpertPanelDiscussion"):
        assert r.calls == bound  # every turn takes every round it may: the bound is reached
