"""The AG2-style network discussion channel (docs/semantics.md "Hub and discussion channel")."""
import asyncio
import inspect
import random
import time

import pytest

from fsmchat.engine import runnable_graph
from fsmchat.network import CLOSE_TOOL, EV_CHANNEL_CLOSED, EV_CHANNEL_EXPIRED, EV_CHANNEL_INVITE, \
    EV_CHANNEL_INVITE_ACK, EV_CHANNEL_INVITE_REJECT, EV_CHANNEL_OPENED, EV_EXPECTATION_VIOLATED, EV_TEXT, \
    EV_TURN_FAILED, LIFECYCLE, ORDERING_ROUND_ROBIN, Channel, DiscussionState, Hub, HubClient, ManualClock, \
    MemoryKnowledgeStore, NetworkError, NotFoundError, ProtocolError, WindowedSummary, example_lifecycle_graph, \
    example_turn_graph, turn_graph, turn_within, wait_for_text_count, window_size
from fsmchat.network.handler import DefaultHandler
from fsmchat.testing import Delay, Empty, Fail, ScriptedModel, ToolCall, assert_trace_is_path
from support.hubs import TOPIC, arun, model_hub, our_tasks, passive_hub

HANG_GUARD = 300  # seconds before a wait that should end fails as hung (never a verdict: a loaded machine is slow)


def texts(hub, cid):
    return [(e.sender, e.text) for e in hub.read_log(cid) if e.event_type == EV_TEXT]


def kinds(hub, cid):
    return [e.event_type for e in hub.read_log(cid)]


# ---- opening: order, handshake, refusals ----
def test_order_is_creator_first_then_targets_in_given_order():
    async def body():
        hub, (alice, bob, carol) = await passive_hub(["alice", "bob", "carol"])
        ch = await alice.open(type="discussion", target=[carol.agent_id, bob.agent_id],
                              knobs={"ordering": ORDERING_ROUND_ROBIN})
        assert hub.adapter_state(ch.channel_id) == DiscussionState(["alice", "carol", "bob"], "alice", 0)
        # the creator listed among the targets keeps its listed place (targets' order as given) and
        # still speaks first; missing knobs mean round robin
        ch2 = await bob.open(type="discussion", target=["alice", "bob", "carol"])
        assert hub.adapter_state(ch2.channel_id) == DiscussionState(["alice", "bob", "carol"], "bob", 0)
        ch3 = await carol.open(target=["bob", "carol"])
        assert hub.adapter_state(ch3.channel_id) == DiscussionState(["bob", "carol"], "carol", 0)
        await hub.aclose()

    arun(body())


def test_creator_among_targets_speaks_first_then_the_listed_order_goes_round():
    """docs/semantics.md's measured example: creator alice, targets [carol, alice, bob] -> order
    [carol, alice, bob]; alice speaks first, then bob, carol, alice, ..."""
    async def body():
        hub, (alice, bob, carol) = await passive_hub(["alice", "bob", "carol"])
        ch = await alice.open(type="discussion", target=["carol", "alice", "bob"])
        cid = ch.channel_id
        assert hub.adapter_state(cid) == DiscussionState(["carol", "alice", "bob"], "alice", 0)
        spoke = []
        for _ in range(5):
            who = hub.adapter_state(cid).expected_next_speaker
            await hub.client(who).channel(cid).send(f"{who} speaks")
            spoke.append(who)
        assert spoke == ["alice", "bob", "carol", "alice", "bob"]
        assert hub.adapter_state(cid) == DiscussionState(["carol", "alice", "bob"], "carol", 5)
        _lifecycle, turns = hub.runs(cid)
        assert turns.path == ["awaiting_alice", "awaiting_bob", "awaiting_carol", "awaiting_alice", "awaiting_bob"]
        await hub.aclose()

    arun(body())


def test_handshake_one_invite_each_acked_then_opened_to_everyone():
    async def body():
        hub, (alice, bob, carol) = await passive_hub(["alice", "bob", "carol"])
        ch = await alice.open(type="discussion", target=["bob", "carol"])
        cid = ch.channel_id
        assert ch.state == "active"
        log = hub.read_log(cid)
        assert [(e.event_type, e.sender, e.audience) for e in log] == [
            (EV_CHANNEL_INVITE, "alice", ("bob",)), (EV_CHANNEL_INVITE, "alice", ("carol",)),
            (EV_CHANNEL_INVITE_ACK, "bob", ("alice",)), (EV_CHANNEL_INVITE_ACK, "carol", ("alice",)),
            (EV_CHANNEL_OPENED, "hub", ("alice", "bob", "carol"))]
        assert log[0].data["participants"] == ["alice", "bob", "carol"]
        assert [e.seq for e in log] == [1, 2, 3, 4, 5]
        lifecycle, turns = hub.runs(cid)
        assert lifecycle.path == ["pending", "pending"] and lifecycle.state == "active"
        assert [e.trigger for e in lifecycle.trace] == ["ack", "ack"]
        assert lifecycle.runnable is runnable_graph(LIFECYCLE)  # the engine's machine, not a second one
        assert turns.state == "awaiting_alice"
        await hub.aclose()

    arun(body())


