"""Bad configurations and inputs, tried: each gets a clear error of the right type before any
model call (the scripted model must record zero requests), or is handled as documented."""
import datetime
import os

import pytest

from fsmchat import Agent, Human, MemoryCheckpointer, SqliteCheckpointer, fork, resume, AgentFlow, Discussion, ExpertPanelDiscussion, GroupChat, OneOnOneDebate, \
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


def first(turn):
    return "first"


def waiting_run():
    """A checkpointed run waiting for a person before the model-backed agent A speaks: a fork of it
    resumed with an answer asks A (its request would fail the "no request" check)."""
    store, chat = MemoryCheckpointer(), RoundRobinSwarm(agents=[first, Human("h"), A], max_loops=1)
    assert chat.execute("go", checkpoint=store, run_id="orig").stop_reason == "interrupted"
    return store, chat


def fork_and_answer(**edit):
    store, chat = waiting_run()
    new = fork("orig", 1, store, edit=edit)
    chat.resume(new, store)
    return chat.resume(new, store, input="ok")


def resume_lane_id(how):
    """Resume a run id naming another run's branch lane (``<run id>/<step>:<branch>``)."""
    store, chat = waiting_run()
    lane = "orig/1:parallel|1"
    return chat.resume(lane, store, input="ok") if how == "pattern" else resume(lane, store)


def config_with_missing_ref():
    """A config whose callable names an attribute its (allowed) module lacks, with A in the roster."""
    cfg = {"kind": "round_robin", "agents": [{"kind": "agent", "name": "a", "model": A.model},
                                             {"kind": "callable", "ref": "test_bad_input:frist"}]}
    return from_config(cfg, allow=["test_bad_input"]).run("t")


