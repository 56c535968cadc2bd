"""Failures are never a quiet ending: a request error no retry can fix ends any run with
stop reason "error" and a typed ``ModelCallError``; missing keys are found before the first request;
a failed flow is not ok; a GroupChat turn where every bid failed is an error, not a lull; bids are
forced tool calls on the wire for models litellm does not know."""
from __future__ import annotations

import uuid

import pytest

from support.credentials import no_keys  # noqa: F401 (a fixture: missing credentials, requests recorded)
from support.openai_server import OpenAIServer, error, json_text, per_agent, respond

from fsmchat import RESPOND_TOOL, Agent, AgentFlow, Discussion, ExpertPanelDiscussion, GroupChat, ModelCallError, \
    OneOnOneDebate, RoundRobinSwarm, Task
from fsmchat.errors import MissingCredentials
from fsmchat.speakers.classify import request_error_kind
from fsmchat.patterns.group_chat import NoBidHeard
from fsmchat.speakers import llm
from fsmchat.testing import Bid, Fail, ScriptedModel, ScriptExhausted

TASK = "Plan a picnic."
SILENT = respond(0.0, "")


# ---------------------------------------------------------------- request errors end every run
@pytest.mark.parametrize("status, kind", [(401, "authentication"), (404, "not_found"), (400, "bad_request")])
def test_group_chat_request_error_ends_the_run_with_error(status, kind):
    m = ScriptedModel({"a": [Bid(0.9, "first"), Fail(status, "nope")], "b": [Bid(0, ""), Bid(0, "")]})
    chat = GroupChat(agents=[m.agent("a", num_retries=3), m.agent("b")], max_loops=10)
    r = chat.execute(TASK)
    assert r.stop_reason == "error" and not r.ok
    assert r.path == ["seed", "bid", "select", "post", "penalize", "bid"]
    assert isinstance(r.error, ModelCallError) and r.error.kind == kind and r.error.fatal
    assert (r.error.agent, r.error.model, r.error.attempts) == ("a", m.model, 1)
    assert "nope" in str(r.error) and "lull" not in str(r.error)
    assert [x.content for x in r.transcript] == [TASK, "first"]  # the post before the fault is kept
    assert m.calls("a") == 2 and m.calls("b") == 2  # never retried (num_retries=3)
    m2 = ScriptedModel({"a": [Fail(status, "nope")], "b": [Bid(0, "")]})
    with pytest.raises(ModelCallError, match="nope") as e:
        GroupChat(agents=[m2.agent("a"), m2.agent("b")], max_loops=10).run(TASK)  # run() raises it
    assert e.value.kind == kind and e.value.fsmchat_result.stop_reason == "error"


@pytest.mark.parametrize("make", [
    lambda a, b, c: RoundRobinSwarm(agents=[a, b], max_loops=2),
    lambda a, b, c: OneOnOneDebate(max_loops=2, agents=[a, b]),
    lambda a, b, c: ExpertPanelDiscussion(max_rounds=1, agents=[a, b], moderator=c),
], ids=["round_robin", "debate", "panel"])
def test_every_pattern_ends_with_the_typed_error(make):
    m = ScriptedModel({"a": [Fail(401, "invalid api key sk-live-abcdef123456")]}, fn=lambda req: "fine")
    pattern = make(m.agent("a", num_retries=2), m.agent("b"), m.agent("c"))
    r = pattern.execute(TASK)
    assert r.stop_reason == "error" and not r.ok
    assert isinstance(r.error, ModelCallError) and r.error.kind == "authentication"
    assert "sk-live-abcdef123456" not in str(r.error) and "***" in str(r.error)  # secrets masked
    assert m.calls("a") == 1


