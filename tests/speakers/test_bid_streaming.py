"""A GroupChat's bids stream when the run has a token sink: each bidder's ``message`` reaches the sink
as ``BidDelta`` pieces while its ``respond`` call's arguments arrive (or its JSON reply's text, with
``tool_mode="json"``), decoded by ``fsmchat.speakers.chunks.MessageField``; the round is decided by
the whole bids, as without streaming (the same requests but ``stream``/``stream_options``, the same
calls, winner and events). Without a sink nothing streams. The local OpenAI-compatible server holds
the rest of a bid until the client side has its first piece (a gate, no clock). Expected values are
written out here, not computed by fsmchat."""
from __future__ import annotations

import json
import random
import threading
from dataclasses import replace

import pytest

from support.openai_server import OpenAIServer, per_agent, respond, streamed, tool_call

from fsmchat import Agent, Bid, BidDelta, GroupChat, Message, RunResult, StreamRetry, TokenDelta, TraceEvent
from fsmchat.speakers import llm
from fsmchat.speakers.chunks import MessageField
from fsmchat.testing import ScriptedModel, ToolCall

TASK = "Ship on Friday?"


def feed(pieces):
    """What ``MessageField`` gives for each piece, and whether it is done after the last."""
    field = MessageField()
    return [field.feed(p) for p in pieces], field.done


# ---- the extractor, on written-out pieces ---------------------------------------------------------
def test_the_message_after_the_score_comes_piece_by_piece():
    assert feed(['{"score": 0.', '9, "message": "Ship ', 'it on Mon', 'day."}']) == \
        (["", "Ship ", "it on Mon", "day."], True)


def test_the_message_before_the_score():
    assert feed(['{"message": "Frid', 'ay is risky", "sco', 're": 0.8}']) == (["Frid", "ay is risky", ""], True)


def test_escapes_cut_between_two_pieces_are_decoded_once_whole():
    pieces = ['{"score": 1, "message": "a\\', 'nb \\"q\\', '" \\\\', '\\/ tab\\t', 'end"}']
    assert feed(pieces) == (["a", '\nb "q', '" \\', "/ tab\t", "end"], True)
    # a \u escape cut after the backslash, after the "u" and inside its digits
    assert feed(['{"message": "caf\\', 'u', '00', 'e9!"}']) == (["caf", "", "", "é!"], True)


def test_unicode_escapes_surrogate_pairs_and_raw_characters():
    pieces = ['{"message": "caf\\u0', '0e9 \\ud83d', '\\ude00 ', 'ü 😀", "score": 0}']
    assert feed(pieces) == (["caf", "é ", "😀 ", "ü 😀"], True)  # the high half is held until its low half
    assert feed(['{"message": "x\\ud83d', '!"}']) == (["x", "\ud83d!"], True)  # a lone half, as json keeps it
    assert json.loads('{"message": "x\\ud83d!"}')["message"] == "x\ud83d!"
    assert feed(['{"message": "\\ud83d\\ud83d\\ude00"}']) == (["\ud83d😀"], True)
    assert feed(['{"message": "\\ud83d"}']) == (["\ud83d"], True)


def test_an_empty_message_gives_nothing_and_is_done():
    assert feed(['{"score": 0.1, "message": ""}']) == ([""], True)
    assert feed(['{"score": 0.1, "mess', 'age": "', '"}']) == (["", "", ""], True)


def test_other_values_and_layout_are_passed_over():
    pieces = ['{"note": "a \\"message\\": \\"no\\" }", "meta": {"message": "no", "l": [1, "]", {}]}, ',
              '"score": 0.4, "ok": true, "n": null, "message": "yes"}']
    assert feed(pieces) == (["", "yes"], True)
    assert feed(['{\n  "score" : 0.5 ,\n  "message" :\n "hi"\n}']) == (["hi"], True)
    assert feed(['{"mess\\u0061ge": "escaped key"}']) == (["escaped key"], True)


def test_a_malformed_stream_ends_the_reading():
    assert feed(['{"score": 0.9 "message": "hi"}']) == ([""], True)  # no comma
    assert feed(['{"message": "a\\x b"}']) == (["a"], True)  # not a JSON escape
    assert feed(['{"message": "a\\u12G4 b"}']) == (["a"], True)  # not four hex digits
    assert feed(['{"message": null, "score": 1}']) == ([""], True)  # not a string: nothing to show
    assert feed(['["message", "hi"]']) == ([""], True)  # not an object
    assert feed(['Sure: {"message": "hi"}']) == ([""], True)  # prose first: json.loads refuses it too
    assert feed(['{"score": 0.2}']) == ([""], True)  # no message
    assert feed(['{"score": 0.9, "message": "unterm', 'inated']) == (["unterm", "inated"], False)  # cut off
    field = MessageField()
    assert [field.feed(p) for p in ['{"message": "a", "message": "b"}', '"more"']] == ["a", ""]
    assert field.done  # only the first is streamed; json.loads keeps the last: the parsed bid decides


