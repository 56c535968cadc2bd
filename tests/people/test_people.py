"""People in the loop: interrupts drawn in the graph, every interrupt point of every pattern and flow
(path, stop reason, call counts, ``result.pending``), the answer vocabulary and its refusals, Human
participants, resume equal to an inline answer, and the testing kit's ``answer``."""
import asyncio

import pytest

from fsmchat import (AgentFlow, Approve, Bid, Discussion, Edit, ExpertPanelDiscussion, GroupChat, Human,
                     OneOnOneDebate, Reject, RoundRobinSwarm, Say, ask_human, from_config, parallel)
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer
from fsmchat.errors import ConfigError
from fsmchat.speakers.human import InputNotAllowed, NeedsCheckpoint, NotWaiting, Pending
from fsmchat.testing import AnswerScriptError, ScriptedModel, answer, assert_calls, assert_path, \
    assert_trace_is_path

TASK = "Should we ship on Friday?"


# ---------------------------------------------------------------- GroupChat: review before post
def review_chat(scripts, **kw):
    m = ScriptedModel(scripts)
    agents = [m.agent(n, system_prompt=f"You are {n}.") for n in scripts]
    return m, GroupChat(agents=agents, interrupt_before=["post"], **kw)


def bids(*rounds):
    """Per-agent scripts from rounds of (a's bid, b's bid)."""
    return {"a": [r[0] for r in rounds], "b": [r[1] for r in rounds]}


def waiting_review():
    """A chat stopped before its first post (a: 0.9 "a says ship", b: 0.6), run id "r"."""
    m, chat = review_chat(bids((Bid(0.9, "a says ship"), Bid(0.6, "b says wait"))), max_loops=2)
    cp = MemoryCheckpointer()
    return m, chat, cp, chat.execute(TASK, checkpoint=cp, run_id="r")


def test_groupchat_stops_before_post_with_the_winners_message_pending():
    m, chat, cp, r = waiting_review()
    assert r.stop_reason == "interrupted" and r.waiting and r.ok and r.error is None
    assert_path(r, ["seed", "bid", "select", "before_post"])
    assert_trace_is_path(chat.graph, r)
    assert [m_.role for m_ in r.transcript] == ["User"]  # nothing posted before the person answers
    assert_calls(m, 2)  # one bid round: N calls
    p = r.pending
    assert isinstance(p, Pending) and (p.state, p.kind, p.person, p.edit) == ("before_post", "post", None, "text")
    assert p.proposed == {"speaker": "a", "content": "a says ship", "score": 0.9}
    assert list(p.allowed) == ["approve", "edit", "reject", "say"]
    saved = cp.load("r")
    assert saved.stop_reason == "interrupted" and not saved.finished  # resumes, never rebuilds
    assert r.to_dict()["pending"]["proposed"]["content"] == "a says ship"


@pytest.mark.parametrize("given, posted, event", [
    (Approve(), ("a", "a says ship"), None),
    (Edit("a says ship, after the tests pass"), ("a", "a says ship, after the tests pass"), "edited"),
    ("Not on a Friday.", ("User", "Not on a Friday."), "rejected"),
])
def test_groupchat_post_review_answers(given, posted, event):
    m, chat, cp, _ = waiting_review()
    r = chat.resume("r", cp, input=given)
    assert r.stop_reason == "max_loops" and not r.waiting and r.pending is None
    assert [(x.role, x.content) for x in r.transcript] == [("User", TASK), posted]
    assert_calls(m, 2)  # the resume made no model call: the bids were kept
    approved = not isinstance(given, str)
    assert_path(r, ["seed", "bid", "select", "before_post", "post" if approved else "penalize", *(
        ["penalize"] if approved else []), "stop"])
    assert_trace_is_path(chat.graph, r)
    assert [e["event"] for e in r.events if e["event"] in ("edited", "rejected")] == ([event] if event else [])
    if approved:
        assert r.transcript[1].metadata == {"score": 0.9}


