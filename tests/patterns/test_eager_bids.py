"""A GroupChat's bid round: every agent bids at once (``asyncio.gather``), so bids that wait
overlap; each bid runs in its own copy of the context; the first error in roster order ends the
chat; a cancellation cancels the waiting bids; a ``KeyboardInterrupt`` is not kept as a result; and
a cancel asked for during instant turns is taken at the next step."""
from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from fsmchat import Bid, GroupChat, RoundRobinSwarm

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="caller")


def named(name: str, answer: Any) -> Any:
    def fn(turn: Any) -> Any:
        return answer
    fn.__name__ = name
    return fn


def test_waiting_bidders_overlap_and_instant_ones_bid_in_the_same_round():
    started: list[str] = []

    def waiting(name: str) -> Any:  # each bid waits until all three have started: only concurrent bids finish
        async def fn(turn: Any) -> Bid:
            started.append(name)
            while len(started) % 3:
                await asyncio.sleep(0)
            return Bid(0.9 if name == "b" else 0.2, f"{name} speaks")
        fn.__name__ = name
        return fn

    async def go() -> Any:
        return await asyncio.wait_for(GroupChat(agents=[waiting(n) for n in "abc"], max_loops=4).aexecute("go"), 10)

    res = asyncio.run(go())
    assert res.stop_reason == "max_loops" and [m.role for m in res.transcript] == ["User", "b", "b", "b"]
    assert started == list("abc") * 3

    res = GroupChat(agents=[named("a", Bid(0.2, "a")), named("b", Bid(0.9, "b")), named("c", Bid(0.5, "c"))],
                    max_loops=3).execute("go")
    assert res.stop_reason == "max_loops" and [m.role for m in res.transcript] == ["User", "b", "b"]


def test_each_bid_runs_in_its_own_copy_of_the_context():
    seen: dict[str, str] = {}

    def bidder(name: str, wait: bool) -> Any:
        async def fn(turn: Any) -> Any:
            if turn.kind != "bid":
                return f"{name} speaks"
            VAR.set(name)
            if wait:
                await asyncio.sleep(0)
            seen[name] = VAR.get()
            return Bid(0.9 if name == "x" else 0.1, f"{name} speaks")
        fn.__name__ = name
        return fn

    async def go() -> tuple[Any, str]:
        VAR.set("caller")
        res = await GroupChat(agents=[bidder("x", False), bidder("y", True)], max_loops=3).aexecute("go")
        return res, VAR.get()

    res, after = asyncio.run(go())
    assert res.ok, res.error
    assert seen == {"x": "x", "y": "y"} and after == "caller"


def test_the_first_failing_bid_in_roster_order_ends_the_chat():
    def boom(name: str, exc: BaseException) -> Any:
        async def fn(turn: Any) -> Bid:
            await asyncio.sleep(0)
            raise exc
        fn.__name__ = name
        return fn

    chat = GroupChat(agents=[named("a", Bid(0.9, "a")), boom("b", ValueError("bad bid")),
                             boom("c", KeyError("later"))], max_loops=3)
    res = chat.execute("go")
    assert res.stop_reason == "error"
    assert type(res.error) is ValueError and str(res.error) == "bad bid"
    assert [m.role for m in res.transcript] == ["User"]


def test_cancelling_the_chat_cancels_the_waiting_bids():
    seen: list[str] = []

    async def go() -> Any:
        both = asyncio.Event()

        def slow(name: str) -> Any:
            async def fn(turn: Any) -> Bid:
                seen.append(f"{name} started")
                if len(seen) == 2:
                    both.set()
                try:
                    await asyncio.Event().wait()  # never set: only a cancellation ends it
                except asyncio.CancelledError:
                    seen.append(f"{name} cancelled")
                    raise
                return Bid(0.5, "never")
            fn.__name__ = name
            return fn

        task = asyncio.ensure_future(GroupChat(agents=[slow("a"), slow("b")], max_loops=3).aexecute("go"))
        await both.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as ei:
            await task
        return ei.value.fsmchat_result

    res = asyncio.run(go())
    assert res.stop_reason == "cancelled"
    assert seen == ["a started", "b started", "a cancelled", "b cancelled"]


def test_a_keyboard_interrupt_in_a_bid_is_not_kept_as_a_result():
    async def interrupted(turn: Any) -> Bid:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        GroupChat(agents=[named("a", Bid(0.9, "a")), interrupted], max_loops=2).execute("go")


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
