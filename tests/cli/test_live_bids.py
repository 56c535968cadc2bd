"""What `fsmchat run` prints while a GroupChat runs: each turn's bids (score, recency-adjusted score,
who cleared the threshold, the winner) before the winner's message, as the run viewer shows them;
nested in a flow too. When the run streams, each bid's message is shown as its ``respond`` call's
arguments arrive, marked as a bid (``  Alice (bidding): ...``), and its score when its call returns,
before the round closes (a gate holds the next bidder's answer until the bid before it is on the
screen; the local server holds the rest of a bid's arguments until its first words are), and the
round is decided as without streaming. The expected text is written out here, not computed by
fsmchat."""
from __future__ import annotations

import io
import threading
from dataclasses import replace

from support.openai_server import OpenAIServer, per_agent, respond, tool_call

from fsmchat import Agent, AgentFlow, Bid, BidDelta, GroupChat, Message, StreamRetry, TraceEvent
from fsmchat.cli import showing_bids
from fsmchat.cli.live import LiveRun
from fsmchat.speakers import BidOutcome
from fsmchat.testing import Delay, FunctionModel, ScriptedModel, ToolCall

HANG_GUARD = 3_000  # polls of 0.01 s before a gate gives up (a bid not shown as it came would hold the round)


def printed(pattern, task, out=None, **kw):
    out = out or io.StringIO()
    view = LiveRun(status=False, out=out, **kw)
    hooks = {"on_token": [view.on_token]} if view.tokens else {}  # as `fsmchat run` wires it
    with view, showing_bids(view):
        pattern.execute(task, observers=[view.on_event], on_message=[view.on_message], on_start=[view.on_start],
                        **hooks)
    return out.getvalue()


def chat():
    m = ScriptedModel({"Alice": [Bid(0.9, "a1"), Bid(0.9, "a2"), Bid(0.2, "")],
                       "Bob": [Bid(0.6, "b1"), Bid(0.7, "b2"), Bid(0.4, "b3")],
                       "Carol": [Bid(0.1, ""), Bid(0.55, "c2"), Bid(0.45, "c3")]})
    return GroupChat(agents=[m.agent(n) for n in ("Alice", "Bob", "Carol")], threshold=0.5, recency_penalty=0.3)


def test_each_turn_shows_every_bid_and_the_winner_before_its_message():
    assert printed(chat(), "pick a name") == """\
User: pick a name
bids, turn 1 (threshold 0.50):
  Alice  0.90 -> 0.90  cleared   <- wins
  Bob    0.60 -> 0.60  cleared
  Carol  0.10          silent
Alice: a1
bids, turn 2 (threshold 0.50):
  Alice  0.90 -> 0.60  cleared   (recency -0.30)
  Bob    0.70 -> 0.70  cleared   <- wins
  Carol  0.55 -> 0.55  cleared
Bob: b2
bids, turn 3 (threshold 0.50):
  Alice  0.20          silent
  Bob    0.40 -> 0.10  below     (recency -0.30)
  Carol  0.45 -> 0.45  below
  no bid cleared the threshold: nothing is posted (lull)
"""


def test_bids_false_shows_only_the_messages():
    assert printed(chat(), "pick a name", bids=False) == "User: pick a name\nAlice: a1\nBob: b2\n"


def test_a_chat_nested_in_a_flow_shows_its_bids_too():
    out = printed(AgentFlow(steps=[chat()]), "pick a name")
    assert "bids, turn 1 (threshold 0.50):\n  Alice  0.90 -> 0.90  cleared   <- wins\n" in out
    assert out.count("bids, turn ") == 3 and "bids, turn 3 (threshold 0.50):" in out


