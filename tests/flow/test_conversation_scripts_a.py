"""docs/semantics.md "Conversation scripts", patterns 1-4 (InterviewSeries, PeerReviewProcess, MediationSession,
BrainstormingSession) as the flows in examples/: call order and inputs, counts against the
formulas, what is recorded under which name, output format, validation, paths.

Every scripted reply is "<agent>#<k>" (the agent's k-th call), so each expected prompt below is
written out by hand from the spec's call order."""
import re

import pytest

from fsmchat.cli.gallery import load_file
from fsmchat.testing import FunctionModel, assert_trace_is_path
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASK = "THE TASK"


def example(name):
    return load_file(ROOT / "examples" / f"{name}.py")


def numbered(req):
    """Every reply is "<agent>#<k>", the agent's k-th call."""
    return f"{req.agent}#{req.n}"


@pytest.fixture
def model():
    m = FunctionModel(numbered)
    yield m
    m.close()


def calls(model):
    """(agent, prompt) of every model call, in order."""
    return [(r.agent, r.messages[-1]["content"]) for r in model.requests]


def posts(result):
    return [(m.role, m.content) for m in result.transcript]


def run(flow):
    r = flow.execute(TASK)
    assert r.ok, r.error
    assert r.stop_reason == "done" and r.output["status"] == "completed"
    assert_trace_is_path(flow.graph, r)
    return r


def no_task_anywhere(model, agents):
    return all(TASK not in m["content"] for r in model.requests if r.agent in agents for m in r.messages)


# ---------------------------------------------------------------- 1. InterviewSeries
I_INTRO = "You are I, interviewing E. Ask thoughtful questions and follow up on the answers."
E_INTRO = "You are E, interviewed by I. Answer in detail and honestly."


def test_interview_one_question_one_follow_up(model):
    flow = example("interview_series").interview_series(["Q1?"], model.agent("I"), model.agent("E"),
                                                        follow_up_depth=1)
    r = run(flow)
    assert calls(model) == [
        ("I", I_INTRO), ("E", E_INTRO),
        ("I", "Ask this question: Q1?"), ("E", "I#2"),
        ("I", "Based on the response 'E#2', ask a relevant follow-up question."), ("E", "I#3")]
    assert r.calls == 6 == flow.max_calls()  # 2 + 2Q(1 + D), Q = 1, D = 1
    assert posts(r) == [("I", "I#2"), ("E", "E#2"), ("I", "I#3"), ("E", "E#3")]
    assert r.output["output"] == "E#2\nI#3\nE#3"  # str-all-except-first drops I's first question
    assert [s["name"] for s in r.output["steps"]] == ["I_intro", "E_intro", "I", "E", "I", "E"]
    assert r.path == ["I_intro", "E_intro", "questions.begin", "questions.next", "questions.body.I",
                      "questions.body.E", "questions.body.follow_ups.begin", "questions.body.follow_ups.body.I",
                      "questions.body.follow_ups.body.E", "questions.body.follow_ups.body.done",
                      "questions.body.follow_ups.check", "questions.body.follow_ups.done", "questions.body.done",
                      "questions.next", "questions.end", "questions.done", "end"]
    # private memory (C3): the follow-up request carries I's introduction and its first question
    assert model.requests[4].messages == [
        {"role": "user", "content": I_INTRO}, {"role": "assistant", "content": "I#1"},
        {"role": "user", "content": "Ask this question: Q1?"}, {"role": "assistant", "content": "I#2"},
        {"role": "user", "content": "Based on the response 'E#2', ask a relevant follow-up question."}]
    assert no_task_anywhere(model, {"I", "E"})  # run(task) never uses the task


def test_interview_follow_ups_quote_the_main_answer_not_the_latest(model):
    flow = example("interview_series").interview_series(["Q1?", "Q2?"], model.agent("I"), model.agent("E"),
                                                        follow_up_depth=2)
    r = run(flow)
    follow = "Based on the response '{}', ask a relevant follow-up question."
    assert calls(model)[2:] == [
        ("I", "Ask this question: Q1?"), ("E", "I#2"),
        ("I", follow.format("E#2")), ("E", "I#3"), ("I", follow.format("E#2")), ("E", "I#4"),
        ("I", "Ask this question: Q2?"), ("E", "I#5"),
        ("I", follow.format("E#5")), ("E", "I#6"), ("I", follow.format("E#5")), ("E", "I#7")]
    assert r.calls == 14 == flow.max_calls()  # 2 + 2 * 2 * (1 + 2)
    assert [role for role, _ in posts(r)] == ["I", "E"] * 6  # strictly alternating, 2Q(1 + D) = 12 posts


