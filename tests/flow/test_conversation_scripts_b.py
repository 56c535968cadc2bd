"""docs/semantics.md "Conversation scripts", patterns 5-8 (TrialSimulation, CouncilMeeting, MentorshipSession,
NegotiationSession) as the flows in examples/: the exact order of model calls and what each was
given, the count against the summary-table formula (and max_calls()) for several settings, what
is recorded under which name, the output format, the quirks, and bad input refused before any call.

Every scripted agent answers "<name>-<n>" on its n-th call, so each expected prompt below names
the reply it carries."""
import sys
from pathlib import Path

import pytest

from fsmchat.testing import ScriptedModel, assert_trace_is_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from council_meeting import council_meeting  # noqa: E402
from mentorship_session import mentorship_session  # noqa: E402
from negotiation_session import negotiation_session  # noqa: E402
from trial_simulation import trial_simulation  # noqa: E402


@pytest.fixture
def m():
    model = ScriptedModel(fn=lambda req: f"{req.agent}-{req.n}")
    yield model
    model.close()


def run(flow, task):
    r = flow.execute(task)
    assert r.error is None and r.ok, r.error
    assert r.stop_reason == "done" and r.output["status"] == "completed"
    assert_trace_is_path(flow.graph, r)
    return r


def calls(m):
    """(agent, prompt) of every model call, in order."""
    return [(q.agent, q.prompt) for q in m.requests]


def rows(r):
    return [(x.role, x.content) for x in r.transcript]


def expect_output(r, posted):
    """The default output: contents only, joined by newlines, the first recorded row dropped."""
    assert r.output["output"] == "\n".join(content for _role, content in posted[1:])


# ---------------------------------------------------------------- 6. CouncilMeeting
def council_intros(chair, members):
    names = ", ".join(members)
    return [(chair, f"You are {chair}, the chairperson. Council members: {names}. Chairperson: {chair}. Lead the "
                    "discussion and the votes.")] + [
        (x, f"You are {x}, Council Member {i}. Other members: {', '.join(o for o in members if o != x)}. "
            f"Chairperson: {chair}. You will discuss proposals and vote on them.") for i, x in enumerate(members, 1)]


def test_council_two_rounds_call_order_inputs_and_record(m):
    flow = council_meeting([m.agent("A"), m.agent("B")], m.agent("C"), voting_rounds=2)
    r = run(flow, "Fund the library")
    vote = "vote on the proposal (approve/reject/abstain)."
    assert calls(m) == council_intros("C", ["A", "B"]) + [
        ("C", "Council Meeting Round 1: Fund the library"),
        ("A", "Council Member A, discuss this proposal: Fund the library"),
        ("B", "Council Member B, discuss this proposal: Fund the library"),
        ("C", "Based on these discussions ['A-2', 'B-2'], call for a vote on the proposal."),
        ("A", f"Council Member A, {vote}"), ("B", f"Council Member B, {vote}"),
        ("C", "Announce the voting result based on: ['A-3', 'B-3']"),
        ("C", "Council Meeting Round 2: C-4"),  # the announced result is the next proposal
        ("A", "Council Member A, discuss this proposal: C-4"),
        ("B", "Council Member B, discuss this proposal: C-4"),
        ("C", "Based on these discussions ['A-4', 'B-4'], call for a vote on the proposal."),
        ("A", f"Council Member A, {vote}"), ("B", f"Council Member B, {vote}"),
        ("C", "Announce the voting result based on: ['A-5', 'B-5']")]
    assert r.calls == 17 == flow.max_calls()  # 1 + N + R(2N + 3), N = 2, R = 2
    rnd = ["rounds.next", "rounds.body.C", "rounds.body.discuss", "rounds.body.C_2", "rounds.body.vote",
           "rounds.body.C_3", "rounds.body.done"]
    assert r.path == ["C_intro", "A_intro", "B_intro", "proposal_is_task", "rounds.begin", *rnd, *rnd,
                      "rounds.next", "rounds.end", "rounds.done", "end"]
    assert r.paths["rounds.body.discuss|2"] == ["rounds.body.discuss|2.B", "rounds.body.discuss|2.done"] * 2
    posted = [("C", "C-2"), ("A", "A-2"), ("B", "B-2"), ("C", "C-3"), ("A", "A-3"), ("B", "B-3"), ("C", "C-4"),
              ("C", "C-5"), ("A", "A-4"), ("B", "B-4"), ("C", "C-6"), ("A", "A-5"), ("B", "B-5"), ("C", "C-7")]
    assert rows(r) == posted  # R(2N + 3) posts: C, M x N, C, M x N, C per round; intros not posted
    expect_output(r, posted)
    # a member votes with only its own memory: its introduction, discussion prompt and reply
    assert m.requests_of("B")[2].messages == [
        {"role": "user", "content": council_intros("C", ["A", "B"])[2][1]}, {"role": "assistant", "content": "B-1"},
        {"role": "user", "content": "Council Member B, discuss this proposal: Fund the library"},
        {"role": "assistant", "content": "B-2"}, {"role": "user", "content": f"Council Member B, {vote}"}]


