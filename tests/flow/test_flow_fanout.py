"""parallel(max_concurrency=N): at most N branches at once, started in declaration order; 1 is a
sequential fan-out with a fixed call order (each branch still sees the variables of the fork)."""
import pytest

from fsmchat import from_config
from fsmchat.flow import AgentFlow, Task, parallel
from fsmchat.testing import Delay, ScriptedModel, assert_trace_is_path


def fan_out(m, limit):
    # the first branch is the slowest: concurrently it finishes last, one at a time it finishes first
    names = ["a", "b", "c"]
    return AgentFlow(steps=[parallel([Task(agent=m.agent(n), action=f"{n}: {{{{input}}}}", save_as="seen")
                                      for n in names], name="sweep", max_concurrency=limit),
                            Task(agent=m.agent("z"), action="{{parallel_outputs}}")])


def finish_order(limit):
    done = []

    def reply(name, delay):
        def answer(req):
            done.append(name)
            return f"{name}-out"
        return Delay(delay, answer)

    with ScriptedModel({"a": [reply("a", 0.2)], "b": [reply("b", 0.05)], "c": [reply("c", 0.0)],
                        "z": ["joined"]}) as m:
        flow = fan_out(m, limit)
        r = flow.execute("task")
        assert_trace_is_path(flow.graph, r)
        assert m.requests_of("z")[0].prompt == "['a-out', 'b-out', 'c-out']"  # joined in declaration order
        assert [x.role for x in r.transcript] == ["a", "b", "c", "z"] and r.calls == 4
        return done, [q.agent for q in m.requests]


def test_one_at_a_time_keeps_the_declaration_order():
    done, started = finish_order(1)
    assert started == ["a", "b", "c", "z"]
    assert done == ["a", "b", "c"]


def test_unbounded_branches_overlap():
    done, started = finish_order(None)
    assert started[:3] == ["a", "b", "c"]
    assert done == ["c", "b", "a"]  # all three were in flight together


def test_the_limit_is_drawn_and_validated_and_travels():
    with ScriptedModel({}) as m:
        assert "3 branches one after another" in fan_out(m, 1).graph.to_dot()
        assert "3 branches at most 2 at once" in fan_out(m, 2).graph.to_dot()
        assert "3 branches concurrently" in fan_out(m, None).graph.to_dot()
        assert from_config(fan_out(m, 1).to_config()).steps[0].max_concurrency == 1
        for bad in (0, True, 1.5):
            with pytest.raises((TypeError, ValueError), match="max_concurrency"):
                parallel([m.agent("a")], max_concurrency=bad)