@pytest.mark.parametrize("questions, depth, expected", [(None, 2, 20), ([], 2, 20), (["a"] * 5, 3, 42),
                                                        (None, 0, 8), (["a", "b"], -1, 6)])
def test_interview_max_calls_is_the_formula(model, questions, depth, expected):
    flow = example("interview_series").interview_series(questions, model.agent("I"), model.agent("E"),
                                                        follow_up_depth=depth)
    assert flow.max_calls() == expected


def test_interview_defaults_and_no_follow_ups(model):
    flow = example("interview_series").interview_series(None, model.agent("I"), model.agent("E"), follow_up_depth=0)
    r = run(flow)
    assert [p for a, p in calls(model) if a == "I"][1:] == [
        "Ask this question: Tell me about yourself.", "Ask this question: What are your main interests?",
        "Ask this question: What are your goals?"]
    assert r.calls == 8 and len(r.transcript) == 6


def test_interview_demo_makes_20_calls():
    assert example("interview_series").build().max_calls() == 20


def test_interview_refuses_a_missing_agent_before_any_call(model):
    mod = example("interview_series")
    for i, e in ((None, model.agent("E")), (model.agent("I"), None)):
        with pytest.raises(ValueError) as exc:
            mod.interview_series(["Q"], i, e)
        assert str(exc.value) == "Both interviewer and interviewee agents are required."
    assert model.requests == []


# ---------------------------------------------------------------- 2. PeerReviewProcess
def test_peer_review_one_reviewer_one_round(model):
    flow = example("peer_review_process").peer_review_process([model.agent("R1")], model.agent("A"), review_rounds=1)
    r = run(flow)
    assert calls(model) == [
        ("A", "You are A, the author. Reviewers: R1. Author: A. Respond to the reviews professionally."),
        ("R1", "You are R1, Reviewer 1. Other reviewers: . Author: A. Review the work thoroughly and constructively."),
        ("R1", f"Reviewer R1, please review this work: {TASK}"),
        ("A", "Author A, please respond to these reviews: ['R1#2']")]
    assert r.calls == 4 == flow.max_calls()  # 1 + N + R(N + 1), N = 1, R = 1
    assert posts(r) == [("R1", "R1#2"), ("A", "A#2")]
    assert r.output["output"] == "A#2"


def test_peer_review_two_reviewers_two_rounds(model):
    flow = example("peer_review_process").peer_review_process([model.agent("R1"), model.agent("R2")],
                                                              model.agent("A"), review_rounds=2)
    r = run(flow)
    assert calls(model)[3:] == [
        ("R1", f"Reviewer R1, please review this work: {TASK}"),
        ("R2", f"Reviewer R2, please review this work: {TASK}"),
        ("A", "Author A, please respond to these reviews: ['R1#2', 'R2#2']"),
        ("R1", "Reviewer R1, please review this work: A#2"), ("R2", "Reviewer R2, please review this work: A#2"),
        ("A", "Author A, please respond to these reviews: ['R1#3', 'R2#3']")]
    assert calls(model)[2] == ("R2", "You are R2, Reviewer 2. Other reviewers: R1. Author: A. Review the work "
                                     "thoroughly and constructively.")
    assert r.calls == 9 == flow.max_calls()
    assert posts(r) == [("R1", "R1#2"), ("R2", "R2#2"), ("A", "A#2"), ("R1", "R1#3"), ("R2", "R2#3"), ("A", "A#3")]
    assert r.output["output"] == "R2#2\nA#2\nR1#3\nR2#3\nA#3"
    assert no_task_anywhere(model, {"A"})  # the author never receives the work under review
    # a reviewer sees no other review: its second request holds only its own memory
    assert [m["content"] for m in model.requests_of("R2")[2].messages] == [
        calls(model)[2][1], "R2#1", f"Reviewer R2, please review this work: {TASK}", "R2#2",
        "Reviewer R2, please review this work: A#2"]


@pytest.mark.parametrize("n, rounds, expected", [(1, 1, 4), (2, 2, 9), (3, 4, 20), (2, 0, 3)])
def test_peer_review_max_calls_is_the_formula(model, n, rounds, expected):
    flow = example("peer_review_process").peer_review_process([model.agent(f"R{i}") for i in range(n)],
                                                              model.agent("A"), review_rounds=rounds)
    assert flow.max_calls() == expected


def test_peer_review_zero_rounds_only_introduces(model):
    r = run(example("peer_review_process").peer_review_process([model.agent("R1")], model.agent("A"),
                                                               review_rounds=0))
    assert [a for a, _ in calls(model)] == ["A", "R1"] and r.transcript == [] and r.output["output"] == ""


