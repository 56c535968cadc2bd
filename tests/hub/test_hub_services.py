"""The hub's seams after its split: ``client.services`` (what a handler may do to the hub) and
``hub.runtime(channel_id)`` (one channel's state and transitions)."""
import asyncio

import pytest

from fsmchat.engine import runnable_graph
from fsmchat.network import EV_CHANNEL_INVITE, EV_TEXT, EV_TURN_FAILED, HANDLER_COUNTS, LIFECYCLE, ChannelRuntime, \
    HubClient, HubClosed, HubServices, NetworkError, NotFoundError, ProtocolError, TurnFailed, TurnStats, \
    wait_for_text_count
from fsmchat.network.handler import DefaultHandler
from fsmchat.testing import Empty, ScriptedModel
from support.hubs import TOPIC, arun, model_hub, our_tasks, passive_hub  # noqa: E402

HANG_GUARD = 300  # seconds before a wait that should end fails as hung (never a verdict)


def counts(stats: TurnStats) -> dict:
    return {k: v for k, v in vars(stats).items() if v}


class Echo:
    """A custom handler keeping the default handler's counts and events through ``client.services``:
    on its turn it answers ``"<me> echoes <n>"`` (a model call run under the channel), else it skips."""

    async def __call__(self, client: HubClient, envelope):
        svc, cid = client.services, envelope.channel_id
        if envelope.event_type == EV_CHANNEL_INVITE:
            await client.channel(cid).ack()
            return
        if envelope.event_type != EV_TEXT:
            return
        svc.count(cid, "deliveries")
        if not client.can_send(cid):
            svc.count(cid, "skipped_deliveries")
            svc.notify("skipped", cid, envelope=envelope)
            return
        turn = client.hub.adapter_state(cid).turn_count
        svc.count(cid, "model_calls")
        svc.notify("model_call", cid, data={"turn": turn})

        async def answer():
            return f"{client.agent_id} echoes {turn}"

        text = await svc.track_turn(cid, asyncio.ensure_future(answer()))
        await client.channel(cid).send(text)
        svc.count(cid, "replies")


def test_a_custom_handler_keeps_the_counts_and_events_through_its_services():
    async def body():
        hub, (alice,) = await passive_hub(["alice"])
        bob = await hub.register("bob", handler=Echo())
        carol = await hub.register("carol", handler=Echo())
        assert isinstance(bob.services, HubServices) and bob.services.agent_id == "bob"
        heard = []
        hub.listen(heard.append)
        ch = await alice.open(target=["bob", "carol"], knobs={"max_texts": 3})
        await ch.send(TOPIC)
        assert await wait_for_text_count(hub, ch.channel_id, expected=3, timeout=HANG_GUARD) == 3
        await hub.drain(timeout=HANG_GUARD)
        cid = ch.channel_id
        assert [(e.sender, e.text) for e in hub.read_log(cid) if e.event_type == EV_TEXT] == [
            ("alice", TOPIC), ("bob", "bob echoes 1"), ("carol", "carol echoes 2")]
        assert hub.close_reason(cid) == "max_texts"
        # deliveries: bob and carol get the topic, carol bob's text, bob carol's (the 3rd closes the channel)
        assert counts(hub.stats(cid)) == {"texts": 3, "deliveries": 4, "skipped_deliveries": 2, "model_calls": 2,
                                          "replies": 2}
        for client in (bob, carol):
            assert counts(client.stats) == {"texts": 1, "deliveries": 2, "skipped_deliveries": 1, "model_calls": 1,
                                            "replies": 1}
        mine = sorted((e.kind, e.agent_id, e.channel_id) for e in heard if e.kind in ("skipped", "model_call"))
        assert mine == [("model_call", "bob", cid), ("model_call", "carol", cid), ("skipped", "bob", cid),
                        ("skipped", "carol", cid)]
        assert [e.data["turn"] for e in heard if e.kind == "model_call"] == [1, 2]
        await hub.aclose()

    arun(body())


