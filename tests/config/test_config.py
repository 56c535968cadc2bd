"""Patterns and flows as data: to_config -> JSON -> from_config runs the same; secrets never travel;
unshippable callables are refused by name; batches with checkpoint_dir skip finished runs (no Ray here)."""
import json

import pytest

from fsmchat import Agent, AgentFlow, Bid, Discussion, ExpertPanelDiscussion, GroupChat, OneOnOneDebate, \
    RoundRobinSwarm, StepResult, Task, if_, loop, parallel, repeat, route
from fsmchat.config import FlowSpec, GroupChatSpec, config_digest, from_config, parse_config
from fsmchat.patterns.distributed import TaskFailure, execute_batch, find_runs, run_batch, run_id_for
from fsmchat.testing import Delay, Empty, Fail, FunctionModel, ScriptedModel, ToolCall
from support.scripted import bid_fn as scripted_bid_fn

SECRET = "sk-should-never-travel-123"


# ---- module-level callables: what a config can ship ----
def bid_fn(req):
    """The config and Ray tests' deterministic model (``support.scripted.bid_fn``), as a module-level function of
    this module: configs stored by the previous version (tests/golden/configs_v1.json) name ``test_config:bid_fn``."""
    return scripted_bid_fn(req)


def echo(turn):
    return f"echo of {turn.last.content if turn.last else ''}"


def shout(ctx):
    return str(ctx.previous_result or ctx.input).upper()


def stop_here(ctx):
    return StepResult(output="halt", stop_workflow=True)


def said_done(ctx):
    return "DONE" in str(ctx.previous_result)


def pick(turn, ctx):
    """A module-level selector names its pick by an equal-named Agent (it cannot hold the roster's objects)."""
    return Agent("critic" if turn % 3 == 0 else "author")


def always(ctx):
    return True


def boom_on_x(turn):
    if "x" in turn.transcript[0].content:
        raise RuntimeError("boom")
    return Bid(0.9, "fine")


class LoudAgent(Agent):
    pass


class MyChat(GroupChat):
    pass


def roundtrip(pattern):
    """to_config -> JSON text -> dict -> from_config, checking the JSON is stable."""
    cfg = pattern.to_config()
    text = cfg.model_dump_json()
    data = json.loads(text)
    rebuilt = from_config(data, allow=["test_config"])
    assert rebuilt.to_config().model_dump_json() == text
    return rebuilt, data


def fm():
    return FunctionModel(bid_fn)


# ---- every pattern ----
def make_group_chat():
    m = fm()
    return GroupChat(agents=[m.agent("a", system_prompt="cats"), m.agent("b"), echo], max_loops=6, threshold=0.2,
                     recency_penalty=0.1, output_type="list")


def make_round_robin():
    m = fm()
    return RoundRobinSwarm(agents=[m.agent("x"), m.agent("y")], max_loops=2, output_type="all", description="d")


def make_debate():
    m = fm()
    return OneOnOneDebate(max_loops=3, agents=[m.agent("P1"), m.agent("P2")], output_type="final", send_intros=False)


def make_panel():
    m = fm()
    return ExpertPanelDiscussion(max_rounds=2, agents=[m.agent("E1"), m.agent("E2")], moderator=m.agent("M"),
                                 output_type="dict")


def make_flow():
    m = fm()
    critic, author = m.agent("critic", system_prompt="Critique {{item}}"), m.agent("author")
    return AgentFlow(steps=[
        loop(steps=[Discussion([critic, author], rounds=2, select=pick, until=said_done)], over="items"),
        parallel([shout, Task(handler=shout, name="shout2", on_error="retry", max_retries=1, retry_delay=0.01)]),
        route({"halt": [stop_here]}, default=[shout]),
        if_("{{loop_index}} >= 1", [shout], [m.agent("else_agent")]),
        if_(always, [Task(agent=m.agent("summarizer"), action="Summarize: {{previous_output}}")]),
        repeat(shout, until="{{previous_output}} contains D", max_iterations=2),
        repeat(shout, until=said_done, max_iterations=2),
    ], variables={"items": ["draft A", "draft B"]}, name="review")


MAKERS = {"group_chat": make_group_chat, "round_robin": make_round_robin, "one_on_one_debate": make_debate,
          "expert_panel": make_panel, "flow": make_flow}