def test_peer_review_validation_order(model):
    mod = example("peer_review_process")
    for reviewers, author, message in (([], None, "At least one reviewer is required."),
                                       (None, model.agent("A"), "At least one reviewer is required."),
                                       ([model.agent("R")], None, "An author agent is required for peer review.")):
        with pytest.raises(ValueError) as exc:
            mod.peer_review_process(reviewers, author)
        assert str(exc.value) == message
    assert model.requests == []


# ---------------------------------------------------------------- 3. MediationSession
def test_mediation_two_parties_one_session(model):
    flow = example("mediation_session").mediation_session([model.agent("P1"), model.agent("P2")], model.agent("M"),
                                                          max_sessions=1)
    r = run(flow)
    assert calls(model) == [
        ("M", "You are M, a neutral mediator. Disputing parties: P1, P2. Mediator: M. Help them reach a fair "
              "resolution."),
        ("P1", "You are P1, Party 1 in a mediation. Other parties: P2. Mediator: M. Present your interests and stay "
               "open to solutions."),
        ("P2", "You are P2, Party 2 in a mediation. Other parties: P1. Mediator: M. Present your interests and stay "
               "open to solutions."),
        ("M", f"Session 1: Let's address {TASK}"),
        ("P1", "Party P1, please share your perspective on: M#2"),
        ("P2", "Party P2, please share your perspective on: M#2"),
        ("M", "Based on these perspectives ['P1#2', 'P2#2'], propose a resolution approach.")]
    assert r.calls == 7 == flow.max_calls()  # 1 + N + R(N + 2)
    assert posts(r) == [("M", "M#2"), ("P1", "P1#2"), ("P2", "P2#2"), ("M", "M#3")]
    assert r.output["output"] == "P1#2\nP2#2\nM#3"


def test_mediation_three_parties_two_sessions_carry_the_proposal(model):
    flow = example("mediation_session").mediation_session([model.agent(p) for p in ("P1", "P2", "P3")],
                                                          model.agent("M"), max_sessions=2)
    r = run(flow)
    assert calls(model)[4:] == [
        ("M", f"Session 1: Let's address {TASK}"),
        ("P1", "Party P1, please share your perspective on: M#2"),
        ("P2", "Party P2, please share your perspective on: M#2"),
        ("P3", "Party P3, please share your perspective on: M#2"),
        ("M", "Based on these perspectives ['P1#2', 'P2#2', 'P3#2'], propose a resolution approach."),
        ("M", "Session 2: Let's address M#3"),  # the proposal is the next dispute
        ("P1", "Party P1, please share your perspective on: M#4"),  # parties get the opening, not the dispute
        ("P2", "Party P2, please share your perspective on: M#4"),
        ("P3", "Party P3, please share your perspective on: M#4"),
        ("M", "Based on these perspectives ['P1#3', 'P2#3', 'P3#3'], propose a resolution approach.")]
    assert r.calls == 14 == flow.max_calls()
    assert [role for role, _ in posts(r)] == ["M", "P1", "P2", "P3", "M"] * 2


@pytest.mark.parametrize("n, sessions, expected", [(2, 2, 11), (2, 3, 15), (4, 3, 23), (3, 0, 4)])
def test_mediation_max_calls_is_the_formula(model, n, sessions, expected):
    flow = example("mediation_session").mediation_session([model.agent(f"P{i}") for i in range(n)],
                                                          model.agent("M"), max_sessions=sessions)
    assert flow.max_calls() == expected


def test_mediation_validation(model):
    mod = example("mediation_session")
    for parties, mediator, message in (([model.agent("P")], model.agent("M"),
                                        "At least two parties are required for mediation."),
                                       (None, None, "At least two parties are required for mediation."),
                                       ([model.agent("P"), model.agent("Q")], None,
                                        "A mediator agent is required for mediation session.")):
        with pytest.raises(ValueError) as exc:
            mod.mediation_session(parties, mediator)
        assert str(exc.value) == message
    assert model.requests == []