def test_every_bid_failing_is_an_error_not_a_lull():
    m = ScriptedModel({"a": [Fail(500, "down"), Fail(500, "down")], "b": [Fail(503, "busy"), Fail(503, "busy")]})
    r = GroupChat(agents=[m.agent("a", num_retries=1), m.agent("b", num_retries=1)]).execute(TASK)
    assert r.stop_reason == "error" and r.path == ["seed", "bid"]
    assert isinstance(r.error, NoBidHeard) and "no bid was heard" in str(r.error) and "not a lull" in str(r.error)
    assert [name for name, _ in r.error.failures] == ["a", "b"]
    assert m.calls() == 4  # transient: each retried once
    assert [e["agent"] for e in r.events if e["event"] == "invalid_bid"] == ["a", "b"]


def test_one_transient_failure_stays_a_silent_bid():
    m = ScriptedModel({"a": [Fail(500, "down")], "b": [Bid(0.0, "")]})
    r = GroupChat(agents=[m.agent("a"), m.agent("b")]).execute(TASK)
    assert r.ok and r.stop_reason == "lull"  # reference parity: a heard silent bid is a lull
    [ev] = r.events
    assert ev["agent"] == "a" and "InternalServerError" in ev["reason"]


def test_classification_of_provider_errors():
    lm = llm.get_litellm()
    kw = {"llm_provider": "openai", "model": "gpt-4o-mini"}
    no_key = lm.InternalServerError(message="OpenAIException - Missing credentials. Please pass an `api_key`, or "
                                            "set the `OPENAI_API_KEY` environment variable.", **kw)
    assert request_error_kind(no_key) == "missing_credentials" and not llm.retryable(no_key)
    assert request_error_kind(lm.ContextWindowExceededError(message="too long", **kw)) == "context_window"
    assert request_error_kind(lm.PermissionDeniedError(message="no", response=_response(403), **kw)) == "permission"
    server_down = lm.InternalServerError(message="upstream overloaded", **kw)
    assert request_error_kind(server_down) is None and llm.retryable(server_down)
    assert request_error_kind(lm.RateLimitError(message="slow down", **kw)) is None


def _response(status):
    import httpx

    return httpx.Response(status, request=httpx.Request("POST", "http://x"))


# ---------------------------------------------------------------- missing credentials, before any request
def keyless_roster():
    return [Agent("Optimist", model="gpt-4o-mini"), Agent("Critic", model="anthropic/claude-sonnet-4-5"),
            Agent("Local", model="openai/my-model", api_base="http://127.0.0.1:9/v1"),  # a local server: no key
            ScriptedModel(fn=lambda req: Bid(0, "")).agent("Scripted")]  # fsmchat's own provider: no key


def test_missing_keys_end_the_run_before_any_request(no_keys):
    r = GroupChat(agents=keyless_roster()).execute(TASK)
    assert r.stop_reason == "error" and not r.ok and r.path == ["seed", "bid"]
    err = r.error
    assert isinstance(err, MissingCredentials) and isinstance(err, ModelCallError) and err.fatal
    assert err.missing == [("Optimist", "gpt-4o-mini", ["OPENAI_API_KEY"]),
                           ("Critic", "anthropic/claude-sonnet-4-5", ["ANTHROPIC_API_KEY"])]
    assert "'Optimist' (model 'gpt-4o-mini') needs OPENAI_API_KEY" in str(err)
    assert "No request was sent" in str(err)
    assert no_keys.sent == [] and r.calls == 0 and r.context.stats.attempts == 0
    with pytest.raises(MissingCredentials):
        GroupChat(agents=keyless_roster()).run(TASK)


def test_missing_keys_in_batches_flows_and_round_robin(no_keys):
    with pytest.raises(MissingCredentials) as e:
        GroupChat(agents=keyless_roster()).run_batch([f"task {i}" for i in range(5)])
    assert "OPENAI_API_KEY" in str(e.value)
    from fsmchat.patterns.distributed import execute_batch

    with pytest.raises(MissingCredentials):  # checked once, before any task starts
        execute_batch(GroupChat(agents=keyless_roster()), ["a", "b"], executor="local")
    critic, author = Agent("critic", model="gpt-4o-mini"), Agent("author", model="gpt-4o-mini")
    flow = AgentFlow(steps=[Discussion([critic, author], rounds=3)])
    r = flow.execute("Draft")
    assert not r.ok and r.output["status"] == "failed" and isinstance(r.error, MissingCredentials)
    assert [x for x, _, _ in r.error.missing] == ["critic", "author"]
    with pytest.raises(MissingCredentials):
        flow.run("Draft")
    r = RoundRobinSwarm(agents=[critic, author]).execute(TASK)
    assert r.stop_reason == "error" and isinstance(r.error, MissingCredentials)
    assert no_keys.sent == []


