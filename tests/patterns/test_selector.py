"""SelectorGroupChat: a model (or a function) picks who speaks next (AutoGen AgentChat's
SelectorGroupChat): paths, stops, call counts, the forced enum tool on the wire, retries and the
fallback, allowed pairs drawn and property-tested, bad input refused before any model call."""
import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fsmchat import Agent, AgentFlow, Human, SelectorGroupChat
from fsmchat.errors import ConfigError, ConfigTypeError
from fsmchat.patterns.selector import SelectionError, compile_selector
from fsmchat.testing import Pick, ScriptedModel, ToolCall, assert_path, assert_stop, assert_trace_is_path

from support.openai_server import OpenAIServer, text, tool_call

TASK = "Add a health check endpoint."


def clock() -> str:
    """The time."""
    return "noon"


def roster(model, names=("planner", "coder", "tester")):
    return [model.agent(n, f"You are {n}.") for n in names]


def replies(req):
    return f"{req.agent} {req.n}"


def test_a_scripted_selector_picks_each_turn_and_the_path_shows_it():
    model = ScriptedModel({"sel": [Pick("coder"), Pick("tester"), Pick("planner")], "planner": ["plan", "replan"],
                           "coder": ["code"], "tester": ["tested"]})
    chat = SelectorGroupChat(roster(model), selector=model.agent("sel"), start="planner", max_turns=4)
    r = chat.execute(TASK)
    assert_trace_is_path(chat.graph, r)
    assert_path(r, ["seed", "planner", "after_planner", "coder", "after_coder", "tester", "after_tester",
                    "planner", "stop"])
    assert_stop(r, "max_turns")
    assert [(m.role, m.content) for m in r.transcript] == [("User", TASK), ("planner", "plan"), ("coder", "code"),
                                                           ("tester", "tested"), ("planner", "replan")]
    assert (model.calls("sel"), model.calls("planner"), model.calls("coder"), model.calls("tester")) == (3, 2, 1, 1)
    assert [(e["speaker"], e["by"], e["candidates"]) for e in r.events if e["event"] == "selected"] == [
        ("coder", "selector", ["coder", "tester"]), ("tester", "selector", ["tester", "planner"]),
        ("planner", "selector", ["planner", "coder"])]


def test_the_selector_is_forced_to_call_select_speaker_with_an_enum_of_the_candidates():
    model = ScriptedModel({"sel": [Pick("tester")], "planner": ["plan"], "tester": ["ok"]})
    chat = SelectorGroupChat(roster(model), selector=model.agent("sel"), start="planner", max_turns=2)
    chat.execute(TASK)
    req = model.requests_of("sel")[0]
    assert req.tool_choice == {"type": "function", "function": {"name": "select_speaker"}}
    assert [t["function"]["name"] for t in req.tools] == ["select_speaker"]
    assert req.tools[0]["function"]["parameters"]["properties"]["speaker"]["enum"] == ["coder", "tester"]
    assert "planner" not in req.tools[0]["function"]["parameters"]["properties"]["speaker"]["enum"]  # no repeat
    assert "coder: You are coder." in req.prompt and "tester: You are tester." in req.prompt  # {roles}


def test_the_enum_is_on_the_wire_at_a_local_server():
    def answer(body):  # the selector's request forces select_speaker; a speaker's is its turn
        if body.get("tool_choice"):
            return tool_call("select_speaker", {"speaker": "coder"})
        return text(body["messages"][0]["content"].removeprefix("You are ").rstrip("."))

    with OpenAIServer(answer) as srv:
        def agent(n):
            return Agent(n, system_prompt=f"You are {n}.", model="openai/test-model", api_base=srv.url + "/v1",
                         api_key="sk-test")
        chat = SelectorGroupChat([agent("planner"), agent("coder"), agent("tester")], selector=agent("sel"),
                                 start="planner", max_turns=2)
        r = chat.execute(TASK)
        picks = [b for b in srv.requests if isinstance(b, dict) and b.get("tool_choice")]
        srv.assert_clean()
    assert_stop(r, "max_turns")
    assert [(m.role, m.content) for m in r.transcript] == [("User", TASK), ("planner", "planner"), ("coder", "coder")]
    assert len(picks) == 1
    assert picks[0]["tool_choice"] == {"type": "function", "function": {"name": "select_speaker"}}
    assert picks[0]["tools"][0]["function"]["parameters"]["properties"]["speaker"] == {
        "type": "string", "enum": ["coder", "tester"], "description": "The next speaker's name."}


