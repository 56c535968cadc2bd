"""A hub channel resumes from its store (``hub.resume_channel``) and its tool rounds are as durable as a
pattern's: a committed result is never asked for again, a call cut off by a dead process is run again
only when its tool is idempotent, otherwise a person decides at the drawn wait point
(``approve_awaiting_bob``), as in GroupChat and every pattern. The hub runs in a subprocess on a
``SQLiteKnowledgeStore`` and is SIGKILLed between a commit and what follows it."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fsmchat import Approve, EV_TEXT, Hub, Say, Tool, wait_for_text_count
from fsmchat.network import EV_TOOL_CALLS, EV_TOOL_DECISION, EV_TOOL_RESULT, NotFoundError, ProtocolError, \
    SQLiteKnowledgeStore
from fsmchat.testing import ScriptedModel

KILL_SCRIPT = textwrap.dedent('''
    import asyncio, os, sys
    from fsmchat import Hub, Tool
    from fsmchat.network import SQLiteKnowledgeStore
    from fsmchat.testing import FunctionModel, ToolCall
    db, log, idempotent, approval, where = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1", sys.argv[5]
    def weather(city: str) -> str:
        """The weather in a city."""
        with open(log, "a") as f:
            f.write(f"weather {city}\\n")
        if where == "call":  # the call ran; its result was never committed
            os.kill(os.getpid(), 9)
        return f"sunny in {city}"
    def answer(req):
        if req.agent == "bob" and req.n == 1 and where == "close":
            return ToolCall("close_channel", {"reason": "we are done"}, id="c1")
        if req.agent == "bob" and req.n == 1:
            return ToolCall("weather", {"city": "Oslo"}, id="c1")
        if req.agent == "bob" and where in ("commit", "close"):  # the result is committed: die at the next call
            os.kill(os.getpid(), 9)
        return "unused"
    m = FunctionModel(answer, id="hub-kill-model")
    async def main():
        hub = await Hub.open(SQLiteKnowledgeStore(db))
        alice = await hub.register("alice")  # an app: it sends the topic
        await hub.register(m.agent("bob", tools=[Tool(weather, idempotent=idempotent, approval=approval)]),
                           close_tool=where == "close")
        channel = await alice.open(target=["bob"], knobs={} if where == "close" else {"max_texts": 2})
        await channel.send("Weather in Oslo?")
        if where == "approval":  # the call waits for a person: the process dies while it waits
            while not hub.waiting_call(channel.channel_id):
                await asyncio.sleep(0.01)
            os.kill(os.getpid(), 9)
        await asyncio.sleep(120)
    asyncio.run(main())
''')


def killed_hub(tmp_path, where, idempotent=False, approval=False):
    script = tmp_path / "kill_hub.py"
    script.write_text(KILL_SCRIPT)
    db, log = tmp_path / "hub.db", tmp_path / "weather.log"
    proc = subprocess.run([sys.executable, str(script), str(db), str(log), "1" if idempotent else "0",
                           "1" if approval else "0", where], env={**os.environ}, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    return db, log


def resumer(log, idempotent=False, approval=False):
    def weather(city: str) -> str:
        """The weather in a city."""
        with open(log, "a") as f:
            f.write(f"weather {city}\n")
        return f"sunny in {city}"
    return ScriptedModel({"bob": ["Sunny in Oslo."]}, id="hub-kill-model"), \
        Tool(weather, idempotent=idempotent, approval=approval)


async def resume(db, model, tool, *, waits=False, close_tool=False):
    hub = await Hub.open(SQLiteKnowledgeStore(db))
    await hub.register("alice")
    await hub.register(model.agent("bob", tools=[tool]), close_tool=close_tool)
    asked = asyncio.Event()
    heard = []
    hub.listen(lambda e: (heard.append(e.data), asked.set()) if e.kind == "tool_approval" else None)
    runtime = await hub.resume_channel("discussion-1")
    if waits:
        await asyncio.wait_for(asked.wait(), 60)
    return hub, runtime, heard


def texts(hub):
    return [(e.sender, e.text) for e in hub.read_log("discussion-1") if e.event_type == EV_TEXT]


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_committed_result_is_never_asked_again_after_a_kill(tmp_path, idempotent):
    db, log = killed_hub(tmp_path, "commit", idempotent)
    assert log.read_text() == "weather Oslo\n"  # the call ran once before the process died

    async def body():
        model, tool = resumer(log, idempotent)
        hub, runtime, _ = await resume(db, model, tool)
        await wait_for_text_count(hub, "discussion-1", expected=2, timeout=60)
        assert texts(hub) == [("alice", "Weather in Oslo?"), ("bob", "Sunny in Oslo.")]
        assert [e.event_type for e in hub.read_log("discussion-1")].count(EV_TOOL_RESULT) == 1
        assert model.requests_of("bob")[0].messages[-1] == {"role": "tool", "tool_call_id": "c1",
                                                            "content": "sunny in Oslo"}
        assert model.requests_of("bob")[0].messages[-2]["tool_calls"] == [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]
        reply = hub.read_log("discussion-1")[-2]
        assert reply.event_type == EV_TEXT and [(c["name"], c["result"]) for c in reply.data["tool_calls"]] == [
            ("weather", "sunny in Oslo")]
        assert hub.runs("discussion-1")[1].path == ["awaiting_bob", "closed"]
        assert hub.channel_state("discussion-1") == "closed"
        await hub.aclose()

    asyncio.run(body())
    assert log.read_text() == "weather Oslo\n"  # not repeated


def test_an_uncommitted_idempotent_call_is_run_again(tmp_path):
    db, log = killed_hub(tmp_path, "call", idempotent=True)
    assert log.read_text() == "weather Oslo\n"

    async def body():
        model, tool = resumer(log, idempotent=True)
        hub, _, heard = await resume(db, model, tool)
        await wait_for_text_count(hub, "discussion-1", expected=2, timeout=60)
        assert texts(hub)[-1] == ("bob", "Sunny in Oslo.") and heard == []
        await hub.aclose()

    asyncio.run(body())
    assert log.read_text() == "weather Oslo\nweather Oslo\n"


def test_an_uncommitted_call_of_a_tool_that_is_not_idempotent_waits_for_a_person(tmp_path):
    db, log = killed_hub(tmp_path, "call", idempotent=False)

    async def body():
        model, tool = resumer(log)
        hub, runtime, heard = await resume(db, model, tool, waits=True)
        assert model.calls() == 0 and log.read_text() == "weather Oslo\n"
        waiting = hub.waiting_call("discussion-1")
        assert waiting["prompt"] == ("bob's call weather(city='Oslo') may have run before the run stopped (its "
                                     "result was not saved): run it again?")
        assert list(waiting["allowed"]) == ["approve", "say", "reject"]
        assert heard[0]["prompt"] == waiting["prompt"]
        assert hub.runs("discussion-1")[1].visited == ["awaiting_bob", "tools_awaiting_bob", "approve_awaiting_bob"]
        decision = await hub.decide_tool_call("discussion-1", Say("sunny (from the weather log)"))
        assert decision.event_type == EV_TOOL_DECISION and decision.data["decision"] == "say"
        await wait_for_text_count(hub, "discussion-1", expected=2, timeout=60)
        assert model.requests_of("bob")[0].messages[-1]["content"] == "sunny (from the weather log)"
        await hub.aclose()

    asyncio.run(body())
    assert log.read_text() == "weather Oslo\n"  # the person supplied the result: not run again


def test_a_person_may_approve_the_re_run(tmp_path):
    db, log = killed_hub(tmp_path, "call", idempotent=False)

    async def body():
        model, tool = resumer(log)
        hub, _, _ = await resume(db, model, tool, waits=True)
        await hub.decide_tool_call("discussion-1", Approve())
        await wait_for_text_count(hub, "discussion-1", expected=2, timeout=60)
        await hub.aclose()

    asyncio.run(body())
    assert log.read_text() == "weather Oslo\nweather Oslo\n"


def test_a_call_waiting_for_approval_when_the_process_died_waits_again_and_runs_once_approved(tmp_path):
    db, log = killed_hub(tmp_path, "approval", approval=True)
    assert not log.exists()  # it never ran

    async def body():
        model, tool = resumer(log, approval=True)
        hub, _, heard = await resume(db, model, tool, waits=True)
        assert hub.waiting_call("discussion-1")["prompt"] == "bob asks to call weather(city='Oslo'): run it?"
        await hub.decide_tool_call("discussion-1", Approve())
        await wait_for_text_count(hub, "discussion-1", expected=2, timeout=60)
        kinds = [e.event_type for e in hub.read_log("discussion-1") if e.event_type.startswith("fsmchat.tool")]
        assert kinds == [EV_TOOL_CALLS, EV_TOOL_DECISION, EV_TOOL_RESULT]
        await hub.aclose()

    asyncio.run(body())
    assert log.read_text() == "weather Oslo\n"


def test_resume_needs_the_channel_in_the_store_and_every_participant_registered(tmp_path):
    async def body():
        store = SQLiteKnowledgeStore(tmp_path / "hub.db")
        hub = await Hub.open(store)
        alice, _ = await hub.register("alice"), await hub.register("bob")
        channel = await alice.open(target=["bob"])
        await channel.send("Topic: should every developer learn Rust?")
        with pytest.raises(ProtocolError, match="channel 'discussion-1' is already open on this hub"):
            await hub.resume_channel("discussion-1")
        await hub.aclose()
        again = await Hub.open(SQLiteKnowledgeStore(tmp_path / "hub.db"))
        with pytest.raises(NotFoundError, match="channel 'discussion-9' is not in the store"):
            await again.resume_channel("discussion-9")
        await again.register("alice")
        with pytest.raises(NotFoundError, match="channel 'discussion-1' cannot resume: participant 'bob' is not "
                                                "registered"):
            await again.resume_channel("discussion-1")
        await again.register("bob")
        runtime = await again.resume_channel("discussion-1")
        assert (runtime.state, runtime.adapter_state().expected_next_speaker, runtime.stats.texts) == \
            ("active", "bob", 1)
        again.client("bob").channel("discussion-1")
        await again.client("bob").channel("discussion-1").send("Only for systems work.")
        fresh = await again.client("alice").open(target=["bob"])
        assert fresh.channel_id == "discussion-2"  # a new channel never takes a stored channel's id
        assert [e.seq for e in again.read_log("discussion-1")] == [1, 2, 3, 4, 5]
        await again.aclose()

    asyncio.run(body())


def test_a_committed_close_channel_call_still_closes_the_resumed_channel(tmp_path):
    db, log = killed_hub(tmp_path, "close")

    async def body():
        model, tool = resumer(log)
        model = ScriptedModel({"bob": ["Goodbye."]}, id="hub-kill-model")
        hub, _, _ = await resume(db, model, tool, close_tool=True)
        await hub.drain(timeout=60)
        assert texts(hub) == [("alice", "Weather in Oslo?"), ("bob", "Goodbye.")]
        assert (hub.channel_state("discussion-1"), hub.close_reason("discussion-1")) == ("closed", "we are done")
        assert [e.data["result"] for e in hub.read_log("discussion-1") if e.event_type == EV_TOOL_RESULT] == [
            "the channel will close after this reply"]  # committed before the kill, not run again
        await hub.aclose()

    asyncio.run(body())
    assert not log.exists()
