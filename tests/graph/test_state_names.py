"""One state-name rule for every graph builder: valid, distinct names for distinct labels."""
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsmchat import AgentFlow, StateGraph
from fsmchat.flow import loop, route
from fsmchat.graph.state_graph import distinct_names, state_names
from fsmchat.network.graphs import turn_state_names
from fsmchat.testing import assert_trace_is_path


def test_rule_and_suffixes():
    assert state_names(["a b", "a-b", "a.b", "a|b", "", "<lambda>", "x  y"], reserved=["a_b_3"]) == \
        ["a_b", "a_b_2", "a_b_4", "a_b_5", "state", "lambda", "x_y"]
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


@pytest.mark.parametrize("said, reply, label", [("a b", "one", "says_a_b"), ("a-b", "two", "says_a_b_2")])
def test_both_colliding_route_keys_are_reachable_by_their_keys(said, reply, label):
    flow = AgentFlow(steps=[say(said), route({"a b": [say("one")], "a-b": [say("two")]})])
    res = flow.execute("go")
    branch = "to_a_b" if reply == "one" else "to_a_b_2"
    assert res.path == ["say_3", "route.decide", f"route.{branch}.say_3", f"route.{branch}.done", "route.done", "end"]
    assert [e.trigger for e in res.trace if e.state == "route.decide"] == [label]  # distinct keys, distinct labels
    assert [m.content for m in res.transcript] == [said, reply]
    assert_trace_is_path(flow.graph, res)


LABELS = st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=6), max_size=8)


@settings(max_examples=200, deadline=None)
@given(labels=LABELS, reserved=st.lists(st.sampled_from(["a", "a_2", "state", "to_x", "_", "done"]), max_size=4),
       prefix=st.sampled_from(["", "to_", "awaiting_"]))
def test_distinct_labels_always_get_distinct_valid_names(labels, reserved, prefix):
    labels = list(dict.fromkeys(labels))  # distinct inputs
    names = state_names(labels, reserved=reserved, prefix=prefix)
    assert len(names) == len(labels) and len(set(names)) == len(names)  # never a collision
    assert not set(names) & set(reserved)
    for label, name in zip(labels, names):
        assert name and "." not in name and "|" not in name and re.fullmatch(r"\w+", name), (label, name)
        assert name.startswith(prefix)
    assert state_names(labels, reserved=reserved, prefix=prefix) == names  # deterministic
    assert state_names(labels[:-1], reserved=reserved, prefix=prefix) == names[:-1]  # in declaration order
    g = StateGraph("g")
    for name in names:
        g.state(name)  # every name is one the graph accepts
    assert list(g.states) == names


@settings(max_examples=100, deadline=None)
@given(names=st.lists(st.sampled_from(["a", "a_2", "a_2_2", "b", "end_"]), max_size=8))
def test_distinct_names_suffixes_only_what_repeats(names):
    out = distinct_names(names)
    assert len(set(out)) == len(out)
    for n, o in zip(names, out):
        assert o == n or re.fullmatch(re.escape(n) + r"_[2-9]\d*", o), (n, o)
    assert distinct_names(["a", "b", "end_"]) == ["a", "b", "end_"]  # nothing repeats: nothing changes
    assert distinct_names(["a", "a", "a_2", "a"]) == ["a", "a_2", "a_2_2", "a_3"]


def b(ctx):
    return "y"


def a_begin(ctx):
    return "x"


def test_drawings_keep_states_whose_names_sanitize_alike_apart():
    # the top-level step 'a_begin' and the loop a's state 'a.begin' were one Mermaid node before
    flow = AgentFlow(steps=[a_begin, loop([b], over=["1"], name="a")])
    mmd = flow.graph.to_mermaid()
    assert '    state "a_begin (call a_begin)" as a_begin\n' in mmd
    assert '        state "begin (read the list to iterate)" as a_begin_2\n' in mmd
    assert "    a_begin --> a_begin_2\n" in mmd and "a_begin --> a_begin\n" not in mmd
    # two clusters whose names sanitize alike (loop x's body 'x.body' and a loop named 'x_body') stay two
    flow = AgentFlow(steps=[loop([b], over=["1"], name="x"), loop([b], over=["1"], name="x_body")])
    names = re.findall(r"subgraph (cluster_\w+) \{", flow.graph.to_dot())
    assert names == ["cluster_x", "cluster_x_body", "cluster_x_body_2", "cluster_x_body_body"]