# ---------------------------------------------------------------- streaming: each bid as it comes
def test_streaming_shows_each_bid_as_its_call_returns_before_the_round_closes():
    out = io.StringIO()
    waits = {"Carol": "  Alice (bidding): a1 -> bid 0.90\n", "Bob": "  Carol (bid 0.10, silent)\n"}  # who waits
    seen_before_answering = {}
    polls = {"Carol": 0, "Bob": 0}
    bids = {"Alice": Bid(0.9, "a1"), "Bob": Bid(0.6, "b1"), "Carol": Bid(0.1, "")}

    def answer(req):
        wanted = waits.get(req.agent)
        if wanted is not None and wanted not in out.getvalue() and polls[req.agent] < HANG_GUARD:
            polls[req.agent] += 1
            return Delay(0.01, answer)  # held until the bid before it is shown
        if wanted is not None:
            seen_before_answering[req.agent] = wanted in out.getvalue() and "bids, turn 1" not in out.getvalue()
        return bids[req.agent]

    model = FunctionModel(answer)
    chat = GroupChat(agents=[model.agent(n) for n in ("Alice", "Bob", "Carol")], threshold=0.5, max_loops=2)
    assert printed(chat, "pick a name", out=out, tokens=True) == """\
User: pick a name
bidding, turn 1:
  Alice (bidding): a1 -> bid 0.90
  Carol (bid 0.10, silent)
  Bob (bidding): b1 -> bid 0.60
bids, turn 1 (threshold 0.50):
  Alice  0.90 -> 0.90  cleared   <- wins
  Bob    0.60 -> 0.60  cleared
  Carol  0.10          silent
Alice: a1
"""
    # each was on the screen while the round was still open (the next bidder had not answered)
    assert seen_before_answering == {"Carol": True, "Bob": True}
    assert [model.calls(n) for n in ("Alice", "Bob", "Carol")] == [1, 1, 1]


def test_streaming_shows_every_turns_bids_and_decides_them_as_without_it():
    streamed = printed(chat(), "pick a name", tokens=True)
    assert streamed == """\
User: pick a name
bidding, turn 1:
  Alice (bidding): a1 -> bid 0.90
  Bob (bidding): b1 -> bid 0.60
  Carol (bid 0.10, silent)
bids, turn 1 (threshold 0.50):
  Alice  0.90 -> 0.90  cleared   <- wins
  Bob    0.60 -> 0.60  cleared
  Carol  0.10          silent
Alice: a1
bidding, turn 2:
  Alice (bidding): a2 -> bid 0.90
  Bob (bidding): b2 -> bid 0.70
  Carol (bidding): c2 -> bid 0.55
bids, turn 2 (threshold 0.50):
  Alice  0.90 -> 0.60  cleared   (recency -0.30)
  Bob    0.70 -> 0.70  cleared   <- wins
  Carol  0.55 -> 0.55  cleared
Bob: b2
bidding, turn 3:
  Alice (bid 0.20, silent)
  Bob (bidding): b3 -> bid 0.40
  Carol (bidding): c3 -> bid 0.45
bids, turn 3 (threshold 0.50):
  Alice  0.20          silent
  Bob    0.40 -> 0.10  below     (recency -0.30)
  Carol  0.45 -> 0.45  below
  no bid cleared the threshold: nothing is posted (lull)
"""
    # without the bid lines it is what a run that does not stream prints
    assert "".join(ln + "\n" for ln in streamed.splitlines() if not ln.startswith(("bidding", "  Alice (", "  Bob (",
                                                                                  "  Carol ("))) \
        == printed(chat(), "pick a name")
    runs = []
    for tokens in (True, False):
        pattern = chat()
        view = LiveRun(status=False, out=io.StringIO(), tokens=tokens)
        with view, showing_bids(view):
            result = pattern.execute("pick a name", on_message=[view.on_message], on_token=[view.on_token])
        runs.append((result.path, [(m.role, m.content) for m in result.transcript], result.calls, result.events))
    assert runs[0] == runs[1]