def test_rejected_invite_fails_the_open_and_closes_the_channel():
    async def body():
        hub = await Hub.open(MemoryKnowledgeStore(), clock=ManualClock())
        alice = await hub.register("alice")
        await hub.register("bob")
        await hub.register("carol", accept_invites=False)
        with pytest.raises(ProtocolError, match=r"^channel 'discussion-1' is closed: invite rejected by 'carol'$"):
            await alice.open(type="discussion", target=["bob", "carol"])
        cid = "discussion-1"
        assert hub.channel_state(cid) == "closed" and hub.close_reason(cid) == "invite rejected by 'carol'"
        assert kinds(hub, cid) == [EV_CHANNEL_INVITE, EV_CHANNEL_INVITE, EV_CHANNEL_INVITE_ACK,
                                   EV_CHANNEL_INVITE_REJECT, EV_CHANNEL_CLOSED]
        lifecycle, turns = hub.runs(cid)
        assert lifecycle.path == ["pending", "pending", "closed"] and turns.state == "closed"
        assert_trace_is_path(LIFECYCLE, lifecycle)
        await hub.aclose()

    arun(body())


def test_unknown_ordering_is_refused_at_open_before_any_invite():
    async def body():
        hub, (alice, bob) = await passive_hub(["alice", "bob"])
        heard = []
        hub.listen(heard.append)
        with pytest.raises(ProtocolError) as ei:
            await alice.open(type="discussion", target=[bob.agent_id], knobs={"ordering": "spiral"})
        assert str(ei.value) == "discussion knobs.ordering='spiral' not supported; choose from ['round_robin']"
        with pytest.raises(ProtocolError) as ei:
            await alice.open(target=[bob.agent_id], knobs={"ordering": "weighted"})
        assert str(ei.value) == "discussion knobs.ordering='weighted' not supported; choose from ['round_robin']"
        assert hub.list_channels(include_hidden=True) == [] and heard == []  # nothing created, nothing sent
        await hub.aclose()

    arun(body())


@pytest.mark.parametrize("kw, error, needle", [
    ({"target": []}, ProtocolError, "at least 2 participants"),
    ({"target": ["alice"]}, ProtocolError, "at least 2 participants"),
    ({"target": ["bob", "bob"]}, ProtocolError, "'bob' is listed twice"),
    ({"target": ["bob", "zed"]}, NotFoundError, "'zed' is not a registered agent"),
    ({"target": ["bob"], "type": "consulting"}, ProtocolError, "channel type 'consulting' not supported"),
    ({"target": ["bob"], "knobs": {"max_texts": 0}}, ProtocolError, "max_texts=0 must be a positive integer"),
    ({"target": ["bob"], "knobs": {"colour": "red"}}, ProtocolError, r"knobs \['colour'\] not supported"),
    ({"target": ["bob"], "ttl": -5}, ProtocolError, "ttl"),
])
def test_bad_opens_are_refused_before_anything_is_created(kw, error, needle):
    async def body():
        hub, (alice, _bob) = await passive_hub(["alice", "bob"])
        with pytest.raises(error, match=needle):
            await alice.open(**kw)
        assert hub.list_channels(include_hidden=True) == []
        await hub.aclose()

    arun(body())


# ---- the turn rule ----
@pytest.mark.parametrize("n", [2, 3, 5])
def test_can_send_for_every_participant_at_every_turn(n):
    async def body():
        names = [f"p{i}" for i in range(n)]
        hub, clients = await passive_hub([*names, "outsider"])
        ch = await clients[0].open(target=names[1:])
        cid = ch.channel_id
        for k in range(2 * n + 1):
            expected = names[k % n]
            assert hub.adapter_state(cid) == DiscussionState(names, expected, k)
            assert {p: hub.can_send(cid, p) for p in names} == {p: p == expected for p in names}
            assert not hub.can_send(cid, "outsider")
            await hub.client(expected).channel(cid).send(f"{expected} at turn {k}")
        assert [s for s, _ in texts(hub, cid)] == [names[k % n] for k in range(2 * n + 1)]
        await ch.close("done")
        assert not any(hub.can_send(cid, p) for p in names)
        _lifecycle, turns = hub.runs(cid)
        assert_trace_is_path(hub.turn_graph(cid), turns)
        assert turns.path[-1] == "closed" and [e.trigger for e in turns.trace][:-2] == ["text"] * (2 * n + 1)
        await hub.aclose()

    arun(body())


