"""StateGraph validation: every GraphError case, with the state(s) at fault named."""
import networkx as nx
import pytest

from fsmchat import GraphError, StateGraph


def ok(ctx):
    """ok"""
    return True


def more(ctx):
    return ctx["n"] < 3


def loop_graph():
    g = StateGraph("loop")
    g.state("work", lambda ctx: ctx.__setitem__("n", ctx["n"] + 1), "count one")
    g.final("done")
    g.edge("work", "work", when=more)
    g.edge("work", "done", label="enough")
    return g


def test_valid_graph_and_networkx_view():
    g = loop_graph().validate()
    nxg = g.to_networkx()
    assert isinstance(nxg, nx.DiGraph)
    assert sorted(nxg.nodes) == ["done", "work"]
    assert nxg.nodes["done"]["final"] is True
    assert [(u, v, d["label"], d["guard"]) for u, v, d in nxg.edges(data=True)] == [
        ("work", "work", "more", "more"), ("work", "done", "enough", None)]


def test_undeclared_state():
    g = StateGraph("g").state("a").final("z")
    g.edge("a", "b")
    with pytest.raises(GraphError, match=r"'a' -> 'b'.*undeclared state 'b'"):
        g.validate()


def test_unreachable_state():
    g = StateGraph("g").state("a").state("island").final("z")
    g.edge("a", "z")
    g.edge("island", "z")
    with pytest.raises(GraphError, match=r"'island' cannot be reached from the initial state 'a'"):
        g.validate()


def test_no_final_reachable():
    g = StateGraph("g").state("a").state("b").state("c").final("z")
    g.edge("a", "z", when=ok)
    g.edge("a", "b")
    g.edge("b", "c", when=ok)
    g.edge("b", "b", when=more)
    g.edge("c", "b")
    with pytest.raises(GraphError, match=r"no final state can be reached from 'b', 'c'"):
        g.validate()


def test_dead_end_state():
    g = StateGraph("g").state("a").state("dead").final("z")
    g.edge("a", "dead", when=ok)
    g.edge("a", "z")
    with pytest.raises(GraphError, match=r"state 'dead' is not final and has no outgoing transition"):
        g.validate()


def test_two_unguarded_transitions():
    g = StateGraph("g").state("a").state("b").final("z")
    g.edge("a", "b")
    g.edge("a", "z")
    g.edge("b", "z")
    with pytest.raises(GraphError, match=r"state 'a' has 2 unguarded transitions \(to 'b', 'z'\)"):
        g.validate()


def test_shadowed_transition():
    g = StateGraph("g").state("a").final("z").final("y")
    g.edge("a", "z")
    g.edge("a", "y", when=ok)
    with pytest.raises(GraphError, match=r"state 'a': the unguarded transition to 'z' is declared before 'y'"):
        g.validate()


def test_cycle_without_guarded_exit():
    g = StateGraph("g").state("a").state("b").state("c").final("z")
    g.edge("a", "b", when=ok)
    g.edge("a", "z")
    g.edge("b", "c")
    g.edge("c", "b")
    with pytest.raises(GraphError, match=r"cycle 'b' -> 'c' -> 'b' has no guarded exit"):
        g.validate()


def test_no_final_state_and_empty_graph():
    with pytest.raises(GraphError, match="has no states"):
        StateGraph("empty").validate()
    g = StateGraph("g").state("a")
    g.edge("a", "a", when=ok)
    with pytest.raises(GraphError, match="no final state"):
        g.validate()


def test_duplicate_and_dotted_names():
    g = StateGraph("g").state("a")
    with pytest.raises(GraphError, match="declared twice"):
        g.state("a")
    with pytest.raises(GraphError, match="contain no '.'"):
        g.state("x.y")


def test_nested_graph_is_validated_and_flattened():
    inner = StateGraph("inner").state("turn").final("done")
    inner.edge("turn", "turn", when=more)
    inner.edge("turn", "done")
    outer = StateGraph("outer").state("start").subgraph("talk", inner).final("end")
    outer.edge("start", "talk")
    outer.edge("talk", "end")
    flat = outer.flatten()
    assert flat.initial == "start"
    assert list(flat.states) == ["start", "talk.turn", "talk.done", "end"]
    assert [(t.source, t.dest) for t in flat.transitions] == [
        ("start", "talk.turn"), ("talk.turn", "talk.turn"), ("talk.turn", "talk.done"), ("talk.done", "end")]
    bad = StateGraph("bad_inner").state("x")
    bad.edge("x", "x", when=more)
    outer2 = StateGraph("o").subgraph("s", bad).final("e")
    outer2.edge("s", "e")
    with pytest.raises(GraphError, match="graph 'bad_inner' has no final state"):
        outer2.validate()