@pytest.mark.parametrize("n, rounds, expected", [(3, 1, 13), (2, 2, 17), (4, 3, 38), (2, 0, 3)])
def test_council_calls_follow_the_formula(m, n, rounds, expected):
    members = [m.agent(f"M{i}") for i in range(1, n + 1)]
    flow = council_meeting(members, m.agent("Chair"), voting_rounds=rounds)
    assert flow.max_calls() == expected  # 1 + N + R(2N + 3), written out
    r = run(flow, "a proposal")
    assert r.calls == expected == len(m.requests)
    assert len(r.transcript) == rounds * (2 * n + 3)
    if rounds == 0:  # C9: the introductions still happen; nothing is recorded; the output is ""
        assert r.output["output"] == "" and [a for a, _ in calls(m)] == ["Chair", "M1", "M2"]


def test_council_require_consensus_is_kept_and_has_no_effect():
    seen = {}
    for flag in (False, True):
        with ScriptedModel(fn=lambda req: f"{req.agent}-{req.n}") as model:
            flow = council_meeting([model.agent("A"), model.agent("B")], model.agent("C"), 1, flag)
            assert flow.variables["require_consensus"] is flag and flow.max_calls() == 10
            r = run(flow, "p")
            seen[flag] = (calls(model), rows(r), r.path)
    assert seen[False] == seen[True]


def test_council_bad_input_is_refused_before_any_call(m):
    a, b, c = m.agent("A"), m.agent("B"), m.agent("C")
    for members in (None, [], [a]):
        with pytest.raises(ValueError, match=r"^At least two council members are required\.$"):
            council_meeting(members, c)
    with pytest.raises(ValueError, match=r"^A chairperson agent is required for council meeting\.$"):
        council_meeting([a, b], None)
    with pytest.raises(ValueError, match="output_type='lines' is not supported"):
        council_meeting([a, b], c, output_type="lines")
    for rounds in ("2", 1.0, True):
        with pytest.raises(TypeError, match="voting_rounds must be an int"):
            council_meeting([a, b], c, rounds)
    assert m.requests == []


# ---------------------------------------------------------------- 8. NegotiationSession
def negotiation_intros(mediator, parties):
    return [(mediator, f"You are {mediator}, the mediator. Negotiating parties: {', '.join(parties)}. Mediator: "
                       f"{mediator}. Help the parties reach an agreement.")] + [
        (p, f"You are {p}, Party {i}. Other parties: {', '.join(o for o in parties if o != p)}. Mediator: {mediator}. "
            "State your position clearly and be willing to compromise.") for i, p in enumerate(parties, 1)]


