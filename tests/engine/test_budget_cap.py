"""``max_model_calls`` is a hard cap on requests (retries included): no request past it is ever sent,
and a GroupChat bid round that could cross it is not started (stop reason "budget")."""
from __future__ import annotations

import pytest

from fsmchat import AgentFlow, Discussion, GroupChat, RoundRobinSwarm
from fsmchat.errors import BudgetExceeded
from fsmchat.limits import Limits, over
from fsmchat.speakers.llm import CallStats
from fsmchat.testing import Bid, Fail, ScriptedModel


def test_four_agent_group_chat_never_crosses_five_requests():
    m = ScriptedModel(fn=lambda req: Bid(0.9, f"{req.agent} speaks"))
    chat = GroupChat(agents=[m.agent(n) for n in "abcd"], max_loops=20).with_limits(max_model_calls=5)
    r = chat.execute("t")
    assert m.calls() == 4  # one round of 4; a second would cross 5, so it is not started (was 8)
    assert r.context.stats.attempts == 4 and r.calls == 4
    assert r.stop_reason == "budget" and r.error is None
    assert r.path == ["seed", "bid", "select", "post", "penalize", "bid", "over_budget"]
    assert {"event": "budget", "limit": "max_model_calls"} in r.events
    assert [x.content for x in r.transcript] == ["t", "a speaks"]


def test_retries_never_cross_the_cap():
    m = ScriptedModel({"a": [Bid(0.9, "a1"), Fail(500, "down"), Fail(500, "down"), Bid(0.9, "a2")],
                       "b": [Bid(0, ""), Bid(0, ""), Bid(0, "")]})
    chat = GroupChat(agents=[m.agent("a", num_retries=3), m.agent("b")], max_loops=10)
    r = chat.with_limits(max_model_calls=5).execute("t")
    # round 1: a, b (2); round 2 fits (2 more = 4): a fails, b, a's retry is the 5th; a's next retry is refused
    assert m.calls() == 5 and r.context.stats.attempts == 5
    assert r.stop_reason == "budget"


def test_exact_fit_runs_the_round():
    m = ScriptedModel(fn=lambda req: Bid(0.9, "x") if req.n == 1 else Bid(0, ""))
    r = GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=10).with_limits(max_model_calls=4).execute("t")
    assert m.calls() == 4 and r.stop_reason == "lull"  # two full rounds fit exactly; the chat ended on its own


def test_round_robin_and_flow_stop_at_the_cap():
    m = ScriptedModel(fn=lambda req: "ok")
    r = RoundRobinSwarm(agents=[m.agent("a"), m.agent("b")], max_loops=5).with_limits(max_model_calls=3).execute("t")
    assert m.calls() == 3 and r.stop_reason == "budget"
    m2 = ScriptedModel(fn=lambda req: "ok")
    flow = AgentFlow(steps=[Discussion([m2.agent("a"), m2.agent("b")], rounds=5)]).with_limits(max_model_calls=3)
    r = flow.execute("go")
    assert m2.calls() == 3 and r.stop_reason == "budget"


def test_over_counts_requests_and_stats_refuse_past_the_cap():
    stats = CallStats(calls=1, attempts=3, max_requests=3)  # 1 logical call, 3 requests (2 retries)
    assert stats.fits(0) and not stats.fits(1)
    assert over(Limits(max_model_calls=3), stats) is None  # reached, but nothing was refused yet
    assert isinstance(stats.refuse_over_cap("a retry"), BudgetExceeded)
    assert over(Limits(max_model_calls=3), stats) == "max_model_calls" and stats.limit_hit == "max_model_calls"
    assert over(Limits(max_model_calls=2), CallStats(attempts=3)) == "max_model_calls"  # crossed (never happens)
    assert issubclass(BudgetExceeded, RuntimeError) and BudgetExceeded.take_edge == "over_budget"


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (True, TypeError), (2.5, TypeError)])
def test_bad_caps_are_refused(bad, error):
    # out of bounds: a ValueError; a bool or a float is no count: a TypeError (the one number rule, fsmchat.checks)
    with pytest.raises(error, match="max_model_calls"):
        Limits(max_model_calls=bad)
