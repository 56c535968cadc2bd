"""The engine on hand-built graphs: loops, guard choice, nesting, max_steps, errors, cancellation."""
import asyncio

import pytest

from fsmchat import StateGraph, run, run_graph, run_sync
from fsmchat.testing import assert_path, assert_stop, assert_trace_is_path


def more(ctx):
    return ctx["n"] < ctx["limit"]


def step(ctx):
    ctx["n"] += 1
    return ctx["n"]


def loop_graph():
    g = StateGraph("loop")
    g.state("work", step, "count one")
    g.final("done")
    g.edge("work", "work", when=more)
    g.edge("work", "done", label="enough")
    return g


def test_loop_with_guarded_exit():
    g = loop_graph()
    r = run(g, {"n": 0, "limit": 3})
    assert_path(r, ["work", "work", "work", "done"])
    assert_path(r, ["work+", "done"])
    assert_stop(r, "enough")
    assert [e.payload for e in r.trace] == [1, 2, 3, None]
    assert [e.trigger for e in r.trace] == ["more", "more", "enough", None]
    assert_trace_is_path(g, r)


def test_guard_choice_in_declared_order():
    def high(ctx):
        return ctx["v"] > 5

    def positive(ctx):
        return ctx["v"] > 0

    g = StateGraph("choice").state("pick").final("big", reason="big").final("pos").final("other")
    g.edge("pick", "big", when=high).edge("pick", "pos", when=positive).edge("pick", "other")
    for v, end, reason in [(9, "big", "big"), (3, "pos", "positive"), (-1, "other", "next")]:
        r = run(g, {"v": v})
        assert r.path == ["pick", end]
        assert r.stop_reason == reason
        assert_trace_is_path(g, r)


async def async_step(ctx):
    await asyncio.sleep(0)
    ctx["n"] += 1


def test_nested_subgraph_runs_flat():
    inner = StateGraph("inner").state("turn", async_step).final("done")
    inner.edge("turn", "turn", when=more).edge("turn", "done")
    mid = StateGraph("mid").subgraph("talk", inner).final("out")
    mid.edge("talk", "out")
    outer = StateGraph("outer").state("start").subgraph("body", mid).final("end")
    outer.edge("start", "body").edge("body", "end", label="finished")
    r = run(outer, {"n": 0, "limit": 2})
    assert r.path == ["start", "body.talk.turn", "body.talk.turn", "body.talk.done", "body.out", "end"]
    assert r.stop_reason == "finished"
    assert_trace_is_path(outer, r)


def test_max_steps_ends_a_runaway():
    g = loop_graph()
    r = asyncio.run(run_graph(g, {"n": 0, "limit": 10**9}, max_steps=50))
    assert_stop(r, "max_steps")
    assert len(r.path) == 51 and r.trace[-1].trigger == "max_steps"


def test_action_error_keeps_context():
    def boom(ctx):
        ctx["log"].append("before")
        raise ValueError("broken action")

    g = StateGraph("err").state("a", step).state("b", boom).final("z")
    g.edge("a", "b").edge("b", "z")
    ctx = {"n": 0, "log": []}
    r = run(g, ctx)
    assert_stop(r, "error")
    assert isinstance(r.error, ValueError) and r.context is ctx
    assert ctx == {"n": 1, "log": ["before"]}
    assert r.path == ["a", "b"] and r.trace[-1].trigger == "error"
    assert "broken action" in r.trace[-1].payload


def test_no_matching_guard_is_an_error():
    def never(ctx):
        return False

    g = StateGraph("g").state("a").final("z")
    g.edge("a", "z", when=never)
    r = run(g, {})
    assert_stop(r, "error")
    assert "no transition out of state 'a' matched" in str(r.error)


def test_cancellation_keeps_context():
    async def slow(ctx):
        ctx["n"] += 1
        await asyncio.sleep(10)

    g = StateGraph("slow").state("a", step).state("b", slow).final("z")
    g.edge("a", "b").edge("b", "z")
    ctx = {"n": 0}

    async def go():
        t = asyncio.ensure_future(run_graph(g, ctx))
        while ctx["n"] < 2:  # until b is running (and sleeping)
            await asyncio.sleep(0.001)
        t.cancel()
        with pytest.raises(asyncio.CancelledError) as ei:
            await t
        return ei.value.fsmchat_result

    r = asyncio.run(go())
    assert r.stop_reason == "cancelled" and r.context is ctx and ctx["n"] == 2
    assert r.path == ["a", "b"]


