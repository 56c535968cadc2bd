"""Watching runs from Python: ``stream()`` iterates in plain scripts and in async code,
``astream()`` is its async spelling, and ``run_batch`` draws a progress bar when asked (by
default only on a terminal)."""
from __future__ import annotations

import asyncio
import threading

import pytest

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


def test_sync_stream_hands_items_over_while_the_run_goes_on_and_a_break_cancels_it():
    b_thinking = threading.Event()

    def answer(req):
        if req.agent == "b":  # b never answers: only a cancellation ends this run
            b_thinking.set()
            return Delay(0.01, answer)
        return f"{req.agent} done"

    model = FunctionModel(answer)
    stream = swarm(model).stream(TASK)
    seen = []
    for item in stream:
        seen.append(item)
        if isinstance(item, Message) and item.role == "a":
            assert b_thinking.wait(60)  # the run goes on after handing a's message over
            break  # leaving now must cancel the run
    assert kinds(seen) == ["msg User: plan the launch", "step seed -> a", "msg a: a done"]
    assert model.calls("b") == 1  # b was asked once and never answered
    assert [t.name for t in threading.enumerate() if t.name == "fsmchat-stream"] == []
    with pytest.raises(RuntimeError, match="already iterated"):
        list(stream)


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