def test_any_cut_of_any_json_object_gives_its_message():
    rng = random.Random(40)
    alphabet = ["a", " ", '"', "\\", "\n", "\t", "é", "😀", "\u2028", "/", "\x01", "{", "}", ",", ":", "message"]
    for _ in range(2_000):
        obj = {"score": rng.choice([0.9, 1, -5e3, True, None]), "message": "".join(
            rng.choice(alphabet) for _ in range(rng.randint(0, 12))), "other": {"message": "x\"}", "l": [1, "]"]}}
        keys = list(obj)
        rng.shuffle(keys)
        text = json.dumps({k: obj[k] for k in keys}, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2]))
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(0, 8)))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        got, done = feed(pieces)
        assert ("".join(got), done) == (obj["message"], True), pieces


# ---- a GroupChat at a local OpenAI-compatible server ----------------------------------------------
def chat(srv, transport="fast", **kw):
    opts = dict(model="openai/test-model", api_base=srv.api_base, api_key="sk-test", num_retries=0, timeout=30,
                transport=transport)
    opts.update(kw)
    return GroupChat(agents=[Agent("alice", **opts), Agent("bob", **opts)], max_loops=2)


def gated(reply, gate):
    """``reply`` streamed with a stop after its first tool-call piece until ``gate`` is set."""
    return replace(reply, gate=gate, hold_after=1)


ALICE = '{"message": "Friday is risky; ship on Monday.", "score": 0.8}'  # the message first: cut inside it


def scripts(gate=None):
    alice = tool_call("respond", ALICE)
    return per_agent({"alice": [gated(alice, gate) if gate is not None else alice], "bob": [respond(0.4, "Ship it.")]})


def without_stream(body):
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def by_agent(requests):
    return sorted(requests, key=lambda b: json.dumps(b["messages"]))


def shape(items):
    """A run's items as ``seed``/``bid``... (trace events), ``alice: text`` (messages), ``~alice:
    piece`` (bid pieces)."""
    out = []
    for x in items:
        if isinstance(x, TraceEvent):
            out.append(x.state)
        elif isinstance(x, Message):
            out.append(f"{x.role}: {x.content}")
        elif isinstance(x, BidDelta):
            out.append(f"~{x.agent}: {x.text}")
        elif not isinstance(x, RunResult):
            out.append(repr(x))
    return out


@pytest.mark.parametrize("transport", ["fast", "litellm"])
def test_stream_with_tokens_yields_each_bids_pieces_before_the_round_closes(transport):
    gate = threading.Event()
    items = []
    with OpenAIServer(scripts(gate), max_lifetime=60) as srv:
        for item in chat(srv, transport).stream(TASK, tokens=True):
            items.append(item)
            if isinstance(item, BidDelta) and item.agent == "alice":
                gate.set()  # the server sends the rest of alice's bid only once its first piece is here
        srv.assert_clean()
        assert [r.note for r in srv.records if r.note] == ["gate passed"]
        assert len(srv.requests) == 2
        assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in srv.requests)
    result = items[-1]
    assert result.ok, result.error
    got = shape(items)
    # bob's one piece may come before, between or after alice's two: the bids are concurrent
    assert sorted(got[2:5]) == ["~alice: Friday is risky; ", "~alice: ship on Monday.", "~bob: Ship it."]
    assert got.index("~alice: Friday is risky; ") < got.index("~alice: ship on Monday.")
    assert got[:2] + got[5:] == ["User: Ship on Friday?", "seed", "bid", "select",
                                 "alice: Friday is risky; ship on Monday.", "post", "penalize", "stop"]
    assert [(d.step, d.attempt) for d in items if isinstance(d, BidDelta)] == [("bid", 1)] * 3
    assert not [x for x in items if isinstance(x, TokenDelta)]  # a bid is no reply
    assert (result.calls, str(result.stop_reason), result.events) == (2, "max_loops", [])


