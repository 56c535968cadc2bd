"""AgentFlow + Discussion + combinators: state-transition tests for each docs/semantics.md rule."""
import asyncio
import time

import pytest

from fsmchat import Agent
from fsmchat.flow import AgentFlow, Discussion, Flow, StepResult, Task, if_, loop, parallel, repeat, route, when
from fsmchat.testing import Fail, ScriptedModel, assert_path, assert_trace_is_path


def speaker(name, outputs=None, log=None):
    """A callable speaker that says '<name><k>' (or the scripted outputs) and logs what it saw."""
    state = {"k": 0}

    def fn(ctx):
        state["k"] += 1
        if log is not None:
            log.append((name, ctx.previous_result))
        return outputs[state["k"] - 1] if outputs else f"{name}{state['k']}"

    fn.__name__ = name
    return fn


def run(flow, inp="go"):
    r = flow.execute(inp)
    assert_trace_is_path(flow.graph, r)
    return r


def turns(r):
    return [s["name"] for s in r.output["steps"]]


# ---- Discussion construction errors (exact) ----
def test_discussion_construction_errors():
    with pytest.raises(ValueError) as e:
        Discussion([])
    assert str(e.value) == ("Discussion needs at least one speaker; an empty discussion would run zero turns and "
                            "report success.")
    for bad in (0, -1):
        with pytest.raises(ValueError) as e:
            Discussion([speaker("a")], rounds=bad)
        assert str(e.value) == f"Discussion 'discussion': rounds={bad} is invalid: an int >= 1 (full passes over the " \
                               "speakers)"
    with pytest.raises(TypeError, match="until must be a callable"):
        Discussion([speaker("a")], until="AGREED")


def test_discussion_defaults():
    d = Discussion([speaker("a")])
    assert (d.rounds, d.until, d.select, d.name) == (3, None, None, "discussion")


# ---- schedule ----
@pytest.mark.parametrize("n, rounds", [(1, 1), (2, 2), (3, 3), (5, 2)])
def test_round_robin_schedule(n, rounds):
    names = [f"s{i}" for i in range(n)]
    flow = AgentFlow(steps=[Discussion([speaker(x) for x in names], rounds=rounds)])
    r = run(flow)
    assert turns(r) == names * rounds
    assert r.path.count("discussion.turn") == n * rounds
    assert r.output["status"] == "completed" and r.stop_reason == "done"
    assert r.trace[-2].trigger == "next" and r.path[-2] == "discussion.done"


def test_reference_quick_start_turn_order():
    critic, author = speaker("critic"), speaker("author")
    r = run(AgentFlow(steps=[Discussion([critic, author], rounds=2)]))
    assert turns(r) == ["critic", "author", "critic", "author"]


@pytest.mark.parametrize("select, expected", [
    (lambda t, ctx: "E" if t % 2 == 0 else "S", ["expert", "scribe"] * 2),       # reference example
    (lambda t, ctx: "E", ["expert"] * 4),                                          # repeat
    (lambda t, ctx: "S", ["scribe"] * 4),                                          # skip the expert
    (lambda t, ctx: "S" if t < 2 else "E", ["scribe", "scribe", "expert", "expert"]),  # reorder
])
def test_select_repeats_skips_reorders(select, expected):
    expert, scribe = speaker("expert"), speaker("scribe")
    pick = {"E": expert, "S": scribe}
    flow = AgentFlow(steps=[Discussion([expert, scribe], rounds=2, select=lambda t, ctx: pick[select(t, ctx)])])
    assert turns(run(flow)) == expected


def test_select_gets_turn_index_and_context():
    seen = []
    a = speaker("a")

    def sel(t, ctx):
        seen.append((t, ctx.input))
        return a

    run(AgentFlow(steps=[Discussion([a, speaker("b")], rounds=2, select=sel)]), "topic")
    assert seen == [(0, "topic"), (1, "topic"), (2, "topic"), (3, "topic")]


def test_select_returning_a_stranger_fails_clearly():
    flow = AgentFlow(steps=[Discussion([speaker("a")], rounds=1, select=lambda t, ctx: "nobody")])
    with pytest.raises(ValueError, match=r"select\(\) returned 'nobody', which is not one of its speakers \['a'\]"):
        flow.run("x")


