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
from fsmchat.speakers import CallableSpeaker
from fsmchat.testing import FunctionModel, ScriptedModel

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


class SlowB:
    """b's turn: noted as started, then a 300 s answer that only a cancellation ends (noted too);
    ``ctrl_c``: a real Ctrl-C first, delivered to the thread that runs the loop."""

    def __init__(self, ctrl_c: bool = False):
        self.started, self.cancelled, self.ctrl_c = threading.Event(), threading.Event(), ctrl_c

    async def __call__(self, turn):
        self.started.set()
        if self.ctrl_c:
            os.kill(os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(300)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return "b done"


def slow_swarm(b: SlowB) -> RoundRobinSwarm:
    return RoundRobinSwarm(agents=[ScriptedModel({"a": ["a done"]}).agent("a"), CallableSpeaker(b, "b")],
                           max_loops=1, output_type="str")


def stream_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "fsmchat-stream"]


def test_a_sync_stream_steps_the_run_in_this_thread_and_a_break_cancels_it():
    """No loop runs here: the run steps in this thread (no worker thread) up to the next items: a's
    message, and the same pass of the loop starts b's turn; the break cancels the run, which cuts
    b's 300 s answer (the stream waits for the run to end before the loop goes on)."""
    b = SlowB()
    stream = slow_swarm(b).stream(TASK)
    seen = []
    for item in stream:
        seen.append(item)
        assert stream_threads() == []
        if isinstance(item, Message) and item.role == "a":
            assert b.started.is_set() and not b.cancelled.is_set()
            break  # leaving now must cancel the run
    assert kinds(seen) == ["msg User: plan the launch", "step seed -> a", "msg a: a done"]
    assert b.cancelled.is_set()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(RuntimeError, match="already iterated"):
        list(stream)


def test_ctrl_c_while_a_sync_stream_waits_cancels_the_run_and_the_interrupt_carries_the_transcript():
    """A real SIGINT while b's turn runs (the loop steps in this thread): the run ends through its
    cancellation path (b's 300 s answer is cut), then the KeyboardInterrupt reaches the ``for``
    with the partial result on it; Python's own Ctrl-C handler is back afterwards."""
    b = SlowB(ctrl_c=True)
    seen = []
    with pytest.raises(KeyboardInterrupt) as info:
        for item in slow_swarm(b).stream(TASK):
            seen.append(item)
    # a's message came in the pass that started b's turn, so the Ctrl-C came before it was handed over
    assert kinds(seen) == ["msg User: plan the launch", "step seed -> a"]
    assert b.cancelled.is_set()
    partial = result_of(info.value)
    assert partial is not None and str(partial.stop_reason) == "cancelled"
    assert [(m.role, m.content) for m in partial.transcript] == [("User", TASK), ("a", "a done")]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_error_in_the_loop_body_cancels_the_run_and_goes_on():
    b = SlowB()
    with pytest.raises(ValueError, match="the body failed"):
        for item in slow_swarm(b).stream(TASK):
            if isinstance(item, Message) and item.role == "a":
                raise ValueError("the body failed")
    assert b.cancelled.is_set()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sync_stream_inside_a_running_loop_goes_on_a_worker_thread():
    """A notebook cell: a loop already runs in this thread, so ``for`` puts the run on a worker
    thread that goes on while the body runs; the items are the same, and a break cancels the run."""
    b = SlowB()

    async def cell():
        items = list(swarm(ScriptedModel({"a": ["one"], "b": ["two"]})).stream(TASK))
        threads = []
        for item in slow_swarm(b).stream(TASK):
            threads.append(stream_threads())
            if isinstance(item, Message) and item.role == "a":
                assert b.started.wait(60)  # the run goes on in the worker while the body runs
                break
        return items, threads

    loop = asyncio.new_event_loop()
    try:
        items, threads = loop.run_until_complete(cell())
    finally:
        loop.close()
    assert kinds(items) == EXPECTED
    assert threads == [["fsmchat-stream"]] * 3
    assert b.cancelled.is_set()  # the stream waited for the worker, which ended through the cancellation
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
