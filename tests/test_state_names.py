"""One state-name rule for every graph builder: valid, distinct names for distinct labels."""
import pytest

from fsmchat import AgentFlow
from fsmchat.flow import route
from fsmchat.graph.state_graph import state_names
from fsmchat.network.graphs import turn_state_names


def test_rule_and_suffixes():
    assert state_names(["a b", "a-b", "a.b", "a|b", ""], reserved=["a_b_3"]) == \
        ["a_b", "a_b_2", "a_b_4", "a_b_5", "state"]
    assert state_names(["x", "x"], prefix="to_") == ["to_x", "to_x_2"]
    assert turn_state_names(["alice", "bob.x", "closed"]) == ["awaiting_alice", "awaiting_bob_x", "awaiting_closed"]


def say(text):
    def fn(ctx):
        return text
    fn.__name__ = f"say_{len(text)}"
    return fn


def test_route_keys_that_sanitize_alike_get_distinct_states():
    # these collided before ("GraphError: state 'to_a_b' is declared twice")
    flow = AgentFlow(steps=[say("a-b"), route({"a b": [say("one")], "a-b": [say("two")]})])
    states = {s for s in flow.graph.flatten().states}
    assert {"route.to_a_b.say_3", "route.to_a_b_2.say_3"} <= states, states
    res = flow.execute("go")
    assert res.ok and res.transcript[-1].content == "two", [m.content for m in res.transcript]