def test_every_rejection_has_its_exact_message_records_nothing_and_is_reported():
    async def body():
        clock = ManualClock()
        hub, (alice, bob, carol, dave) = await passive_hub(["alice", "bob", "carol", "dave"], clock=clock)
        heard = []
        hub.listen(heard.append)
        ch = await alice.open(type="discussion", target=["bob", "carol"], ttl=100)
        cid = ch.channel_id
        await ch.send("kickoff")

        def snapshot():
            return hub.read_log(cid), hub.adapter_state(cid), hub.store.get_state(cid), hub.channel_state(cid)

        async def refused(handle, text, message):
            before = snapshot()
            with pytest.raises(ProtocolError) as ei:
                await handle.send(text)
            assert str(ei.value) == message
            assert snapshot() == before
            last = heard[-1]
            assert last.kind == "rejected" and last.error is ei.value and last.agent_id == handle.agent_id

        await refused(alice.channel(cid), "me again", f"discussion channel '{cid}' expects 'bob' to speak, got 'alice'")
        await refused(carol.channel(cid), "skip bob", f"discussion channel '{cid}' expects 'bob' to speak, got 'carol'")
        await refused(dave.channel(cid), "let me in", f"'dave' is not a participant of channel '{cid}'")
        with pytest.raises(ProtocolError, match="'dave' is not a participant"):
            await dave.channel(cid).emit("myapp.note", {"x": 1})
        with pytest.raises(ProtocolError, match="'dave' is not a participant"):
            await dave.channel(cid).close("hijack")
        assert hub.channel_state(cid) == "active"
        await bob.channel(cid).send("bob speaks")  # the expected speaker is accepted

        await ch.close("enough")
        for handle in (alice.channel(cid), bob.channel(cid), carol.channel(cid)):
            await refused(handle, "after close", f"channel '{cid}' is closed")
        with pytest.raises(ProtocolError, match=f"^channel '{cid}' is closed$"):
            await bob.channel(cid).emit("myapp.note")

        ch2 = await alice.open(target=["bob"], ttl=30)
        clock.advance(30)  # TTL ran out; no sweep has run yet: the send itself finds it expired
        assert not hub.can_send(ch2.channel_id, "alice")
        with pytest.raises(ProtocolError) as ei:
            await ch2.send("too late")
        assert str(ei.value) == f"channel '{ch2.channel_id}' is expired"
        assert hub.channel_state(ch2.channel_id) == "expired" and EV_TEXT not in kinds(hub, ch2.channel_id)
        await refused(bob.channel(ch2.channel_id), "still there?", f"channel '{ch2.channel_id}' is expired")
        assert hub.stats(cid).rejected_sends == 9
        await hub.aclose()

    arun(body())


def test_custom_events_pass_any_time_without_advancing_the_turn():
    async def body():
        hub, (alice, bob, carol) = await passive_hub(["alice", "bob", "carol"])
        ch = await alice.open(target=["bob", "carol"])
        cid = ch.channel_id
        await ch.send("kickoff")
        state = hub.adapter_state(cid)
        env = await carol.channel(cid).emit("myapp.review_request", {"draft": 2})
        await alice.channel(cid).emit("myapp.note")
        assert (env.event_type, env.sender, env.data, env.audience) == ("myapp.review_request", "carol",
                                                                        {"draft": 2}, ("alice", "bob"))
        assert hub.adapter_state(cid) == state == DiscussionState(["alice", "bob", "carol"], "bob", 1)
        for reserved in (EV_CHANNEL_OPENED, EV_CHANNEL_CLOSED, EV_TURN_FAILED):
            with pytest.raises(ProtocolError, match="reserved for the hub"):
                await bob.channel(cid).emit(reserved)
        with pytest.raises(ProtocolError, match="a text must be a non-empty string"):
            await bob.channel(cid).send("   ")
        assert hub.adapter_state(cid) == state
        await hub.aclose()

    arun(body())