# ---------------------------------------------------------------- 4. BrainstormingSession
def test_brainstorming_two_participants_one_round(model):
    flow = example("brainstorming_session").brainstorming_session([model.agent("P1"), model.agent("P2")],
                                                                  model.agent("F"), idea_rounds=1)
    r = run(flow)
    assert calls(model) == [
        ("F", "You are F, facilitating a brainstorm. Brainstorming participants: P1, P2. Facilitator: F. Keep ideas "
              "flowing and synthesise them."),
        ("P1", "You are P1, Participant 1 in a brainstorm. Other participants: P2. Facilitator: F. Build on the "
               "others' suggestions."),
        ("P2", "You are P2, Participant 2 in a brainstorm. Other participants: P1. Facilitator: F. Build on the "
               "others' suggestions."),
        ("F", f"Round 1: Let's brainstorm about {TASK}"),
        ("P1", f"Participant P1, suggest ideas for: {TASK}"),
        ("P2", "Participant P2, build on these previous ideas: ['P1#2']"),
        ("F", "Synthesize the ideas from this round and reframe the problem: ['P1#2', 'P2#2']")]
    assert r.calls == 7 == flow.max_calls()
    assert posts(r) == [("F", "F#2"), ("P1", "P1#2"), ("P2", "P2#2"), ("F", "F#3")]
    assert r.output["output"] == "P1#2\nP2#2\nF#3"
    assert r.output["variables"]["ideas"] == ["P1#2", "P2#2"]
    assert r.path[4:] == [
        "idea_rounds.begin", "idea_rounds.next", "idea_rounds.body.F", "idea_rounds.body.P1_turn.check",
        "idea_rounds.body.P1_turn.else.P1", "idea_rounds.body.P1_turn.else.done", "idea_rounds.body.P1_turn.done",
        "idea_rounds.body.P2_turn.check", "idea_rounds.body.P2_turn.then.P2", "idea_rounds.body.P2_turn.then.done",
        "idea_rounds.body.P2_turn.done", "idea_rounds.body.F_2", "idea_rounds.body.done", "idea_rounds.next",
        "idea_rounds.end", "idea_rounds.done", "end"]


def test_brainstorming_window_of_three_crosses_rounds(model):
    flow = example("brainstorming_session").brainstorming_session([model.agent(p) for p in ("P1", "P2", "P3")],
                                                                  model.agent("F"), idea_rounds=2)
    r = run(flow)
    build = "Participant {}, build on these previous ideas: {}"
    assert calls(model)[4:] == [
        ("F", f"Round 1: Let's brainstorm about {TASK}"),
        ("P1", f"Participant P1, suggest ideas for: {TASK}"),
        ("P2", build.format("P2", "['P1#2']")),
        ("P3", build.format("P3", "['P1#2', 'P2#2']")),
        ("F", "Synthesize the ideas from this round and reframe the problem: ['P1#2', 'P2#2', 'P3#2']"),
        ("F", "Round 2: Let's brainstorm about F#3"),  # the reframing reaches only F's own opening
        ("P1", build.format("P1", "['P1#2', 'P2#2', 'P3#2']")),
        ("P2", build.format("P2", "['P2#2', 'P3#2', 'P1#3']")),
        ("P3", build.format("P3", "['P3#2', 'P1#3', 'P2#3']")),
        ("F", "Synthesize the ideas from this round and reframe the problem: ['P1#3', 'P2#3', 'P3#3']")]
    assert r.calls == 14 == flow.max_calls()  # the demo's count (N = 3, R = 2)
    assert [role for role, _ in posts(r)] == ["F", "P1", "P2", "P3", "F"] * 2
    assert r.output["variables"]["ideas"] == ["P1#2", "P2#2", "P3#2", "P1#3", "P2#3", "P3#3"]


def test_brainstorming_without_building_every_participant_gets_the_problem(model):
    flow = example("brainstorming_session").brainstorming_session([model.agent("P1"), model.agent("P2")],
                                                                  model.agent("F"), idea_rounds=2,
                                                                  build_on_ideas=False)
    r = run(flow)
    assert calls(model)[3:] == [
        ("F", f"Round 1: Let's brainstorm about {TASK}"),
        ("P1", f"Participant P1, suggest ideas for: {TASK}"), ("P2", f"Participant P2, suggest ideas for: {TASK}"),
        ("F", "Synthesize the ideas from this round and reframe the problem: ['P1#2', 'P2#2']"),
        ("F", "Round 2: Let's brainstorm about F#3"),
        ("P1", "Participant P1, suggest ideas for: F#3"), ("P2", "Participant P2, suggest ideas for: F#3"),
        ("F", "Synthesize the ideas from this round and reframe the problem: ['P1#3', 'P2#3']")]
    assert r.calls == 11 == flow.max_calls()  # the flag changes prompts, never counts


@pytest.mark.parametrize("n, rounds, build, expected", [(3, 2, True, 14), (3, 2, False, 14), (2, 3, True, 15),
                                                        (5, 1, False, 13), (2, 0, True, 3)])