# ---- until ----
@pytest.mark.parametrize("agreed_at", [1, 2, 4, 5])
def test_until_stops_mid_round(agreed_at):
    """until is checked after every turn: the turn that meets it is the last, wherever it falls in
    a round of three speakers (turn 1, 2, 4, 5: none ends a round)."""
    said = iter(range(1, 100))

    def talk(name):
        def fn(ctx):
            return "AGREED" if next(said) == agreed_at else f"{name} goes on"
        fn.__name__ = name
        return fn

    flow = AgentFlow(steps=[Discussion([talk("critic"), talk("author"), talk("editor")], rounds=3,
                                       until=lambda ctx: ctx.previous_result == "AGREED")])
    r = run(flow)
    assert turns(r) == ["critic", "author", "editor", "critic", "author"][:agreed_at]
    assert r.output["output"] == "AGREED"
    assert r.trace[-3].trigger == "until"


def test_until_sees_this_turn_output_and_transcript():
    seen = []

    def until(ctx):
        seen.append((ctx.previous_result, ctx.variables["discussion_transcript"]))
        return False

    run(AgentFlow(steps=[Discussion([speaker("a"), speaker("b")], rounds=1, until=until)]))
    assert seen == [("a1", "a: a1"), ("b1", "a: a1\nb: b1")]


def test_until_raising_is_wrapped_and_chained():
    def until(ctx):
        raise KeyError("score")

    flow = AgentFlow(steps=[Discussion([speaker("a"), speaker("b")], rounds=3, until=until), speaker("after")])
    with pytest.raises(ValueError) as e:
        flow.run("x")
    assert str(e.value) == ("Discussion until() raised KeyError: 'score'. It is checked after every turn, so a "
                            "failing condition would run the full round budget.")
    assert isinstance(e.value.__cause__, KeyError)
    res = e.value.fsmchat_result
    assert res.output["status"] == "failed"
    assert [s["name"] for s in res.output["steps"]] == ["a"]  # one turn, then halted; `after` never ran
    assert res.output["variables"]["discussion_transcript"] == "a: a1"
    assert res.stop_reason == "error"


# ---- transcript and previous_result ----
def test_transcript_variable_and_template_downstream():
    seen = []

    def summarize(ctx):
        seen.append(ctx.render("Summarize:\n{{discussion_transcript}}"))
        return "summary"

    flow = AgentFlow(steps=[Discussion([speaker("critic"), speaker("author")], rounds=2), summarize])
    r = run(flow)
    t = "critic: critic1\nauthor: author1\ncritic: critic2\nauthor: author2"
    assert r.output["variables"]["discussion_transcript"] == t
    assert seen == ["Summarize:\n" + t]
    assert r.output["output"] == "summary"
    assert flow.variables == {}  # the declared state is untouched


def test_previous_result_chaining_including_empty_output():
    log = []
    pre = speaker("pre", ["prepared"])
    a = speaker("a", ["", "a2"], log)
    b = speaker("b", ["b1", "b2"], log)
    run(AgentFlow(steps=[pre, Discussion([a, b], rounds=2)]))
    assert log == [("a", "prepared"), ("b", ""), ("a", "b1"), ("b", "a2")]


def test_first_speaker_gets_none_without_previous_step():
    log = []
    run(AgentFlow(steps=[Discussion([speaker("a", None, log)], rounds=1)]))
    assert log == [("a", None)]


def test_each_discussion_run_starts_its_own_transcript():
    flow = AgentFlow(steps=[loop(steps=[Discussion([speaker("c"), speaker("w")], rounds=1)], over="items")],
                     variables={"items": ["draft A", "draft B"]})
    r = run(flow)
    assert r.output["variables"]["discussion_transcript"] == "c: c2\nw: w2"
    assert turns(r) == ["c", "w", "c", "w"]


def test_second_run_starts_fresh():
    def add(ctx):
        ctx.variables.setdefault("seen", []).append(ctx.input)
        return "ok"

    flow = AgentFlow(steps=[add], variables={"seen": []})
    assert flow.run("one")["variables"]["seen"] == ["one"]
    assert flow.run("two")["variables"]["seen"] == ["two"]
    assert flow.variables == {"seen": []}