CASES = [
    # (id, callable, exception type, message fragment)
    ("gc no agents", lambda: GroupChat(agents=None), ValueError, "GroupChat requires at least 2 agents."),
    ("gc one agent", lambda: GroupChat(agents=[A]), ValueError, "at least 2 agents"),
    ("gc duplicate names", lambda: GroupChat(agents=[A, M.agent("a")]), ValueError, "unique"),
    ("gc reserved name", lambda: GroupChat(agents=[A, M.agent("User")]), ValueError, "reserved"),
    ("gc threshold > 1", lambda: GroupChat(agents=[A, B], threshold=2), ValueError, "threshold"),
    ("gc threshold str", lambda: GroupChat(agents=[A, B], threshold="high"), TypeError, "threshold"),
    ("gc negative penalty", lambda: GroupChat(agents=[A, B], recency_penalty=-0.1), ValueError, "recency_penalty"),
    ("gc negative window", lambda: GroupChat(agents=[A, B], recency_window=-1), ValueError, "recency_window"),
    ("gc max_loops 0", lambda: GroupChat(agents=[A, B], max_loops=0), ValueError, "max_loops"),
    ("gc max_loops float", lambda: GroupChat(agents=[A, B], max_loops=2.5), TypeError, "max_loops"),
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
    ("agent max_loops", lambda: Agent("x", max_loops=3), ValueError,
     "max_loops=3 is invalid on an Agent: an agent answers once per turn (1, or leave it out); for more turns give "
     "the pattern max_loops (GroupChat(max_loops=...), RoundRobinSwarm(max_loops=...)) or repeat a step (loop, "
     "repeat)"),
    ("agent persistent_memory", lambda: Agent("x", persistent_memory=True), ValueError,
     "persistent_memory=True is invalid: an agent keeps no memory of its own between runs (False, or leave it "
     "out); a run's memory is its transcript, kept across processes by checkpoint= (resume, fork)"),
    ("agent output_type", lambda: Agent("x", output_type="str"), ValueError,
     "output_type='str' is invalid on an Agent: an agent passes on its reply only ('final', or leave it out); the "
     "pattern's output_type formats the run's output (GroupChat(output_type='list'))"),
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
    ("discussion rounds 0", lambda: Discussion([A], rounds=0), ValueError,
     "Discussion 'discussion': rounds=0 is invalid: an int >= 1 (full passes over the speakers)"),
    ("discussion rounds str", lambda: Discussion([A], rounds="3"), TypeError,
     "Discussion 'discussion': rounds='3' is invalid: an int >= 1"),
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
    # each refused before any request, with a model-backed agent in the run
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
     "GroupChat: threshold=1.0 is invalid: a finite number >= 0 and < 1"),
    ("gc penalty nan", lambda: GroupChat(agents=[A, B], recency_penalty=float("nan")).run("t"), ValueError,
     "recency_penalty=nan is invalid"),
    ("gc penalty inf", lambda: GroupChat(agents=[A, B], recency_penalty=float("inf")).run("t"), ValueError,
     "recency_penalty=inf is invalid"),
    ("gc max_loops True", lambda: GroupChat(agents=[A, B], max_loops=True).run("t"), TypeError,
     "GroupChat: max_loops=True is invalid"),
    ("gc recency_window 0", lambda: GroupChat(agents=[A, B], recency_window=0).run("t"), ValueError,
     "GroupChat: recency_window=0 is invalid"),
    ("gc idle_timeout negative", lambda: GroupChat(agents=[A, B], idle_timeout=-1).run("t"), ValueError,
     "GroupChat: idle_timeout=-1 is invalid"),
    ("gc max_loops 0 style", lambda: GroupChat(agents=[A, B], max_loops=0).run("t"), ValueError,
     "GroupChat: max_loops=0 is invalid: an int >= 1 (cap on total messages, the task included)"),
    ("gc agents generator", lambda: GroupChat(agents=(a for a in [A, B])).run("t"), TypeError,
     "GroupChat: agents=<generator"),
    ("batch a string", lambda: GroupChat(agents=[A, B]).run_batch("abc"), TypeError,
     "GroupChat.run_batch: tasks='abc' is invalid"),
    ("batch concurrency str", lambda: GroupChat(agents=[A, B]).run_batch(["t"], max_concurrency="2"), TypeError,
     "max_concurrency='2' is invalid: an int >= 1 (how many runs at once), not a str"),
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
    # run arguments, hooks and keywords: checked like a constructor's
    ("observers not a list", lambda: RoundRobinSwarm(agents=[A]).execute("t", observers=42), TypeError,
     "RoundRobinSwarm: observers=42 is invalid: a list of callables"),
    ("observers item not callable", lambda: RoundRobinSwarm(agents=[A]).execute("t", observers=[42]), TypeError,
     "RoundRobinSwarm: observers=[42] is invalid: a list of callables; item 42 (int) cannot be called"),
    ("on_message item not callable", lambda: RoundRobinSwarm(agents=[A]).execute("t", on_message=[42]), TypeError,
     "RoundRobinSwarm: on_message=[42] is invalid: a list of callables; item 42 (int) cannot be called"),
    ("on_message via run", lambda: RoundRobinSwarm(agents=[A]).run("t", on_message=["print"]), TypeError,
     "on_message=['print'] is invalid"),
    ("on_start a function", lambda: RoundRobinSwarm(agents=[A]).execute("t", on_start=len), TypeError,
     "RoundRobinSwarm: on_start=<built-in function len> is invalid: a list of callables"),
    ("run keyword typo", lambda: RoundRobinSwarm(agents=[A]).run("t", chekpoint=MemoryCheckpointer()), TypeError,
     "RoundRobinSwarm.run() got an unexpected keyword argument 'chekpoint'; did you mean checkpoint? (its keywords: "
     "checkpoint, run_id, observers, on_message, on_start, on_token, commit)"),
    ("execute keyword typo", lambda: GroupChat(agents=[A, B]).execute("t", run_di="x"), TypeError,
     "GroupChat.execute() got an unexpected keyword argument 'run_di'; did you mean run_id?"),
    ("flow run keyword typo", lambda: AgentFlow(steps=[A]).run("go", observer=[print]), TypeError,
     "AgentFlow.run() got an unexpected keyword argument 'observer'; did you mean observers?"),
    ("flow variables not JSON, checkpointed",
     lambda: AgentFlow(steps=[A], variables={"when": datetime.date(2026, 1, 2)}).execute(
         "go", checkpoint=MemoryCheckpointer()), TypeError,
     "AgentFlow 'flow': variables={'when': datetime.date(2026, 1, 2)} is invalid: JSON-able values (str, int, float, "
     "bool, None, and lists and dicts of them) to be checkpointed after each step; found a date"),
    ("flow variables a set, checkpointed",
     lambda: AgentFlow(steps=[A], variables={"tags": {"x"}}).run("go", checkpoint=MemoryCheckpointer()), TypeError,
     "variables={'tags': {'x'}} is invalid: JSON-able values"),
    # numbers are strict (the one rule, fsmchat.checks.Number; every field: test_strict_numbers.py): a bool or a
    # numeric string is a TypeError, never taken as 1 or 5
    ("deadline True", lambda: RoundRobinSwarm(agents=[A]).with_limits(deadline_s=True).run("t"), TypeError,
     "Limits: deadline_s=True is invalid: a finite number > 0 or None (seconds the run may take), not a bool"),
    ("deadline a string", lambda: RoundRobinSwarm(agents=[A]).with_limits(deadline_s="5").run("t"), TypeError,
     "Limits: deadline_s='5' is invalid: a finite number > 0 or None (seconds the run may take), not a str"),
    ("cost True", lambda: RoundRobinSwarm(agents=[A]).with_limits(max_cost_usd=True).run("t"), TypeError,
     "Limits: max_cost_usd=True is invalid: a finite number > 0 or None"),
    ("price a string", lambda: RoundRobinSwarm(agents=[A]).with_limits(price_per_1k_tokens=("0.1", 0.2)).run("t"),
     TypeError, "Limits: price_per_1k_tokens.0='0.1' is invalid: a finite number >= 0 (US dollars per 1,000 prompt "
     "or completion tokens), not a str"),
    ("refuse_over_bound 1", lambda: RoundRobinSwarm(agents=[A]).with_limits(refuse_over_bound=1).run("t"), ValueError,
     "Limits: refuse_over_bound=1 is invalid: input should be a valid boolean"),
    ("gc penalty True", lambda: GroupChat(agents=[A, B], recency_penalty=True).run("t"), TypeError,
     "GroupChat: recency_penalty=True is invalid: a finite number >= 0"),
    ("gc threshold a numeric string", lambda: GroupChat(agents=[A, B], threshold="0.2").run("t"), TypeError,
     "GroupChat: threshold='0.2' is invalid: a finite number >= 0 and < 1"),
    ("gc idle_timeout True", lambda: GroupChat(agents=[A, B], idle_timeout=True).run("t"), TypeError,
     "GroupChat: idle_timeout=True is invalid: a finite number >= 0"),
    # names: one line of visible text, distinct after Unicode normalisation
    ("agent name zero-width", lambda: rr(M.agent("a\u200b")), ValueError,
     "Agent: name='a\\u200b' is invalid: a name is one line of visible text; it holds '\\u200b' (U+200B, zero width "
     "space), which is invisible or reorders text (no newlines, control, zero-width or bidi characters)"),
    ("agent name bidi override", lambda: rr(M.agent("evil\u202egnp.exe")), ValueError,
     "it holds '\\u202e' (U+202E, right-to-left override)"),
    ("agent name bidi isolate", lambda: rr(M.agent("x\u2066y")), ValueError, "U+2066"),
    ("agent name line separator", lambda: rr(M.agent("x\u2028y")), ValueError, "U+2028"),
    ("agent name tab", lambda: rr(M.agent("x\ty")), ValueError, "U+0009"),
    ("agent names equal after NFKC", lambda: rr(M.agent("\uff41")), ValueError,
     "RoundRobinSwarm: agent names must be unique; '\uff41' and 'a' are the same name once Unicode-normalised "
     "(NFKC), so a transcript could not tell them apart"),
    ("agent names equal after NFKC, ligature", lambda: GroupChat(agents=[M.agent("\ufb01le"), M.agent("file")]).run("t"),
     ValueError, "'file' and '\ufb01le' are the same name once Unicode-normalised"),
    ("callable speaker named with a zero-width joiner",
     lambda: rr(__import__("fsmchat").speakers.CallableSpeaker(first, "x\u200dy")), ValueError,
     "RoundRobinSwarm: agent name 'x\\u200dy' is invalid: a name is one line of visible text; it holds '\\u200d'"),
    # references, URLs, stores, counts, forks
    ("config ref to a missing attribute", config_with_missing_ref, ValueError,
     "participant: reference='test_bad_input:frist' is invalid: 'test_bad_input' has no attribute 'frist'; did you "
     "mean test_bad_input:first?"),
    ("api_base not a url", lambda: rr(M.agent("x", api_base="not a url")), ValueError,
     "Agent: api_base='not a url' is invalid: an http(s) URL such as 'http://127.0.0.1:8000/v1'"),
    ("api_base ftp", lambda: rr(M.agent("x", api_base="ftp://127.0.0.1/v1")), ValueError,
     "Agent: api_base='ftp://127.0.0.1/v1' is invalid: an http(s) URL"),
    ("base_url without a host", lambda: rr(M.agent("x", base_url="http:///v1")), ValueError,
     "Agent: base_url='http:///v1' is invalid: an http(s) URL"),
    ("sqlite store an int", lambda: GroupChat(agents=[A, B]).run("t", checkpoint=SqliteCheckpointer(123)),
     TypeError, "SqliteCheckpointer: path=123 is invalid: the SQLite file's path, a non-empty str or a pathlib.Path"),
    ("sqlite store empty", lambda: GroupChat(agents=[A, B]).run("t", checkpoint=SqliteCheckpointer("")), TypeError,
     "SqliteCheckpointer: path='' is invalid"),
    ("discussion rounds True", lambda: flow(Discussion([B], rounds=True)), TypeError,
     "Discussion 'discussion': rounds=True is invalid: an int >= 1 (full passes over the speakers), not a bool"),
    ("fork drops the task", lambda: fork_and_answer(drop=[0]), ValueError,
     "fork('orig', at=1): drop index 0 is invalid: message 0 is the run's task, which the run starts from (replace it "
     "to change the task: edit={'replace': {0: 'new task'}}); the indexes that may be dropped are 1 to 1"),
    ("fork drops the task from the end", lambda: fork_and_answer(drop=[-2]), ValueError, "drop index 0 is invalid"),
    # run ids: the characters of a branch lane's name ("<run id>/<step>:<branch>") are refused everywhere
    ("run_id a lane name", lambda: GroupChat(agents=[A, B]).run("t", checkpoint=MemoryCheckpointer(),
                                                                 run_id="R/1:parallel|1"), ValueError,
     "GroupChat: run_id='R/1:parallel|1' is invalid: one line of printable characters other than '/', ':' and '|' "
     "(letters, digits, '-', '_', '.', ...), at most 200 of them; it holds '/' and ':' and '|', reserved for the names of a run's branch "
     "lanes ('<run id>/<step>:<branch>', e.g. 'R/3:parallel|1') (or None for a new id)"),
    ("run_id with a bar", lambda: RoundRobinSwarm(agents=[A]).execute("t", checkpoint=MemoryCheckpointer(),
                                                                      run_id="R|2"), ValueError, "it holds '|'"),
    ("run_id with a colon, flow", lambda: AgentFlow(steps=[A]).run("go", checkpoint=MemoryCheckpointer(),
                                                                   run_id="a:b"), ValueError,
     "AgentFlow: run_id='a:b' is invalid"),
    ("run_id a newline", lambda: GroupChat(agents=[A, B]).run("t", checkpoint=MemoryCheckpointer(), run_id="a\nb"),
     ValueError, "run_id='a\\nb' is invalid: a non-empty string: one line of printable characters"),
    ("resume a lane id", lambda: resume_lane_id("pattern"), ValueError,
     "RoundRobinSwarm.resume: run_id='orig/1:parallel|1' is invalid: one line of printable characters other than"),
    ("fsmchat.resume a lane id", lambda: resume_lane_id("function"), ValueError,
     "resume: run_id='orig/1:parallel|1' is invalid"),
    ("fork_id a lane name", lambda: fork("orig", 1, waiting_run()[0], fork_id="orig/1:x|1"), ValueError,
     "fork('orig', at=1): fork_id='orig/1:x|1' is invalid: one line of printable characters other than '/', ':' "
     "and '|'"),
    ("from_config garbage", lambda: from_config({"kind": "chat"}), ValueError,
     "'expert_panel', 'factory', 'flow', 'group_chat', 'handoffs', 'one_on_one_debate', 'round_robin', "
     "'selector_group_chat'] (kind='chat' is none of them)"),  # after any kind a test module registered (test_kinds: 'echo_chain')
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


