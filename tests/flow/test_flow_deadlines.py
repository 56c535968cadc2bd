"""A deadline ends a flow through its drawn ``past_deadline`` edge, whatever was running: a slow
async callable is cancelled, a slow sync callable is abandoned in its worker thread, a Discussion
turn and a parallel branch stop too; the transcript so far is kept."""
import asyncio
import threading
import time

from fsmchat.flow import AgentFlow, Discussion, parallel


def quick(ctx):
    return "quick"


async def slow_async(ctx):
    await asyncio.sleep(30)
    return "never"


RELEASE = threading.Event()


def slow_sync(ctx):
    RELEASE.wait(30)  # a blocking call (released at the end of the test)
    return "never"


def run_with_deadline(steps, deadline=0.3):
    flow = AgentFlow(steps=steps, name="slow").with_limits(deadline_s=deadline)
    t0 = time.monotonic()
    res = flow.execute("go")
    return res, time.monotonic() - t0


def test_async_callable_step_is_cancelled_at_the_deadline():
    res, _took = run_with_deadline([quick, slow_async, quick])
    assert res.stop_reason == "deadline" and res.error is None
    assert res.path[-2:] == ["slow_async", "past_deadline"]
    assert [m.content for m in res.transcript] == ["quick"]
    assert res.output["status"] == "stopped"  # slow_async (30 s) was cancelled: its output never posted


def test_sync_callable_step_is_abandoned_at_the_deadline_with_an_event():
    try:
        res, _took = run_with_deadline([quick, slow_sync])
    finally:
        RELEASE.set()
    assert res.stop_reason == "deadline" and res.path[-2:] == ["slow_sync", "past_deadline"]
    ev = [e for e in res.events if e.get("event") == "deadline"]
    assert ev and "abandoned in its worker thread" in ev[0]["detail"] and ev[0]["step"] == "slow_sync"


def test_discussion_turn_and_parallel_branch_stop_at_the_deadline():
    res, _ = run_with_deadline([Discussion([quick, slow_async], rounds=2, name="talk")])
    assert res.stop_reason == "deadline"
    assert res.path == ["talk.begin", "talk.turn", "talk.turn", "talk.past_deadline", "past_deadline"]
    assert [m.content for m in res.transcript] == ["quick"]
    res2, _ = run_with_deadline([parallel([quick, slow_async]), quick])
    assert res2.stop_reason == "deadline" and res2.path == ["parallel", "past_deadline"]
    assert res2.paths["parallel|2"][-1] == "parallel|2.past_deadline"


def test_loop_variables_are_unset_after_the_loop():
    """docs/semantics.md: item and loop_index are scoped to their loop (a later step sees None)."""
    from fsmchat.flow import loop

    seen = []

    def body(ctx):
        return f"{ctx.variables['item']}#{ctx.variables['loop_index']}"

    def after(ctx):
        seen.append((ctx.variables.get("item"), ctx.variables.get("loop_index")))
        return "after"

    flow = AgentFlow(steps=[loop(body, over="items"), after], variables={"items": ["a", "b"]})
    res = flow.execute("go")
    assert res.ok and seen == [(None, None)]
    assert [m.content for m in res.transcript] == ["a#0", "b#1", "after"]
    assert "item" not in res.output["variables"]
    assert res.path == ["loop.begin", "loop.next", "loop.body.body", "loop.body.done", "loop.next",
                        "loop.body.body", "loop.body.done", "loop.next", "loop.end", "loop.done", "after", "end"]