def test_an_agent_sends_only_as_itself():
    async def body():
        hub, (alice, bob) = await passive_hub(["alice", "bob"])
        assert list(inspect.signature(Channel.send).parameters) == ["self", "text", "data"]  # no sender to forge
        ch = await alice.open(target=["bob"])
        handle = bob.channel(ch.channel_id)
        assert handle.agent_id == "bob" and ch.agent_id == "alice"
        await ch.send("from alice")
        env = await handle.send("from bob")
        assert env.sender == "bob"
        forged = HubClient(hub, "alice", None, DefaultHandler())  # not the registered client
        with pytest.raises(NetworkError, match="client 'alice' is not registered with this hub"):
            await Channel(forged, ch.channel_id).send("forged")
        with pytest.raises(NotFoundError, match="channel 'nope' not found"):
            alice.channel("nope")
        with pytest.raises(NetworkError, match="agent 'alice' is already registered"):
            await hub.register("alice")
        await hub.aclose()

    arun(body())


# ---- the default handler: one model call per text ----
@pytest.mark.parametrize("n", [2, 3, 5])
def test_exactly_one_model_call_per_text(n):
    async def body():
        m = ScriptedModel(fn=lambda req: f"{req.agent} says #{req.n}")
        names = [f"p{i}" for i in range(n)]
        hub, clients = await model_hub(names, m)
        cap = 3 * n + 1
        ch = await clients[0].open(type="discussion", target=names[1:],
                                   knobs={"ordering": ORDERING_ROUND_ROBIN, "max_texts": cap})
        await ch.send(TOPIC)
        assert await wait_for_text_count(hub, ch.channel_id, expected=cap, timeout=HANG_GUARD) == cap
        await hub.drain(timeout=HANG_GUARD)
        said = texts(hub, ch.channel_id)
        assert [s for s, _ in said] == [names[k % n] for k in range(cap)]
        s = hub.stats(ch.channel_id)
        # every text after the kickoff cost exactly one model call, and every model call became a text
        assert s.texts == cap and s.model_calls == m.calls() == s.replies == cap - 1
        assert s.wasted_calls == 0 and s.turn_failures == 0
        assert s.deliveries == cap * (n - 1) and s.skipped_deliveries == cap * (n - 1) - (cap - 1)
        for c in clients:
            own = sum(1 for who, _ in said if who == c.agent_id)
            assert m.calls(c.agent_id) == c.stats.model_calls == own - (c is clients[0])
        await hub.aclose()

    arun(body())


def test_exact_cap_never_overshoots_over_20_runs():
    async def body():
        for run in range(20):
            rng = random.Random(run)
            n, cap = [2, 3, 4, 5][run % 4], [1, 2, 5, 6, 9][run % 5]
            m = ScriptedModel(fn=lambda req, rng=rng: Delay(rng.choice([0, 0, 0.001]), f"{req.agent} {req.n}"))
            names = [f"a{i}" for i in range(n)]
            hub, clients = await model_hub(names, m)
            ch = await clients[0].open(target=names[1:], knobs={"max_texts": cap})
            await ch.send("go")
            await wait_for_text_count(hub, ch.channel_id, expected=cap, timeout=HANG_GUARD)
            await hub.drain(timeout=HANG_GUARD)
            # drain returned: every delivery is handled, so no model call may still be running
            assert [t for t in hub.runtime(ch.channel_id).turn_tasks() if not t.done()] == [], (run, n, cap)
            assert not [t for t in our_tasks() if t.get_name().startswith("fsmchat-turn")], (run, n, cap)
            s = hub.stats(ch.channel_id)
            assert (s.texts, s.model_calls, m.calls(), s.wasted_calls) == (cap, cap - 1, cap - 1, 0), (run, n, cap)
            assert hub.close_reason(ch.channel_id) == "max_texts" and hub.channel_state(ch.channel_id) == "closed"
            log = hub.read_log(ch.channel_id)
            assert log[-1].event_type == EV_CHANNEL_CLOSED and log[-1].data == {"reason": "max_texts"}
            assert log[-2].event_type == EV_TEXT
            _lifecycle, turns = hub.runs(ch.channel_id)
            assert [e.trigger for e in turns.trace] == ["text"] * cap + [None]
            await hub.aclose()

    arun(body())