def test_streaming_shows_a_bid_kept_over_a_tool_round_once_and_the_tool_users_bid_after_its_tools():
    def lookup(q: str) -> str:
        """Look a name up.

        Args:
            q: What to look up.
        """
        return "Ada"

    m = ScriptedModel({"Alice": [ToolCall("lookup", {"q": "names"}), Bid(0.9, "Ada, from the list")],
                       "Bob": [Bid(0.6, "b1")], "Carol": [Bid(0.1, "")]})
    agents = [m.agent("Alice", tools=[lookup]), m.agent("Bob"), m.agent("Carol")]
    out, took = printed(GroupChat(agents=agents, threshold=0.5, max_loops=2), "pick a name", tokens=True).rsplit(" (", 1)
    assert took.endswith("s)\n")  # the tool call's duration
    assert out == """\
User: pick a name
bidding, turn 1:
  Bob (bidding): b1 -> bid 0.60
  Carol (bid 0.10, silent)
  Alice (bidding): Ada, from the list -> bid 0.90
bids, turn 1 (threshold 0.50):
  Alice  0.90 -> 0.90  cleared   <- wins
  Bob    0.60 -> 0.60  cleared
  Carol  0.10          silent
Alice: Ada, from the list
  tool lookup(q='names') -> Ada"""
    assert [m.calls(n) for n in ("Alice", "Bob", "Carol")] == [2, 1, 1]


def test_bids_false_shows_no_bid_as_it_comes_either():
    assert printed(chat(), "pick a name", bids=False, tokens=True) == "User: pick a name\nAlice: a1\nBob: b2\n"


# ---------------------------------------------------------------- streaming: a bid's message as it is written
def test_a_bids_message_is_on_the_screen_before_its_call_returns():
    """At the local server: alice's bid stops after its first piece until that piece is on the screen
    and bob's bid is shown whole; bob's waits until alice's first piece is shown. Each streamed line
    is marked as a bid; the line that showed a whole message ends with its score."""
    out = io.StringIO()
    alice_gate, bob_gate = threading.Event(), threading.Event()

    class Watched(LiveRun):  # opens each gate once what it waits for is on the screen
        def on_token(self, item):
            super().on_token(item)
            bob_gate.set() if "  alice (bidding): Friday is risky; " in out.getvalue() else None

        def on_bid(self, agent, step, bid):
            super().on_bid(agent, step, bid)
            alice_gate.set() if "  bob (bidding): Ship it. -> bid 0.40\n" in out.getvalue() else None

    alice = replace(tool_call("respond", '{"message": "Friday is risky; ship on Monday.", "score": 0.8}'),
                    gate=alice_gate, hold_after=1)  # its first piece cuts the message: "Friday is risky; "
    bob = replace(respond(0.4, "Ship it."), gate=bob_gate, hold_after=0)  # nothing of it before alice's first piece
    with OpenAIServer(per_agent({"alice": [alice], "bob": [bob]}), max_lifetime=60) as srv:
        opts = dict(model="openai/test-model", api_base=srv.api_base, api_key="sk-test", num_retries=0, timeout=30)
        chat = GroupChat(agents=[Agent("alice", **opts), Agent("bob", **opts)], threshold=0.5, max_loops=2)
        view = Watched(status=False, out=out, tokens=True)
        with view, showing_bids(view):
            result = chat.execute("Ship on Friday?", observers=[view.on_event], on_message=[view.on_message],
                                  on_start=[view.on_start], on_token=[view.on_token])
        srv.assert_clean()
        assert [r.note for r in srv.records] == ["gate passed", "gate passed"] and len(srv.requests) == 2
    assert result.ok, result.error
    assert out.getvalue() == (
        "User: Ship on Friday?\n"
        "bidding, turn 1:\n"
        "  alice (bidding): Friday is risky; \n"
        "  bob (bidding): Ship it. -> bid 0.40\n"
        "  alice (bidding): ship on Monday.\n"
        "  alice (bid 0.80): Friday is risky; ship on Monday.\n"
        "bids, turn 1 (threshold 0.50):\n"
        "  alice  0.80 -> 0.80  cleared   <- wins\n"
        "  bob    0.40 -> 0.40  below\n"
        "alice: Friday is risky; ship on Monday.\n")