def test_fail_turn_records_the_failure_and_ends_the_wait():
    async def body():
        hub, (alice,) = await passive_hub(["alice"])
        heard = []
        hub.listen(heard.append)

        async def gives_up(client, envelope):
            if envelope.event_type == EV_CHANNEL_INVITE:
                await client.channel(envelope.channel_id).ack()
            elif envelope.event_type == EV_TEXT and client.can_send(envelope.channel_id):
                client.services.fail_turn(envelope.channel_id, "no idea", 1)

        bob = await hub.register("bob", handler=gives_up)
        ch = await alice.open(target=["bob"])
        await ch.send(TOPIC)
        with pytest.raises(TurnFailed, match=r"^channel 'discussion-1': bob's turn 1 failed: no idea$"):
            await wait_for_text_count(hub, ch.channel_id, expected=3, timeout=HANG_GUARD)
        last = hub.read_log(ch.channel_id)[-1]
        assert (last.event_type, last.sender, last.data) == (EV_TURN_FAILED, "bob",
                                                             {"speaker": "bob", "turn": 1, "reason": "no idea"})
        failed = [e for e in heard if e.kind == "turn_failed"]
        assert [(e.agent_id, e.envelope) for e in failed] == [("bob", last)]
        assert hub.stats(ch.channel_id).turn_failures == 1 and bob.stats.turn_failures == 1
        assert hub.adapter_state(ch.channel_id).expected_next_speaker == "bob"  # the turn did not move
        await hub.aclose()

    arun(body())


def test_track_turn_returns_none_when_the_channel_ends_and_reraises_the_calls_error():
    async def body():
        hub, (alice,) = await passive_hub(["alice"])
        seen = []
        started = asyncio.Event()

        async def slow_or_broken(client, envelope):
            if envelope.event_type == EV_CHANNEL_INVITE:
                await client.channel(envelope.channel_id).ack()
                return
            if envelope.event_type != EV_TEXT or not client.can_send(envelope.channel_id):
                return

            async def call():
                if envelope.text == "boom":
                    raise ValueError("model broke")
                started.set()
                await asyncio.sleep(30)

            task = asyncio.ensure_future(call())
            try:
                seen.append(await client.services.track_turn(envelope.channel_id, task))
            except ValueError as exc:
                seen.append(exc)
            seen.append(task.cancelled())

        await hub.register("bob", handler=slow_or_broken)
        first = await alice.open(target=["bob"])
        await first.send("boom")
        await hub.drain(timeout=HANG_GUARD)
        assert [type(x).__name__ for x in seen] == ["ValueError", "bool"] and str(seen[0]) == "model broke"
        assert seen[1] is False
        seen.clear()
        second = await alice.open(target=["bob"])
        await second.send("think hard")
        await asyncio.wait_for(started.wait(), 5)
        assert len(hub.runtime(second.channel_id).turn_tasks()) == 1
        await second.close("enough")  # the channel ends: its running call is cancelled
        await hub.drain(timeout=HANG_GUARD)
        assert seen == [None, True]
        assert hub.runtime(second.channel_id).turn_tasks() == []
        await hub.aclose()
        assert our_tasks() == []

    arun(body())


def test_services_refuse_what_a_handler_may_not_do():
    async def body():
        hub, (alice, bob, carol) = await passive_hub(["alice", "bob", "carol"])
        ch = await alice.open(target=["bob"])
        cid = ch.channel_id
        svc = bob.services
        assert HANDLER_COUNTS == ("deliveries", "skipped_deliveries", "model_calls", "replies", "wasted_calls")
        with pytest.raises(ValueError) as err:
            svc.count(cid, "texts")
        assert str(err.value) == ("count 'texts' is not a handler's; a handler counts one of ['deliveries', "
                                  "'skipped_deliveries', 'model_calls', 'replies', 'wasted_calls'] (texts and "
                                  "rejected_sends are the hub's, turn_failures is fail_turn's)")
        with pytest.raises(ValueError, match=r"^notify kind 'accepted': a non-empty name that is not one the hub "
                                             r"reports itself \(\['accepted', 'expectation', 'rejected', "
                                             r"'tool_approval', 'tool_decision', 'tool_error', 'tool_result_truncated', "
                                             r"'transition', 'turn_failed'\]\)$"):
            svc.notify("accepted", cid)
        with pytest.raises(ValueError, match="notify kind ''"):
            svc.notify("", cid)
        with pytest.raises(ProtocolError, match=r"^'carol' is not a participant of channel 'discussion-1'$"):
            carol.services.count(cid, "deliveries")
        with pytest.raises(ProtocolError, match="'carol' is not a participant"):
            carol.services.fail_turn(cid, "not mine", 0)
        with pytest.raises(NotFoundError, match=r"^channel 'nope' not found$"):
            svc.call_stats("nope")
        with pytest.raises(ValueError, match=r"^TurnStats has no count 'typo'; its counts: \['texts', "):
            TurnStats().add("typo")
        assert hub.stats(cid) == TurnStats() and carol.stats == TurnStats()  # nothing was counted
        svc.count(cid, "wasted_calls")
        assert (hub.stats(cid).wasted_calls, bob.stats.wasted_calls, alice.stats.wasted_calls) == (1, 1, 0)
        assert svc.call_stats(cid) is hub.usage(cid)
        await hub.aclose()

    arun(body())


