"""Reactor: event-driven stepping of a StateGraph on the engine's compiled machine."""
import asyncio

import pytest

from fsmchat import StateGraph
from fsmchat.engine import compile_graph
from fsmchat.errors import NoTransitionError
from fsmchat.reactive import Reactor
from fsmchat.testing import assert_path, assert_trace_is_path


def door_graph():
    """closed -open-> opened -close-> closed; lock only when the key fits; break -> broken."""

    def key_fits(ctx):
        return ctx["key"] == "right"

    def count_open(ctx):
        """count the openings"""
        ctx["opens"] += 1
        return ctx["opens"]

    def on_enter_closed(ctx):
        """closed (count entries)"""
        ctx["closed_entries"] += 1

    g = StateGraph("door", description="a door driven by events")
    g.state("closed", on_enter_closed)
    g.state("opened", count_open)
    g.state("locked")
    g.final("broken", reason="vandalism")
    g.edge("closed", "locked", when=key_fits, label="lock")  # guarded first: StateGraph's validation rule
    g.edge("closed", "opened", label="open")
    g.edge("opened", "closed", label="close")
    g.edge("locked", "closed", when=key_fits, label="unlock")
    g.edge("locked", "broken", label="kick")
    return g


def ctx(key="right"):
    return {"key": key, "opens": 0, "closed_entries": 0}


def test_fire_follows_labels_and_runs_destination_actions():
    g = door_graph()
    c = ctx()
    r = Reactor(g, c)
    assert r.state == "closed" and c["closed_entries"] == 1  # the initial action ran on construction
    ev = r.fire("open", payload={"by": "me"})
    assert (ev.state, ev.trigger, ev.dest, ev.payload) == ("closed", "open", "opened", {"by": "me"})
    assert r.state == "opened" and c["opens"] == 1 and r.last_result == 1
    r.fire("close")
    r.fire("open")
    r.fire("close")
    assert c == {"key": "right", "opens": 2, "closed_entries": 3}
    assert r.path == ["closed", "opened", "closed", "opened"]
    assert r.visited == ["closed", "opened", "closed", "opened", "closed"]
    assert not r.finished and r.stop_reason is None
    assert_trace_is_path(g, r)


def test_guards_decide_and_a_refused_event_changes_nothing():
    g = door_graph()
    c = ctx(key="wrong")
    r = Reactor(g, c)
    assert r.can_fire("open") and not r.can_fire("lock") and not r.can_fire("fly")
    with pytest.raises(NoTransitionError, match=r"no 'lock' transition out of state 'closed' passed its guard "
                                                r"\(key_fits\)"):
        r.fire("lock")
    with pytest.raises(NoTransitionError, match=r"state 'closed' has no 'fly' transition; it accepts 'lock', "
                                                r"'open'"):
        r.fire("fly")
    assert r.state == "closed" and r.trace == [] and r.path == [] and c["closed_entries"] == 1
    c["key"] = "right"
    assert r.can_fire("lock")
    r.fire("lock")
    assert r.state == "locked"


def test_can_fire_has_no_side_effects():
    calls = []

    def watched(ctx):
        calls.append(1)
        return True

    g = StateGraph("w").state("a").final("b")
    g.edge("a", "b", when=watched, label="go")
    r = Reactor(g, {})
    assert r.can_fire("go") and r.can_fire("go")
    assert r.state == "a" and r.trace == [] and len(calls) == 2


def test_final_state_ends_the_instance_like_a_run():
    g = door_graph()
    r = Reactor(g, ctx())
    seen = []
    r.observers.append(seen.append)
    r.fire("lock")
    r.fire("kick")
    assert r.finished and r.state == "broken" and r.stop_reason == "vandalism"
    assert r.path == ["closed", "locked", "broken"]
    assert r.trace[-1].trigger is None and r.trace[-1].dest is None  # terminal event, as run_graph records
    assert [e.trigger for e in seen] == ["lock", "kick", None]
    assert not r.can_fire("open")
    with pytest.raises(NoTransitionError, match="the instance is in the final state 'broken'"):
        r.fire("open")
    assert_trace_is_path(g, r)
    assert_path(r, ["closed", "locked", "broken"])


def test_runs_on_the_engines_compiled_machine_and_detaches():
    g = door_graph()
    machine = compile_graph(g).machine
    before = len(machine.models)
    a, b = Reactor(g, ctx()), Reactor(g, ctx())
    assert a.compiled is compile_graph(g)  # the very CompiledGraph run_graph uses
    assert len(machine.models) == before + 2
    a.fire("open")
    assert (a.state, b.state) == ("opened", "closed")  # instances are independent
    b.fire("lock")
    b.fire("kick")  # reaches a final state: detached
    assert len(machine.models) == before + 1
    a.detach()
    a.detach()  # idempotent
    assert len(machine.models) == before
    assert a.state == "opened"  # still readable


def test_async_actions_are_refused():
    async def slow(ctx):
        await asyncio.sleep(0)

    g = StateGraph("slow").state("a").state("b", slow).final("c")
    g.edge("a", "b", label="go").edge("b", "c", label="done")
    with pytest.raises(TypeError, match=r"state 'b' has an async action \(slow\).*runs actions synchronously"):
        Reactor(g, {})


def test_action_error_propagates_after_the_transition():
    def boom(ctx):
        raise RuntimeError("action failed")

    g = StateGraph("err").state("a").state("b", boom).final("c")
    g.edge("a", "b", label="go").edge("b", "c", label="done")
    r = Reactor(g, {})
    with pytest.raises(RuntimeError, match="action failed"):
        r.fire("go")
    assert r.state == "b" and r.path == ["a"]  # the transition happened; the state's action failed


def test_trace_overlays_on_the_rendered_graph():
    g = door_graph()
    r = Reactor(g, ctx())
    r.fire("open")
    r.fire("close")
    r.fire("open")
    dot = g.to_dot(trace=r)
    assert "open ×2" in dot
    mmd = g.to_mermaid(trace=r)
    assert "closed --> opened : open x2" in mmd
