"""An MCP server as a tool source of hub agents and of direct replies: a hub starts it once (for every
channel and every reply) and stops it in ``aclose``; a direct ``agent.reply`` starts and stops one per
call unless ``agent.tools_open()`` holds it open."""
import asyncio

import pytest

from fsmchat import EV_TEXT, Hub, ManualClock, MemoryKnowledgeStore, Message, Turn, wait_for_text_count
from fsmchat.network import EV_TOOL_RESULT
from fsmchat.speakers.mcp import MCPServer
from fsmchat.testing import ScriptedModel, ToolCall

from test_mcp import COMMAND, gone

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")


def test_a_hub_starts_an_mcp_server_once_for_all_its_replies_and_stops_it_in_aclose():
    async def body():
        server = MCPServer(command=COMMAND, name="capitals")
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


def _turn():
    return Turn("a", [Message(role="User", content="Which process?")], "Answer.")


def test_a_direct_reply_starts_and_stops_its_server_unless_tools_open_holds_it():
    async def body():
        server = MCPServer(command=COMMAND, name="capitals")
        m = ScriptedModel({"a": [ToolCall("pid", {}, id="p1"), "one", ToolCall("pid", {}, id="p2"), "two",
                                 ToolCall("pid", {}, id="p3"), "three", ToolCall("pid", {}, id="p4"), "four"]})
        agent = m.agent("a", tools=[server])

        def last_pid():
            return int(m.requests_of("a")[-1].messages[-1]["content"])

        assert await agent.reply(_turn()) == "one"
        first = last_pid()
        assert not server.running and gone(first)
        assert await agent.reply(_turn()) == "two"
        second = last_pid()
        assert second != first and not server.running
        async with agent.tools_open():
            assert server.running
            assert await agent.reply(_turn()) == "three"
            third = last_pid()
            assert await agent.reply(_turn()) == "four"
            assert last_pid() == third and server.running
        return server.running, third

    running, pid = asyncio.run(body())
    assert running is False and gone(pid)