def test_a_pick_that_names_no_candidate_is_asked_again_then_the_fallback_speaks():
    model = ScriptedModel({"sel": [Pick("ghost"), "the tester", ToolCall("select_speaker", "{oops"),
                                   Pick("planner")],
                           "planner": ["plan", "plan again"], "coder": ["code"], "tester": ["t"]})
    chat = SelectorGroupChat(roster(model), selector=model.agent("sel"), start="planner", max_turns=3)
    r = chat.execute(TASK)
    assert_stop(r, "max_turns")
    # turn 2: three bad answers (max_selector_attempts=3), so the first candidate after planner speaks: coder
    assert [m.role for m in r.transcript] == ["User", "planner", "coder", "planner"]
    assert [(e["event"], e.get("attempt")) for e in r.events if e["event"].startswith("selector")] == [
        ("selector_retry", 1), ("selector_retry", 2), ("selector_retry", 3), ("selector_fallback", None)]
    reasons = [e["reason"] for e in r.events if e["event"] == "selector_retry"]
    assert reasons[0] == "select_speaker named 'ghost', which is not among the candidates ['coder', 'tester']"
    assert reasons[1] == "no select_speaker call, and the text 'the tester' is no candidate's name"
    assert reasons[2].startswith("select_speaker arguments are not JSON")
    assert "Your previous answer was not valid (select_speaker named 'ghost'" in model.requests_of("sel")[1].prompt
    assert model.calls("sel") == 4  # 3 for the failed pick, 1 for the next


def test_one_candidate_left_makes_no_selector_call():
    model = ScriptedModel({"sel": [], "planner": ["p1", "p2"], "coder": ["c1"]})
    chat = SelectorGroupChat(roster(model, ("planner", "coder")), selector=model.agent("sel"), start="planner",
                             max_turns=3)
    r = chat.execute(TASK)
    assert [m.role for m in r.transcript] == ["User", "planner", "coder", "planner"]
    assert model.calls("sel") == 0
    assert {e["by"] for e in r.events if e["event"] == "selected"} == {"only_candidate"}


def test_allowed_pairs_are_the_edges_of_the_pick_states():
    allowed = {"planner": ["coder"], "coder": ["planner", "tester"], "tester": ["planner"]}
    chat = SelectorGroupChat(roster(ScriptedModel()), allowed=allowed, selector=lambda m: None)
    g = chat.graph
    assert sorted((t.source, t.dest) for t in g.transitions if t.source.startswith("after_")) == [
        ("after_coder", "planner"), ("after_coder", "tester"), ("after_planner", "coder"), ("after_tester", "planner")]
    assert [(t.source, t.dest, t.label) for t in g.transitions if t.source == "select"] == [
        ("select", "planner", "planner"), ("select", "coder", "coder"), ("select", "tester", "tester")]
    digraph = nx.DiGraph([("planner", "coder"), ("coder", "planner"), ("coder", "tester"), ("tester", "planner")])
    assert SelectorGroupChat(roster(ScriptedModel()), allowed=digraph).config.follows() == allowed


def test_a_function_selector_and_a_candidates_filter_are_plain_python():
    model = ScriptedModel(fn=replies)
    seen = []

    def who(messages):
        seen.append(messages[-1].role)
        return {"planner": "coder", "coder": "tester"}.get(messages[-1].role)  # None after tester: the fallback

    chat = SelectorGroupChat(roster(model), selector_func=who, candidate_func=lambda m: ["planner", "coder", "tester"],
                             start="planner", max_turns=5, allow_repeated_speaker=True)
    r = chat.execute(TASK)
    # after tester the function says None: the fallback is the first candidate after tester (planner)
    assert [m.role for m in r.transcript] == ["User", "planner", "coder", "tester", "planner", "coder"]
    assert seen == ["planner", "coder", "tester", "planner"]
    assert [e["by"] for e in r.events if e["event"] == "selected"] == ["function", "function", "fallback", "function"]
    assert chat.max_calls() == 15  # 3 participants x 5 turns; a function selector makes no model call


def test_a_function_that_names_a_speaker_not_allowed_now_ends_the_run_loudly():
    model = ScriptedModel(fn=replies)
    chat = SelectorGroupChat(roster(model), selector=lambda m: "planner", start="planner", max_turns=3)
    r = chat.execute(TASK)
    assert_stop(r, "error")
    assert isinstance(r.error, SelectionError)
    assert str(r.error) == ("SelectorGroupChat: selector returned 'planner', which may not speak now "
                            "(candidates: 'coder', 'tester'); return one of them, or None")
    assert [m.role for m in r.transcript] == ["User", "planner"]  # the transcript so far is kept


