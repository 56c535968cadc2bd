"""Bad configurations and inputs, tried: each gets a clear error of the right type before any
model call (the scripted model must record zero requests), or is handled as documented."""
import pytest

from fsmchat import Agent, AgentFlow, Discussion, ExpertPanelDiscussion, GroupChat, OneOnOneDebate, \
    RoundRobinSwarm, StateGraph, GraphError, Task, if_, loop, one_on_one_debate, repeat, route
from fsmchat import from_config
from fsmchat.testing import ScriptedModel

M = ScriptedModel(fn=lambda req: "never")
A, B, C = M.agent("a"), M.agent("b"), M.agent("c")


def unreachable_graph():
    g = StateGraph("g").state("a").state("island").final("z")
    g.edge("a", "z").edge("island", "z")
    return g.validate()


def rr(*agents):
    """Run a round robin in which the model-backed agent A speaks first: had a bad agent or value
    slipped through, A's request would be recorded and the "no request" check would fail."""
    return RoundRobinSwarm(agents=[A, *agents]).run("t")


def flow(*steps, **kw):
    return AgentFlow(steps=[A, *steps], **kw).run("go")


CASES = [
    # (id, callable, exception type, message fragment)
    ("gc no agents", lambda: GroupChat(agents=None), ValueError, "GroupChat requires at least 2 agents."),
    ("gc one agent", lambda: GroupChat(agents=[A]), ValueError, "at least 2 agents"),
    ("gc duplicate names", lambda: GroupChat(agents=[A, M.agent("a")]), ValueError, "unique"),
    ("gc reserved name", lambda: GroupChat(agents=[A, M.agent("User")]), ValueError, "reserved"),
    ("gc threshold > 1", lambda: GroupChat(agents=[A, B], threshold=2), ValueError, "threshold"),
    ("gc threshold str", lambda: GroupChat(agents=[A, B], threshold="high"), ValueError, "threshold"),
    ("gc negative penalty", lambda: GroupChat(agents=[A, B], recency_penalty=-0.1), ValueError, "recency_penalty"),
    ("gc negative window", lambda: GroupChat(agents=[A, B], recency_window=-1), ValueError, "recency_window"),
    ("gc max_loops 0", lambda: GroupChat(agents=[A, B], max_loops=0), ValueError, "max_loops"),
    ("gc max_loops float", lambda: GroupChat(agents=[A, B], max_loops=2.5), ValueError, "max_loops"),
    ("gc output_type", lambda: GroupChat(agents=[A, B], output_type="xml"), ValueError, "output_type"),
    ("gc agent is an int", lambda: GroupChat(agents=[A, 42]), TypeError, "Agent or a callable"),
    ("gc agent is a str", lambda: GroupChat(agents=[A, "bob"]), TypeError, "got str"),
    ("gc empty task", lambda: GroupChat(agents=[A, B]).run(""), ValueError, "non-empty string"),
    ("gc task None", lambda: GroupChat(agents=[A, B]).run(None), ValueError, "non-empty string"),
    ("gc task list", lambda: GroupChat(agents=[A, B]).run(["x"]), ValueError, "non-empty string"),
    ("gc batch bad task", lambda: GroupChat(agents=[A, B]).run_batch(["ok", ""]), ValueError, "non-empty"),
    ("gc batch concurrency", lambda: GroupChat(agents=[A, B]).run_batch(["ok"], max_concurrency=0), ValueError,
     "max_concurrency"),
    ("agent no name", lambda: Agent(), ValueError, "name"),
    ("agent blank name", lambda: Agent("  "), ValueError, "non-empty name"),
    ("agent bad tool_mode", lambda: Agent("x", tool_mode="xml"), ValueError, "tool_mode"),
    ("agent negative retries", lambda: Agent("x", num_retries=-1), ValueError, "num_retries"),
    ("rr no agents", lambda: RoundRobinSwarm(agents=[]), ValueError, "RoundRobinSwarm cannot be initialized without agents"),
    ("rr max_loops 0", lambda: RoundRobinSwarm(agents=[A], max_loops=0), ValueError, "max_loops"),
    ("rr output_type", lambda: RoundRobinSwarm(agents=[A], output_type="csv"), ValueError, "output_type"),
    ("debate three agents", lambda: OneOnOneDebate(agents=[A, B, C]).run("t"), ValueError,
     "There must be exactly two agents in the dialogue."),
    ("debate no agents", lambda: OneOnOneDebate().run("t"), ValueError, "exactly two agents"),
    ("debate bad img", lambda: OneOnOneDebate(agents=[A, B], img="/no/such.png").run("t"), ValueError, "img"),
    ("debate fn no task", lambda: one_on_one_debate(agents=[A, B]), ValueError, "task"),
    ("panel one expert", lambda: ExpertPanelDiscussion(agents=[A], moderator=B).run("t"), ValueError,
     "At least two expert agents are required for a panel discussion."),
    ("panel no moderator", lambda: ExpertPanelDiscussion(agents=[A, B]).run("t"), ValueError,
     "A moderator agent is required for panel discussion."),
    ("panel rounds 0", lambda: ExpertPanelDiscussion(max_rounds=0, agents=[A, B], moderator=C), ValueError,
     "max_rounds"),
    ("discussion empty", lambda: Discussion([]), ValueError, "Discussion needs at least one speaker"),
    ("discussion rounds 0", lambda: Discussion([A], rounds=0), ValueError, "Discussion rounds must be >= 1."),
    ("discussion rounds str", lambda: Discussion([A], rounds="3"), ValueError, "Discussion rounds must be >= 1."),
    ("discussion until not callable", lambda: Discussion([A], until="AGREED"), TypeError, "until must be a callable"),
    ("discussion select not callable", lambda: Discussion([A], select=3), TypeError, "select must be a callable"),
    ("discussion select stranger", lambda: AgentFlow(steps=[Discussion([lambda c: "x"], rounds=1,
                                                                       select=lambda t, c: C)]).run("go"),
     ValueError, "not one of its speakers"),
    ("flow no steps", lambda: AgentFlow(steps=[]), ValueError, "at least one step"),
    ("flow step is a number", lambda: AgentFlow(steps=[3.14]), TypeError, "a step must be"),
    ("flow variables not a dict", lambda: AgentFlow(steps=[A], variables=["x"]), TypeError, "variables must be a dict"),
    ("flow input not a str", lambda: AgentFlow(steps=[lambda c: "x"]).run(123), TypeError, "input must be a str"),
    ("flow roster", lambda: AgentFlow(agents=[A], steps=[B]), ValueError, "not in agents="),
    ("task both", lambda: Task(handler=print, agent=A), ValueError, "exactly one of handler"),
    ("task policy", lambda: Task(handler=print, on_error="ignore"), ValueError, "on_error='ignore'"),
    ("task retries", lambda: Task(handler=print, max_retries=-2), ValueError, "max_retries"),
    ("loop over missing", lambda: AgentFlow(steps=[loop(lambda c: "x", over="nope")]).run("go"), ValueError,
     "no such variable"),
    ("loop over a string", lambda: AgentFlow(steps=[loop(lambda c: "x", over="s")], variables={"s": "abc"}).run("go"),
     ValueError, "expected a list"),
    ("route empty", lambda: route({}), ValueError, "at least one key"),
    ("if_ bad condition", lambda: if_(42, [A]), TypeError, "condition must be a callable"),
    ("repeat zero", lambda: repeat(A, max_iterations=0), ValueError, "max_iterations"),
    ("graph unreachable", unreachable_graph, GraphError, "'island' cannot be reached"),
    ("limits bad", lambda: GroupChat(agents=[A, B]).with_limits(max_model_calls=0), ValueError, "max_model_calls"),
    # issue 14: each refused before any request, with a model-backed agent in the run
    ("agent typo keyword", lambda: rr(M.agent("x", sytem_prompt="hi")), ValueError, "did you mean system_prompt?"),
    ("agent temperature str", lambda: rr(M.agent("x", temperature="hot")), ValueError,
     "Agent: temperature='hot' is invalid: a finite number"),
    ("agent timeout 0", lambda: rr(M.agent("x", timeout=0)), ValueError, "Agent: timeout=0.0 is invalid"),
    ("agent timeout nan", lambda: rr(M.agent("x", timeout=float("nan"))), ValueError, "timeout=nan is invalid"),
    ("agent model empty", lambda: rr(Agent("x", model="")), ValueError, "Agent: model='' is invalid"),
    ("agent metadata list", lambda: rr(M.agent("x", metadata=["tag"])), ValueError,
     "Agent: metadata=['tag'] is invalid: a dict"),
    ("agent name newline", lambda: rr(M.agent("x\ny")), ValueError, "no newlines"),
    ("limits negative price", lambda: GroupChat(agents=[A, B]).with_limits(price_per_1k_tokens=(-0.1, 0.2)).run("t"),
     ValueError, "price_per_1k_tokens.0=-0.1 is invalid"),
    ("gc threshold 1", lambda: GroupChat(agents=[A, B], threshold=1.0).run("t"), ValueError,
     "GroupChat: threshold=1.0 is invalid: input should be less than 1"),
    ("gc penalty nan", lambda: GroupChat(agents=[A, B], recency_penalty=float("nan")).run("t"), ValueError,
     "recency_penalty=nan is invalid"),
    ("gc penalty inf", lambda: GroupChat(agents=[A, B], recency_penalty=float("inf")).run("t"), ValueError,
     "recency_penalty=inf is invalid"),
    ("gc max_loops True", lambda: GroupChat(agents=[A, B], max_loops=True).run("t"), ValueError,
     "GroupChat: max_loops=True is invalid"),
    ("gc recency_window 0", lambda: GroupChat(agents=[A, B], recency_window=0).run("t"), ValueError,
     "GroupChat: recency_window=0 is invalid"),
    ("gc idle_timeout negative", lambda: GroupChat(agents=[A, B], idle_timeout=-1).run("t"), ValueError,
     "GroupChat: idle_timeout=-1 is invalid"),
    ("gc max_loops 0 style", lambda: GroupChat(agents=[A, B], max_loops=0).run("t"), ValueError,
     "GroupChat: max_loops=0 is invalid: input should be greater than or equal to 1"),
    ("gc agents generator", lambda: GroupChat(agents=(a for a in [A, B])).run("t"), TypeError,
     "GroupChat: agents=<generator"),
    ("batch a string", lambda: GroupChat(agents=[A, B]).run_batch("abc"), TypeError,
     "GroupChat.run_batch: tasks='abc' is invalid"),
    ("batch concurrency str", lambda: GroupChat(agents=[A, B]).run_batch(["t"], max_concurrency="2"), TypeError,
     "max_concurrency='2' is invalid: a positive int"),
    ("flow empty input", lambda: AgentFlow(steps=[A]).execute(""), ValueError, "AgentFlow.run(input): input=''"),
    ("discussion same agent twice", lambda: flow(Discussion([B, B])), ValueError, "'b' is listed more than once"),
    ("if_ malformed condition", lambda: flow(if_("{{score} > 3", [B])), ValueError,
     "condition='{{score} > 3' is invalid: unbalanced"),
    ("repeat malformed until", lambda: flow(repeat(B, until="{{score}} >=")), ValueError,
     "the right operand is missing"),
    ("route key not a string", lambda: flow(route({1: [B]})), TypeError, "route: routes key=1 is invalid"),
    ("loop over a dict", lambda: flow(loop(B, over="d"), variables={"d": {"k": 1}}), ValueError,
     "loop over='d' is invalid: expected a list, the variable holds a dict"),
    ("debate three agents at construction", lambda: OneOnOneDebate(agents=[A, B, C]), ValueError,
     "There must be exactly two agents in the dialogue."),
    ("panel no moderator at construction", lambda: ExpertPanelDiscussion(agents=[A, B]), ValueError,
     "A moderator agent is required for panel discussion."),
    ("checkpoint is a path", lambda: GroupChat(agents=[A, B]).run("t", checkpoint="runs.db"), TypeError,
     "SqliteCheckpointer('runs.db')"),
    ("resume without a store", lambda: GroupChat(agents=[A, B]).resume("run-1", None), TypeError,
     "checkpoint=None is invalid"),
    ("run_id empty", lambda: GroupChat(agents=[A, B]).run("t", run_id=""), ValueError, "run_id='' is invalid"),
    ("flow roster of names", lambda: AgentFlow(steps=[A], agents=["a"]).run("go"), TypeError,
     "a list of Agent objects (found a str)"),
    ("loop var_name not a name", lambda: flow(loop(B, over="items", var_name=3), variables={"items": [1]}), TypeError,
     "loop: var_name=3 is invalid"),
    ("task negative retry_delay", lambda: flow(Task(agent=B, on_error="retry", retry_delay=-1)), ValueError,
     "Task: retry_delay=-1 is invalid"),
    ("task should_run not callable", lambda: flow(Task(agent=B, should_run=True)), TypeError,
     "Task: should_run=True is invalid"),
    ("from_config garbage", lambda: from_config({"kind": "chat"}), ValueError,
     "'expert_panel', 'factory', 'flow', 'group_chat', 'one_on_one_debate', 'round_robin'] (kind='chat' is none "
     "of them)"),  # after any kind a test module registered (test_kinds: 'echo_chain')
]