def test_groupchat_reject_drops_the_turn_penalizes_the_winner_and_counts_toward_max_loops():
    # round 1: a wins (0.9) and is rejected; round 2: a bids 0.9 again but is penalized (0.6 < b's 0.7)
    m, chat = review_chat(bids((Bid(0.9, "a1"), Bid(0.6, "b1")), (Bid(0.9, "a2"), Bid(0.7, "b2"))), max_loops=3)
    done, asked = answer(chat, TASK, [Reject("too hasty"), Approve()])
    assert [p.proposed["speaker"] for p in asked] == ["a", "b"]
    assert [(x.role, x.content) for x in done.transcript] == [("User", TASK), ("b", "b2")]
    assert done.stop_reason == "max_loops"  # 1 seed + 1 dropped + 1 post = max_loops: the bound holds
    assert_calls(m, 4)
    assert m.calls() <= chat.max_calls() == 4
    assert {"event": "rejected", "turn": 0, "agent": "a", "reason": "too hasty"} in done.events
    assert_path(done, ["seed", "bid", "select", "before_post", "penalize", "bid", "select", "before_post", "post",
                       "penalize", "stop"])


def test_groupchat_rejections_alone_end_at_max_loops():
    m, chat = review_chat(bids(*[(Bid(0.9, f"a{i}"), Bid(0.8, f"b{i}")) for i in range(3)]), max_loops=3)
    done, asked = answer(chat, TASK, lambda pending: Reject())
    assert len(asked) == 2 and [x.role for x in done.transcript] == ["User"]
    assert done.stop_reason == "max_loops" and m.calls() == 4 == chat.max_calls()


@pytest.mark.parametrize("bad, needle", [
    (Edit(vars={"x": 1}), "an Edit here replaces the proposed message"),
    (42, "is invalid: Approve\\(\\), Edit"),
    ({"kind": "shout"}, "is invalid"),
])
def test_a_wrong_answer_is_refused_before_anything_runs(bad, needle):
    m, chat, cp, _ = waiting_review()
    before = (len(cp.load("r").events), len(cp.load("r").messages), cp.load("r").stop_reason)
    with pytest.raises((InputNotAllowed, ConfigError, TypeError), match=needle):
        chat.resume("r", cp, input=bad)
    assert (len(cp.load("r").events), len(cp.load("r").messages), cp.load("r").stop_reason) == before
    assert m.calls() == 2 and not cp.leases  # nothing ran, the lease was never taken


def test_input_not_allowed_lists_what_the_point_takes():
    m = ScriptedModel({"a": ["hello"]})
    rr = RoundRobinSwarm(agents=[Human("h"), m.agent("a")])
    cp = MemoryCheckpointer()
    rr.execute(TASK, checkpoint=cp, run_id="r")
    with pytest.raises(InputNotAllowed, match=r"waits at h \(message, for h\); allowed here: Say\(text\) or a str: "
                                              r"post it as h's message"):
        rr.resume("r", cp, input=Approve())


def test_resume_without_input_returns_the_waiting_run_and_runs_nothing():
    m, chat, cp, first = waiting_review()
    again = chat.resume("r", cp)
    assert again.waiting and again.pending == first.pending and again.path == first.path
    assert m.calls() == 2 and len(cp.load("r").events) == len(first.trace)


def test_input_to_a_run_that_does_not_wait_is_refused():
    m, chat = review_chat(bids((Bid(0.1, ""), Bid(0.1, ""))), max_loops=2)
    cp = MemoryCheckpointer()
    assert chat.execute(TASK, checkpoint=cp, run_id="r").stop_reason == "lull"
    with pytest.raises(NotWaiting, match="does not wait for a person \\(stop reason 'lull'\\)"):
        chat.resume("r", cp, input=Approve())


def test_an_interrupt_without_a_checkpoint_is_refused_before_any_call():
    m, chat = review_chat(bids((Bid(0.9, "x"), Bid(0.6, "y"))))
    with pytest.raises(NeedsCheckpoint, match="waits for a person at before_post .* pass checkpoint="):
        chat.execute(TASK)
    with pytest.raises(NeedsCheckpoint):
        chat.run(TASK)
    assert m.calls() == 0


def test_unknown_interrupt_states_are_refused_at_construction_with_the_valid_ones():
    m = ScriptedModel({})
    with pytest.raises(ConfigError, match=r"interrupt_before=\['pots'\] is invalid: 'pots' is not a state of its "
                                          r"graph \(did you mean 'post'\?\); .*: seed, bid, select, post, penalize$"):
        GroupChat(agents=[m.agent("a"), m.agent("b")], interrupt_before=["pots"])
    with pytest.raises(ConfigError, match="'stop' is not a state"):  # a final state cannot be interrupted
        RoundRobinSwarm(agents=[m.agent("a")], interrupt_after=["stop"])
    with pytest.raises(TypeError, match="a list of state names"):
        GroupChat(agents=[m.agent("a"), m.agent("b")], interrupt_before=[3])
    with pytest.raises(ConfigError, match="'e1' is not a state"):  # a panel without its roster: checked at run
        ExpertPanelDiscussion(interrupt_before=["e1"], agents=[m.agent("x"), m.agent("y")], moderator=m.agent("mo"))


