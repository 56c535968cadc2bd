"""Watching runs from Python: ``stream()`` iterates in plain scripts and in async code,
``astream()`` is its async spelling, and ``run_batch`` draws a progress bar when asked (by
default only on a terminal)."""
from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from fsmchat.errors import result_of
from fsmchat.models import Message, RunResult, TraceEvent
from fsmchat.patterns.round_robin import RoundRobinSwarm
from fsmchat.testing import Delay, FunctionModel, ScriptedModel

TASK = "plan the launch"


def swarm(model) -> RoundRobinSwarm:
    return RoundRobinSwarm(agents=[model.agent("a"), model.agent("b")], max_loops=1, output_type="str")


def kinds(items) -> list[str]:
    out = []
    for x in items:
        if isinstance(x, Message):
            out.append(f"msg {x.role}: {x.content}")
        elif isinstance(x, TraceEvent):
            out.append(f"step {x.state} -> {x.dest}")
        else:
            assert isinstance(x, RunResult)
            out.append(f"result {x.stop_reason}")
    return out


EXPECTED = ["msg User: plan the launch", "step seed -> a", "msg a: one", "step a -> b", "msg b: two",
            "step b -> stop", "step stop -> None", "result max_loops"]


def test_stream_is_a_plain_iterator_in_scripts():
    items = list(swarm(ScriptedModel({"a": ["one"], "b": ["two"]})).stream(TASK))
    assert kinds(items) == EXPECTED


def test_stream_and_astream_in_async_code_give_the_same_items():
    async def collect():
        a = [x async for x in swarm(ScriptedModel({"a": ["one"], "b": ["two"]})).stream(TASK)]
        b = [x async for x in swarm(ScriptedModel({"a": ["one"], "b": ["two"]})).astream(TASK)]
        return a, b

    a, b = asyncio.run(collect())
    assert kinds(a) == kinds(b) == EXPECTED


def never_b(req):
    """a answers; b's answer takes 300 s: only a cancellation ends the run before it."""
    return Delay(300, "b done") if req.agent == "b" else f"{req.agent} done"


def stream_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "fsmchat-stream"]


def test_a_sync_stream_steps_the_run_in_this_thread_and_a_break_cancels_it():
    """No loop runs here: the run steps in this thread (no worker thread) up to the next items (a's
    message, then the same pass of the loop asks b); the break cancels the run through its
    cancellation path, cutting b's 300 s answer (the pattern keeps the partial result, as for a Ctrl-C)."""
    model = FunctionModel(never_b)
    pattern = swarm(model)
    stream = pattern.stream(TASK)
    seen = []
    for item in stream:
        seen.append(item)
        assert stream_threads() == []
        if isinstance(item, Message) and item.role == "a":
            break  # leaving now must cancel the run
    assert kinds(seen) == ["msg User: plan the launch", "step seed -> a", "msg a: a done"]
    assert model.calls("b") == 1
    partial = pattern._last_partial  # what the run's cancellation path kept
    assert partial is not None and str(partial.stop_reason) == "cancelled"
    assert [(m.role, m.content) for m in partial.transcript] == [("User", TASK), ("a", "a done")]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(RuntimeError, match="already iterated"):
        list(stream)


def test_ctrl_c_while_a_sync_stream_waits_cancels_the_run_and_the_interrupt_carries_the_transcript():
    """A real SIGINT while b is asked (the loop steps in this thread): the run ends through its
    cancellation path (b's 300 s answer is cut), then the KeyboardInterrupt reaches the ``for``
    with the partial result on it; Python's own Ctrl-C handler is back afterwards."""
    def answer(req):
        if req.agent == "b":
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered to this thread
        return never_b(req)

    model = FunctionModel(answer)
    seen = []
    with pytest.raises(KeyboardInterrupt) as info:
        for item in swarm(model).stream(TASK):
            seen.append(item)
    assert kinds(seen) == ["msg User: plan the launch", "step seed -> a", "msg a: a done", "step a -> b"]
    partial = result_of(info.value)
    assert partial is not None and str(partial.stop_reason) == "cancelled"
    assert [(m.role, m.content) for m in partial.transcript] == [("User", TASK), ("a", "a done")]
    assert model.calls("b") == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_error_in_the_loop_body_cancels_the_run_and_goes_on():
    pattern = swarm(FunctionModel(never_b))
    with pytest.raises(ValueError, match="the body failed"):
        for item in pattern.stream(TASK):
            if isinstance(item, Message) and item.role == "a":
                raise ValueError("the body failed")
    partial = pattern._last_partial
    assert partial is not None and str(partial.stop_reason) == "cancelled"
    assert [m.role for m in partial.transcript] == ["User", "a"]


def test_a_sync_stream_inside_a_running_loop_goes_on_a_worker_thread():
    """A notebook cell: a loop already runs in this thread, so ``for`` puts the run on a worker
    thread; the items are the same, and a break there cancels the run too."""
    async def cell():
        items = list(swarm(ScriptedModel({"a": ["one"], "b": ["two"]})).stream(TASK))
        pattern = swarm(FunctionModel(never_b))
        threads = []
        for item in pattern.stream(TASK):
            threads.append(stream_threads())
            if isinstance(item, Message) and item.role == "a":
                break
        return items, threads, pattern._last_partial

    loop = asyncio.new_event_loop()
    try:
        items, threads, partial = loop.run_until_complete(cell())
    finally:
        loop.close()
    assert kinds(items) == EXPECTED
    assert threads == [["fsmchat-stream"]] * 3
    assert str(partial.stop_reason) == "cancelled" and [m.role for m in partial.transcript] == ["User", "a"]
    assert stream_threads() == []


def test_sync_stream_raises_a_bad_task_where_it_is_iterated():
    with pytest.raises(ValueError, match="task must be a non-empty string"):
        list(swarm(ScriptedModel({"a": ["one"], "b": ["two"]})).stream(""))


def test_run_batch_progress(capsys):
    model = FunctionModel(lambda req: f"{req.agent} ok")
    assert swarm(model).run_batch(["t1", "t2", "t3"]) == ["User: t1\n\na: a ok\n\nb: b ok",
                                                         "User: t2\n\na: a ok\n\nb: b ok",
                                                         "User: t3\n\na: a ok\n\nb: b ok"]
    assert capsys.readouterr().err == ""  # stderr is not a terminal here: no bar by default
    assert len(swarm(model).run_batch(["t1", "t2", "t3"], progress=True)) == 3
    err = capsys.readouterr().err
    assert "RoundRobinSwarm batch" in err and "3/3" in err
    with pytest.raises(TypeError, match="progress must be True, False or None"):
        swarm(model).run_batch(["t1"], progress="yes")