# ---- agents through litellm ----
def test_agent_steps_are_templated_and_see_the_transcript():
    m = ScriptedModel({"critic": ["c1", "c2"], "author": ["a1", "AGREED"], "summarizer": ["done"]})
    critic = m.agent("critic", "Critique the draft rigorously")
    author = m.agent("author", "Revise the draft; say AGREED when satisfied")
    summarizer = Agent(name="summarizer", instructions="Summarize this debate:\n{{discussion_transcript}}",
                       model=m.model, num_retries=0)
    flow = AgentFlow(agents=[critic, author, summarizer], steps=[
        Discussion([critic, author], rounds=3, until=lambda ctx: "AGREED" in (ctx.previous_result or "")),
        summarizer])
    r = run(flow, "Draft: Renewable energy is the only path forward.")
    assert r.output == {"output": "done", "status": "completed",
                        "steps": [{"name": n, "output": o, "status": "completed"} for n, o in
                                  [("critic", "c1"), ("author", "a1"), ("critic", "c2"), ("author", "AGREED"),
                                   ("summarizer", "done")]],
                        "variables": {"discussion_transcript": "critic: c1\nauthor: a1\ncritic: c2\nauthor: AGREED"}}
    s = m.requests_of("summarizer")[0]
    assert s.messages[0] == {"role": "system", "content": "Summarize this debate:\ncritic: c1\nauthor: a1\n"
                                                          "critic: c2\nauthor: AGREED"}
    a2 = m.requests_of("author")[1].prompt
    assert a2.startswith("Draft: Renewable energy") and "critic: c1\nauthor: a1\ncritic: c2" in a2
    assert r.calls == 5 and flow.max_calls() == 3 * 2 + 1


def test_roster_check():
    a, b = Agent("a"), Agent("b")
    with pytest.raises(ValueError, match=r"step agent 'b' is not in agents= \['a'\]"):
        AgentFlow(agents=[a], steps=[Discussion([a, b])])
    assert Flow is AgentFlow


# ---- errors and stops ----
def boom(ctx):
    raise RuntimeError("speaker down")


def test_speaker_failure_stops_discussion_and_flow():
    later = speaker("later")
    flow = AgentFlow(steps=[Discussion([speaker("a"), boom, speaker("c")], rounds=2), later])
    r = run(flow)
    out = r.output
    assert out["status"] == "failed" and r.stop_reason == "error"
    assert "step 'boom' failed: RuntimeError: speaker down" in out["error"]
    assert [(s["name"], s["status"]) for s in out["steps"]] == [("a", "completed"), ("boom", "failed")]
    assert "later" not in r.path[-1] and all(not p.startswith("later") for p in r.path)
    # no until: no check_until state, the turn loops on itself
    assert_path(r, ["discussion.begin", "discussion.turn", "discussion.turn", "discussion.done", "end"])
    assert out["variables"]["discussion_transcript"] == "a: a1"


def test_continue_records_and_goes_on():
    flow = AgentFlow(steps=[Discussion([speaker("a"), Task(handler=boom, on_error="continue")], rounds=2)])
    r = run(flow)
    assert r.output["status"] == "completed"
    assert [(s["name"], s["status"]) for s in r.output["steps"]] == [
        ("a", "completed"), ("boom", "failed"), ("a", "completed"), ("boom", "failed")]
    assert r.output["variables"]["discussion_transcript"] == "a: a1\na: a2"


def test_retry_with_backoff_then_success():
    calls = []

    def flaky(ctx):
        calls.append(time.perf_counter())
        if len(calls) < 3:
            raise ConnectionError("blip")
        return "finally"

    r = run(AgentFlow(steps=[Task(handler=flaky, on_error="retry", max_retries=2, retry_delay=0.02)]))
    assert r.output["output"] == "finally" and len(calls) == 3
    assert calls[1] - calls[0] >= 0.02 and calls[2] - calls[1] >= 0.04  # exponential backoff (lower bounds)
    assert [e["attempt"] for e in r.events if e["event"] == "retry"] == [1, 2]


def test_retry_exhausted_fails():
    r = run(AgentFlow(steps=[Task(handler=boom, on_error="retry", max_retries=1, retry_delay=0.001), speaker("x")]))
    assert r.output["status"] == "failed" and len(r.output["steps"]) == 1