def test_model_sees_the_window_and_the_summary_line():
    async def body():
        m = ScriptedModel(fn=lambda req: f"{req.agent} point {req.n}")
        hub, (alice, bob) = await model_hub(["alice", "bob"], m)
        ch = await alice.open(target=["bob"], knobs={"max_texts": 8})
        await ch.send(TOPIC)
        await wait_for_text_count(hub, ch.channel_id, expected=8, timeout=HANG_GUARD)
        await hub.drain(timeout=HANG_GUARD)
        first, last = m.requests_of("bob")[0], m.requests_of("bob")[-1]
        assert first.messages[0] == {"role": "system", "content": "You are bob. One short sentence."}
        assert first.messages[1]["role"] == "system" and "alice and bob take turns" in first.messages[1]["content"]
        assert first.messages[2] == {"role": "user", "content": f"[alice]: {TOPIC}"}
        assert first.prompt.startswith("You are bob in a round-robin discussion with alice")
        assert window_size(2) == 4
        # bob's 4th call sees 7 texts: 3 folded into the summary line, the last 4 labelled
        assert last.messages[2]["content"].split("\n") == [
            f"[summary] 3 earlier texts (alice 2, bob 1); it opened with [alice]: {TOPIC}",
            "[bob]: bob point 2", "[alice]: alice point 2", "[bob]: bob point 3", "[alice]: alice point 3"]
        await hub.aclose()

    arun(body())


def test_windowed_summary_unit():
    w = WindowedSummary(window_size(3))
    assert w.recent_n == 6 and window_size(1) == 4 and window_size(5) == 10
    short = [("a", "one"), ("b", "two")]
    assert w.lines(short) == ["[a]: one", "[b]: two"]
    many = [(["a", "b", "c"][i % 3], f"t{i}") for i in range(7)]
    assert w.lines(many) == ["[summary] 1 earlier text (a 1); it opened with [a]: t0",
                             "[b]: t1", "[c]: t2", "[a]: t3", "[b]: t4", "[c]: t5", "[a]: t6"]
    assert w.lines([("a", "x " * 200)])[0].startswith("[a]: x x")


# ---- closing ----
def test_close_is_idempotent_and_keeps_the_first_reason():
    async def body():
        hub, (alice, bob) = await passive_hub(["alice", "bob"])
        ch = await alice.open(target=["bob"])
        await ch.send("hello")
        assert await ch.close("first reason") == "first reason"
        assert await bob.channel(ch.channel_id).close("second reason") == "first reason"
        assert await ch.close() == "first reason"
        closed = [e for e in hub.read_log(ch.channel_id) if e.event_type == EV_CHANNEL_CLOSED]
        assert len(closed) == 1 and closed[0].data == {"reason": "first reason"} and closed[0].sender == "alice"
        assert closed[0].audience == ("alice", "bob")
        assert hub.close_reason(ch.channel_id) == "first reason" and ch.close_reason == "first reason"
        lifecycle, turns = hub.runs(ch.channel_id)
        assert lifecycle.path == ["pending", "active", "closed"] and lifecycle.stop_reason == "closed"
        assert turns.path == ["awaiting_alice", "awaiting_bob", "closed"]
        assert_trace_is_path(LIFECYCLE, lifecycle)
        assert_trace_is_path(hub.turn_graph(ch.channel_id), turns)
        assert hub.store.get_state(ch.channel_id)["close_reason"] == "first reason"
        await hub.aclose()

    arun(body())


def test_agent_side_close_tool():
    async def body():
        m = ScriptedModel({"alice": [], "bob": [ToolCall("close_channel", {"reason": "we agree"})], "carol": []})
        hub, (alice, bob, carol) = await model_hub(["alice", "bob", "carol"], m, bob={"close_tool": True})
        ch = await alice.open(target=["bob", "carol"])
        await ch.send(TOPIC)
        await wait_for_text_count(hub, ch.channel_id, expected=1)
        await hub.drain(timeout=HANG_GUARD)
        assert hub.channel_state(ch.channel_id) == "closed" and hub.close_reason(ch.channel_id) == "we agree"
        closed = hub.read_log(ch.channel_id)[-1]
        assert (closed.event_type, closed.sender) == (EV_CHANNEL_CLOSED, "bob")
        req = m.requests_of("bob")[0]
        assert req.tools == [CLOSE_TOOL] and req.tool_choice == "auto" and "close_channel tool" in req.prompt
        assert m.calls("carol") == 0 and hub.stats(ch.channel_id).turn_failures == 0
        await hub.aclose()

    arun(body())