def test_keys_present_or_passed_are_not_reported(no_keys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert llm.missing_credentials([Agent("a", model="gpt-4o-mini"),
                                    Agent("b", model="anthropic/x", api_key="sk-ant-test")]) is None
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("FSMCHAT_CHECK_KEYS", "0")
    assert llm.missing_credentials([Agent("a", model="gpt-4o-mini")]) is None


# ---------------------------------------------------------------- flows fail loudly
def failing_flow(status, policy="stop"):
    m = ScriptedModel({"a": ["first"], "b": [Fail(status, "it broke")]}, fn=lambda req: "spare")
    steps = [Discussion([m.agent("a"), Task(agent=m.agent("b"), on_error=policy)], rounds=2), m.agent("after")]
    return m, AgentFlow(steps=steps)


def test_failed_flow_is_not_ok_and_run_keeps_the_reference_dict():
    m, flow = failing_flow(500)
    r = flow.execute("topic")
    assert not r.ok and r.stop_reason == "error" and r.output["status"] == "failed"
    assert "step 'b' failed" in str(r.error) and r.output["error"] == str(r.error)
    assert m.calls("after") == 0
    out = failing_flow(500)[1].run("topic")  # a step failure under its policy: PraisonAI's dict
    assert out["status"] == "failed" and "step 'b' failed" in out["error"]


@pytest.mark.parametrize("policy", ["stop", "continue", "retry"])
def test_flow_request_error_is_raised_by_run_whatever_the_policy(policy):
    m, flow = failing_flow(401, policy)
    r = flow.execute("topic")
    assert not r.ok and r.stop_reason == "error" and r.output["status"] == "failed"
    assert isinstance(r.error, ModelCallError) and r.error.kind == "authentication" and r.error.agent == "b"
    assert m.calls() == 2  # nothing after the refused request, never retried
    with pytest.raises(ModelCallError, match="it broke"):
        failing_flow(401, policy)[1].run("topic")


def test_an_exhausted_script_fails_the_flow_loudly():
    m = ScriptedModel({"a": ["only one"]})
    flow = AgentFlow(steps=[Discussion([Task(agent=m.agent("a"), on_error="continue")], rounds=3)])
    with pytest.raises(ScriptExhausted, match="call #2"):
        flow.run("topic")
    with pytest.raises(ScriptExhausted) as e:
        flow.execute("topic")  # not a run outcome: execute() raises it too, with the result attached
    r = e.value.fsmchat_result
    assert not r.ok and r.output["status"] == "failed" and r.error is e.value


# ---------------------------------------------------------------- bids on the wire
@pytest.fixture
def server():
    with OpenAIServer(max_requests=40, max_lifetime=30) as srv:
        yield srv


def http_agent(srv, name, model, **kw):
    return Agent(name, model=model, api_base=srv.url + "/v1", api_key="sk-test", num_retries=0, timeout=120, **kw)


def test_unknown_model_bids_with_a_forced_tool_call(server):
    model = f"openai/my-model-{uuid.uuid4().hex[:6]}"  # litellm does not know it; no tool_mode set
    server.set_script(per_agent({"alice": [respond(0.9, "hi"), SILENT], "bob": [SILENT, SILENT]}))
    r = GroupChat(agents=[http_agent(server, "alice", model), http_agent(server, "bob", model)]).execute(TASK)
    assert r.ok and [x.content for x in r.transcript] == [TASK, "hi"]
    assert len(server.requests) == 4
    for req in server.requests:
        assert req["tools"] == [RESPOND_TOOL]
        assert req["tool_choice"] == {"type": "function", "function": {"name": "respond"}}
        assert "response_format" not in req


def test_provider_refusing_tools_switches_to_json_once_and_remembers(server):
    model = f"openai/no-tools-{uuid.uuid4().hex[:6]}"

    def refuses_tools(answers):
        def answer(req):
            if "tools" in req:
                return error(400, "'tool_choice' is not supported by this server")
            return answers.pop(0)
        return answer

    server.set_script(per_agent({
        "alice": refuses_tools([json_text({"score": 0.9, "message": "json hi"}),
                                json_text({"score": 0, "message": ""})]),
        "bob": refuses_tools([json_text({"score": 0, "message": ""})] * 2)}))
    r = GroupChat(agents=[http_agent(server, "alice", model), http_agent(server, "bob", model)]).execute(TASK)
    assert r.ok and r.stop_reason == "lull" and [x.content for x in r.transcript] == [TASK, "json hi"]
    fallbacks = [e for e in r.events if e["event"] == "tool_mode_fallback"]
    assert fallbacks and all(e["model"] == model for e in fallbacks) and "tool_choice" in fallbacks[0]["reason"]
    with_tools = [q for q in server.requests if "tools" in q]
    assert 1 <= len(with_tools) <= 2  # turn 1 only (both bids were in flight); turn 2 remembered JSON mode
    assert all("response_format" in q for q in server.requests_for("alice")[-1:])
    assert llm.tool_mode_for(model) == "json"
    assert len(server.requests) == len(with_tools) + 4


def test_explicit_json_mode_and_known_non_tool_models():
    assert Agent("a", model="openai/anything", tool_mode="json").resolved_tool_mode == "json"
    assert Agent("a", model="openai/anything-else").resolved_tool_mode == "native"
    assert Agent("a", model="gpt-4o-mini").resolved_tool_mode == "native"


# ---------------------------------------------------------------- the CLI exits non-zero
@pytest.mark.parametrize("example", ["group_chat.py", "discussion_until_agreed.py", "round_robin.py"])
def test_cli_run_without_a_key_prints_the_error_and_exits_non_zero(example, no_keys, monkeypatch, capsys):
    from pathlib import Path

    from fsmchat.cli import main

    monkeypatch.setenv("FSMCHAT_MODEL", "offline")  # restored after main() sets it
    monkeypatch.setattr("sys.argv", ["fsmchat"])
    code = main(["run", str(Path(__file__).parents[2] / "examples" / example), "--model", "gpt-4o-mini"])
    err = capsys.readouterr().err
    assert code == 1
    assert "MissingCredentials" in err and "OPENAI_API_KEY" in err and "No request was sent" in err
    assert no_keys.sent == []


def test_cli_run_notices_a_failed_run_the_script_ignored(tmp_path, monkeypatch, capsys):
    from fsmchat.cli import main

    script = tmp_path / "ignores.py"
    script.write_text("from fsmchat import AgentFlow\n"
                      "def boom(ctx):\n    raise RuntimeError('speaker down')\n"
                      "AgentFlow(steps=[boom]).execute('go')  # result.error ignored\n"
                      "print('script finished')\n")
    monkeypatch.setattr("sys.argv", ["fsmchat"])
    code = main(["run", str(script)])
    out = capsys.readouterr()
    assert code == 1 and "script finished" in out.out
    assert "a run failed (stop reason 'error')" in out.err and "speaker down" in out.err


def test_an_exhausted_script_is_raised_by_every_pattern_execute():
    m = ScriptedModel({"a": [Bid(0.9, "one")], "b": [Bid(0, "")]})
    with pytest.raises(ScriptExhausted, match="agent 'a' made call #2") as e:
        GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=5).execute(TASK)
    assert [x.content for x in e.value.fsmchat_result.transcript] == [TASK, "one"]