# ---------------------------------------------------------------- GroupChat: a Human claims the floor
def test_groupchat_human_claims_the_floor_before_each_bid_round():
    m = ScriptedModel({"a": [Bid(0.9, "a1"), Bid(0.9, "a2")], "b": [Bid(0.6, "b1"), Bid(0.6, "b2")]})
    chat = GroupChat(agents=[m.agent("a"), m.agent("b"), Human("h")], max_loops=4)
    assert chat.max_calls() == 6  # the person makes no model call
    cp = MemoryCheckpointer()
    r = chat.execute(TASK, checkpoint=cp, run_id="r")
    assert_path(r, ["seed", "claim_h", ])
    assert (r.pending.kind, r.pending.person, list(r.pending.allowed)) == ("claim", "h", ["approve", "say"])
    assert m.calls() == 0  # asked before the bid round
    r = chat.resume("r", cp, input="I claim turn one")
    assert r.pending.kind == "claim" and m.calls() == 0  # the claimed turn cost no bid
    r = chat.resume("r", cp, input=Approve())
    assert r.waiting and m.calls() == 2
    r = chat.resume("r", cp, input=Approve())
    assert r.stop_reason == "max_loops"
    assert [(x.role, x.content) for x in r.transcript] == [("User", TASK), ("h", "I claim turn one"), ("a", "a1"),
                                                          ("a", "a2")]
    assert r.transcript[1].metadata == {"claimed": True}
    assert_path(r, ["seed", "claim_h", "penalize", "claim_h", "bid", "select", "post", "penalize", "claim_h", "bid",
                    "select", "post", "penalize", "stop"])
    assert_trace_is_path(chat.graph, r)
    assert m.calls() == 4


def test_groupchat_needs_an_agent_that_bids():
    with pytest.raises(ValueError, match="at least one agent that bids"):
        GroupChat(agents=[Human("x"), Human("y")])


# ---------------------------------------------------------------- generic before/after points
def test_generic_after_point_reject_stops_and_say_posts():
    m = ScriptedModel({"a": ["A1", "A2"], "b": ["B1", "B2"]})
    rr = RoundRobinSwarm(agents=[m.agent("a"), m.agent("b")], max_loops=2, interrupt_after=["a"])
    assert "after_a" in rr.graph.states and rr.graph.states["after_a"].waits
    done, asked = answer(rr, TASK, ["Keep it short.", Reject("enough")])
    assert [(p.state, p.kind) for p in asked] == [("after_a", "after"), ("after_a", "after")]
    assert done.stop_reason == "stopped" and done.ok
    assert [(x.role, x.content) for x in done.transcript] == [("User", TASK), ("a", "A1"), ("User", "Keep it short."),
                                                             ("b", "B1"), ("a", "A2")]
    assert_path(done, ["seed", "a", "after_a", "b", "a", "after_a", "stopped"])
    assert m.calls() == 3 and {"event": "rejected", "state": "a", "reason": "enough"} in done.events


def test_generic_before_point_on_the_initial_state():
    m = ScriptedModel({"a": ["A1"]})
    rr = RoundRobinSwarm(agents=[m.agent("a")], interrupt_before=["seed"])
    assert rr.graph.initial == "before_seed"
    done, asked = answer(rr, TASK, [Approve()])
    assert_path(done, ["before_seed", "seed", "a", "stop"])
    assert asked[0].proposed == {"next": "seed"} and m.calls() == 1


# ---------------------------------------------------------------- Human turns in scheduled patterns
def test_round_robin_human_turn_equals_an_inline_scripted_human():
    def make(h):
        m = ScriptedModel({"a": ["A1", "A2"]})
        return m, RoundRobinSwarm(agents=[m.agent("a", system_prompt="You plan."), h], max_loops=2)

    m1, rr = make(Human("h"))
    cp = MemoryCheckpointer()
    r = rr.execute(TASK, checkpoint=cp, run_id="r")
    assert_path(r, ["seed", "a", "h"])
    assert (r.pending.state, r.pending.kind, r.pending.person) == ("h", "message", "h")
    assert r.pending.prompt.startswith("You are h, agent 2 of 2 in loop 1 of 2.")
    assert r.pending.proposed == {"last": {"role": "a", "content": "A1"}}
    r = rr.resume("r", cp, input="H1")
    r = rr.resume("r", cp, input=Say("H2"))
    m2, inline = make(Human("h", answers=["H1", "H2"]))
    ref = inline.execute(TASK, checkpoint=MemoryCheckpointer())
    assert ref.stop_reason == r.stop_reason == "max_loops" and ref.path == r.path
    assert [(x.role, x.content, x.metadata) for x in ref.transcript] == \
        [(x.role, x.content, x.metadata) for x in r.transcript]
    assert m1.calls() == m2.calls() == 2 and ref.calls == r.calls == 2
    assert [q.messages for q in m1.requests] == [q.messages for q in m2.requests]  # the agent saw the same
    assert rr.graph.states["h"].waits and not rr.graph.states["a"].waits


