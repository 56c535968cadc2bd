"""``context=`` on the two conversations that are not patterns: the flow's ``Discussion`` step and the
hub's discussion channels. Each takes the patterns' policies with the patterns' checks; what the
speakers were sent is asserted on the requests the local OpenAI-compatible server (tests/support/openai_server.py
on 127.0.0.1) received, written out here in full."""
import asyncio

import pytest

from support.openai_server import OpenAIServer, per_agent, text

from fsmchat import Agent, AgentFlow, GroupChat, Hub, from_config, wait_for_text_count
from fsmchat.config import to_config
from fsmchat.errors import ConfigError
from fsmchat.flow import Discussion
from fsmchat.speakers.context import LastMessages, Summarize

HANG_GUARD = 600  # seconds before a hung server is stopped (never a verdict)
BAD = ["last3", 0]  # a policy's name misspelt, and a bare number


def msg(role, content):
    return {"role": role, "content": content}


def agents(srv, *names, **kw):
    return [Agent(n, model="openai/test-model", api_base=srv.api_base, api_key="sk-test", num_retries=0, **kw)
            for n in names]


def group_chat_refusal(value):
    """GroupChat's refusal of ``value`` without its owner: the shape the others must match."""
    with pytest.raises(ConfigError) as err:
        GroupChat(agents=[Agent("a"), Agent("b")], context=value)
    owner, rest = str(err.value).split(": ", 1)
    assert owner == "GroupChat"
    return rest


# ---- the flow's Discussion step ----
def discussion_requests(policy, **own):
    replies = {n: [text(f"{n}{i}") for i in (1, 2, 3)] for n in ("a", "b")}
    with OpenAIServer(per_agent(replies), max_lifetime=HANG_GUARD) as srv:
        a, b = agents(srv, "a", **own), agents(srv, "b")[0]
        flow = AgentFlow(steps=[Discussion([a[0], b], rounds=3, name="talk", context=policy)])
        r = flow.execute("Plan.")
        srv.assert_clean()
    assert r.ok, r.error
    assert [m.content for m in r.transcript] == ["a1", "b1", "a2", "b2", "a3", "b3"]
    return flow, [body["messages"] for body in srv.requests_for("a")], \
        [body["messages"] for body in srv.requests_for("b")]


def test_a_discussion_under_last_messages_sends_the_topic_and_the_last_n_turns():
    flow, to_a, to_b = discussion_requests(LastMessages(2))
    assert to_a == [
        [msg("user", "Plan.\n\nYou are a. Open the discussion.")],
        [msg("user", "Plan.\n\nDiscussion so far:\na: a1\nb: b1\n\n"
                     "You are a. Respond to the latest turn and move the discussion forward.")],
        [msg("user", "Plan.\n\nLatest turns:\na: a2\nb: b2\n\n"
                     "You are a. Respond to the latest turn and move the discussion forward.")]]
    assert to_b == [
        [msg("user", "Plan.\n\nDiscussion so far:\na: a1\n\n"
                     "You are b. Respond to the latest turn and move the discussion forward.")],
        [msg("user", "Plan.\n\nLatest turns:\nb: b1\na: a2\n\n"
                     "You are b. Respond to the latest turn and move the discussion forward.")],
        [msg("user", "Plan.\n\nLatest turns:\nb: b2\na: a3\n\n"
                     "You are b. Respond to the latest turn and move the discussion forward.")]]
    step = flow.config.steps[0]
    assert step.context == LastMessages(2) and repr(step).endswith("context=LastMessages(n=2))")
    assert from_config(to_config(flow).model_dump()).config.steps[0].context == LastMessages(2)  # it travels


def test_a_discussion_under_full_sends_every_turn_and_an_agents_own_policy_comes_first():
    for policy, own in (("full", {}), (LastMessages(1), {"context": "full"})):
        _flow, to_a, to_b = discussion_requests(policy, **own)
        assert to_a[2] == [msg("user", "Plan.\n\nDiscussion so far:\na: a1\nb: b1\na: a2\nb: b2\n\n"
                                       "You are a. Respond to the latest turn and move the discussion forward.")]
        if own:  # b follows the step's LastMessages(1)
            assert to_b[2] == [msg("user", "Plan.\n\nLatest turns:\na: a3\n\n"
                                           "You are b. Respond to the latest turn and move the discussion forward.")]
        else:
            assert to_b[2] == [msg("user", "Plan.\n\nDiscussion so far:\na: a1\nb: b1\na: a2\nb: b2\na: a3\n\n"
                                           "You are b. Respond to the latest turn and move the discussion forward.")]