def test_a_store_named_by_a_number_creates_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=r"SqliteCheckpointer: path=123 is invalid"):
        SqliteCheckpointer(123)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_refuses_a_lane_id_before_opening_the_run(tmp_path, capsys):
    from fsmchat.cli import main

    db = tmp_path / "runs.db"
    store = SqliteCheckpointer(str(db))
    chat = RoundRobinSwarm(agents=[first, Human("h"), A], max_loops=1)
    assert chat.execute("go", checkpoint=store, run_id="orig").stop_reason == "interrupted"
    store.close()
    before = M.calls()
    assert main(["resume", "orig/1:parallel|1", "--db", str(db), "--input", "ok"]) == 2
    err = capsys.readouterr().err
    assert "fsmchat resume: ConfigError: fsmchat resume: run_id='orig/1:parallel|1' is invalid: one line of " \
           "printable characters other than '/', ':' and '|'" in err
    assert M.calls() == before


def test_a_run_id_without_lane_characters_still_runs_and_resumes():
    store, chat = waiting_run()
    for rid in ("team-alpha_2.v1", "Ünïcødé run 7", "R@host#3"):
        assert chat.execute("go", checkpoint=store, run_id=rid).stop_reason == "interrupted"
        assert chat.resume(rid, store).stop_reason == "interrupted"


def test_a_fork_whose_task_was_replaced_still_keeps_its_task():
    store, chat = waiting_run()
    edited = fork("orig", 1, store, edit={"replace": {0: "go, edited"}}, fork_id="edited")
    assert [m.content for m in store.load(edited).messages] == ["go, edited", "first"]
    before = M.calls()
    with pytest.raises(ValueError, match=r"fork\('edited', at=1\): drop index 0 is invalid: message 0 is the run's task"):
        fork("edited", 1, store, edit={"drop": [0]})
    assert M.calls() == before
    kept = fork("orig", 1, store, edit={"drop": [1]}, fork_id="dropped")  # any other message may go
    assert [m.content for m in store.load(kept).messages] == ["go"]