def test_debate_with_a_human_debater():
    m = ScriptedModel({"a": ["intro ok", "A1", "A2"]})
    debate = OneOnOneDebate(max_loops=3, agents=[m.agent("a"), Human("h")])
    assert debate.max_calls() == 3  # the agent's intro and two turns
    done, asked = answer(debate, TASK, ["H1"])
    assert [(p.state, p.kind) for p in asked] == [("turn_b", "message")]
    assert asked[0].prompt == "A1"  # the person answers the other debater's last reply
    assert_path(done, ["intro_a", "intro_b", "turn_a", "turn_b", "turn_a", "stop"])
    assert [(x.role, x.content) for x in done.transcript] == [("a", "A1"), ("h", "H1"), ("a", "A2")]
    assert m.calls() == 3 and m.requests[2].prompt == "H1"


def test_panel_with_a_human_expert_and_a_human_moderator():
    m = ScriptedModel({"e1": ["brief ok", "E1 r1"]})
    panel = ExpertPanelDiscussion(max_rounds=1, agents=[m.agent("e1"), Human("e2")], moderator=Human("mo"))
    waits = [s for s, st in panel.graph.states.items() if st.waits]
    assert waits == ["open_round", "e2", "synthesize"]
    done, asked = answer(panel, TASK, ["Round 1: ship?", "E2 r1", "Summary and a question"])
    assert [(p.state, p.person) for p in asked] == [("open_round", "mo"), ("e2", "e2"), ("synthesize", "mo")]
    assert [(x.role, x.content) for x in done.transcript] == [("mo", "Round 1: ship?"), ("e1", "E1 r1"),
                                                             ("e2", "E2 r1"), ("mo", "Summary and a question")]
    assert done.stop_reason == "rounds" and m.calls() == 2
    assert "Round 1: ship?" in m.requests[1].prompt


# ---------------------------------------------------------------- flows
def test_flow_ask_human_saves_the_answer_and_status_waits():
    m = ScriptedModel({"writer": ["draft v1"], "editor": ["final"]})
    flow = AgentFlow(steps=[m.agent("writer"), ask_human("Publish {{previous_output}}?", save_as="verdict"),
                            m.agent("editor", system_prompt="Verdict: {{verdict}}")])
    cp = MemoryCheckpointer()
    r = flow.execute("go", checkpoint=cp, run_id="f")
    assert r.stop_reason == "interrupted" and r.output["status"] == "waiting" and r.ok
    assert (r.pending.state, r.pending.kind, r.pending.prompt) == ("ask_human", "ask", "Publish draft v1?")
    assert m.calls() == 1
    r = flow.resume("f", cp, input="yes, publish")
    assert r.output["status"] == "completed" and r.stop_reason == "done"
    assert r.output["variables"]["verdict"] == "yes, publish" and r.output["output"] == "final"
    assert m.requests[-1].messages[0]["content"] == "Verdict: yes, publish"
    assert_path(r, ["writer", "ask_human", "editor", "end"])


def test_flow_ask_human_reject_stops_the_flow():
    m = ScriptedModel({"writer": ["draft v1"]})
    flow = AgentFlow(steps=[m.agent("writer"), ask_human("Publish?"), m.agent("editor")])
    done, _ = answer(flow, "go", [Reject("not good enough")])
    assert done.stop_reason == "stopped" and done.output["status"] == "stopped" and m.calls() == 1
    assert_path(done, ["writer", "ask_human", "end"])


def publishing():
    m = ScriptedModel({"writer": ["draft"], "publisher": ["published"]})
    return m, AgentFlow(steps=[m.agent("writer"), m.agent("publisher", system_prompt="Channel: {{channel}}")],
                        variables={"channel": "blog"}, interrupt_before=["publisher"])