@pytest.mark.parametrize("value", BAD)
def test_a_discussion_refuses_what_is_not_a_policy_as_group_chat_does(value):
    with pytest.raises(ConfigError) as err:
        Discussion([Agent("a"), Agent("b")], context=value)
    owner, rest = str(err.value).split(": ", 1)
    assert owner == "Discussion" and rest == group_chat_refusal(value)
    assert rest.startswith(f"context={value!r} ({type(value).__name__}) is invalid: a context policy is \"full\"")


def test_a_discussions_summarize_is_checked_before_any_call():
    with OpenAIServer([], max_lifetime=HANG_GUARD) as srv:
        a, b, s = agents(srv, "a", "b", "s")  # test-model has no input limit: nothing to compact at
        flow = AgentFlow(steps=[Discussion([a, b], rounds=1, name="talk", context=Summarize(agent=s))])
        assert list(flow.graph.states["talk"].subgraph.states) == ["begin", "turn", "done", "compact_turn"]
        assert flow.max_calls() == 4  # 2 turns, and at most one compaction before each
        with pytest.raises(ConfigError, match=r"AgentFlow: agent 'a' follows Summarize, .* give the agent one"):
            flow.execute("Plan.")
    assert srv.requests == []


# ---- the hub's discussion channels ----
FRAME = ("Discussion channel 'discussion-1': alice and bob take turns in this order on the topic of its first text. "
         "Texts are labelled [name]: ... (a text's further lines are indented; only an unindented [name]: starts a "
         "text).")


ASKED = msg("user", "You are bob in a round-robin discussion with alice (speaking order: alice -> bob). The "
                    "discussion so far is above. It is your turn: reply with your next contribution only, without a "
                    "name label.")


def channel_requests(**open_kw):
    replies = {"alice": [text(f"a{i}") for i in (1, 2, 3)], "bob": [text(f"b{i}") for i in (1, 2, 3)]}
    with OpenAIServer(per_agent(replies), max_lifetime=HANG_GUARD) as srv:
        alice, bob = agents(srv, "alice", "bob")

        async def talk():
            async with Hub() as hub:
                a = await hub.register(alice)
                await hub.register(bob)
                channel = await a.open(target=["bob"], knobs={"max_texts": 7}, **open_kw)
                await channel.send("Topic: Rust?")
                await wait_for_text_count(hub, channel.channel_id, expected=7, timeout=HANG_GUARD)
                return [(e.sender, e.text) for e in hub.read_log(channel.channel_id) if e.event_type == "text"]

        texts = asyncio.run(talk())
        srv.assert_clean()
    assert texts == [("alice", "Topic: Rust?"), ("bob", "b1"), ("alice", "a1"), ("bob", "b2"), ("alice", "a2"),
                     ("bob", "b3"), ("alice", "a3")]
    return [body["messages"] for body in srv.requests_for("bob")]


def test_a_channel_under_last_messages_sends_the_first_text_and_the_last_n():
    to_bob = channel_requests(context=LastMessages(2))
    frame = msg("system", FRAME + " Only its first text and its latest 2 are shown; the texts between are left out.")
    assert to_bob == [[frame, msg("user", "[alice]: Topic: Rust?"), ASKED],
                      [frame, msg("user", "[alice]: Topic: Rust?\n[bob]: b1\n[alice]: a1"), ASKED],
                      [frame, msg("user", "[alice]: Topic: Rust?\n[bob]: b2\n[alice]: a2"), ASKED]]


def test_a_channel_under_full_sends_every_text_where_the_default_folds_the_older_ones():
    full = msg("system", FRAME + " Every text so far is shown.")
    assert channel_requests(context="full")[2] == [
        full, msg("user", "[alice]: Topic: Rust?\n[bob]: b1\n[alice]: a1\n[bob]: b2\n[alice]: a2"), ASKED]
    default = msg("system", FRAME + " Texts older than the recent window are folded into one [summary] line.")
    assert channel_requests()[2] == [  # the window of 4 texts, the topic folded into the summary line
        default, msg("user", "[summary] 1 earlier text (alice 1); it opened with [alice]: Topic: Rust?\n"
                             "[bob]: b1\n[alice]: a1\n[bob]: b2\n[alice]: a2"), ASKED]


@pytest.mark.parametrize("value", BAD)
def test_a_channel_refuses_what_is_not_a_policy_as_group_chat_does(value):
    async def open_with(context):
        async with Hub() as hub:
            a = await hub.register("alice")
            await hub.register("bob")
            await a.open(target=["bob"], context=context)

    with pytest.raises(ConfigError) as err:
        asyncio.run(open_with(value))
    owner, rest = str(err.value).split(": ", 1)
    assert owner == "discussion channel" and rest == group_chat_refusal(value)
    with pytest.raises(ConfigError, match=r"discussion channel: context=Summarize\(agent='s', keep_last=4, at=0.8\) "
                                          r"is invalid here: a channel draws no compaction"):
        asyncio.run(open_with(Summarize(agent=Agent("s"))))