@pytest.mark.parametrize("kind", list(MAKERS))
def test_roundtrip_runs_identically(kind):
    pattern = MAKERS[kind]()
    rebuilt, data = roundtrip(pattern)
    assert data["kind"] == kind and data["version"] == 1
    assert type(rebuilt) is type(pattern)
    assert rebuilt.graph.to_dot() == pattern.graph.to_dot()
    tasks = ["first topic", "second topic"]
    a, b = pattern.run_batch(tasks), rebuilt.run_batch(tasks)
    assert a == b and a[0] != a[1]


def test_config_is_pydantic_and_json():
    cfg = make_group_chat().to_config()
    assert isinstance(cfg, GroupChatSpec)
    assert [a.kind for a in cfg.agents] == ["agent", "agent", "callable"]
    assert cfg.agents[2].ref == "test_config:echo"
    assert cfg.models[0].fn == "test_config:bid_fn" and cfg.models[0].kind == "function"
    assert (cfg.max_loops, cfg.threshold, cfg.output_type) == (6, 0.2, "list")
    assert parse_config(cfg.model_dump_json()) == cfg == parse_config(cfg.model_dump())
    flow = make_flow().to_config()
    assert isinstance(flow, FlowSpec)
    assert [s.kind for s in flow.steps] == ["loop", "parallel", "route", "if", "if", "repeat", "repeat"]
    assert flow.steps[3].expression == "{{loop_index}} >= 1" and flow.steps[4].condition == "test_config:always"
    assert flow.steps[5].until_expression == "{{previous_output}} contains D"
    disc = flow.steps[0].steps[0]
    assert (disc.kind, disc.select, disc.until) == ("discussion", "test_config:pick", "test_config:said_done")


def test_limits_factory_and_subclasses_travel():
    m = fm()
    chat = MyChat(agents=[LoudAgent("a", model=m.model), m.agent("b")], max_loops=4)
    chat.with_limits(max_model_calls=50, deadline_s=30, price_per_1k_tokens=(0.1, 0.2))
    chat.factory = "somewhere:make"
    rebuilt, data = roundtrip(chat)
    assert type(rebuilt) is MyChat and type(rebuilt.agents[0]) is LoudAgent
    assert rebuilt.limits == chat.limits and rebuilt.factory == "somewhere:make"
    assert data["pattern_class"] == "test_config:MyChat" and data["agents"][0]["agent_class"] == "test_config:LoudAgent"
    assert rebuilt.run("t") == chat.run("t")