@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in CASES])
def test_bad_input_gets_a_clear_error_before_any_call(case):
    _, fn, exc_type, fragment = case
    before = M.calls()
    with pytest.raises(exc_type) as e:
        fn()
    assert fragment in str(e.value), f"message {str(e.value)!r} lacks {fragment!r}"
    assert M.calls() == before, "a model was called before the error"


def test_there_are_at_least_eighty_cases():
    assert len(CASES) >= 80  # docs/reliability.md states the count


def test_a_route_with_no_match_and_no_default_records_an_event():
    r = AgentFlow(steps=[lambda ctx: "nothing relevant", route({"approve": [lambda ctx: "ok"]})]).execute("go")
    [ev] = [e for e in r.events if e["event"] == "route_no_match"]
    assert ev["keys"] == ["approve"] and ev["default"] is False and "no default" in ev["note"]
    assert r.ok and [s["name"] for s in r.output["steps"]] == ["<lambda>"]


@pytest.mark.parametrize("task, cap", [("¿Debería 🤖 regular la IA? — ünïcødé", None), ("x" * 200_000, None),
                                       ("x" * 1_000_000, 1_000_000)])
def test_unicode_and_huge_tasks_are_handled(task, cap):
    m = ScriptedModel(fn=lambda req: "ok")
    chat = RoundRobinSwarm(agents=[m.agent("a")], max_loops=1)
    if cap:
        chat.with_limits(max_message_chars=cap)
    r = chat.execute(task)
    assert r.transcript[0].content == task and r.error is None
    assert m.requests_of("a")[0].messages[0] == {"role": "user", "content": task}  # no blank system prompt


def test_a_task_over_the_default_message_cap_is_refused_with_the_way_out():
    m = ScriptedModel(fn=lambda req: "ok")
    with pytest.raises(ValueError, match=r"the task has 1000000 characters, over max_message_chars=200000; "
                                         r"shorten it or raise the cap with with_limits\(max_message_chars=...\)"):
        RoundRobinSwarm(agents=[m.agent("a")], max_loops=1).execute("x" * 1_000_000)
    assert m.requests == []