def test_callable_participant_closes_through_the_turn():
    async def body():
        hub = await Hub.open(MemoryKnowledgeStore(), clock=ManualClock())

        def closer(turn):
            assert turn.variables["participants"] == ["alice", "closer"] and turn.variables["turn"] == 1
            assert turn.history[-1]["content"] == "[alice]: is it settled?"
            turn.variables["close_channel"]("settled")
            return "Yes, it is settled."

        closer.__name__ = "closer"
        alice = await hub.register("alice")
        await hub.register(closer, close_tool=True)
        ch = await alice.open(target=["closer"])
        await ch.send("is it settled?")
        await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=HANG_GUARD)
        await hub.drain(timeout=HANG_GUARD)
        assert texts(hub, ch.channel_id)[-1] == ("closer", "Yes, it is settled.")
        assert hub.close_reason(ch.channel_id) == "settled"
        await hub.aclose()

    arun(body())


def test_app_side_close_cancels_the_model_call_in_flight():
    async def body():
        m = ScriptedModel({"alice": [], "bob": [Delay(3600, "too late")]})
        hub, (alice, bob) = await model_hub(["alice", "bob"], m)
        ch = await alice.open(target=["bob"])
        await ch.send("kickoff")
        while not m.requests_of("bob"):  # bob's call has reached the model (and waits there)
            await asyncio.sleep(0)
        await ch.close("app cap")
        await hub.drain(timeout=HANG_GUARD)  # returns: bob's hour-long call was cancelled, not waited for
        s = hub.stats(ch.channel_id)
        assert (s.texts, s.model_calls, s.wasted_calls) == (1, 1, 1)
        assert texts(hub, ch.channel_id) == [("alice", "kickoff")]
        await hub.aclose()
        assert our_tasks() == []

    arun(body())


def test_reference_style_app_side_cap():
    async def body():
        m = ScriptedModel(fn=lambda req: f"{req.agent} {req.n}")
        hub, clients = await model_hub(["alice", "bob", "carol"], m)
        ch = await clients[0].open(target=["bob", "carol"])
        await ch.send(TOPIC)
        await wait_for_text_count(hub, ch.channel_id, expected=6, timeout=HANG_GUARD)
        await ch.close()
        await hub.drain(timeout=HANG_GUARD)
        assert hub.close_reason(ch.channel_id) == "closed"
        # the wait is woken by the 6th text before any handler sees it, so closing at once lands exactly
        # (AG2 polls and overshoots); max_texts is the guarantee that needs no prompt app
        s = hub.stats(ch.channel_id)
        assert (s.texts, s.model_calls, s.wasted_calls) == (6, 5, 0)
        await hub.aclose()

    arun(body())


def test_wait_for_text_count_fails_when_the_channel_ends_short():
    async def body():
        hub, (alice, bob) = await passive_hub(["alice", "bob"])
        ch = await alice.open(target=["bob"])
        waiter = asyncio.create_task(wait_for_text_count(hub, ch.channel_id, expected=3))
        await ch.send("one")
        await asyncio.sleep(0)
        await ch.close("stop")
        with pytest.raises(NetworkError, match="is closed with 1 of 3 texts"):
            await waiter
        await hub.aclose()

    arun(body())


# ---- time: TTL and expectations ----
def test_ttl_expiry_on_a_fake_clock():
    async def body():
        clock = ManualClock(1000.0)
        hub, (alice, bob, carol) = await passive_hub(["alice", "bob", "carol"], clock=clock)
        ch = await alice.open(type="discussion", target=["bob", "carol"], ttl=60)
        cid = ch.channel_id
        clock.advance(59)
        assert hub.expire_due() == [] and ch.state == "active"
        await ch.send("just in time")
        clock.advance(1)
        assert hub.expire_due() == [cid] and hub.expire_due() == []
        assert ch.state == "expired" and hub.close_reason(cid) == "ttl"
        assert hub.read_log(cid)[-1].event_type == EV_CHANNEL_EXPIRED
        assert not any(hub.can_send(cid, p) for p in ("alice", "bob", "carol"))
        with pytest.raises(ProtocolError, match=f"^channel '{cid}' is expired$"):
            await bob.channel(cid).send("hello?")
        assert await ch.close("late") == "ttl"  # nothing more to close
        assert kinds(hub, cid).count(EV_CHANNEL_EXPIRED) == 1 and EV_CHANNEL_CLOSED not in kinds(hub, cid)
        lifecycle, turns = hub.runs(cid)
        assert lifecycle.path == ["pending", "pending", "active", "expired"] and lifecycle.stop_reason == "ttl"
        assert turns.path == ["awaiting_alice", "awaiting_bob", "expired"]
        assert_trace_is_path(LIFECYCLE, lifecycle)
        await hub.aclose()

    arun(body())


