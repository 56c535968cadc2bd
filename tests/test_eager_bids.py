"""A bid round runs the bids inline until one waits (``fsmchat.deadline.gather_eager``): an
instant bid (a sync callable participant, a scripted model) costs no task and no trip through the
event loop (issue 21, item 2); the bid that waits goes on as a task, the ones after it start as
tasks, all concurrently;
results, exceptions, contexts and cancellation behave as with ``asyncio.gather``."""
from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from fsmchat import Bid, GroupChat, RoundRobinSwarm
from fsmchat.deadline import gather_eager

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="caller")


def counting_tasks(loop: asyncio.AbstractEventLoop) -> list[Any]:
    made: list[Any] = []

    def factory(lp: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        made.append(coro)
        return asyncio.Task(coro, loop=lp, **kw)
    loop.set_task_factory(factory)
    return made


def test_instant_coroutines_make_no_task_and_waiting_ones_make_one_each():
    log: list[str] = []

    async def instant(name: str) -> str:
        log.append(f"{name} start")
        return name

    async def waits(name: str) -> str:
        log.append(f"{name} start")
        await asyncio.sleep(0)
        log.append(f"{name} end")
        return name

    async def boom() -> str:
        log.append("boom start")
        raise ValueError("bad bid")

    async def go() -> tuple[list[Any], int]:
        made = counting_tasks(asyncio.get_running_loop())
        got = await gather_eager([instant("a"), waits("b"), boom(), waits("c"), instant("d")])
        return got, len(made)

    got, tasks = asyncio.run(go())
    assert got[:2] == ["a", "b"] and got[3:] == ["c", "d"]
    assert isinstance(got[2], ValueError) and str(got[2]) == "bad bid"
    assert tasks == 4  # a ran inline; b waited (a task from there), so boom, c and d started as tasks
    # every first step in order, before any waiting one resumes (as gather's tasks would start)
    assert log == ["a start", "b start", "boom start", "c start", "d start", "b end", "c end"]


def test_each_coroutine_runs_in_its_own_copy_of_the_context():
    async def sets(value: str, wait: bool) -> str:
        VAR.set(value)
        if wait:
            await asyncio.sleep(0)
        return VAR.get()

    async def go() -> tuple[list[Any], str]:
        VAR.set("caller")
        got = await gather_eager([sets("x", False), sets("y", True)])
        return got, VAR.get()

    assert asyncio.run(go()) == (["x", "y"], "caller")


def test_cancelling_the_round_cancels_the_waiting_bids():
    seen: list[str] = []
    started: list[str] = []

    async def slow() -> str:
        started.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    async def go() -> None:
        outer = asyncio.ensure_future(gather_eager([slow(), slow()]))
        while len(started) < 2:  # both bids are waiting
            await asyncio.sleep(0)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer

    asyncio.run(go())
    assert seen == ["cancelled", "cancelled"]


def test_keyboard_interrupt_is_not_returned_as_a_result():
    async def interrupted() -> str:
        raise KeyboardInterrupt

    async def go() -> list[Any]:
        return await gather_eager([interrupted()])

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(go())


def test_a_group_chat_of_sync_callables_bids_without_tasks_and_waiting_bidders_still_overlap():
    def instant(name: str) -> Any:
        def fn(turn: Any) -> Bid:
            return Bid(0.9 if name == "a" else 0.2, f"{name} speaks")
        fn.__name__ = name
        return fn

    async def go(agents: list[Any]) -> tuple[Any, int]:
        made = counting_tasks(asyncio.get_running_loop())
        res = await GroupChat(agents=agents, max_loops=4).aexecute("go")
        return res, len(made)

    res, tasks = asyncio.run(go([instant(n) for n in "abc"]))
    assert res.stop_reason == "max_loops" and [m.role for m in res.transcript] == ["User", "a", "a", "a"]
    assert tasks == 0

    started: list[str] = []

    def waiting(name: str) -> Any:  # each bid waits until all three have started: only concurrent bids finish
        async def fn(turn: Any) -> Bid:
            started.append(name)
            while len(started) % 3:
                await asyncio.sleep(0)
            return Bid(0.9 if name == "b" else 0.2, f"{name} speaks")
        fn.__name__ = name
        return fn

    async def bounded() -> tuple[Any, int]:
        return await asyncio.wait_for(go([waiting(n) for n in "abc"]), 10)

    res, tasks = asyncio.run(bounded())
    assert res.stop_reason == "max_loops" and [m.role for m in res.transcript] == ["User", "b", "b", "b"]
    assert tasks == 9  # 3 turns x 3: a waited, so b and c started as tasks
    assert started == list("abc") * 3


def named(name: str, answer: Any) -> Any:
    def fn(turn: Any) -> Any:
        return answer
    fn.__name__ = name
    return fn


@pytest.mark.parametrize("make, posts", [
    (lambda: GroupChat(agents=[named("a", Bid(0.9, "a")), named("b", Bid(0.5, "b"))], max_loops=20), ["post"]),
    (lambda: RoundRobinSwarm(agents=[named("x", "x says"), named("y", "y says")], max_loops=10), ["x", "y"]),
])
def test_a_cancel_asked_for_during_instant_turns_is_taken_at_the_next_step(make, posts):
    """Instant participants never wait, so nothing suspends; a cancel() asked for during a step
    still ends the run at the next step boundary (stop reason "cancelled", the transcript so far)."""
    async def go() -> Any:
        me, seen = asyncio.current_task(), []

        def obs(ev: Any) -> None:
            if ev.dest is not None and ev.state in posts:
                seen.append(ev.state)
                if len(seen) == 2:
                    me.cancel()
        try:
            await make().aexecute("go", observers=[obs])
        except asyncio.CancelledError as exc:
            return exc.fsmchat_result
        raise AssertionError("the run was not cancelled")

    res = asyncio.run(go())
    assert res.stop_reason == "cancelled"
    assert len(res.transcript) == 3  # the task and the two posts before the cancel
