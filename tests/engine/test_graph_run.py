"""GraphRun, the one runner: driven by events (``fire``, as hub channels are), by guards
(``step()``, as patterns and flows are), and always through the transitions Machine."""
import asyncio
import inspect

import pytest

from fsmchat import StateGraph
from fsmchat import engine
from fsmchat.engine import GraphRun, runnable_graph, run_graph
from fsmchat.errors import NoTransitionError
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
    r = GraphRun(g, c)
    assert r.state == "closed" and c["closed_entries"] == 0
    r.enter_sync()  # the initial state's action (fire() runs it too, if it has not run yet)
    assert c["closed_entries"] == 1
    ev = r.fire("open", payload={"by": "me"})
    assert (ev.state, ev.trigger, ev.dest, ev.payload) == ("closed", "open", "opened", {"by": "me"})
    assert r.state == "opened" and c["opens"] == 1 and r.payload == 1
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
    r = GraphRun(g, c)
    assert r.can_fire("open") and not r.can_fire("lock") and not r.can_fire("fly")
    with pytest.raises(NoTransitionError, match=r"no 'lock' transition out of state 'closed' passed its guard "
                                                r"\(key_fits\)"):
        r.fire("lock")
    with pytest.raises(NoTransitionError, match=r"state 'closed' has no 'fly' transition; it accepts 'lock', "
                                                r"'open'"):
        r.fire("fly")
    assert r.state == "closed" and r.trace == [] and r.path == [] and c["closed_entries"] == 1  # entered once
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
    r = GraphRun(g, {})
    assert r.can_fire("go") and r.can_fire("go")
    assert r.state == "a" and r.trace == [] and len(calls) == 2


def test_final_state_ends_the_instance_like_a_run():
    g = door_graph()
    r = GraphRun(g, ctx())
    seen = []
    r.observers.append(seen.append)
    r.fire("lock")
    r.fire("kick")
    assert r.finished and r.state == "broken" and r.stop_reason == "vandalism"
    assert r.path == ["closed", "locked", "broken"]
    assert r.trace[-1].trigger is None and r.trace[-1].dest is None  # terminal event, as run_graph records
    assert [e.trigger for e in seen] == ["lock", "kick", None]
    assert not r.can_fire("open")
    with pytest.raises(NoTransitionError, match="cannot fire 'open': the run is in the final state 'broken'"):
        r.fire("open")
    assert_trace_is_path(g, r)
    assert_path(r, ["closed", "locked", "broken"])


def test_runs_share_the_engines_compiled_graph_and_are_independent():
    g = door_graph()
    a, b = GraphRun(g, ctx()), GraphRun(g, ctx())
    assert a.runnable is b.runnable is runnable_graph(g)  # the very RunnableGraph run_graph uses
    a.fire("open")
    assert (a.state, b.state) == ("opened", "closed")
    b.fire("lock")
    b.fire("kick")
    assert b.finished and not a.finished and a.state == "opened"
    assert runnable_graph(g).machine.models == []  # no run is registered on the shared machine


def test_graphs_of_one_shape_share_one_machine_and_keep_their_own_steps():
    """A pattern built anew per task compiles a new graph each time: graphs with the same state names
    share one Machine (it holds nothing but the names), each keeps its own steps and legal pairs."""
    a, b = runnable_graph(door_graph()), runnable_graph(door_graph())
    assert a is not b and a.machine is b.machine and a.steps is not b.steps
    other = runnable_graph(StateGraph("other").state("closed").final("opened").edge("closed", "opened"))
    assert other.machine is not a.machine
    r, s = GraphRun(door_graph(), ctx()), GraphRun(door_graph(), ctx())
    r.fire("open")
    assert (r.state, s.state) == ("opened", "closed") and a.machine.models == []


def test_async_actions_are_refused_when_fired():
    async def slow(ctx):
        await asyncio.sleep(0)

    g = StateGraph("slow").state("a").state("b", slow).final("c")
    g.edge("a", "b", label="go").edge("b", "c", label="done")
    r = GraphRun(g, {})
    with pytest.raises(TypeError, match=r"the action of state 'b' \(slow\) is async; an event-driven run"):
        r.fire("go")
    assert r.state == "b"


def test_action_error_propagates_after_the_transition():
    def boom(ctx):
        raise RuntimeError("action failed")

    g = StateGraph("err").state("a").state("b", boom).final("c")
    g.edge("a", "b", label="go").edge("b", "c", label="done")
    r = GraphRun(g, {})
    with pytest.raises(RuntimeError, match="action failed"):
        r.fire("go")
    assert r.state == "b" and r.path == ["a"]  # the transition happened; the state's action failed


def test_trace_overlays_on_the_rendered_graph():
    g = door_graph()
    r = GraphRun(g, ctx())
    r.fire("open")
    r.fire("close")
    r.fire("open")
    dot = g.to_dot(trace=r)
    assert "open ×2" in dot
    mmd = g.to_mermaid(trace=r)
    assert "closed --> opened : open x2" in mmd