def test_stop_workflow_is_a_stop_not_a_failure():
    def judge(ctx):
        return StepResult(output="enough", stop_workflow=True, variables={"verdict": "stop"})

    flow = AgentFlow(steps=[Discussion([speaker("a"), judge, speaker("c")], rounds=3), speaker("later")])
    r = run(flow)
    assert r.output["status"] == "stopped" and "error" not in r.output and r.stop_reason == "stopped"
    assert turns(r) == ["a", "judge"] and r.output["variables"]["verdict"] == "stop"


def test_task_should_run_and_validation():
    r = run(AgentFlow(steps=[Task(handler=speaker("x"), should_run=lambda ctx: False), speaker("y")]))
    assert [(s["name"], s["status"]) for s in r.output["steps"]] == [("x", "skipped"), ("y", "completed")]
    with pytest.raises(ValueError, match="on_error='explode' is not allowed"):
        Task(handler=boom, on_error="explode")
    with pytest.raises(ValueError, match="exactly one of handler"):
        Task()
    with pytest.raises(TypeError, match="a step must be an Agent"):
        AgentFlow(steps=[42])


def test_model_failure_in_agent_step_keeps_transcript():
    m = ScriptedModel({"a": ["first"], "b": [Fail(500, "server down")]})  # a 400: test_honest_failures.py
    flow = AgentFlow(steps=[Discussion([m.agent("a"), m.agent("b")], rounds=2), speaker("after")])
    r = run(flow)
    assert r.output["status"] == "failed" and "step 'b' failed" in r.output["error"]
    assert [m_.content for m_ in r.transcript] == ["first"]
    assert m.calls() == 2


# ---- combinators alone and with a Discussion inside ----
def test_loop_sets_item_and_index():
    seen = []

    def body(ctx):
        seen.append((ctx.variables["draft"], ctx.variables["loop_index"]))
        return ctx.variables["draft"].upper()

    r = run(AgentFlow(steps=[loop(body, over="drafts", var_name="draft")], variables={"drafts": ["a", "b", "c"]}))
    assert seen == [("a", 0), ("b", 1), ("c", 2)] and r.output["output"] == "C"
    assert_path(r, ["loop.begin", "*", "loop.next", "loop.end", "loop.done", "end"])
    assert r.path.count("loop.body.body") == 3


def test_loop_over_missing_variable_fails_clearly():
    with pytest.raises(ValueError, match=r"loop over='nope': no such variable"):
        AgentFlow(steps=[loop(speaker("x"), over="nope")]).run("x")


def test_parallel_merges_in_declaration_order():
    async def slow(ctx):
        await asyncio.sleep(0.05)
        ctx.variables["winner"] = "slow"
        ctx.variables["slow_only"] = 1
        return "slow out"

    def fast(ctx):
        ctx.variables["winner"] = "fast"
        return "fast out"

    r = run(AgentFlow(steps=[parallel([slow, fast]), speaker("after", None)]))
    v = r.output["variables"]
    assert v["winner"] == "fast" and v["slow_only"] == 1  # later declaration wins, whatever finished first
    assert v["parallel_outputs"] == ["slow out", "fast out"]
    assert [s["name"] for s in r.output["steps"]] == ["slow", "fast", "after"]


def test_parallel_branches_run_concurrently_and_see_copies():
    """Each branch waits until all three have started: run one after another, the first would wait
    alone (until a hang guard) and see 1 of 3."""
    started, seen = [], []
    give_up = time.monotonic() + 120  # only ends a wait that concurrent branches never reach

    async def nap(ctx):
        ctx.variables["n"] += 1
        started.append(1)
        while len(started) < 3 and time.monotonic() < give_up:
            await asyncio.sleep(0.005)
        seen.append(len(started))
        return str(ctx.variables["n"])

    r = run(AgentFlow(steps=[parallel([nap, nap, nap])], variables={"n": 0}))
    assert seen == [3, 3, 3], f"the branches were not all running at once: {seen}"
    assert r.output["variables"]["parallel_outputs"] == ["1", "1", "1"]


def test_parallel_of_two_discussions():
    r = run(AgentFlow(steps=[parallel([Discussion([speaker("a"), speaker("b")], rounds=1, name="d1"),
                                       Discussion([speaker("c")], rounds=2, name="d2")])]))
    assert turns(r) == ["a", "b", "c", "c"]
    assert r.output["variables"]["parallel_outputs"] == ["b1", "c2"]
    assert r.output["variables"]["discussion_transcript"] == "c: c1\nc: c2"  # declaration order: d2 merged last