def test_flow_interrupt_before_a_step_edits_variables():
    m, flow = publishing()
    done, asked = answer(flow, "go", [Edit(vars={"channel": "newsletter"})])
    p = asked[0]
    assert (p.state, p.kind, p.edit) == ("before_publisher", "before", "vars")
    assert p.proposed["variables"] == {"channel": "blog"} and p.proposed["previous_output"] == "draft"
    assert m.requests[-1].messages[0]["content"] == "Channel: newsletter"
    assert_path(done, ["writer", "before_publisher", "publisher", "end"])
    with pytest.raises(InputNotAllowed, match="an Edit here sets variables"):
        answer(publishing()[1], "go", [Edit("text")])


def test_flow_interrupt_inside_a_discussion_and_a_human_speaker():
    m = ScriptedModel({"critic": ["C1", "C2"]})
    flow = AgentFlow(steps=[Discussion([m.agent("critic"), Human("author")], rounds=2, name="review")],
                     interrupt_after=["review.turn"])
    assert flow.graph.flatten().states["review.turn"].waits
    answers = [Approve(), "A1", Say("Looks better"), Approve(), "A2", Approve()]
    done, asked = answer(flow, "go", answers)
    after, turn = ("review.after_turn", "after"), ("review.turn", "message")
    assert [(p.state, p.kind) for p in asked] == [after, turn, after, after, turn, after]
    transcript = done.output["variables"]["discussion_transcript"].splitlines()
    assert transcript == ["critic: C1", "author: A1", "critic: C2", "author: A2"]
    assert [(x.role, x.content) for x in done.transcript] == [("critic", "C1"), ("author", "A1"),
                                                             ("User", "Looks better"), ("critic", "C2"),
                                                             ("author", "A2")]
    assert m.calls() == 2 and done.output["status"] == "completed"
    assert_trace_is_path(flow.graph, done)


def test_people_in_parallel_branches_are_refused():
    m = ScriptedModel({})
    with pytest.raises(ConfigError, match="'bob' \\(a person\\) in a parallel branch"):
        AgentFlow(steps=[parallel([m.agent("a"), Human("bob")])])
    with pytest.raises(ConfigError, match="not a state"):
        AgentFlow(steps=[parallel([m.agent("a"), m.agent("b")])], interrupt_before=["parallel|1.a"])


# ---------------------------------------------------------------- drawing, config, kit
def test_wait_states_are_drawn_and_graphs_without_them_are_not_touched():
    m = ScriptedModel({})
    plain = GroupChat(agents=[m.agent("a"), m.agent("b")])
    reviewed = GroupChat(agents=[m.agent("a"), m.agent("b")], interrupt_before=["post"])
    assert "fff3cd" not in plain.graph.to_dot() and "waits" not in plain.graph.to_mermaid()
    dot, mmd = reviewed.graph.to_dot(), reviewed.graph.to_mermaid()
    assert 'before_post [label="before_post\na person approves, edits or rejects the winner\'s message" ' \
           'color="#b8860b" fillcolor="#fff3cd" style="rounded,filled,bold"]' in dot
    assert "waits for a person" in dot  # the legend row
    assert "class before_post waits" in mmd and "classDef waits" in mmd
    assert "before_post --> post : [approved]" in mmd and "before_post --> penalize : rejected" in mmd


def test_interrupts_and_people_travel_in_configs():
    m = ScriptedModel({})
    chat = GroupChat(agents=[m.agent("a"), m.agent("b"), Human("h", answers=["hi", Approve()])],
                     interrupt_before=["post"], interrupt_after=["seed"])
    cfg = chat.to_config()
    assert cfg.interrupt_before == ["post"] and cfg.interrupt_after == ["seed"]
    again = from_config(cfg.model_dump_json())
    assert again.graph.to_dot() == chat.graph.to_dot() and again.agents[2].answers == [Say("hi"), Approve()]
    flow = AgentFlow(steps=[ask_human("ok?", save_as="ok"), Discussion([m.agent("a"), Human("h")])],
                     interrupt_before=["discussion"])
    assert from_config(flow.to_config()).to_config() == flow.to_config()


def test_answer_fails_loudly_when_its_script_does_not_fit():
    def chat():
        return review_chat(bids((Bid(0.9, "a"), Bid(0.6, "b")), (Bid(0.9, "a"), Bid(0.6, "b"))), max_loops=3)[1]

    with pytest.raises(AnswerScriptError, match="all 1 scripted answer"):
        answer(chat(), TASK, [Approve()])
    with pytest.raises(AnswerScriptError, match="1 scripted answer\\(s\\) were not used"):
        answer(chat(), TASK, [Approve(), Approve(), Approve()])