def test_negotiation_two_rounds_call_order_inputs_and_record(m):
    flow = negotiation_session([m.agent("X"), m.agent("Y")], m.agent("M"), negotiation_rounds=2)
    r = run(flow, "wages")
    concede = "consider making a concession based on the discussion."
    summary = "Summarize the round and propose next steps for agreement."
    assert calls(m) == negotiation_intros("M", ["X", "Y"]) + [
        ("M", "Negotiation Round 1: wages"),
        ("X", "Party X, present your position on: wages"), ("Y", "Party Y, present your position on: wages"),
        # one snapshot of all positions, the party's own included, for every party
        ("X", "Party X, respond to the other positions: ['X-2', 'Y-2']"),
        ("Y", "Party Y, respond to the other positions: ['X-2', 'Y-2']"),
        ("X", f"Party X, {concede}"), ("Y", f"Party Y, {concede}"),
        ("M", summary),
        ("M", "Negotiation Round 2: M-3"),  # the summary is the next terms
        ("X", "Party X, present your position on: M-3"), ("Y", "Party Y, present your position on: M-3"),
        ("X", "Party X, respond to the other positions: ['X-5', 'Y-5']"),
        ("Y", "Party Y, respond to the other positions: ['X-5', 'Y-5']"),
        ("X", f"Party X, {concede}"), ("Y", f"Party Y, {concede}"),
        ("M", summary)]
    assert r.calls == 19 == flow.max_calls()  # the demo's count: 1 + N + R(3N + 2), N = 2, R = 2
    posted = [("M", "M-2"), ("X", "X-2"), ("Y", "Y-2"), ("X", "X-3"), ("Y", "Y-3"), ("X", "X-4"), ("Y", "Y-4"),
              ("M", "M-3"), ("M", "M-4"), ("X", "X-5"), ("Y", "Y-5"), ("X", "X-6"), ("Y", "Y-6"), ("X", "X-7"),
              ("Y", "Y-7"), ("M", "M-5")]
    assert rows(r) == posted
    expect_output(r, posted)
    # the mediator never receives a party's text: not in any prompt, not in its memory
    party_text = {c for role, c in posted if role != "M"}
    mediator_seen = " ".join(msg["content"] for q in m.requests_of("M") for msg in q.messages)
    assert not any(t in mediator_seen for t in party_text)


@pytest.mark.parametrize("n, rounds, concessions, expected", [
    (2, 5, True, 43), (2, 5, False, 33), (3, 2, True, 26), (3, 2, False, 20), (2, 0, True, 3)])
def test_negotiation_calls_follow_the_formula(m, n, rounds, concessions, expected):
    parties = [m.agent(f"P{i}") for i in range(1, n + 1)]
    flow = negotiation_session(parties, m.agent("Med"), rounds, concessions)
    assert flow.max_calls() == expected  # 1 + N + R(2 + 2N + C N), written out
    r = run(flow, "terms")
    assert r.calls == expected and len(r.transcript) == expected - (1 + n)
    conceded = [p for _a, p in calls(m) if "concession" in p]
    assert len(conceded) == (rounds * n if concessions else 0)


def test_negotiation_bad_input_is_refused_before_any_call(m):
    a, b, med = m.agent("A"), m.agent("B"), m.agent("Med")
    for parties in (None, [], [a]):
        with pytest.raises(ValueError, match=r"^At least two parties are required for negotiation\.$"):
            negotiation_session(parties, med)
    with pytest.raises(ValueError, match=r"^A mediator agent is required for negotiation session\.$"):
        negotiation_session([a, b], None)
    with pytest.raises(TypeError, match="negotiation_rounds must be an int"):
        negotiation_session([a, b], med, "5")
    assert m.requests == []


# ---------------------------------------------------------------- 7. MentorshipSession
MENTOR_INTROS = [("Mr", "You are Mr, mentoring Me. Give guidance, support and constructive feedback."),
                 ("Me", "You are Me, mentored by Mr. Ask questions, share your progress and be open to feedback.")]