def test_candidates_narrow_a_turn_and_an_empty_narrowing_is_an_error():
    model = ScriptedModel(fn=replies)
    chat = SelectorGroupChat(roster(model), selector=model.agent("sel"), candidates=lambda m: ["tester"],
                             start="planner", max_turns=3)
    r = chat.execute(TASK)
    assert_stop(r, "error")
    assert [m.role for m in r.transcript] == ["User", "planner", "tester"]
    assert str(r.error) == ("SelectorGroupChat: no candidate may speak after 'tester': candidates returned "
                            "['tester'], and the allowed ones are ['planner', 'coder']")
    assert model.calls("sel") == 0


def test_until_and_livelock_stop_with_their_own_reasons():
    model = ScriptedModel(fn=lambda req: "DONE" if req.agent == "coder" else f"{req.agent} {req.n}")
    chat = SelectorGroupChat(roster(model), selector=lambda m: None, start="planner", max_turns=9,
                             until=lambda messages: messages[-1].content == "DONE")
    r = chat.execute(TASK)
    assert_stop(r, "until")
    assert [m.role for m in r.transcript] == ["User", "planner", "coder"]
    loop = ScriptedModel(fn=lambda req: f"{req.agent} again")
    chat = SelectorGroupChat(roster(loop, ("a", "b", "c")), selector=lambda m: {"a": "b", "b": "a"}[m[-1].role],
                             start="a", max_turns=20)
    r = chat.execute(TASK)
    assert_stop(r, "livelock")
    assert [m.role for m in r.transcript] == ["User", "a", "b", "a", "b", "a", "b"]  # the a-b cycle said 3 times
    assert_trace_is_path(chat.graph, r)


def test_max_calls_counts_the_selector_attempts():
    model = ScriptedModel()
    chat = SelectorGroupChat(roster(model), selector=model.agent("sel"), max_turns=4, max_selector_attempts=2)
    assert chat.max_calls() == 3 * 4 + 4 * 2


def test_the_offline_selector_takes_the_name_the_last_message_mentions_else_the_next_in_turn():
    chat = SelectorGroupChat([Agent("planner", system_prompt="You plan."), Agent("coder", system_prompt="You code."),
                              Agent("tester", system_prompt="You test.")], start="planner", max_turns=3,
                             selector_func=None)
    r = chat.execute("Plan it, and the tester should check it before the coder writes anything.")
    picks = [e["speaker"] for e in r.events if e["event"] == "selected"]
    assert r.stop_reason == "max_turns" and len(picks) == 2
    again = chat.execute("Plan it, and the tester should check it before the coder writes anything.")
    assert [m.content for m in again.transcript] == [m.content for m in r.transcript]  # deterministic
    assert [(e["speaker"], e["by"]) for e in again.events if e["event"] == "selected"] == [
        (p, "selector") for p in picks]


def test_a_selector_chat_is_a_flow_step():
    model = ScriptedModel(fn=replies)
    chat = SelectorGroupChat(roster(model), selector=lambda m: None, start="planner", max_turns=2)
    flow = AgentFlow(steps=[chat])
    r = flow.execute(TASK)
    assert r.error is None and r.stop_reason == "done"
    assert (model.calls("planner"), model.calls("coder")) == (1, 1)


