"""An MCP server as a tool source of hub agents and of direct replies: one server per run. A hub starts
it once (for every channel and every reply, its handlers' own ``agent.reply`` calls too) and stops it in
``aclose``; direct ``agent.reply`` calls share one per event loop (``asyncio.run``), stopped as the loop
ends, or the one ``agent.tools_open()`` holds open. Server starts are counted by a launcher that writes a
line per start."""
import asyncio
import sys

import pytest

from fsmchat import EV_CHANNEL_INVITE, EV_TEXT, Hub, ManualClock, MemoryKnowledgeStore, Message, Tool, Turn, \
    wait_for_text_count
from fsmchat.network import EV_TOOL_RESULT
from fsmchat.speakers.mcp import MCPServer
from fsmchat.testing import ScriptedModel, ToolCall

from support.mcp_fixtures import SERVER, gone

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")


def test_a_hub_starts_an_mcp_server_once_for_all_its_replies_and_stops_it_in_aclose(tmp_path):
    server, starts = counted(tmp_path)

    async def body():
        m = ScriptedModel({"alice": [], "bob": [ToolCall("pid", {}, id="p1"), "first",
                                                ToolCall("pid", {}, id="p2"), "second"]})
        hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=ManualClock())
        alice = await hub.register(m.agent("alice"))
        await hub.register(m.agent("bob", tools=[server]))
        pids = []
        for topic in ("one", "two"):  # two channels, one reply each
            ch = await alice.open(target=["bob"], knobs={"max_texts": 2})
            await ch.send(topic)
            await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=60)
            pids += [e.data["result"] for e in hub.read_log(ch.channel_id) if e.event_type == EV_TOOL_RESULT]
            assert [e.text for e in hub.read_log(ch.channel_id) if e.event_type == EV_TEXT][-1] in ("first", "second")
        assert len(pids) == 2 and pids[0] == pids[1]  # one server process answered both
        assert server.running
        await hub.aclose()
        return server.running, int(pids[0])

    running, pid = asyncio.run(body())
    assert running is False and gone(pid)
    assert starts.read_text() == "start\n"


def _turn():
    return Turn("a", [Message(role="User", content="Which process?")], "Answer.")


LAUNCH = ("import os, sys; open(sys.argv[1], 'a').write('start\\n'); "
          "os.execv(sys.executable, [sys.executable, sys.argv[2], 'stdio'])")
"""Writes one line per server start to a file, then becomes the test server (same process)."""


def counted(tmp_path):
    """A stdio MCPServer whose every start adds a line ``start`` to the returned file."""
    starts = tmp_path / "starts"
    return MCPServer(command=[sys.executable, "-c", LAUNCH, str(starts), str(SERVER)], name="capitals"), starts


def test_direct_replies_share_one_server_per_run_and_it_stops_when_the_run_ends(tmp_path):
    server, starts = counted(tmp_path)
    m = ScriptedModel({"a": [ToolCall("pid", {}, id="p1"), "one", ToolCall("pid", {}, id="p2"), "two",
                             ToolCall("pid", {}, id="p3"), "three", ToolCall("pid", {}, id="p4"), "four"]})
    agent = m.agent("a", tools=[server])

    async def three_replies():
        replies = [await agent.reply(_turn()) for _ in range(3)]
        return replies, server.running

    replies, running = asyncio.run(three_replies())
    pids = {int(r.messages[-1]["content"]) for r in m.requests_of("a")[1::2]}
    assert replies == ["one", "two", "three"] and running is True
    assert starts.read_text() == "start\n"  # one server process answered the three replies
    assert len(pids) == 1 and not server.running and gone(pids.pop())  # stopped as asyncio.run ended

    assert asyncio.run(agent.reply(_turn())) == "four"  # a new run starts its own
    assert starts.read_text() == "start\nstart\n"
    assert not server.running and gone(int(m.requests_of("a")[-1].messages[-1]["content"]))


def test_tools_open_still_holds_the_server_and_a_reply_inside_it_uses_that_one(tmp_path):
    server, starts = counted(tmp_path)
    m = ScriptedModel({"a": [ToolCall("pid", {}, id="p1"), "one", ToolCall("pid", {}, id="p2"), "two"]})
    agent = m.agent("a", tools=[server])

    async def body():
        async with agent.tools_open():
            assert server.running and starts.read_text() == "start\n"  # started on entry
            assert [await agent.reply(_turn()), await agent.reply(_turn())] == ["one", "two"]
        return server.running

    assert asyncio.run(body()) is False
    assert starts.read_text() == "start\n"


def test_a_hub_handler_replying_directly_shares_the_hubs_server_across_channels(tmp_path):
    server, starts = counted(tmp_path)
    m = ScriptedModel({"bob": [ToolCall("pid", {}, id="p1"), "first", ToolCall("pid", {}, id="p2"), "second"]})

    async def direct(client, envelope):  # a handler of one's own: agent.reply, not client.services.speak
        cid = envelope.channel_id
        if envelope.event_type == EV_CHANNEL_INVITE:
            await client.channel(cid).ack()
        elif envelope.event_type == EV_TEXT and client.can_send(cid):
            turn = Turn(client.agent_id, [Message(role="User", content=envelope.text)], "Answer.")
            await client.channel(cid).send(await client.speaker.reply(turn))

    async def body():
        hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=ManualClock())
        alice = await hub.register("alice")
        await hub.register(m.agent("bob", tools=[server]), handler=direct)
        for topic in ("one", "two"):
            ch = await alice.open(target=["bob"], knobs={"max_texts": 2})
            await ch.send(topic)
            await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=60)
        running = server.running
        await hub.aclose()
        return running, server.running

    assert asyncio.run(body()) == (True, False)  # running until the hub's aclose stopped it
    pids = {int(r.messages[-1]["content"]) for r in m.requests_of("bob")[1::2]}
    assert starts.read_text() == "start\n" and len(pids) == 1  # one server for both replies
    assert not server.running and gone(pids.pop())


class Recorded:
    """A tool source of one's own that writes down what a run asks of it."""

    name = "clock"

    def __init__(self):
        self.calls = []

    async def start(self):
        self.calls.append("start")

    async def tools(self):
        self.calls.append("tools")
        return [Tool(lambda: "12:00", name="now", description="The time.")]

    async def stop(self):
        self.calls.append("stop")


def test_any_tool_source_is_started_once_per_run_of_direct_replies_and_stopped_as_the_run_ends():
    source = Recorded()
    m = ScriptedModel({"a": [ToolCall("now", {}), "noon", ToolCall("now", {}), "still noon"]})
    agent = m.agent("a", tools=[source])

    async def two_replies():
        replies = [await agent.reply(_turn()), await agent.reply(_turn())]
        return replies, list(source.calls)

    assert asyncio.run(two_replies()) == (["noon", "still noon"], ["start", "tools"])  # not stopped between
    assert source.calls == ["start", "tools", "stop"]  # stopped as asyncio.run ended