def test_mentorship_two_sessions_with_feedback(m):
    flow = mentorship_session(m.agent("Mr"), m.agent("Me"), session_count=2)
    r = run(flow, "code review")
    ask = "Ask for specific feedback on your progress"
    goal = "Set the goal for the next session based on this discussion."
    assert calls(m) == MENTOR_INTROS + [
        ("Mr", "Session 1: Let's work on code review"),
        ("Me", "Mentee Me, share your progress and ask questions about: code review"),
        ("Mr", "Mentor Mr, provide guidance based on: Me-2"),
        ("Me", ask), ("Mr", "Provide detailed feedback on: Me-3"), ("Mr", goal),
        ("Mr", "Session 2: Let's work on Mr-5"),  # the mentor's last reply is the next goal
        ("Me", "Mentee Me, share your progress and ask questions about: Mr-5"),
        ("Mr", "Mentor Mr, provide guidance based on: Me-4"),
        ("Me", ask), ("Mr", "Provide detailed feedback on: Me-5"), ("Mr", goal)]
    assert r.calls == 14 == flow.max_calls()  # the demo's count: 2 + S(4 + 2F), S = 2, F = 1
    posted = [("Mr", "Mr-2"), ("Me", "Me-2"), ("Mr", "Mr-3"), ("Me", "Me-3"), ("Mr", "Mr-4"), ("Mr", "Mr-5"),
              ("Mr", "Mr-6"), ("Me", "Me-4"), ("Mr", "Mr-7"), ("Me", "Me-5"), ("Mr", "Mr-8"), ("Mr", "Mr-9")]
    assert rows(r) == posted  # the mentor posts twice in a row, and three times across a session boundary
    expect_output(r, posted)
    # the mentee's only input from the mentor is the goal: never its guidance or feedback
    mentee_seen = " ".join(msg["content"] for q in m.requests_of("Me") for msg in q.messages)
    assert "Mr-3" not in mentee_seen and "Mr-4" not in mentee_seen and "Mr-5" in mentee_seen


@pytest.mark.parametrize("sessions, feedback, expected", [(3, True, 20), (3, False, 14), (2, False, 10),
                                                          (0, True, 2)])
def test_mentorship_calls_follow_the_formula(m, sessions, feedback, expected):
    flow = mentorship_session(m.agent("Mr"), m.agent("Me"), sessions, feedback)
    assert flow.max_calls() == expected  # 2 + S(4 + 2F), written out
    r = run(flow, "goal")
    assert r.calls == expected and len(r.transcript) == expected - 2
    if not feedback and sessions:
        assert [a for a, _ in calls(m)][2:8] == ["Mr", "Me", "Mr", "Mr", "Mr", "Me"]
    if sessions == 0:
        assert r.output["output"] == ""


def test_mentorship_bad_input_is_refused_before_any_call(m):
    with pytest.raises(ValueError, match=r"^Both mentor and mentee agents are required\.$"):
        mentorship_session(m.agent("Mr"), None)
    with pytest.raises(ValueError, match=r"^Both mentor and mentee agents are required\.$"):
        mentorship_session(None, m.agent("Me"))
    with pytest.raises(TypeError, match="session_count must be an int"):
        mentorship_session(m.agent("Mr"), m.agent("Me"), 2.5)
    flow = mentorship_session(m.agent("Mr"), m.agent("Me"))
    with pytest.raises(Exception, match="non-empty string"):  # deviation: swarms substitutes a goal
        flow.run("")
    assert m.requests == []


# ---------------------------------------------------------------- 5. TrialSimulation
def trial_intros(witnesses=()):
    roster = "Prosecution: Pr. Defense: De. Judge: J." + (f" Witnesses: {', '.join(witnesses)}." if witnesses else "")
    roles = [("J", "the judge"), ("Pr", "the prosecution"), ("De", "the defense")] + [(w, "a witness")
                                                                                      for w in witnesses]
    return [(a, f"You are {a}, {role} in this trial. {roster}") for a, role in roles]


def trial(m, witnesses=(), phases=None):
    return trial_simulation(m.agent("Pr"), m.agent("De"), m.agent("J"), [m.agent(w) for w in witnesses], phases)