def test_the_channel_runtime_is_one_object_per_channel_on_the_engines_runner():
    async def body():
        hub, (alice, bob) = await passive_hub(["alice", "bob"])
        ch = await alice.open(target=["bob"])
        cid = ch.channel_id
        rt = hub.runtime(cid)
        assert isinstance(rt, ChannelRuntime) and rt is hub.runtime(cid) and rt.channel_id == cid
        assert rt.runs == hub.runs(cid) and rt.turn_graph is hub.turn_graph(cid)
        assert rt.lifecycle.runnable is runnable_graph(LIFECYCLE)  # the engine's machine, not a second executor
        env = rt.submit(alice, EV_TEXT, text="straight through the runtime")
        assert (env.seq, env.sender, env.audience) == (4, "alice", ("bob",))  # after invite, ack, opened
        assert rt.adapter_state().expected_next_speaker == "bob" and rt.stats.texts == 1 == alice.stats.texts
        with pytest.raises(ProtocolError, match=r"expects 'bob' to speak, got 'alice'"):
            rt.submit(alice, EV_TEXT, text="again")
        assert hub.stats(cid).rejected_sends == 1
        forged = HubClient(hub, "bob", None, DefaultHandler())
        with pytest.raises(NetworkError, match=r"^client 'bob' is not registered with this hub$"):
            rt.submit(forged, EV_TEXT, text="forged")
        forged.deliver(env)  # a client the hub did not start drops deliveries
        assert forged.worker is None
        await hub.drain(timeout=HANG_GUARD)
        assert rt.close_by(bob, "done") == "done" and rt.state == "closed" and rt.close_reason == "done"
        with pytest.raises(NotFoundError, match=r"^channel 'discussion-9' not found$"):
            hub.runtime("discussion-9")
        await hub.aclose()
        with pytest.raises(HubClosed, match="the hub is closed"):
            rt.submit(bob, "myapp.note")
        assert [e.seq for e in rt.log()] == [1, 2, 3, 4, 5]  # the refused texts took no number

    arun(body())


def test_the_close_tool_call_goes_through_the_agents_reply_path():
    """An empty response to a close-tool request fails the turn as a ``ModelCallError``, exactly as
    ``Agent.reply`` does (the handler asks ``Agent.reply_message``; no copy of the call path)."""
    async def body():
        m = ScriptedModel({"alice": [], "bob": [Empty()]})
        hub, (alice, bob) = await model_hub(["alice", "bob"], m, bob={"close_tool": True})
        ch = await alice.open(target=["bob"])
        await ch.send(TOPIC)
        with pytest.raises(TurnFailed, match=r"bob's turn 1 failed: ModelCallError"):
            await wait_for_text_count(hub, ch.channel_id, expected=2, timeout=HANG_GUARD)
        (req,) = m.requests_of("bob")
        assert req.tool_choice == "auto" and [t["function"]["name"] for t in req.tools] == ["close_channel"]
        assert hub.usage(ch.channel_id).calls == 1  # counted in the channel's call stats, as a turn's stats
        await hub.aclose()

    arun(body())
