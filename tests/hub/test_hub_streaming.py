"""Hub channel replies stream to the hub's token listeners (``hub.on_token``): each delta names
the agent and the channel's state, in order, before the reply is posted whole; tool rounds run as
without streaming; a hub with no token listener asks for no stream. Over a scripted model (which
streams word by word) and over a local OpenAI-compatible server that sends server-sent events."""
import asyncio

import pytest

from support.openai_server import OpenAIServer, streamed, text

from fsmchat import Agent, EV_TEXT, Hub, ManualClock, MemoryKnowledgeStore, StreamRetry, TokenDelta, \
    wait_for_text_count
from fsmchat.testing import ScriptedModel, ToolCall


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    return f"sunny in {city}"


async def _hub(bob, heard=None):
    hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=ManualClock())
    if heard is not None:
        hub.on_token(lambda item: heard.append(item))
        hub.listen(lambda e: heard.append(("text", e.envelope.sender, e.envelope.text))
                   if e.kind == "accepted" and e.envelope.event_type == EV_TEXT else None)
    alice = await hub.register("alice")
    await hub.register(bob)
    ch = await alice.open(target=["bob"], knobs={"max_texts": 2})
    return hub, ch


def test_a_channel_reply_streams_word_by_word_to_the_token_listener_then_is_posted_whole():
    async def body():
        m = ScriptedModel({"bob": ["Sunny and warm today."]})
        heard = []
        hub, ch = await _hub(m.agent("bob", "You are bob."), heard)
        await ch.send("Weather?")
        await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=30)
        await hub.aclose()
        return ch.channel_id, heard

    cid, heard = asyncio.run(body())
    assert cid == "discussion-1"
    assert heard == [("text", "alice", "Weather?"),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "Sunny ", 1),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "and ", 1),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "warm ", 1),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "today.", 1),
                     ("text", "bob", "Sunny and warm today.")]


def test_with_tools_only_the_final_replys_text_streams_and_the_tool_round_runs_as_before():
    async def body():
        m = ScriptedModel({"bob": [ToolCall("weather", {"city": "Oslo"}, id="c1"), "Sunny in Oslo."]})
        heard = []
        hub, ch = await _hub(m.agent("bob", "You are bob.", tools=[weather]), heard)
        await ch.send("Weather in Oslo?")
        await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=30)
        path = hub.runs(ch.channel_id)[1].path
        reply = [e for e in hub.read_log(ch.channel_id) if e.event_type == EV_TEXT][-1]
        await hub.aclose()
        return heard, path, reply

    heard, path, reply = asyncio.run(body())
    assert heard == [("text", "alice", "Weather in Oslo?"),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "Sunny ", 1),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "in ", 1),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "Oslo.", 1),
                     ("text", "bob", "Sunny in Oslo.")]
    assert path == ["awaiting_alice", "awaiting_bob", "tools_awaiting_bob", "awaiting_bob", "closed"]
    assert [c["result"] for c in reply.data["tool_calls"]] == ["sunny in Oslo"]


def test_an_agent_offered_the_close_tool_streams_its_reply_too():
    async def body():
        m = ScriptedModel({"bob": ["Sunny today."]})
        heard = []
        hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=ManualClock())
        hub.on_token(heard.append)
        alice = await hub.register("alice")
        await hub.register(m.agent("bob", "You are bob."), close_tool=True)
        ch = await alice.open(target=["bob"], knobs={"max_texts": 2})
        await ch.send("Weather?")
        await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=30)
        await hub.aclose()
        return heard, m.requests_of("bob")[0].tools

    heard, tools = asyncio.run(body())
    assert [t["function"]["name"] for t in tools] == ["close_channel"]
    assert heard == [TokenDelta("bob", "discussion-1|awaiting_bob", "Sunny ", 1),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "today.", 1)]


def test_an_unsubscribed_listener_hears_nothing_and_a_failing_one_never_breaks_the_reply():
    async def body():
        m = ScriptedModel({"bob": ["Sunny today."]})
        hub, ch = await _hub(m.agent("bob", "You are bob."))
        gone = []
        stop = hub.on_token(gone.append)
        stop()

        def broken(item):
            raise RuntimeError("the display is gone")

        hub.on_token(broken)
        kept = []
        hub.on_token(kept.append)
        await ch.send("Weather?")
        with pytest.warns(RuntimeWarning, match="token listener .* raised RuntimeError: the display is gone"):
            await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=30)
        texts = [e.text for e in hub.read_log(ch.channel_id) if e.event_type == EV_TEXT]
        await hub.aclose()
        return gone, kept, texts

    gone, kept, texts = asyncio.run(body())
    assert gone == []
    assert [d.text for d in kept] == ["Sunny ", "today."]
    assert texts == ["Weather?", "Sunny today."]


def test_a_token_listener_must_be_callable():
    async def body():
        async with Hub() as hub:
            with pytest.raises(TypeError, match=r"Hub.on_token: listener must be callable .* got 42"):
                hub.on_token(42)

    asyncio.run(body())


def _local(srv):
    return Agent("bob", system_prompt="You are bob.", model="openai/test-model", api_base=srv.api_base,
                 api_key="sk-test", num_retries=0, timeout=60)


def test_over_http_the_reply_streams_its_server_sent_pieces_in_order_then_whole():
    async def body(srv):
        heard = []
        hub, ch = await _hub(_local(srv), heard)
        await ch.send("Weather?")
        await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=60)
        await hub.aclose()
        return heard

    with OpenAIServer([streamed(["Sun", "ny in ", "Oslo."], hold_after=3)], max_lifetime=120) as srv:
        heard = asyncio.run(body(srv))
        [request] = srv.requests
        srv.assert_clean()
    assert heard == [("text", "alice", "Weather?"),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "Sun", 1),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "ny in ", 1),
                     TokenDelta("bob", "discussion-1|awaiting_bob", "Oslo.", 1),
                     ("text", "bob", "Sunny in Oslo.")]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    assert not [x for x in heard if isinstance(x, StreamRetry)]


def test_over_http_a_hub_without_a_token_listener_asks_for_no_stream():
    async def body(srv):
        hub, ch = await _hub(_local(srv))
        await ch.send("Weather?")
        await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=60)
        texts = [e.text for e in hub.read_log(ch.channel_id) if e.event_type == EV_TEXT]
        await hub.aclose()
        return texts

    with OpenAIServer([text("Sunny in Oslo.")], max_lifetime=120) as srv:
        texts = asyncio.run(body(srv))
        [request] = srv.requests
        srv.assert_clean()
    assert texts == ["Weather?", "Sunny in Oslo."]
    assert "stream" not in request and "stream_options" not in request