def test_streamed_bids_interleaved_retried_and_malformed_then_the_round():
    """The view alone, given written-out items: two bidders' pieces interleaved, a bid stream asked
    again, a malformed bid whose streamed words are not its parsed message, then the round."""
    out = io.StringIO()
    view = LiveRun(status=False, out=out, tokens=True)
    with view:
        view.on_token(BidDelta("Ann", "review.bid", "Ship "))
        view.on_token(BidDelta("Ben", "review.bid", "Wait."))
        view.on_bid("Ben", "review.bid", BidOutcome(0.3, "Wait."))
        view.on_token(BidDelta("Ann", "review.bid", "it"))
        view.on_token(StreamRetry("Ann", "review.bid", 1, 7, "TimeoutError: (no message)"))
        view.on_token(BidDelta("Ann", "review.bid", "Ship it now.", 2))
        view.on_bid("Ann", "review.bid", BidOutcome(0.9, "Ship it now."))
        view.on_token(BidDelta("Cat", "review.bid", "draft"))
        view.on_bid("Cat", "review.bid", BidOutcome(0.0, "", False, "respond arguments are not JSON"))
        view.on_event(TraceEvent(3, "review.bid", "next", "review.select", 0.1, {"Ann": 0.9, "Ben": 0.3, "Cat": 0.0}))
        view.on_event(TraceEvent(4, "review.select", "speak", "review.post", 0.1, {
            "winner": "Ann", "adjusted": {"Ann": 0.9, "Ben": 0.3}, "threshold": 0.5,
            "invalid": {"Cat": "respond arguments are not JSON"}}))
        view.on_message(Message(role="Ann", content="Ship it now."))
    assert out.getvalue() == (
        "bidding, turn 1:\n"
        "  Ann (bidding): Ship \n"
        "  Ben (bidding): Wait. -> bid 0.30\n"
        "  Ann (bidding): it\n"
        "  Ann's bid broke after 7 characters (TimeoutError: (no message)); asking again (attempt 2)\n"
        "  Ann (bidding): Ship it now. -> bid 0.90\n"
        "  Cat (bidding): draft\n"
        "  Cat (bid 0.00, silent)\n"
        "bids, turn 1 (threshold 0.50):\n"
        "  Ann  0.90 -> 0.90  cleared   <- wins\n"
        "  Ben  0.30 -> 0.30  below\n"
        "  Cat  0.00          silent (invalid bid: respond arguments are not JSON)\n"
        "Ann: Ship it now.\n")


def test_on_a_terminal_a_bid_streams_in_a_bidding_panel_above_the_status_line():
    from rich.console import Console

    out, err = io.StringIO(), io.StringIO()
    view = LiveRun(status=True, out=out, err=err, tokens=True)

    def region():
        shown = io.StringIO()
        Console(file=shown, width=48).print(view._renderable())
        return [ln.rstrip() for ln in shown.getvalue().splitlines()]

    with view:
        view.on_token(BidDelta("Ann", "bid", "Ship it "))
        view.on_token(BidDelta("Ann", "bid", "on Monday."))
        assert region()[:3] == ["╭─ Ann (bidding) ──────────────────────────────╮",
                                "│ Ship it on Monday.                           │",
                                "╰──────────────────────────────────────────────╯"]
        view.on_bid("Ann", "bid", BidOutcome(0.8, "Ship it on Monday."))
        assert "(bidding)" not in "\n".join(region())  # its score is printed: the panel is gone
    assert out.getvalue() == "bidding, turn 1:\n  Ann (bid 0.80): Ship it on Monday.\n"


def test_a_notebook_view_shows_no_bid():
    from fsmchat.cli.live import NotebookLive

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj._repr_html_())

    view = NotebookLive(display=lambda obj: Handle())
    view.on_token(BidDelta("Ann", "bid", "Ship "))
    view.on_token(StreamRetry("Ann", "bid", 1, 5, "TimeoutError: (no message)"))
    view.on_message(Message(role="Ann", content="Ship it."))
    assert view.rows == [["Ann", "Ship it.", ""]]