def phases_taken(r):
    """The route branch each phase took, from the path."""
    return [s.split(".")[3] for s in r.path if s.startswith("phases.body.by_phase.to_") and s.endswith(".done")]


def test_trial_default_phases_one_witness(m):
    flow = trial(m, ["W"])
    r = run(flow, "the case")
    assert calls(m) == trial_intros(["W"]) + [
        ("J", "Phase: OPENING. Case: the case"),
        ("Pr", "Give opening statement for: the case"), ("De", "Give opening statement responding to: Pr-2"),
        ("J", "Phase: TESTIMONY. Case: the case"), ("W", "Provide testimony for: the case"),
        ("J", "Phase: CROSS. Case: the case"),
        ("Pr", "Cross-examine this testimony: W-2"), ("De", "Redirect examination: Pr-3"),
        ("J", "Phase: CLOSING. Case: the case"),
        ("Pr", "Give closing argument"), ("De", "Give closing argument responding to: Pr-4"),
        ("J", "Render verdict based on: ['Pr-4', 'De-4']")]  # the last two rows, as a list repr
    assert r.calls == 16 == flow.max_calls()  # the demo's count: 12 + 4W, W = 1
    posted = [("J", "J-2"), ("Pr", "Pr-2"), ("De", "De-2"), ("J", "J-3"), ("W", "W-2"), ("J", "J-4"), ("Pr", "Pr-3"),
              ("De", "De-3"), ("J", "J-5"), ("Pr", "Pr-4"), ("De", "De-4"), ("J", "J-6")]
    assert rows(r) == posted  # posts = calls - (3 + W)
    expect_output(r, posted)
    assert r.output["variables"]["testimony_1"] == "W-2"  # stored per witness index
    assert phases_taken(r) == ["to_opening", "to_testimony", "to_cross", "to_closing"]
    phase, route = "phases.body.", "phases.body.by_phase."
    assert r.path == ["J_intro", "Pr_intro", "De_intro", "W_intro", "phases.begin", "phases.next",
                      phase + "J", route + "decide", route + "to_opening.Pr", route + "to_opening.De",
                      route + "to_opening.done", route + "done", phase + "done", "phases.next",
                      phase + "J", route + "decide", route + "to_testimony.W", route + "to_testimony.done",
                      route + "done", phase + "done", "phases.next",
                      phase + "J", route + "decide", route + "to_cross.Pr", route + "to_cross.De",
                      route + "to_cross.done", route + "done", phase + "done", "phases.next",
                      phase + "J", route + "decide", route + "to_closing.Pr", route + "to_closing.De",
                      route + "to_closing.J", route + "to_closing.done", route + "done", phase + "done",
                      "phases.next", "phases.end", "phases.done", "end"]


@pytest.mark.parametrize("witnesses, phases, expected", [
    ((), None, 12), (("W1", "W2"), None, 20),
    (("W1", "W2"), ["testimony", "cross", "testimony", "cross"], 21),  # 3+2+4 + 2*2 + 2*2*2
    (("W1",), ["opening", "Opening", "recess", "closing", "closing"], 3 + 1 + 5 + 2 + 6),
    ((), ["cross", "testimony", "cross"], 6)])  # no witnesses: any order, only the openers
def test_trial_calls_follow_the_formula(m, witnesses, phases, expected):
    flow = trial(m, witnesses, phases)
    assert flow.max_calls() == expected  # 3 + W + P + 2n_op + W n_te + 2W n_cr + 3n_cl, written out
    r = run(flow, "case")
    assert r.calls == expected and len(r.transcript) == expected - 3 - len(witnesses)