def test_parallel_loop():
    seen = []
    done = {i: asyncio.Event() for i in (1, 2, 3, 4)}
    done[4].set()

    async def body(ctx):  # item i finishes after item i + 1: only concurrent items can (else a hang guard fails)
        item = ctx.variables["item"]
        await asyncio.wait_for(done[item + 1].wait(), 120)
        seen.append(item)
        done[item].set()
        return f"did {item}"

    r = run(AgentFlow(steps=[loop(body, over="items", parallel=True)], variables={"items": [1, 2, 3]}))
    assert seen == [3, 2, 1]  # concurrent: shortest sleep first
    assert r.output["variables"]["loop_outputs"] == ["did 1", "did 2", "did 3"]


@pytest.mark.parametrize("said, expected", [("I APPROVE this", "approver"), ("reject it", "rejecter"),
                                            ("approved!", "fallback"), ("nothing", "fallback")])
def test_route_matches_whole_words_case_insensitively(said, expected):
    r = run(AgentFlow(steps=[lambda ctx: said, route({"approve": [speaker("approver")],
                                                      "reject": [speaker("rejecter")]},
                                                     default=[speaker("fallback")])]))
    assert r.output["steps"][-1]["name"] == expected


def test_route_first_key_wins_and_no_default():
    r = run(AgentFlow(steps=[lambda ctx: "reject then approve", route({"approve": [speaker("A")],
                                                                       "reject": [speaker("R")]})]))
    assert r.output["steps"][-1]["name"] == "A"
    r = run(AgentFlow(steps=[lambda ctx: "hmm", route({"approve": [speaker("A")]})]))
    assert r.output["output"] == "hmm" and r.path[-3:] == ["route.decide", "route.done", "end"]


@pytest.mark.parametrize("cond, score, branch", [("{{score}} >= 70", 85, "yes"), ("{{score}} >= 70", 10, "no"),
                                                 ("{{status}} == approved", 0, "yes"),
                                                 (lambda ctx: ctx.variables["score"] > 5, 6, "yes")])
def test_if_with_expressions_and_callables(cond, score, branch):
    r = run(AgentFlow(steps=[if_(cond, [speaker("yes")], [speaker("no")])],
                      variables={"score": score, "status": "approved"}))
    assert r.output["steps"][-1]["name"] == branch
    assert when is if_


def test_repeat_until_and_max_iterations():
    r = run(AgentFlow(steps=[repeat(speaker("w"), until=lambda ctx: ctx.previous_result == "w3")]))
    assert turns(r) == ["w", "w", "w"] and r.trace[-3].trigger == "until"
    r = run(AgentFlow(steps=[repeat(speaker("w"), max_iterations=4)]))
    assert turns(r) == ["w"] * 4 and r.trace[-3].trigger == "max_iterations"
    with pytest.raises(ValueError, match="max_iterations=0 is invalid: an int >= 1"):
        repeat(speaker("w"), max_iterations=0)


@pytest.mark.parametrize("make", [
    lambda d: loop(d, over="items"),
    lambda d: parallel([d]),
    lambda d: route({"go": [d]}),
    lambda d: if_(lambda ctx: True, [d]),
    lambda d: repeat(d, max_iterations=3),
])
def test_stop_propagates_out_of_every_combinator(make):
    d = Discussion([speaker("a"), boom], rounds=2)
    flow = AgentFlow(steps=[lambda ctx: "go", make(d), speaker("never")], variables={"items": [1, 2]})
    r = run(flow)
    assert r.output["status"] == "failed"
    assert [s["name"] for s in r.output["steps"]] == ["<lambda>", "a", "boom"]
    assert not any("never" in p for p in r.path)


@pytest.mark.parametrize("make", [
    lambda d: loop(d, over="items"), lambda d: route({"go": [d]}),
    lambda d: if_(lambda ctx: True, [d]), lambda d: repeat(d, max_iterations=2),
])
def test_discussion_inside_each_combinator(make):
    flow = AgentFlow(steps=[lambda ctx: "go", make(Discussion([speaker("a"), speaker("b")], rounds=1))],
                     variables={"items": ["x"]})
    r = run(flow)
    assert r.output["status"] == "completed"
    assert r.output["variables"]["discussion_transcript"].startswith("a: a")