def test_streaming_changes_no_request_but_stream_and_no_outcome():
    runs = []
    for tokens in (True, False):
        seen = []
        with OpenAIServer(scripts(), max_lifetime=60) as srv:
            result = chat(srv).execute(TASK, on_token=seen.append if tokens else None)
            srv.assert_clean()
            bodies = by_agent(srv.requests)
        if tokens:
            assert [b["stream"] for b in bodies] == [True, True]
            assert sorted(d.text for d in seen) == ["Friday is risky; ", "Ship it.", "ship on Monday."]
        else:  # no token sink: nothing streams
            assert not [b for b in bodies if "stream" in b or "stream_options" in b]
        runs.append(([without_stream(b) for b in bodies], result.path, [(m.role, m.content) for m in result.transcript],
                     result.calls, result.usage, result.events))
    assert runs[0] == runs[1]
    assert runs[0][2] == [("User", "Ship on Friday?"), ("alice", "Friday is risky; ship on Monday.")]
    assert runs[0][3] == 2
    assert runs[0][0][0]["tool_choice"] == {"type": "function", "function": {"name": "respond"}}


def test_a_json_mode_bid_streams_its_message_from_the_reply_text():
    pieces = ['{"score": 0.7, "message": "Sh', 'ip \\u00', 'e9t\\u00e9."}']
    seen = []
    with OpenAIServer(per_agent({"alice": [streamed(pieces)], "bob": [streamed(['{"score": 0.2, "message": ""}'])]}),
                      max_lifetime=60) as srv:
        result = chat(srv, tool_mode="json").execute(TASK, on_token=seen.append)
        srv.assert_clean()
        assert all(b["stream"] is True and "tools" not in b and b["response_format"]["type"] == "json_schema"
                   for b in srv.requests)
    assert result.ok, result.error
    assert seen == [BidDelta("alice", "bid", "Sh"), BidDelta("alice", "bid", "ip "), BidDelta("alice", "bid", "été.")]
    assert [(m.role, m.content) for m in result.transcript][1:] == [("alice", "Ship été.")]


def test_a_malformed_bid_streams_what_it_shows_and_is_decided_by_its_whole_parse():
    def run(alice, tokens):
        seen = []
        with OpenAIServer(per_agent({"alice": [tool_call("respond", alice)], "bob": [respond(0.6, "Bob's turn.")]}),
                          max_lifetime=60) as srv:
            result = chat(srv).execute(TASK, on_token=seen.append if tokens else None)
            srv.assert_clean()
        return [d.text for d in seen if d.agent == "alice"], [(m.role, m.content) for m in result.transcript][1:], \
            result.events, result.calls

    cut = '{"score": 0.9, "message": "unterminated'  # not JSON: a silent bid, bob speaks
    streamed_run = run(cut, True)
    assert streamed_run == (["unterminated"], [("bob", "Bob's turn.")], [
        {"event": "invalid_bid", "turn": 0, "agent": "alice",
         "reason": "respond arguments are not JSON: Unterminated string starting at: line 1 column 27 (char 26)"}], 2)
    assert run(cut, False) == ([], *streamed_run[1:])
    twice = '{"message": "a draft", "score": 0.9, "message": "The final word."}'  # json keeps the last
    assert run(twice, True) == (["a draft"], [("alice", "The final word.")], [], 2)
    assert run(twice, False)[1:] == ([("alice", "The final word.")], [], 2)


@pytest.fixture
def no_waits(monkeypatch):
    async def instant(seconds):
        return None
    monkeypatch.setattr(llm, "retry_sleep", instant)


def test_a_bid_stream_that_breaks_after_its_first_piece_is_asked_again_visibly(warm, no_waits):
    stalled = replace(tool_call("respond", ALICE), stall_after=1)  # its first piece, then nothing more
    with OpenAIServer(per_agent({"alice": [stalled, tool_call("respond", ALICE)], "bob": [respond(0.4, "Ship it.")]}),
                      max_lifetime=60) as srv:
        seen = []
        result = chat(srv, timeout=2, num_retries=1).execute(TASK, on_token=seen.append)
        assert len(srv.requests) == 3
    assert result.ok, result.error
    alice = [x for x in seen if x.agent == "alice"]
    assert [(type(x).__name__, x.attempt, x.text if isinstance(x, BidDelta) else x.shown) for x in alice] == [
        ("BidDelta", 1, "Friday is risky; "), ("StreamRetry", 1, 17), ("BidDelta", 2, "Friday is risky; "),
        ("BidDelta", 2, "ship on Monday.")]
    assert isinstance(alice[1], StreamRetry) and alice[1].reason.startswith("TimeoutError")
    assert [(e["event"], e["agent"], e["step"], e["attempt"], e["shown"]) for e in result.events] == [
        ("stream_retry", "alice", "bid", 1, 17)]
    assert (result.transcript[-1].role, result.calls) == ("alice", 2)