def test_trial_repeated_testimony_is_overwritten_and_cross_uses_the_latest(m):
    flow = trial(m, ["W1", "W2"], ["testimony", "cross", "testimony", "cross"])
    r = run(flow, "c")
    main = calls(m)[5:]  # after the 3 + W introductions
    assert [p for a, p in main if a == "Pr"] == [
        "Cross-examine this testimony: W1-2", "Cross-examine this testimony: W2-2",
        "Cross-examine this testimony: W1-3", "Cross-examine this testimony: W2-3"]
    assert [p for a, p in main if a == "De"] == ["Redirect examination: Pr-2", "Redirect examination: Pr-3",
                                                      "Redirect examination: Pr-4", "Redirect examination: Pr-5"]
    assert (r.output["variables"]["testimony_1"], r.output["variables"]["testimony_2"]) == ("W1-3", "W2-3")
    assert phases_taken(r) == ["to_testimony", "to_cross", "to_testimony", "to_cross"]


def test_trial_names_match_exactly_and_others_run_only_the_opener(m):
    r = run(trial(m, [], ["Opening", "testimony", "cross", "recess"]), "c")
    assert calls(m)[3:] == [("J", "Phase: OPENING. Case: c"), ("J", "Phase: TESTIMONY. Case: c"),
                            ("J", "Phase: CROSS. Case: c"), ("J", "Phase: RECESS. Case: c")]
    assert phases_taken(r) == []
    assert [e["value"] for e in r.events if e["event"] == "route_no_match"] == ["Opening", "testimony", "cross",
                                                                                 "recess"]


def test_trial_empty_testimony_is_still_cross_examined():
    with ScriptedModel({"J": ["i", "o1", "o2"], "Pr": ["i", "x"], "De": ["i", "y"], "W": ["i", ""]}) as model:
        flow = trial_simulation(model.agent("Pr"), model.agent("De"), model.agent("J"), [model.agent("W")],
                                ["testimony", "cross"])
        r = run(flow, "c")
        assert model.requests_of("Pr")[1].prompt == "Cross-examine this testimony: "
        assert rows(r) == [("J", "o1"), ("W", ""), ("J", "o2"), ("Pr", "x"), ("De", "y")]


def test_trial_a_second_run_does_not_reuse_the_first_runs_testimony(m):
    flow = trial(m, ["W"], ["testimony", "cross"])
    run(flow, "first")
    first = len(m.requests)
    r = run(flow, "second")
    second = calls(m)[first:]
    assert len(second) == first == 4 + 2 + 1 + 2
    assert [p for a, p in second if a == "Pr"][1] == "Cross-examine this testimony: W-4"  # not W-2
    assert r.output["variables"]["testimony_1"] == "W-4"
    # memories last one run (fsmchat's choice; swarms' agents keep theirs across runs)
    assert m.requests[first].messages == [{"role": "user", "content": trial_intros(["W"])[0][1]}]


def test_trial_bad_input_is_refused_before_any_call(m):
    pr, de, j, w = m.agent("Pr"), m.agent("De"), m.agent("J"), m.agent("W")
    for args in ((None, de, j), (pr, None, j), (pr, de, None)):
        with pytest.raises(ValueError, match=r"^Prosecution, defense, and judge agents are all required\.$"):
            trial_simulation(*args)
    for phases in (["cross"], ["cross", "testimony"], ["opening", "cross", "closing"]):
        with pytest.raises(ValueError, match=r"^The testimony phase must precede cross-examination\.$"):
            trial_simulation(pr, de, j, [w], phases)
    with pytest.raises(TypeError, match="phases must be a list of phase names"):
        trial_simulation(pr, de, j, [w], ["opening", 2])
    assert trial_simulation(pr, de, j, [], ["cross"]).max_calls() == 4  # no witnesses: any order
    assert trial_simulation(pr, de, j, None, []).max_calls() == 12  # falsy phases: the four defaults, W = 0
    assert m.requests == []


def test_trial_phase_route_is_drawn(m):
    dot = trial(m, ["W"]).graph.to_dot()
    for guard in ("phase_name_is_opening", "phase_name_is_testimony", "phase_name_is_cross",
                  "phase_name_is_closing"):
        assert guard in dot
    assert "phase_name_is_cross" not in trial(m, []).graph.to_dot()  # no witnesses: nothing to cross-examine