def test_background_sweep_expires_on_the_injected_clock():
    async def body():
        class CountingClock(ManualClock):  # each sweep reads the clock: the reads show sweeps have run
            reads = 0

            def __call__(self) -> float:
                self.reads += 1
                return super().__call__()

        clock = CountingClock()
        hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0.005, clock=clock)
        alice, _bob = await hub.register("alice"), await hub.register("bob")
        ch = await alice.open(target=["bob"], ttl="2m")
        seen, hung = clock.reads, time.monotonic() + HANG_GUARD
        while clock.reads < seen + 3:  # sweeps ran before the clock moved ...
            assert time.monotonic() < hung, "hung: the background sweep never ran"
            await asyncio.sleep(0.005)
        assert ch.state == "active"  # ... and expired nothing early
        clock.advance(120)
        hung = time.monotonic() + HANG_GUARD
        while ch.state != "expired":  # the next sweep expires it
            assert time.monotonic() < hung, f"hung: the sweep never expired the channel ({ch.state})"
            await asyncio.sleep(0.005)
        await hub.aclose()
        assert our_tasks() == []

    arun(body())


def test_expectations_fire_at_120s_and_600s_of_fake_time():
    async def body():
        clock = ManualClock()
        hub, (alice, bob, carol) = await passive_hub(["alice", "bob", "carol"], clock=clock)
        heard = []
        hub.listen(heard.append)
        ch = await alice.open(target=["bob", "carol"])
        cid = ch.channel_id
        await ch.send("kickoff")  # bob's turn starts at t=0 and bob never answers
        clock.advance(119)
        assert hub.check_expectations() == []
        clock.advance(1)
        (warn,) = hub.check_expectations()
        assert warn.kind == "expectation" and warn.agent_id == "bob"
        assert warn.data == {"expectation": "turn_within", "seconds": 120.0, "action": "warn", "speaker": "bob",
                             "turn": 1, "waited": 120.0}
        assert warn.envelope.event_type == EV_EXPECTATION_VIOLATED and warn.envelope.data == warn.data
        assert hub.check_expectations() == []  # reported once per turn
        assert not hub.is_hidden(cid) and cid in hub.list_channels()
        clock.advance(480)
        _expired, (hide,) = await hub.sweep()
        assert (hide.data["action"], hide.data["seconds"], hide.data["waited"]) == ("hide", 600.0, 600.0)
        assert hub.is_hidden(cid) and cid not in hub.list_channels() and cid in hub.list_channels(include_hidden=True)
        assert [e.kind for e in heard].count("expectation") == 2
        assert hub.adapter_state(cid).turn_count == 1  # expectations never advance the turn
        await bob.channel(cid).send("sorry, here I am")  # carol's turn starts now (t=600)
        assert not hub.is_hidden(cid)
        clock.advance(120)
        (warn2,) = hub.check_expectations()
        assert (warn2.data["speaker"], warn2.data["turn"], warn2.data["action"]) == ("carol", 2, "warn")
        await hub.aclose()

    arun(body())


def test_custom_expectations_and_turn_within_parsing():
    assert turn_within("120s", "warn").seconds == 120.0 and turn_within("10m", "hide").seconds == 600.0
    with pytest.raises(ValueError, match="action 'page' not supported"):
        turn_within(5, "page")
    with pytest.raises(ValueError, match="positive"):
        turn_within(0)

    async def body():
        clock = ManualClock()
        hub, (alice, _bob) = await passive_hub(["alice", "bob"], clock=clock)
        ch = await alice.open(target=["bob"], expectations=[turn_within(5)])
        clock.advance(5)  # the first turn (alice's) started when the channel opened
        (v,) = hub.check_expectations()
        assert (v.data["speaker"], v.data["turn"], v.data["seconds"]) == ("alice", 0, 5.0)
        await ch.close()
        clock.advance(1000)
        assert hub.check_expectations() == []  # a closed channel expects nothing
        await hub.aclose()

    arun(body())


# ---- failures do not stall silently ----
@pytest.mark.parametrize("answer, reason", [
    (Fail(500), "ModelCallError"), ("", "empty reply"), (Empty(), "ModelCallError")])