def test_inputs_are_typed_and_checked():
    with pytest.raises(ConfigError, match="Say: text=''"):
        Say("")
    with pytest.raises(ConfigError, match="give the new text"):
        Edit()
    assert repr(Reject("why")) == "Reject(reason='why')" and repr(Approve()) == "Approve()"
    with pytest.raises(TypeError, match="answers"):
        Human("h", answers="hello")


def test_human_reply_is_never_called_like_a_model():
    with pytest.raises(TypeError, match="is a person"):
        asyncio.run(Human("h").reply(None))


def test_sqlite_store_keeps_a_waiting_run_across_pattern_objects(tmp_path):
    m = ScriptedModel({"a": ["A1"]})

    def make():
        return RoundRobinSwarm(agents=[m.agent("a"), Human("h")])

    cp = SqliteCheckpointer(tmp_path / "runs.db")
    assert make().execute(TASK, checkpoint=cp, run_id="w").waiting
    cp2 = SqliteCheckpointer(tmp_path / "runs.db")
    done = make().resume("w", cp2, input="H1")
    assert done.stop_reason == "max_loops" and [x.content for x in done.transcript] == [TASK, "A1", "H1"]
    assert make().resume("w", cp2).transcript == done.transcript  # finished: rebuilt, not re-run


def _patterns():
    """(name, make(interrupts) -> (model, pattern), task, where, state): a point on each pattern and a flow."""
    def chat(**kw):
        m = ScriptedModel({"a": [Bid(0.9, "a1"), Bid(0.1, "")], "b": [Bid(0.6, "b1"), Bid(0.0, "")]})
        return m, GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=4, **kw)  # a posts, then a lull

    def rr(**kw):
        m = ScriptedModel({"a": ["A1", "A2"], "b": ["B1", "B2"]})
        return m, RoundRobinSwarm(agents=[m.agent("a"), m.agent("b")], max_loops=2, **kw)

    def debate(**kw):
        m = ScriptedModel({"a": ["hi", "A1", "A2"], "b": ["hi", "B1"]})
        return m, OneOnOneDebate(max_loops=3, agents=[m.agent("a"), m.agent("b")], **kw)

    def panel(**kw):
        m = ScriptedModel({"mo": ["ok", "R1", "S1", "R2", "S2"], "x": ["ok", "X1", "X2"], "y": ["ok", "Y1", "Y2"]})
        return m, ExpertPanelDiscussion(max_rounds=2, agents=[m.agent("x"), m.agent("y")], moderator=m.agent("mo"), **kw)

    def flow(**kw):
        m = ScriptedModel({"c": ["C1", "C2"], "d": ["D1", "D2"], "s": ["S"]})
        return m, AgentFlow(steps=[Discussion([m.agent("c"), m.agent("d")], rounds=2), m.agent("s")], **kw)

    return [("group_chat", chat, "before", "bid"), ("round_robin", rr, "after", "b"),
            ("debate", debate, "before", "turn_b"), ("panel", panel, "after", "synthesize"),
            ("flow", flow, "before", "discussion.turn")]


@pytest.mark.parametrize("name, make, where, state", _patterns(), ids=[p[0] for p in _patterns()])
def test_approving_every_interrupt_equals_the_plain_run(name, make, where, state):
    m0, plain = make()
    ref = plain.execute(TASK)
    m1, paused = make(**{f"interrupt_{where}": [state]})
    done, asked = answer(paused, TASK, lambda pending: Approve())
    level, _, local = state.rpartition(".")
    wait = (level + "." if level else "") + f"{where}_{local}"
    visits = ref.path.count(state)
    assert len(asked) == visits > 0 and {p.state for p in asked} == {wait}
    assert [x for x in done.path if x != wait] == ref.path  # the wait state is the only difference
    first, then = (wait, state) if where == "before" else (state, wait)
    assert [b for a, b in zip(done.path, done.path[1:]) if a == first] == [then] * visits
    assert [(x.role, x.content) for x in done.transcript] == [(x.role, x.content) for x in ref.transcript]
    assert m1.calls() == m0.calls() == done.calls == ref.calls
    assert done.stop_reason == ref.stop_reason
    assert_trace_is_path(paused.graph, done)