# ---- fsmchat's own models -------------------------------------------------------------------------
def test_the_offline_models_bids_stream_word_by_word():
    def offline():
        return GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                                 Agent("b", system_prompt="You argue for dogs.")], max_loops=2)

    items = list(offline().stream("Cats or dogs?", tokens=True))
    result = items[-1]
    assert result.ok
    pieces = {n: [d.text for d in items if isinstance(d, BidDelta) and d.agent == n] for n in ("a", "b")}
    assert pieces["a"][:6] == ["Since ", "I ", "argue ", "for ", "cats, ", "my "]
    assert pieces["b"][:6] == ["Given ", "that ", "I ", "argue ", "for ", "dogs, "]
    kinds = [type(x).__name__ for x in items]
    assert kinds[:3] == ["Message", "TraceEvent", "BidDelta"]  # the task, seed, then the bids as they are written
    assert kinds[kinds.index("TraceEvent", 2):] == ["TraceEvent", "TraceEvent", "Message", "TraceEvent", "TraceEvent",
                                                   "TraceEvent", "RunResult"]  # bid, select, the winner's post, ...
    assert set(kinds[2:kinds.index("TraceEvent", 2)]) == {"BidDelta"}
    assert result.transcript[-1].role == "a" and "".join(pieces["a"]) == result.transcript[-1].content
    plain = offline().execute("Cats or dogs?")
    assert [(m.role, m.content) for m in plain.transcript] == [(m.role, m.content) for m in result.transcript]
    assert (plain.calls, plain.path) == (result.calls, result.path) == (2, ["seed", "bid", "select", "post", "penalize",
                                                                         "stop"])


def test_a_bidder_with_tools_streams_its_respond_call_only():
    def lookup(message: str) -> str:
        """Look a message up.

        Args:
            message: What to look up.
        """
        return "Ada"

    m = ScriptedModel({"Alice": [ToolCall("lookup", {"message": "not a bid"}), Bid(0.9, "Ada, from the list.")],
                       "Bob": [Bid(0.3, "")]})
    seen = []
    result = GroupChat(agents=[m.agent("Alice", tools=[lookup]), m.agent("Bob")], max_loops=2).execute(
        "Pick a name.", on_token=seen.append)
    assert result.ok, result.error
    assert seen == [BidDelta("Alice", "bid", "Ada, "), BidDelta("Alice", "bid", "from "),
                    BidDelta("Alice", "bid", "the "), BidDelta("Alice", "bid", "list.")]
    assert [(x.role, x.content) for x in result.transcript][1:] == [("Alice", "Ada, from the list.")]
    assert [m.calls(n) for n in ("Alice", "Bob")] == [2, 1]


def test_a_bid_cut_after_its_first_piece_is_silent_and_what_it_showed_stays_in_the_events(warm):
    """Its call ends (the timeout, no retry left): a silent bid, as without streaming, and the
    message shown so far is kept in a ``partial_reply`` event (never posted)."""
    stalled = replace(tool_call("respond", ALICE), stall_after=1)
    with OpenAIServer(per_agent({"alice": [stalled], "bob": [respond(0.6, "Ship it.")]}), max_lifetime=60) as srv:
        seen = []
        result = chat(srv, timeout=1).execute(TASK, on_token=seen.append)
        assert len(srv.requests) == 2
    assert result.ok, result.error
    assert sorted((d.agent, d.text) for d in seen) == [("alice", "Friday is risky; "), ("bob", "Ship it.")]
    assert [(m.role, m.content) for m in result.transcript][1:] == [("bob", "Ship it.")]
    assert [{k: e[k] for k in ("event", "agent", "step", "attempt", "chars", "text", "reason") if k in e}
            for e in result.events] == [
        {"event": "partial_reply", "agent": "alice", "step": "bid", "attempt": 1, "chars": 17,
         "text": "Friday is risky; ", "reason": "TimeoutError: (no message)"},
        {"event": "invalid_bid", "agent": "alice", "reason": "model call failed: model call for agent 'alice' (model "
         "'openai/test-model') failed after 1 attempt(s): TimeoutError: no answer within 1 s, the agent's timeout "
         "(Agent(timeout=1)); raise it for a slow model or server"}]
