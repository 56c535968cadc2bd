"""Budgets and deadlines are stop transitions in the graph, checked at every state boundary."""
import asyncio

import pytest

from fsmchat import AgentFlow, Bid, Discussion, GroupChat, RoundRobinSwarm
from fsmchat.testing import ScriptedModel, assert_path, assert_trace_is_path


def bids(n=10):
    return [Bid(0.9, f"m{i}") for i in range(n)]


def two(**kw):
    m = ScriptedModel({"a": bids(), "b": [Bid(0, "")] * 10})
    return m, GroupChat(agents=[m.agent("a"), m.agent("b")], recency_penalty=0.0, **kw)


def test_max_model_calls_is_a_hard_cap_and_a_round_that_fits_completes():
    m, chat = two()
    chat.with_limits(max_model_calls=4)
    r = chat.execute("t")
    assert_trace_is_path(chat.graph, r)
    # two rounds of 2 fit and are posted; the third is not started (it would cross 4 requests)
    assert_path(r, ["seed", "bid", "select", "post", "penalize", "bid", "select", "post", "penalize", "bid",
                    "over_budget"])
    assert r.stop_reason == "budget" and r.calls == 4 == m.calls()
    assert [x.content for x in r.transcript] == ["t", "m0", "m1"]
    assert {"event": "budget", "limit": "max_model_calls"} in r.events


def test_the_graph_shows_the_limit_edges():
    _, chat = two()
    assert "over_budget" not in chat.graph.to_dot()
    chat.with_limits(max_tokens=100, deadline_s=5)
    dot = chat.graph.to_dot()
    # a limit exit is a guarded stop edge: drawn red, into a final state
    assert 'seed -> over_budget [label="[over_budget]" color=firebrick fontcolor=firebrick]' in dot
    assert 'bid -> past_deadline' in dot
    first = [t for t in chat.graph.transitions if t.source == "select"][:2]
    assert [t.label for t in first] == ["over_budget", "past_deadline"]  # checked before the pattern's own


def test_max_tokens_and_cost():
    m, chat = two()
    chat.with_limits(max_tokens=40)  # scripted usage is 15 tokens per call
    r = chat.execute("t")
    assert r.stop_reason == "budget" and r.usage["total_tokens"] == 60 and r.calls == 4
    m, chat = two()
    chat.with_limits(max_cost_usd=0.05, price_per_1k_tokens=(1.0, 2.0))  # 0.02 USD per call
    r = chat.execute("t")
    assert r.stop_reason == "budget" and r.calls == 4
    assert {"event": "budget", "limit": "max_cost_usd"} in r.events


@pytest.mark.parametrize("max_tokens, calls, stop", [(29, 2, "budget"), (30, 2, "budget"), (31, 3, "budget"),
                                                    (45, 3, "budget"), (60, 4, "budget"), (61, 4, "max_loops")])
def test_max_tokens_stops_once_the_run_has_spent_exactly_that_many(max_tokens, calls, stop):
    """15 tokens per call: a run reaching the limit exactly (30 = 30) stops, as does one over it
    (30 > 29); one a token short of it (30 < 31) makes another call."""
    m = ScriptedModel({"a": [f"a{i}" for i in range(4)], "b": [f"b{i}" for i in range(4)]})
    chat = RoundRobinSwarm(agents=[m.agent("a"), m.agent("b")], max_loops=2).with_limits(max_tokens=max_tokens)
    r = chat.execute("t")
    assert (r.stop_reason, r.calls, m.calls(), r.usage["total_tokens"]) == (stop, calls, calls, 15 * calls)


def test_refuse_over_bound_before_any_call():
    m, chat = two(max_loops=20)
    assert chat.max_calls() == 2 * 19
    chat.with_limits(max_model_calls=10, refuse_over_bound=True)
    with pytest.raises(ValueError, match=r"up to 38 model calls, over max_model_calls=10"):
        chat.run("t")
    assert m.calls() == 0


def test_deadline_with_slow_participants():
    async def slow(turn):
        await asyncio.sleep(0.15)
        return "slow reply"

    def quick(turn):
        return "quick reply"

    swarm = RoundRobinSwarm(agents=[slow, quick], max_loops=50)
    swarm.with_limits(deadline_s=2.0)  # time enough for a first reply on a loaded machine; 50 loops take 7.5 s
    r = swarm.execute("t")
    # the deadline, not max_loops, ended it: fewer than the 100 replies 50 loops post
    assert r.stop_reason == "deadline" and 2 <= len(r.transcript) < 1 + 2 * 50


def test_flow_budget_is_a_stop():
    m = ScriptedModel(fn=lambda req: "ok")
    flow = AgentFlow(steps=[Discussion([m.agent("a"), m.agent("b")], rounds=5)]).with_limits(max_model_calls=3)
    r = flow.execute("x")
    assert r.stop_reason == "budget" and r.output["status"] == "stopped" and r.calls == 3
    assert_trace_is_path(flow.graph, r)
    assert "discussion.over_budget" in r.path


@pytest.mark.parametrize("kw, needle", [({"max_tokens": 0}, "max_tokens=0"), ({"deadline_s": -1}, "deadline_s=-1"),
                                        ({"max_cost": 1}, "unknown option 'max_cost'")])
def test_bad_limits(kw, needle):
    _, chat = two()
    with pytest.raises(ValueError, match=needle):
        chat.with_limits(**kw)


def test_limits_reach_parallel_branches_and_shared_subgraphs():
    from fsmchat import StateGraph, parallel
    from fsmchat.limits import Limits, add_limit_edges

    m = ScriptedModel(fn=lambda req: "ok")
    d = lambda: Discussion([m.agent("a"), m.agent("b")], rounds=5)  # noqa: E731
    flow = AgentFlow(steps=[parallel([d(), d()])]).with_limits(max_model_calls=2)
    r = flow.execute("x")
    assert r.calls <= 2 + 2  # each branch stops at its first boundary past the budget
    sub = StateGraph("sub").state("w").final("end")
    sub.edge("w", "end")
    g = StateGraph("g").subgraph("first", sub).subgraph("second", sub).final("z")
    g.edge("first", "second").edge("second", "z")
    add_limit_edges(g, Limits(max_model_calls=3)).validate()
    assert "over_budget" in sub.states