# ---- bad input, before any model call ----
@pytest.mark.parametrize("kw, error, message", [
    (dict(participants=[]), ConfigError, "SelectorGroupChat needs at least two participants"),
    (dict(allowed={"planner": ["coder"], "coder": ["ghost"]}), ConfigError,
     "SelectorGroupChat: allowed names 'ghost', who is not a participant (participants: 'planner', 'coder', "
     "'tester')"),
    (dict(allowed={"planner": ["coder"], "coder": ["planner"], "tester": []}), ConfigError,
     "SelectorGroupChat: allowed: no one may speak after 'tester' (a dead end: the chat could not go on); give each "
     "speaker at least one who may follow it (end a chat with until= or max_turns=)"),
    (dict(allowed={"planner": ["coder"], "coder": ["planner"], "tester": ["planner"]}, start="planner"), ConfigError,
     "SelectorGroupChat: allowed: no run reaches 'tester' from 'planner' (nobody may hand the floor to it); add an "
     "edge to it, or leave it out"),
    (dict(allowed={"planner": ["planner", "coder"], "coder": ["tester"], "tester": ["planner"]}), ConfigError,
     "SelectorGroupChat: allowed lets 'planner' follow itself, but allow_repeat=False; drop the edge or set "
     "allow_repeat=True"),
    (dict(allowed=[("planner", "coder")]), ConfigTypeError, "SelectorGroupChat: allowed=[('planner', 'coder')] is "
     "invalid: a dict {speaker: [who may follow]} or a networkx DiGraph, not a list"),
    (dict(max_selector_attempts=0), ConfigError,
     "SelectorGroupChat: max_selector_attempts=0 is invalid: an int >= 1 (selector calls per pick before the "
     "fallback)"),
    (dict(max_selector_attempts="3"), ConfigTypeError, "max_selector_attempts='3' is invalid"),
    (dict(selector=Human("boss")), ConfigError, "SelectorGroupChat: selector=Human"),
    (dict(selector=Agent("sel", tools=[clock])), ConfigError,
     "SelectorGroupChat: the selector 'sel' has tools; a selector is offered only select_speaker, so give it none"),
    (dict(start="ghost"), ConfigError, "SelectorGroupChat: start='ghost' is not a participant"),
    (dict(allow_repeat=True, allow_repeated_speaker=True), ConfigTypeError,
     "SelectorGroupChat() got both allow_repeated_speaker= and allow_repeat= (the same option); give one"),
    (dict(max_turn=3), ConfigTypeError, "max_turn"),
])
def test_bad_input_is_refused_at_construction_naming_what_is_wrong(kw, error, message):
    model = ScriptedModel()
    kw = {"participants": roster(model), **kw}
    with pytest.raises(error) as exc:
        SelectorGroupChat(**kw)
    assert message in str(exc.value)
    assert model.calls() == 0


# ---- the property: every run's speakers walk `allowed`, and the calls are exactly counted ----
@st.composite
def chats(draw):
    n = draw(st.integers(2, 4))
    names = [f"s{i}" for i in range(n)]
    repeat = draw(st.booleans())
    follows = {}
    for i, a in enumerate(names):
        pool = [b for b in names if b != a or repeat]
        must = names[(i + 1) % n]  # a ring: no dead end, everyone reachable from anyone
        extra = draw(st.lists(st.sampled_from(pool), max_size=len(pool), unique=True))
        follows[a] = [b for b in names if b == must or b in extra]
    turns = draw(st.integers(1, 8))
    choices = draw(st.lists(st.integers(0, 10), min_size=turns, max_size=turns))
    bad = draw(st.lists(st.booleans(), min_size=turns, max_size=turns))  # a bad first answer at that pick
    return names, follows, repeat, turns, choices, bad


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chats())
def test_every_run_walks_allowed_and_the_selector_calls_are_exact(case):
    names, follows, repeat, turns, choices, bad = case
    picks = iter(range(len(choices)))

    def answer(req):
        if req.agent != "sel":
            return f"{req.agent} says {req.n}"
        enum = req.tools[0]["function"]["parameters"]["properties"]["speaker"]["enum"]
        if "not valid" not in req.prompt:
            k = next(picks)
            if bad[k]:
                return Pick("nobody")
            return Pick(enum[choices[k] % len(enum)])
        return Pick(enum[0])

    model = ScriptedModel(fn=answer)
    chat = SelectorGroupChat([model.agent(n) for n in names], selector=model.agent("sel"), allowed=follows,
                             allow_repeat=repeat, max_turns=turns, livelock_repeats=None)
    r = chat.execute(TASK)
    assert r.error is None and r.stop_reason == "max_turns"
    assert_trace_is_path(chat.graph, r)
    spoken = [m.role for m in r.transcript[1:]]
    assert len(spoken) == turns
    assert all(b in follows[a] for a, b in zip(spoken, spoken[1:]))
    # the selector is asked before every turn (the opening pick among all), never when one candidate is left,
    # and once more after each bad answer
    sizes = [len(names)] + [len(follows[a]) for a in spoken[:-1]]
    asked = [k for k, size in enumerate(sizes) if size > 1]
    expected = sum(2 if bad[j] else 1 for j, _ in enumerate(asked))
    assert model.calls("sel") == expected
    assert sum(model.calls(n) for n in names) == turns
    assert model.calls() <= chat.max_calls()


def test_the_gallery_graph_compiles_with_one_pick_state_per_speaker():
    g = compile_selector({"a": ["b"], "b": ["a"]}, start="a")
    assert list(g.states) == ["seed", "a", "b", "after_a", "after_b", "stop"]