def test_brainstorming_max_calls_is_the_formula(model, n, rounds, build, expected):
    flow = example("brainstorming_session").brainstorming_session([model.agent(f"P{i}") for i in range(n)],
                                                                  model.agent("F"), idea_rounds=rounds,
                                                                  build_on_ideas=build)
    assert flow.max_calls() == expected


def test_brainstorming_validation_and_output_types(model):
    mod = example("brainstorming_session")
    for parties, facilitator, message in (([model.agent("P")], model.agent("F"),
                                           "At least two participants are required for brainstorming."),
                                          ([model.agent("P"), model.agent("Q")], None,
                                           "A facilitator agent is required for brainstorming session.")):
        with pytest.raises(ValueError) as exc:
            mod.brainstorming_session(parties, facilitator)
        assert str(exc.value) == message
    with pytest.raises(ValueError, match="output_type='text' is not supported"):  # refused before any call
        mod.brainstorming_session([model.agent("P"), model.agent("Q")], model.agent("F"), output_type="text")
    assert model.requests == []
    r = run(mod.brainstorming_session([model.agent("P"), model.agent("Q")], model.agent("F"), idea_rounds=1,
                                      output_type="final"))
    assert r.output["output"] == "F#3"


# ---------------------------------------------------------------- the examples as scripts
@pytest.mark.parametrize("name, n_calls", [("interview_series", 20), ("peer_review_process", 9),
                                           ("mediation_session", 11), ("brainstorming_session", 14)])
def test_example_runs_offline_and_reports_its_calls(name, n_calls, capsys):
    from fsmchat.cli import main

    assert main(["run", str(ROOT / "examples" / f"{name}.py")]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"\n-- stopped: done after \d+ messages, {n_calls} model calls \(worst case {n_calls}\), ", out), out[-600:]


def test_example_runs_with_a_model_over_http(monkeypatch, capsys):
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from support.openai_server import OpenAIServer, text

    from fsmchat.cli import main

    with OpenAIServer(lambda req: text(f"reply {len(srv.requests)}")) as srv:
        monkeypatch.setenv("FSMCHAT_MODEL", "openai/test-model")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_API_BASE", srv.url + "/v1")
        assert main(["run", str(ROOT / "examples" / "peer_review_process.py"), "--model", "openai/test-model"]) == 0
        assert len(srv.requests) == 9
    out = capsys.readouterr().out
    assert re.search(r"\n-- stopped: done after \d+ messages, 9 model calls \(worst case 9\), ", out), out[-600:]


def test_ill_typed_counts_are_refused_when_built(model):
    two = [model.agent("P"), model.agent("Q")]
    cases = [
        (lambda: example("interview_series").interview_series(["q"], two[0], two[1], follow_up_depth="2"),
         "follow_up_depth must be an int (0 or less: no follow-ups), got '2'"),
        (lambda: example("interview_series").interview_series("Why?", two[0], two[1]),
         "questions must be a list of strings, got 'Why?'"),
        (lambda: example("peer_review_process").peer_review_process(two, model.agent("A"), review_rounds=2.0),
         "review_rounds must be an int, got 2.0"),
        (lambda: example("mediation_session").mediation_session(two, model.agent("M"), max_sessions=True),
         "max_sessions must be an int, got True"),
        (lambda: example("brainstorming_session").brainstorming_session(two, model.agent("F"), idea_rounds=None),
         "idea_rounds must be an int, got None")]
    for make, message in cases:
        with pytest.raises(TypeError) as exc:
            make()
        assert str(exc.value) == message
    assert model.requests == []


def test_a_pattern_travels_as_a_config_and_runs_the_same(model):
    from fsmchat import from_config

    flow = example("brainstorming_session").brainstorming_session([model.agent("P1"), model.agent("P2")],
                                                                  model.agent("F"), idea_rounds=2)
    first = run(flow)
    sent = calls(model)
    model.requests.clear()
    again = from_config(flow.to_config(), trusted=True)  # trusted: the scripted model's function is this module's
    second = again.execute(TASK)
    assert second.ok and calls(model) == sent  # the same prompts, in the same order
    assert posts(second) == posts(first) and second.output["output"] == first.output["output"]
    assert again.max_calls() == flow.max_calls() == 11


def test_a_second_run_starts_with_fresh_memories(model):
    """Deviation from swarms (C3): its agents keep memory across runs; here each run starts empty."""
    flow = example("mediation_session").mediation_session([model.agent("P1"), model.agent("P2")], model.agent("M"),
                                                          max_sessions=1)
    run(flow)
    first = [r.messages for r in model.requests]
    model.requests.clear()
    run(flow)
    assert [r.messages for r in model.requests] == first
    assert len(model.requests[0].messages) == 1  # the mediator's introduction, with nothing before it