# ---- secrets ----
def test_secrets_never_in_the_config(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = Agent("a", model="gpt-4o-mini", api_key=SECRET, temperature=0.3, api_base="http://127.0.0.1:9/v1",
                  extra_headers={"Authorization": f"Bearer {SECRET}", "X-Trace": "on"}, aws_secret_access_key=SECRET,
                  max_tokens=50, thinking={"type": "enabled", "budget_tokens": 64}, num_retries=1, timeout=9.0,
                  tool_mode="json")
    chat = GroupChat(agents=[agent, Agent("b", access_token=SECRET, password=SECRET, api_tokens=SECRET,
                                          secret_tokens=SECRET)])
    cfg = chat.to_config()
    text = cfg.model_dump_json()
    assert SECRET not in text
    assert cfg.agents[0].litellm == {"temperature": 0.3, "api_base": "http://127.0.0.1:9/v1",
                                     "extra_headers": {"X-Trace": "on"}, "max_tokens": 50,
                                     "thinking": {"type": "enabled", "budget_tokens": 64}}
    assert (cfg.agents[0].num_retries, cfg.agents[0].timeout, cfg.agents[0].tool_mode) == (1, 9.0, "json")
    assert cfg.agents[1].litellm == {}
    rebuilt = from_config(text, allow=["test_config"])
    assert rebuilt.agents[0].model_extra == cfg.agents[0].litellm
    assert "api_key" not in rebuilt.agents[0].model_extra  # a worker reads keys from its environment
    # none there: the agent's own endpoint is sent the placeholder the OpenAI client demands, never a key
    assert rebuilt.agents[0].litellm_kwargs == {**cfg.agents[0].litellm, "api_key": "fsmchat-no-key"}


# ---- what cannot be shipped ----
def test_lambdas_and_closures_are_refused_by_name():
    m = fm()
    with pytest.raises(TypeError, match=r"GroupChat agent.*<lambda>.*is a lambda.*define it as a function at module"):
        GroupChat(agents=[m.agent("a"), lambda turn: "hi"]).to_config()

    def local_step(ctx):
        return "x"

    with pytest.raises(TypeError, match=r"local_step is defined inside a function \(a closure\)"):
        AgentFlow(steps=[local_step]).to_config()
    with pytest.raises(TypeError, match=r"Discussion 'd' until.*lambda"):
        AgentFlow(steps=[Discussion([shout], until=lambda ctx: True, name="d")]).to_config()
    with pytest.raises(TypeError, match=r"Task 'h' should_run.*lambda"):
        AgentFlow(steps=[Task(handler=shout, name="h", should_run=lambda ctx: True)]).to_config()
    with pytest.raises(TypeError, match=r"FunctionModel .* fn.*lambda"):
        GroupChat(agents=[FunctionModel(lambda req: "x").agent("a"), m.agent("b")]).to_config()
    with pytest.raises(TypeError, match="JSON-able"):
        AgentFlow(steps=[shout], variables={"when": object()}).to_config()


def test_closed_scripted_model_and_custom_patterns():
    m = fm()
    chat = GroupChat(agents=[m.agent("a"), m.agent("b")])
    m.close()
    with pytest.raises(TypeError, match="closed"):
        chat.to_config()
    from fsmchat import Pattern

    class Custom(Pattern):
        def _compile(self):
            raise NotImplementedError

        def _context(self, task):
            raise NotImplementedError

        def _calls_by_speaker(self):
            return []

    with pytest.raises(TypeError, match="Custom has no config form.*factory"):
        Custom().to_config()
    custom = Custom()
    custom.factory = "test_config:make_round_robin"
    assert from_config(custom.to_config().model_dump(), allow=["test_config"]).to_config().kind == "round_robin"


# ---- scripted models ----
def test_scripted_model_config_form():
    m = ScriptedModel({"a": ["hello", Bid(0.7, "bid"), ToolCall("respond", "{bad"), Fail(429, "slow", 0.1),
                             Delay(0.01, Bid(0.2, "late")), Empty(), echo]}, fn=bid_fn)
    spec = m.to_config()
    assert spec.id == m.id and spec.kind == "scripted" and spec.fn == "test_config:bid_fn"
    assert [i.kind for i in spec.scripts["a"]] == ["text", "bid", "tool_call", "fail", "delay", "empty", "callable"]
    assert ScriptedModel.from_config(spec, allow=["test_config"]) is m  # the live model, in the process that made it
    m.close()
    again = ScriptedModel.from_config(spec.model_dump(), allow=["test_config"])
    assert again is not m and again.id == m.id and again.scripts["a"][4] == Delay(0.01, Bid(0.2, "late"))
    assert again.to_config() == spec
    again.close()


def test_digest_ignores_scripted_model_ids():
    a, b = make_round_robin(), make_round_robin()
    assert a.to_config().models[0].id != b.to_config().models[0].id
    assert config_digest(a.to_config()) == config_digest(b.to_config())
    c = make_round_robin()
    c.config = c.config.model_copy(update={"max_loops": 3})
    assert config_digest(c.to_config()) != config_digest(a.to_config())
    assert run_id_for("d", 0, "t") != run_id_for("d", 1, "t") != run_id_for("d", 1, "u")


# ---- local batches with checkpoints (the same shard runner the Ray workers use) ----
def test_local_checkpoint_dir_skips_finished_runs(tmp_path):
    chat = make_group_chat()
    model = FunctionModel.from_config(chat.to_config().models[0], allow=["test_config"])
    tasks = [f"topic {i}" for i in range(12)]
    expected = chat.run_batch(tasks)
    before = model.calls()
    first = execute_batch(chat, tasks, executor="local", checkpoint_dir=tmp_path, max_concurrency_per_worker=4)
    assert first.results == expected and first.model_calls == model.calls() - before > 0
    assert first.resumed == 0 and len(find_runs(tmp_path)) == 12
    again = execute_batch(chat, tasks, executor="local", checkpoint_dir=tmp_path)
    assert again.results == expected
    assert again.model_calls == 0 and again.resumed == 12 and model.calls() - before == first.model_calls
    more = execute_batch(chat, tasks + ["topic new"], executor="local", checkpoint_dir=tmp_path)
    assert more.results[:12] == expected and more.resumed == 12 and more.outcomes[12].model_calls > 0
    assert chat.run_batch(tasks, executor="local", checkpoint_dir=tmp_path) == expected


def test_local_checkpointed_batch_isolates_then_raises(tmp_path):
    m = fm()
    chat = GroupChat(agents=[m.agent("a"), boom_on_x], max_loops=3)
    tasks = ["a", "x marks", "b"]
    report = execute_batch(chat, tasks, executor="local", checkpoint_dir=tmp_path)
    assert [o.ok for o in report.outcomes] == [True, False, True]
    failure = report.results[1]
    assert isinstance(failure, TaskFailure) and failure.index == 1 and failure.error_type == "RuntimeError"
    assert "boom" in str(failure) and failure.transcript[0]["content"] == "x marks"
    assert report.results[0] == chat.run("a")
    again = execute_batch(chat, tasks, executor="local", checkpoint_dir=tmp_path)  # the failed run is resumed
    assert [o.resumed for o in again.outcomes] == [True, False, True]
    assert again.model_calls == again.outcomes[1].model_calls  # only the failed run calls a model again
    assert again.results[1].error_type == "RuntimeError" and again.results[::2] == report.results[::2]
    with pytest.raises(TaskFailure, match="boom"):
        run_batch(chat, tasks, executor="local", checkpoint_dir=tmp_path)
    with pytest.raises(RuntimeError, match="boom"):  # the plain local path is unchanged
        chat.run_batch(tasks)


def test_batch_arguments_are_checked_before_any_call(tmp_path):
    chat = make_round_robin()
    with pytest.raises(ValueError, match="executor='dask'"):
        chat.run_batch(["t"], executor="dask")
    with pytest.raises(ValueError, match="non-empty"):
        chat.run_batch(["ok", ""], executor="ray")
    with pytest.raises(ValueError, match="max_concurrency_per_worker"):
        execute_batch(chat, ["t"], executor="local", max_concurrency_per_worker=0)
    with pytest.raises(TypeError, match="lambda"):
        GroupChat(agents=[Agent("a"), lambda t: "x"]).run_batch(["t"], executor="ray")


def test_progress_bar_shows_done_failed_total(capsys):
    m = fm()
    chat = GroupChat(agents=[m.agent("a"), boom_on_x], max_loops=3)
    report = execute_batch(chat, ["a", "x", "b"], executor="local", checkpoint_dir=None, progress=True)
    err = capsys.readouterr().err
    assert report.failed == 1 and "3/3" in err and "failed 1" in err and "ETA" in err


def test_group_chat_context_window_travels():
    chat = GroupChat(agents=[Agent("a"), Agent("b")], context_window=3)
    assert from_config(chat.to_config().model_dump_json()).config.context_window == 3


def test_loop_max_items_travels_and_is_enforced_after_the_roundtrip():
    from fsmchat.config import to_config
    from fsmchat.flow import loop

    flow = AgentFlow(steps=[loop(fm().agent("a"), over="items", max_items=2)], variables={"items": [1, 2, 3]})
    data = to_config(flow).model_dump(mode="json")
    assert data["steps"][0]["max_items"] == 2
    rebuilt = from_config(data, allow=["test_config"])
    assert rebuilt.steps[0].max_items == 2
    res = rebuilt.execute("t")
    assert not res.ok and "'items' holds 3 items, over its max_items=2" in str(res.error)


def test_an_agents_tool_options_travel_and_defaults_are_not_written():
    schema = {"type": "function", "function": {"name": "lookup", "description": "Look a word up.",
                                               "parameters": {"type": "object", "properties": {}}}}
    tuned = Agent("a", tools=[schema], max_tool_rounds=2, max_parallel_tools=1, on_tool_error="stop",
                  share_tool_results=True, max_retry_wait_s=5, transport="litellm")
    cfg = json.loads(RoundRobinSwarm(agents=[tuned, Agent("b")], max_loops=1).to_config().model_dump_json())
    back = from_config(cfg).agents[0]
    assert (back.max_tool_rounds, back.max_parallel_tools, back.on_tool_error, back.share_tool_results,
            back.max_retry_wait_s, back.transport) == (2, 1, "stop", True, 5, "litellm")
    plain = cfg["agents"][1]
    for name in ("max_tool_rounds", "max_parallel_tools", "on_tool_error", "share_tool_results", "max_retry_wait_s",
                 "transport"):
        assert name not in plain  # written only when set: configs of the previous version read back equal