def test_discussion_in_loop_in_route_and_five_levels_deep():
    d = Discussion([speaker("a"), speaker("b")], rounds=1)
    deep = repeat(if_(lambda ctx: True, [route({"go": [loop(d, over="items")]})]), max_iterations=1)
    flow = AgentFlow(steps=[lambda ctx: "go", parallel([deep])], variables={"items": [1, 2]})
    r = run(flow)
    assert r.output["status"] == "completed"
    assert turns(r) == ["<lambda>", "a", "b", "a", "b"]
    sub = flow.graph.states["parallel"].branches[0].flatten()
    assert max(s.count(".") for s in sub.states) >= 5  # repeat.body.if.then.route.to_go.loop.body.discussion...
    inline = AgentFlow(steps=[lambda ctx: "go", deep], variables={"items": [1, 2]})
    r = run(inline)
    assert turns(r) == ["<lambda>", "a", "b", "a", "b"]
    assert "repeat.body.if.then.route.to_go.loop.body.discussion.turn" in r.path


def test_max_calls_bound_matches_counted_calls():
    m = ScriptedModel(fn=lambda req: "ok")
    a, b, s = m.agent("a"), m.agent("b"), m.agent("s")
    flow = AgentFlow(steps=[loop(steps=[Discussion([a, b], rounds=2)], over="items", max_items=3), s,
                            repeat(Task(agent=s, action="again"), max_iterations=3)],
                     variables={"items": ["x", "y", "z"]})
    r = run(flow)
    assert flow.max_calls() == flow.max_calls(items=3) == 3 * 2 * 2 + 1 + 3
    assert r.calls == m.calls() == flow.max_calls()
    assert flow.max_calls(items=5) == 5 * 4 + 4
    assert flow.max_calls(requests=True) == 16  # scripted agents have num_retries=0: one request per call


def test_flow_graph_renders_with_clusters(tmp_path):
    flow = AgentFlow(steps=[loop(steps=[Discussion([speaker("c"), speaker("a")], rounds=2)], over="items"),
                            parallel([speaker("p1"), speaker("p2")])], variables={"items": [1]})
    dot = flow.graph.to_dot()
    assert "subgraph cluster_loop" in dot and "subgraph cluster_loop_body_discussion" in dot
    assert '"parallel|1.p1"' in dot and "fork" in dot
    flow.graph.render(tmp_path / "f.mmd")
    assert "state loop {" in (tmp_path / "f.mmd").read_text()


def test_stream_and_arun():
    flow = AgentFlow(steps=[Discussion([speaker("a"), speaker("b")], rounds=1)])

    async def go():
        items = [x async for x in flow.stream("t")]
        out = await flow.arun("t")
        return items, out

    items, out = asyncio.run(go())
    assert [getattr(x, "content", None) for x in items if type(x).__name__ == "Message"] == ["a1", "b1"]
    assert out["status"] == "completed"


def test_parallel_merge_keeps_a_write_over_an_untouched_copy():
    def writer(ctx):
        ctx.variables["report"]["score"] = 1
        return "wrote"

    def idle(ctx):
        return "idle"

    for order in ([writer, idle], [idle, writer]):
        r = run(AgentFlow(steps=[parallel(order)], variables={"report": {"score": 0}}))
        assert r.output["variables"]["report"] == {"score": 1}


def test_a_failed_join_merges_nothing():
    calls = {"n": 0}

    def flaky(ctx):
        calls["n"] += 1
        raise RuntimeError("until broke")

    a = speaker("a", ["A-said"])
    flow = AgentFlow(steps=[parallel([a, Discussion([speaker("b")], rounds=1, until=flaky)])])
    with pytest.raises(ValueError, match="until\\(\\) raised RuntimeError") as e:
        flow.run("go")
    assert [m.content for m in e.value.fsmchat_result.transcript] == []


def test_task_action_is_the_discussion_topic():
    m = ScriptedModel(fn=lambda req: "ok")
    flow = AgentFlow(steps=[loop(Discussion([Task(agent=m.agent("a"), action="Critique {{item}}"), m.agent("b")],
                                            rounds=1), over="items")], variables={"items": ["APPLE", "PEAR"]})
    run(flow)
    assert [r.prompt.split("\n")[0] for r in m.requests_of("a")] == ["Critique APPLE", "Critique PEAR"]