class RecordingMachine(engine.machine_class()):
    """A transitions Machine that records every state change it makes."""

    moves: list = []

    def set_state(self, state, model=None):
        RecordingMachine.moves.append(state if isinstance(state, str) else state.name)
        return super().set_state(state, model)


def test_every_step_goes_through_the_transitions_machine(monkeypatch):
    """Replacing the Machine's state change (e.g. by ``run.state = dest``) fails this test: the
    recording subclass must see each step of a run, the branch runs' steps included."""
    from fsmchat.flow import AgentFlow, parallel

    RecordingMachine.moves = []
    monkeypatch.setattr(engine, "machine_class", lambda: RecordingMachine)
    g = door_graph()
    r = GraphRun(g, ctx())
    r.fire("open")
    r.fire("close")
    assert RecordingMachine.moves == ["opened", "closed"]

    RecordingMachine.moves = []
    flow = AgentFlow(steps=[parallel([lambda c: "a", lambda c: "b"]), lambda c: "after"], name="f")
    res = flow.execute("go")
    assert res.ok, res.error
    # each branch: lambda -> done (2 moves); the top level: parallel -> lambda -> end (2 moves)
    assert sorted(RecordingMachine.moves) == ["done", "done", "end", "lambda"]
    assert res.paths == {"": ["parallel", "lambda", "end"],
                         "parallel|1": ["parallel|1.lambda", "parallel|1.done"],
                         "parallel|2": ["parallel|2.lambda", "parallel|2.done"]}
    assert [(e.state, e.dest) for e in res.trace] == [
        ("parallel|1.lambda", "parallel|1.done"), ("parallel|1.done", None),
        ("parallel|2.lambda", "parallel|2.done"), ("parallel|2.done", None),
        ("parallel", "lambda"), ("lambda", "end"), ("end", None)]
    assert_trace_is_path(flow.graph, res)


def test_step_picks_by_guards_or_by_event_label():
    g = door_graph()
    r = GraphRun(g, ctx(key="wrong"))
    ev = asyncio.run(r.step())  # no event: guards in declared order; key_fits is false -> open
    assert (ev.state, ev.trigger, ev.dest) == ("closed", "open", "opened")
    r2 = GraphRun(g, ctx(key="right"))
    ev = asyncio.run(r2.step("open"))  # an event picks its labelled edge although 'lock' would pass
    assert (ev.trigger, ev.dest) == ("open", "opened")


def test_an_action_raising_a_limit_takes_the_edge_it_names():
    from fsmchat.errors import DeadlineExceeded

    def slow_call(ctx):
        """a model call that hit the deadline"""
        raise DeadlineExceeded("the run's deadline_s has passed")

    g = StateGraph("lim").state("work", slow_call).final("done").final("past_deadline", reason="deadline")
    g.edge("work", "past_deadline", when=lambda c: False, label="past_deadline")
    g.edge("work", "done")
    res = asyncio.run(run_graph(g, {}))
    assert res.stop_reason == "deadline" and res.error is None
    assert res.path == ["work", "past_deadline"]
    assert res.trace[0].payload == "DeadlineExceeded: the run's deadline_s has passed"
    g2 = StateGraph("nolim").state("work", slow_call).final("done")
    g2.edge("work", "done")
    res2 = asyncio.run(run_graph(g2, {}))  # no such edge drawn: an error, as any other exception
    assert res2.stop_reason == "error" and isinstance(res2.error, DeadlineExceeded)


def test_the_engine_moves_only_along_the_graphs_legal_pairs():
    """The engine changes state with the Machine's public ``set_state`` after checking the pair
    against the graph's transitions: a move no transition joins is a typed error naming both
    states, and the run's state is left as it was."""
    from transitions import Machine

    from fsmchat.engine import IllegalTransitionError

    compiled = runnable_graph(door_graph())
    assert type(compiled.machine) is Machine
    assert compiled.legal == {("closed", "locked"), ("closed", "opened"), ("opened", "closed"),
                              ("locked", "closed"), ("locked", "broken")}
    r = GraphRun(door_graph(), ctx())
    with pytest.raises(IllegalTransitionError, match="from state 'closed' to 'broken'"):
        compiled.move(r, "broken")
    assert r.state == "closed" and r.path == []
    compiled.move(r, "opened")
    assert r.state == "opened"


def test_is_awaitable_answers_as_inspect_does_for_every_kind_of_value():
    import types

    from fsmchat.graph.state_graph import is_awaitable

    class Later:
        def __await__(self):
            yield
            return 1

    @types.coroutine
    def old_style():
        yield

    def plain_generator():
        yield

    async def coro():
        return 1

    c, g_old, g_plain = coro(), old_style(), plain_generator()
    loop = asyncio.new_event_loop()
    fut = loop.create_future()
    values = [None, "text", 3, {"a": 1}, Later(), c, fut, g_old, g_plain, plain_generator(), old_style()]
    assert [is_awaitable(v) for v in values] == [False, False, False, False, True, True, True, True, False,
                                                 False, True]
    assert [is_awaitable(v) for v in values] == [inspect.isawaitable(v) for v in values]
    c.close()
    loop.close()