def test_a_failed_or_empty_reply_is_a_turn_failure_the_expectations_catch(answer, reason):
    async def body():
        clock = ManualClock()
        m = ScriptedModel({"alice": [], "bob": [answer], "carol": []})
        hub, (alice, bob, carol) = await model_hub(["alice", "bob", "carol"], m, clock=clock)
        heard = []
        hub.listen(heard.append)
        ch = await alice.open(target=["bob", "carol"])
        cid = ch.channel_id
        await ch.send(TOPIC)
        await hub.drain(timeout=HANG_GUARD)
        failed = hub.read_log(cid)[-1]
        assert (failed.event_type, failed.sender, failed.data["turn"]) == (EV_TURN_FAILED, "bob", 1)
        assert reason in failed.data["reason"]
        assert [e for e in heard if e.kind == "turn_failed"][0].data == failed.data
        s = hub.stats(cid)
        assert (s.model_calls, s.replies, s.turn_failures) == (1, 0, 1)
        assert hub.adapter_state(cid) == DiscussionState(["alice", "bob", "carol"], "bob", 1)  # not advanced
        assert m.calls("carol") == 0
        clock.advance(120)
        (warn,) = hub.check_expectations()
        assert (warn.data["speaker"], warn.data["action"]) == ("bob", "warn")
        await hub.aclose()

    arun(body())


def test_a_failed_turn_reaches_the_waiter_with_its_cause():
    """No silent stall: wait_for_text_count ends with the turn's error, not after its timeout."""
    from fsmchat.network import TurnFailed, wait_for_text_count

    async def body():
        m = ScriptedModel({"alice": [], "bob": [Fail(401, "invalid api key sk-...")], "carol": []})
        hub, (alice, bob, carol) = await model_hub(["alice", "bob", "carol"], m)
        ch = await alice.open(target=["bob", "carol"])
        await ch.send(TOPIC)
        with pytest.raises(TurnFailed, match=r"bob's turn 1 failed: ModelCallError") as ei:
            await wait_for_text_count(hub, ch.channel_id, expected=6, timeout=600)
        assert (ei.value.agent_id, ei.value.turn, ei.value.channel_id) == ("bob", 1, ch.channel_id)
        assert m.calls("bob") == 1 and m.calls("carol") == 0
        await hub.aclose()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(body(), 30))  # far below the 600 s the waiter was given
    finally:
        loop.close()


# ---- graphs ----
def test_channel_and_turn_graphs_validate_and_render():
    life = example_lifecycle_graph().validate()
    assert list(life.states) == ["pending", "active", "closed", "expired"]
    dot, mmd = life.to_dot(), life.to_mermaid()
    assert "pending -> active" in dot and "ack [all_acked]" in dot
    assert "active --> expired : expire [ttl_elapsed]" in mmd and "pending --> closed : reject [invite_rejected]" in mmd
    turns = example_turn_graph().validate()
    assert list(turns.states) == ["awaiting_alice", "awaiting_bob", "awaiting_carol", "closed", "expired"]
    mmd = turns.to_mermaid()
    assert "awaiting_carol --> awaiting_alice : text" in mmd
    assert "awaiting_bob --> closed : close [channel_closed]" in mmd
    assert "reaches_cap" not in mmd
    capped = turn_graph(["a", "b"], max_texts=4).validate()
    assert "awaiting_a --> closed : text [reaches_cap]" in capped.to_mermaid()
    for n in range(2, 7):
        turn_graph([f"agent.{i}" for i in range(n)]).validate().to_dot()  # dotted ids become valid state names
    with pytest.raises(ValueError, match="at least 2 participants"):
        turn_graph(["solo"])


def test_example_runs_offline(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "discussion_channel.py"
    spec = importlib.util.spec_from_file_location("discussion_channel_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.build().validate().name == "discussion_turns"
    asyncio.run(mod.discuss(mod.TOPIC))
    out = capsys.readouterr().out
    assert out.startswith(f"[alice]: {mod.TOPIC}\n[bob]: ")
    assert "-- spoke: alice -> bob -> carol -> alice -> bob -> carol" in out
    assert "model calls: 5; skipped deliveries: 7; wasted calls: 0" in out
    assert "-- closed: max_texts" in out


def test_shutdown_leaves_no_task_behind():
    async def body():
        m = ScriptedModel({"alice": [], "bob": [Delay(30, "never")]})
        hub, (alice, bob) = await model_hub(["alice", "bob"], m)
        ch = await alice.open(target=["bob"])
        await ch.send("kickoff")
        while hub.stats(ch.channel_id).model_calls == 0:
            await asyncio.sleep(0)
        assert any(t.get_name().startswith("fsmchat-turn") for t in our_tasks())
        await hub.aclose()
        await hub.aclose()  # idempotent
        assert our_tasks() == []
        with pytest.raises(NetworkError, match="the hub is closed"):
            await hub.register("carol")

    arun(body())