def test_run_sync_inside_a_running_loop():
    g = loop_graph()

    async def notebook_cell():
        return run(g, {"n": 0, "limit": 2})  # sync call from inside a loop, as in Jupyter

    r = asyncio.run(notebook_cell())
    assert r.path == ["work", "work", "done"]
    assert run_sync(lambda: asyncio.sleep(0, "x")) == "x"


def test_many_turns_do_not_overflow_the_stack():
    g = loop_graph()
    r = run(g, {"n": 0, "limit": 5000})
    assert len(r.path) == 5001 and r.stop_reason == "enough"


def test_concurrent_runs_share_one_compiled_graph():
    g = loop_graph()

    async def go():
        return await asyncio.gather(*(run_graph(g, {"n": 0, "limit": k}) for k in range(1, 30)))

    results = asyncio.run(go())
    assert [len(r.path) for r in results] == [k + 1 for k in range(1, 30)]
    assert g.runnable.machine.models == []


def test_import_does_not_import_litellm():
    import subprocess
    import sys
    code = "import sys, fsmchat; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_ctrl_c_inside_a_running_loop_cancels_the_run():
    """Jupyter: the sync API inside a running loop; a KeyboardInterrupt while waiting cancels the
    worker's run at once (it does not finish the remaining steps). The Ctrl-C comes during step 3,
    which only a cancellation ends early; nothing is timed."""
    import os
    import signal
    import threading

    cancelled = threading.Event()

    async def slow(ctx):
        ctx["n"] += 1
        if ctx["n"] == 3:
            threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT)).start()  # a real Ctrl-C
            try:
                await asyncio.sleep(300)  # ends early only when the run is cancelled
            except asyncio.CancelledError:
                cancelled.set()
                raise

    g = StateGraph("slow").state("s", slow).final("z")
    g.edge("s", "s", when=lambda ctx: ctx["n"] < 50).edge("s", "z")
    ctx = {"n": 0}
    main = threading.main_thread()

    async def cell():
        with pytest.raises(KeyboardInterrupt):
            run(g, ctx)

    assert threading.current_thread() is main
    loop = asyncio.new_event_loop()  # like a notebook kernel: Python's own SIGINT handler stays
    try:
        loop.run_until_complete(cell())
    finally:
        loop.close()
    assert cancelled.wait(300), "the Ctrl-C did not cancel the worker's run"  # a hang guard, not a verdict
    assert ctx["n"] == 3  # no step ran after the one interrupted


def test_ctrl_c_before_the_wait_starts_still_cancels_the_run(monkeypatch):
    """A Ctrl-C may land in the caller's thread after the run was handed to the worker but before
    the caller waits for it (a loaded machine lets the worker reach its step first): the run is
    cancelled all the same, and the KeyboardInterrupt goes on. The interrupt is raised right
    after the submit, where a signal handler would raise it; nothing is timed."""
    import concurrent.futures
    import threading

    sleeping, cancelled = threading.Event(), threading.Event()
    submit = concurrent.futures.ThreadPoolExecutor.submit

    def submit_then_ctrl_c(self, fn, *args, **kwargs):
        submit(self, fn, *args, **kwargs)  # the run is handed over, then the Ctrl-C lands
        assert sleeping.wait(300), "the run never reached its step"  # a hang guard, not a verdict
        raise KeyboardInterrupt

    async def slow(ctx):
        ctx["n"] += 1
        sleeping.set()
        try:
            await asyncio.sleep(300)  # ends early only when the run is cancelled
        except asyncio.CancelledError:
            cancelled.set()
            raise

    g = StateGraph("slow").state("s", slow).final("z").edge("s", "z")
    ctx = {"n": 0}

    async def cell():
        with pytest.raises(KeyboardInterrupt):
            run(g, ctx)

    monkeypatch.setattr(concurrent.futures.ThreadPoolExecutor, "submit", submit_then_ctrl_c)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cell())
    finally:
        loop.close()
    assert cancelled.is_set()  # the run was cancelled before run() gave the KeyboardInterrupt back
    assert ctx["n"] == 1
