"""Turn taking written once (``fsmchat.graph.turns``): ``TurnOrder`` counts whose turn it is and
how many are left, ``add_turns`` draws the edges; RoundRobinSwarm, OneOnOneDebate,
ExpertPanelDiscussion, the flow's Discussion and a hub channel's turn graph are built with them."""
import pytest

from fsmchat import StateGraph
from fsmchat.flow import Discussion, repeat
from fsmchat.graph.turns import TurnOrder, add_turns
from fsmchat.network import graphs as network_graphs
from fsmchat.network.graphs import ChannelContext, reaches_cap, turn_graph
from fsmchat.patterns import debate, panel, round_robin


def test_turn_order_counts_speakers_rounds_and_neighbours():
    rr = TurnOrder(3, rounds=2)
    assert [rr.speaker(t) for t in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [rr.round(t) for t in range(7)] == [1, 1, 1, 2, 2, 2, 3]
    assert rr.limit == 6 and [rr.left(t) for t in (0, 5, 6, 7)] == [True, True, False, False]
    assert [rr.prev(t) for t in (0, 1, 3)] == [None, 0, 2]
    assert [rr.next(t) for t in (0, 2, 4, 5)] == [1, 0, 2, None]
    hub = TurnOrder(3, first=2)  # the creator (index 2) speaks first; no bound
    assert [hub.speaker(t) for t in range(4)] == [2, 0, 1, 2]
    assert hub.limit is None and hub.left(10 ** 6) and hub.next(10 ** 6) == hub.speaker(10 ** 6 + 1)
    capped = TurnOrder(2, rounds=5, max_turns=3)  # the tighter bound wins
    assert capped.limit == 3 and capped.left(2) and not capped.left(3)


@pytest.mark.parametrize("kw, message", [
    ({"n": 0}, "TurnOrder: n=0 is invalid: turn taking needs at least one speaker"),
    ({"n": 2, "rounds": 0}, "TurnOrder: rounds=0 is invalid: at least 1, or None for no bound"),
    ({"n": 2, "max_turns": 0}, "TurnOrder: max_turns=0 is invalid: at least 1, or None for no cap"),
    ({"n": 2, "first": 2}, "TurnOrder: first=2 is invalid: a speaker index in 0..1"),
])
def test_turn_order_refuses_bad_values(kw, message):
    with pytest.raises(ValueError) as info:
        TurnOrder(**kw)
    assert str(info.value) == message


def always(ctx):
    return True


def more(ctx):
    return True


def test_add_turns_orders_exits_then_the_next_turn():
    g = StateGraph("g").state("a").state("b").final("stop").final("out")
    add_turns(g, ["a", "b"], exits=[("out", always, "quit")], more=more, exhausted=("stop", "rounds"), label="go")
    assert [(t.source, t.dest, t.label) for t in g.transitions] == [
        ("a", "out", "quit"), ("a", "b", "go"),
        ("b", "out", "quit"), ("b", "a", "go"), ("b", "stop", "rounds")]
    assert g.outgoing("b")[1].guard is more and g.outgoing("b")[2].guard is None
    g.validate()


def test_add_turns_without_a_bound_goes_round_and_with_a_check_state_checks_there():
    ring = StateGraph("ring").state("x").state("y").final("closed")
    add_turns(ring, ["x", "y"], exits=[("closed", always, "close")], label="text")
    assert [(t.source, t.dest, t.label, t.guard is None) for t in ring.transitions] == [
        ("x", "closed", "close", False), ("x", "y", "text", True),
        ("y", "closed", "close", False), ("y", "x", "text", True)]
    one = StateGraph("one").state("turn").state("check").final("done")
    add_turns(one, [("turn", "check")], exits=[("done", always, "until")], more=more, exhausted=("done", "rounds"))
    assert [(t.source, t.dest, t.label) for t in one.transitions] == [
        ("turn", "check", "next"), ("check", "done", "until"), ("check", "turn", "more"), ("check", "done", "rounds")]


def test_add_turns_refuses_no_states_and_a_bound_without_an_end():
    g = StateGraph("g").state("a").final("stop")
    with pytest.raises(ValueError, match="^add_turns needs at least one turn state$"):
        add_turns(g, [])
    with pytest.raises(ValueError) as info:
        add_turns(g, ["a"], more=more)
    assert str(info.value) == "add_turns: more= needs exhausted=(state, label), where the turns end when none is left"


def test_add_turns_every_turn_checks_the_bound_after_each_speaker():
    g = StateGraph("duel").state("a").state("b").final("stop")
    add_turns(g, ["a", "b"], more=more, exhausted=("stop", "max_loops"), every_turn=True)
    assert [(t.source, t.dest, t.label, t.guard is more) for t in g.transitions] == [
        ("a", "b", "more", True), ("a", "stop", "max_loops", False),
        ("b", "a", "more", True), ("b", "stop", "max_loops", False)]
    g.validate()


def test_the_debate_counts_its_turns_with_a_turn_order():
    cfg = debate.DebateConfig(max_loops=3, agents=[alice_fn, bob_fn])
    ctx = debate.DebateContext("task", [], config=cfg)
    assert ctx.turn_order == TurnOrder(2, max_turns=3)
    ctx.turn = 2
    assert debate.turns_remain(ctx)
    ctx.turn = 3
    assert not debate.turns_remain(ctx)


def test_the_turn_takers_are_built_with_add_turns(monkeypatch):
    seen = []

    def spy(g, turns, **kw):
        seen.append((g.name, list(turns), kw.get("label"), [e[2] for e in kw.get("exits", ())]))
        return add_turns(g, turns, **kw)

    for module in (round_robin, debate, panel, network_graphs):
        monkeypatch.setattr(module, "add_turns", spy)
    from fsmchat.flow.blocks import discussion
    monkeypatch.setattr(discussion, "add_turns", spy)

    def alice(turn):
        return "a"

    def bob(turn):
        return "b"

    def agreed(ctx):
        return False

    round_robin.compile_round_robin(["Analyst", "Critic"])
    debate.compile_debate(["Pro", "Con"])
    panel.compile_panel(["AI", "Ethics"], "Chair")
    turn_graph(["alice", "bob"], max_texts=3)
    from fsmchat import AgentFlow
    AgentFlow(steps=[Discussion([alice, bob], rounds=2, until=agreed, name="talk")]).graph.flatten()
    assert seen == [
        ("round_robin", ["Analyst", "Critic"], None, []),
        ("one_on_one_debate", ["turn_a", "turn_b"], None, []),
        ("expert_panel", ["open_round", "AI", "Ethics", "synthesize"], None, []),
        ("discussion_turns", ["awaiting_alice", "awaiting_bob"], "text", ["text", "close", "expire"]),
        ("talk", [("turn", "check_until")], None, ["halt", "until"]),
    ]


def test_turn_order_drives_the_round_robin_prompts_and_the_channel_cap():
    cfg = round_robin.RoundRobinConfig(agents=[alice_fn, bob_fn], max_loops=2)
    ctx = round_robin.RoundRobinContext("task", list(cfg.agents), config=cfg)
    assert ctx.turn_order == TurnOrder(2, 2)
    assert "agent 2 of 2 in loop 2 of 2. Previous speaker: alice_fn. Next speaker: (none — you close" in \
        round_robin.turn_prompt(ctx, 3)
    channel = ChannelContext("c1", creator="bob", order=["alice", "bob", "carol"], max_texts=2)
    assert channel.turn_order == TurnOrder(3, first=1, max_turns=2)
    assert not reaches_cap(channel)
    channel.turn_count = 1
    assert reaches_cap(channel)


def alice_fn(turn):
    return "a"


def bob_fn(turn):
    return "b"


def test_repeat_passes_are_bounded_like_turns():
    def polish(ctx):
        return "again"

    from fsmchat import AgentFlow
    flow = AgentFlow(steps=[repeat(polish, max_iterations=2)])
    res = flow.execute("go")
    assert res.path == ["repeat.begin", "repeat.body.polish", "repeat.body.done", "repeat.check",
                        "repeat.body.polish", "repeat.body.done", "repeat.check", "repeat.done", "end"]
    assert [e.trigger for e in res.trace if e.state == "repeat.check"] == ["iterations_left", "max_iterations"]
