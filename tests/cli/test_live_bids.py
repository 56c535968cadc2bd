"""What `fsmchat run` prints while a GroupChat runs: each turn's bids (score, recency-adjusted score,
who cleared the threshold, the winner) before the winner's message, as the run viewer shows them;
nested in a flow too. The expected text is written out here, not computed by fsmchat."""
from __future__ import annotations

import io

from fsmchat import AgentFlow, Bid, GroupChat
from fsmchat.live import LiveRun
from fsmchat.testing import ScriptedModel


def printed(pattern, task, **kw):
    out = io.StringIO()
    view = LiveRun(status=False, out=out, **kw)
    with view:
        pattern.execute(task, observers=[view.on_event], on_message=[view.on_message], on_start=[view.on_start])
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
