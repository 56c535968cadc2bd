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

from fsmchat import AgentFlow, Bid, GroupChat
from fsmchat.cli import showing_bids
from fsmchat.cli.live import LiveRun
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
