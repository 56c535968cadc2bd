"""The fast path and litellm's path give the same runs: each case sends the same requests through
both (``Agent(transport="fast")`` and ``transport="litellm"``) to a fresh local OpenAI-compatible
server scripted the same way, and asserts the same request bodies on the wire (headers aside) and
the same ``RunResult`` (transcript, path, calls, usage, cost, stop reason, events, error class and
message), and the same waits between retries."""
from __future__ import annotations

import asyncio
import gc
import json
import logging
import subprocess
import sys

import pytest

from support.openai_server import (OpenAIServer, Reply, completion, delayed, empty_choices, error,
                                   malformed_tool_call, per_agent, raw, respond, streamed, text, tool_call)

from fsmchat import Agent, GroupChat, RoundRobinSwarm
from fsmchat.errors import ConfigError
from fsmchat.speakers import llm, wire

pytestmark = pytest.mark.filterwarnings("error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning")

PATHS = ("litellm", "fast")
TASK = "Plan a picnic for Saturday."
SILENT = respond(0.0, "")


class Waits:
    """Stands in for ``asyncio`` inside fsmchat.speakers.llm: records each retry wait, waits no time."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def __getattr__(self, name: str):
        return getattr(asyncio, name)

    async def sleep(self, seconds: float) -> None:
        self.seen.append(seconds)


@pytest.fixture
def waits(monkeypatch):
    w = Waits()
    monkeypatch.setattr(llm, "asyncio", w)
    return w


def agent(api_base: str, name: str, transport: str, **kw) -> Agent:
    opts = dict(system_prompt=f"You are {name}, a terse planner.", model="openai/test-model", api_base=api_base,
                api_key="sk-test", tool_mode="native", num_retries=0, timeout=5, transport=transport)
    opts.update(kw)
    return Agent(name, **opts)


def summary(result) -> dict:
    err = result.error
    return {"transcript": [(m.role, m.content, dict(m.metadata)) for m in result.transcript], "path": result.path,
            "stop_reason": str(result.stop_reason), "calls": result.calls, "usage": result.usage,
            "cost": result.context.stats.cost_usd, "attempts": result.context.stats.attempts,
            "events": result.events, "error": None if err is None else (type(err).__name__, str(err)),
            "cause": None if err is None else type(getattr(err, "cause", None)).__name__}


def both(script, build, waits=None) -> dict[str, tuple[dict, list, list]]:
    """Run ``build(api_base, transport)`` on each path against a server scripted by ``script()``."""
    out = {}
    for transport in PATHS:
        if waits is not None:
            waits.seen.clear()
        with OpenAIServer(script(), max_requests=30, max_lifetime=30) as srv:
            result = build(srv.api_base, transport).execute(TASK)
            out[transport] = (summary(result), list(srv.requests), list(waits.seen) if waits is not None else [])
    return out


def wire_bodies(bodies: list) -> list[str]:
    """The bodies as sorted JSON texts: concurrent bids reach the server in either order."""
    return sorted(json.dumps(b, sort_keys=True) for b in bodies)


def same(out):
    assert wire_bodies(out["fast"][1]) == wire_bodies(out["litellm"][1])  # the request bodies on the wire
    assert out["fast"][0] == out["litellm"][0]  # the runs
    assert out["fast"][2] == out["litellm"][2]  # the retry waits
    return out["fast"]


def swarm(*replies, **kw):
    return (lambda: list(replies)), (lambda base, t: RoundRobinSwarm(agents=[agent(base, "alice", t, **kw)],
                                                                   max_loops=1))


# ---- the cases ---------------------------------------------------------------------------------------
def test_plain_reply():
    run, _, _ = same(both(*swarm(text("Bring sandwiches."))))
    assert run["transcript"][1][:2] == ("alice", "Bring sandwiches.")
    assert run["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert run["error"] is None and run["calls"] == 1 and run["events"] == []


def test_known_model_is_priced_the_same():
    run, bodies, _ = same(both(*swarm(text("Bring sandwiches."), model="openai/gpt-4o-mini", temperature=0.2,
                                      max_tokens=50, seed=7)))
    assert run["cost"] == pytest.approx(10 * 0.15e-6 + 5 * 0.6e-6)
    assert {k: bodies[0][k] for k in ("model", "temperature", "max_tokens", "seed")} == \
        {"model": "gpt-4o-mini", "temperature": 0.2, "max_tokens": 50, "seed": 7}


@pytest.mark.parametrize("model", ["openai/test-model", "hosted_vllm/llama"])
def test_group_chat_bid(model):
    def script():
        return per_agent({"alice": [respond(0.9, "Bring sandwiches."), SILENT], "bob": [respond(0.2, ""), SILENT]})

    run, bodies, _ = same(both(script, lambda base, t: GroupChat(
        agents=[agent(base, "alice", t, model=model), agent(base, "bob", t, model=model)], max_loops=10,
        threshold=0.5)))
    assert {b["model"] for b in bodies} == {model.partition("/")[2]}
    assert [(r, c) for r, c, _ in run["transcript"][1:]] == [("alice", "Bring sandwiches.")]
    assert run["stop_reason"] == "lull" and run["calls"] == 4
    assert all(b["tool_choice"] == {"type": "function", "function": {"name": "respond"}} for b in bodies)


def test_429_with_retry_after_then_success(waits):
    run, bodies, seen = same(both(*swarm(error(429, retry_after=2), text("ok"), num_retries=1), waits))
    assert seen == [2.0]
    assert run["calls"] == 1 and run["attempts"] == 2 and run["transcript"][1][1] == "ok"
    assert len(bodies) == 2 and bodies[0] == bodies[1]


def test_500_is_retried(waits):
    out = both(*swarm(error(500), error(500), text("ok"), num_retries=2), waits)
    for t in PATHS:  # the backoff is jittered: 0.5 s then 1 s, each up to 25 % longer
        assert [round(w * 4) / 4 for w in out[t][2]] in ([0.5, 1.0], [0.5, 1.25], [0.75, 1.0], [0.75, 1.25])
        out[t][2].clear()
    run, _, _ = same(out)
    assert run["attempts"] == 3 and run["error"] is None and run["transcript"][1][1] == "ok"


def test_401_is_not_retried(waits):
    run, bodies, seen = same(both(*swarm(error(401, "bad key"), num_retries=2), waits))
    assert seen == [] and len(bodies) == 1 and run["attempts"] == 1
    assert run["stop_reason"] == "error" and run["cause"] == "AuthenticationError"
    assert run["error"][1] == ("model call for agent 'alice' (model 'openai/test-model') failed after 1 attempt(s): "
                               "AuthenticationError: bad key [authentication, not retried: the provider refused the "
                               "credentials; check the API key]")


def test_timeout():
    run, _, _ = same(both(*swarm(delayed(30, text("late")), timeout=0.2)))
    assert run["stop_reason"] == "error" and run["cause"] == "TimeoutError"


def test_malformed_body():
    run, _, _ = same(both(*swarm(raw("not json at all"))))
    assert run["error"][1].endswith("InternalServerError: Expecting value: line 1 column 1 (char 0)")


@pytest.mark.parametrize("reply", [
    empty_choices(),
    Reply(body={"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}]}),
    Reply(body=[1, 2]),
    raw("upstream down", status=502, content_type="text/plain"),
], ids=["no choices", "no usage", "not an object", "502 text"])
def test_odd_answers(reply):
    run, _, _ = same(both(*swarm(reply)))
    assert run["calls"] == 1


def test_malformed_tool_call_in_a_bid():
    def script():
        return per_agent({"alice": [malformed_tool_call(), SILENT], "bob": [respond(0.0, ""), SILENT]})

    run, _, _ = same(both(script, lambda base, t: GroupChat(
        agents=[agent(base, "alice", t), agent(base, "bob", t)], max_loops=3, threshold=0.5)))
    assert run["events"][0]["event"] == "invalid_bid"


def test_connection_refused():
    with OpenAIServer() as gone:
        base = gone.api_base
    runs = {t: summary(RoundRobinSwarm(agents=[agent(base, "alice", t)], max_loops=1).execute(TASK)) for t in PATHS}
    assert runs["fast"] == runs["litellm"]
    assert runs["fast"]["error"][1].endswith("/v1/chat/completions (connection refused: nothing listens there); check "
                                             "that the server is running and that the agent's api_base is right")


def test_tool_calls_and_tool_results():
    tools = [{"type": "function", "function": {"name": "weather", "description": "The forecast.",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_9", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]},
               {"role": "tool", "tool_call_id": "call_9", "content": "Rain."}]
    got = {}
    for t in PATHS:
        with OpenAIServer([tool_call("weather", {"city": "Bergen"}, content="Checking.")]) as srv:
            msg = asyncio.run(llm.acomplete("openai/test-model", history, agent="alice", transport=t,
                                            kwargs={"api_base": srv.api_base, "api_key": "sk-test"}, timeout=5,
                                            num_retries=0, tools=tools, tool_choice="auto")).choices[0].message
            call = msg.tool_calls[0]
            got[t] = (srv.requests, msg.content, msg.role, call.type, call.function.name, call.function.arguments)
    assert got["fast"][1:] == got["litellm"][1:] == ("Checking.", "assistant", "function", "weather",
                                                     '{"city": "Bergen"}')
    # the assistant message's "content": None is left out on both paths; everything else is sent as given
    fast_body, litellm_body = got["fast"][0][0], got["litellm"][0][0]
    assert fast_body == litellm_body
    assert fast_body["messages"] == [history[0], {k: v for k, v in history[1].items() if k != "content"}, history[2]]
    assert fast_body["tool_choice"] == "auto" and fast_body["tools"] == tools


CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}


@pytest.mark.parametrize("message, sent", [
    ({"role": "assistant", "content": None, "tool_calls": [CALL]}, {"role": "assistant", "tool_calls": [CALL]}),
    ({"role": "assistant", "content": None}, {"role": "assistant"}),
    ({"role": "assistant", "content": "Sunny.", "tool_calls": None}, {"role": "assistant", "content": "Sunny."}),
    ({"role": "user", "content": "And Bergen?", "name": None}, {"role": "user", "content": "And Bergen?"}),
    ({"role": "tool", "tool_call_id": "call_1", "content": None}, {"role": "tool", "tool_call_id": "call_1"}),
    ({"role": "assistant", "content": "", "tool_calls": [{**CALL, "index": None}]},  # nested: sent as given
     {"role": "assistant", "content": "", "tool_calls": [{**CALL, "index": None}]}),
], ids=["assistant-tool-call", "assistant-empty", "no-tool-calls", "user-name", "tool-result", "nested"])
def test_a_message_key_set_to_none_is_sent_as_litellm_sends_it(message, sent):
    got = {}
    for t in PATHS:
        with OpenAIServer([text("ok")]) as srv:
            asyncio.run(llm.acomplete("openai/test-model", [{"role": "user", "content": "Weather?"}, message],
                                      agent="alice", transport=t, kwargs={"api_base": srv.api_base, "api_key": "sk-test"},
                                      timeout=5, num_retries=0))
            got[t] = srv.requests[0]
    assert got["fast"] == got["litellm"]
    assert got["fast"]["messages"] == [{"role": "user", "content": "Weather?"}, sent]


def test_a_tool_round_sends_the_same_requests_on_both_paths():
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    def script():  # the call's id is fixed, so both servers see the same second request
        call = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_w", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]}
        return [Reply(body=completion(call, "tool_calls")), text("Hats.")]

    out = both(script, lambda base, t: RoundRobinSwarm(agents=[agent(base, "alice", t, tools=[weather])], max_loops=1))
    assert wire_bodies(out["fast"][1]) == wire_bodies(out["litellm"][1])
    second = out["fast"][1][1]["messages"]
    assert second[-2:] == [{"role": "assistant", "tool_calls": [{"id": "call_w", "type": "function", "function": {
        "name": "weather", "arguments": '{"city": "Oslo"}'}}]}, {"role": "tool", "tool_call_id": "call_w",
                                                                  "content": "sunny in Oslo"}]
    for transport in PATHS:
        run = out[transport][0]
        assert run["transcript"][1][1] == "Hats." and run["error"] is None and run["calls"] == 2


# ---- which path a request takes --------------------------------------------------------------------
def test_an_option_litellm_translates_falls_back_with_an_event():
    with OpenAIServer([text("ok")]) as srv:
        result = RoundRobinSwarm(agents=[agent(srv.api_base, "alice", "auto", top_k=5)], max_loops=1).execute(TASK)
    assert result.error is None
    assert result.events == [{"event": "transport_fallback", "agent": "alice", "model": "openai/test-model",
                              "reason": "option(s) 'top_k' are litellm's to translate"}]


def test_callbacks_send_through_litellm(monkeypatch):
    import litellm

    seen = []

    class Spy(litellm.integrations.custom_logger.CustomLogger):
        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            seen.append(kwargs["model"])

    for name in wire.CALLBACK_LISTS:  # litellm copies a callback into its other lists
        monkeypatch.setattr(litellm, name, [])
    monkeypatch.setattr(litellm, "callbacks", [Spy()])
    with OpenAIServer([text("ok")]) as srv:
        result = RoundRobinSwarm(agents=[agent(srv.api_base, "alice", "auto")], max_loops=1).execute(TASK)
    assert result.events[0]["reason"] == "litellm callbacks are registered"
    assert result.transcript[-1].content == "ok"


def test_litellm_debug_logging_sends_through_litellm():
    log = logging.getLogger("LiteLLM")
    level = log.level
    assert wire.blocker(llm.get_litellm(), "openai/m", {"api_base": "http://h/v1", "api_key": "k"}) is None
    log.setLevel(logging.DEBUG)
    try:
        assert wire.blocker(llm.get_litellm(), "openai/m", {"api_base": "http://h/v1", "api_key": "k"}) == \
            "litellm debug logging is on (its request log)"
    finally:
        log.setLevel(level)


def route(model: str, options: dict) -> wire.Route:
    return wire.Route.of(llm.get_litellm(), model, options)


def test_streaming_takes_the_fast_path_without_an_event():
    stats = llm.CallStats(events=[])
    options = {"api_base": "http://h/v1", "api_key": "k", "stream": True, "stream_options": {"include_usage": True}}
    assert wire.choose(llm.get_litellm(), route("openai/m", options), "auto", stats, "alice")
    assert stats.events == []


def test_other_providers_stay_on_litellm_without_an_event():
    stats = llm.CallStats(events=[])
    assert not wire.choose(llm.get_litellm(), route("anthropic/claude", {"api_key": "k"}), "auto", stats, "a")
    assert not wire.choose(llm.get_litellm(), route("openai/m", {"api_key": "k"}), "auto", stats, "a")  # no api_base
    assert stats.events == []
    assert wire.choose(llm.get_litellm(), route("hosted_vllm/m", {"api_base": "http://h/v1"}), "auto", stats, "a")


def test_each_agents_route_is_worked_out_once_per_run(monkeypatch):
    made = []
    of = wire.Route.of.__func__

    def counted(cls, lm, model, options):
        made.append(model)
        return of(cls, lm, model, options)

    monkeypatch.setattr(wire.Route, "of", classmethod(counted))
    script = per_agent({"alice": [respond(0.9, "Sandwiches.")] * 3, "bob": [respond(0.2, "")] * 3})
    with OpenAIServer(script) as srv:
        result = GroupChat(agents=[agent(srv.api_base, "alice", "fast"), agent(srv.api_base, "bob", "fast")],
                           max_loops=4).execute(TASK)
    assert result.calls == 6 and [m.content for m in result.transcript[1:]] == ["Sandwiches."] * 3
    assert made == ["openai/test-model", "openai/test-model"]  # one per agent, not one per call


def test_a_route_is_kept_while_the_requests_options_stay_the_same():
    lm, stats = llm.get_litellm(), llm.CallStats()
    options = {"api_base": "http://h/v1", "api_key": "k", "temperature": 0.2}
    first = stats.route(lm, "alice", "openai/m", options)
    assert stats.route(lm, "alice", "openai/m", dict(options)) is first
    assert (first.url, first.headers, first.name) == ("http://h/v1/chat/completions", {
        "Content-Type": "application/json", "Authorization": "Bearer k"}, "m")
    assert stats.lane().route(lm, "alice", "openai/m", options) is first  # a branch run shares the run's routes
    moved = stats.route(lm, "alice", "openai/m", {**options, "api_base": "http://g/v1"})
    assert moved is not first and moved.url == "http://g/v1/chat/completions"
    assert stats.route(lm, "bob", "openai/m", options) is not moved
    assert stats.route(lm, "bob", "openai/m", {**options, "top_k": 3}).blocked == \
        "option(s) 'top_k' are litellm's to translate"


def test_fast_refuses_what_it_cannot_send_before_any_call():
    with pytest.raises(ConfigError, match=r"transport='fast' is invalid for this agent: option\(s\) 'top_k'"):
        Agent("alice", model="openai/m", api_base="http://127.0.0.1:9/v1", api_key="k", transport="fast", top_k=5)
    with pytest.raises(ConfigError, match="is not an OpenAI-compatible endpoint"):
        Agent("alice", model="gpt-4o-mini", transport="fast")
    with pytest.raises(ConfigError, match=r"transport='wire' is invalid: one of 'auto'"):
        Agent("alice", model="openai/m", transport="wire")


def test_fast_with_callbacks_is_a_loud_error(monkeypatch):
    import litellm

    for name in wire.CALLBACK_LISTS:
        monkeypatch.setattr(litellm, name, [])
    monkeypatch.setattr(litellm, "success_callback", [lambda *a: None])
    with OpenAIServer([text("ok")]) as srv:
        with pytest.raises(wire.FastPathUnavailable, match="transport='fast' cannot send this request: litellm "
                                                           "callbacks are registered"):
            RoundRobinSwarm(agents=[agent(srv.api_base, "alice", "fast")], max_loops=1).execute(TASK)
        assert srv.requests == []


def test_one_session_per_loop_closed_with_it():
    async def two_calls(base):
        for _ in range(2):
            await llm.acomplete("openai/test-model", [{"role": "user", "content": "hi"}], agent="a", transport="fast",
                                kwargs={"api_base": base, "api_key": "sk-test"}, timeout=5, num_retries=0)
        return wire.open_sessions()

    with OpenAIServer([text("a"), text("b"), text("c"), text("d")]) as srv:
        assert asyncio.run(two_calls(srv.api_base)) == 1  # the second call reused the loop's session
        assert wire.open_sessions() == 0  # asyncio.run closed it with the loop
        assert asyncio.run(two_calls(srv.api_base)) == 1
    assert wire.open_sessions() == 0


def test_import_fsmchat_imports_no_aiohttp():
    code = ("import sys, fsmchat; from fsmchat import Agent, GroupChat; "
            "Agent('a', model='openai/m', api_base='http://127.0.0.1:9/v1', api_key='k', transport='fast'); "
            "print(sorted(m for m in ('aiohttp', 'httpx', 'litellm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_transport_travels_in_a_config():
    from fsmchat import from_config

    alice = Agent("alice", model="openai/m", api_base="http://127.0.0.1:9/v1", api_key="k", transport="litellm")
    again = from_config(RoundRobinSwarm(agents=[alice], max_loops=1).to_config().model_dump_json())
    assert again.agents[0].transport == "litellm"


def test_a_loop_closed_without_shutting_down_leaves_no_unclosed_session():
    async def call(base):
        await llm.acomplete("openai/test-model", [{"role": "user", "content": "hi"}], agent="a", transport="fast",
                            kwargs={"api_base": base, "api_key": "sk-test"}, timeout=5, num_retries=0)

    with OpenAIServer([text("a"), text("b")]) as srv:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(call(srv.api_base))
        loop.close()  # no shutdown_asyncgens: the session could not be closed with it
        asyncio.run(call(srv.api_base))  # the next session forgets the dead loop's
    gc.collect()  # an unclosed aiohttp session would warn here (an error in this module)
    assert wire.open_sessions() == 0


def streamed_both(script, build, on_token=True):
    """``both`` for streamed replies: each path's run summary, request bodies and the deltas it saw."""
    out = {}
    for transport in PATHS:
        seen: list = []
        with OpenAIServer(script(), max_requests=30, max_lifetime=30) as srv:
            result = build(srv.api_base, transport).execute(TASK, on_token=seen.append if on_token else None)
            out[transport] = (summary(result), list(srv.requests), [(type(x).__name__, getattr(x, "text", None))
                                                                    for x in seen])
    return out


def test_a_streamed_reply_is_the_same_on_both_paths(warm):
    out = streamed_both(lambda: [text("Bring sandwiches and lemonade.")],
                        lambda base, t: RoundRobinSwarm(agents=[agent(base, "alice", t)], max_loops=1))
    run, bodies, seen = same(out)
    assert bodies[0]["stream"] is True and bodies[0]["stream_options"] == {"include_usage": True}
    assert seen == [("TokenDelta", "Bring "), ("TokenDelta", "sandwiches "), ("TokenDelta", "and "),
                    ("TokenDelta", "lemonade.")]
    assert run["transcript"][1][:2] == ("alice", "Bring sandwiches and lemonade.")
    assert run["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15} and run["events"] == []


def test_agent_stream_true_is_the_same_on_both_paths(warm):
    out = streamed_both(lambda: [text("Bring sandwiches.")],
                        lambda base, t: RoundRobinSwarm(agents=[agent(base, "alice", t, stream=True)], max_loops=1),
                        on_token=False)
    run, bodies, seen = same(out)
    assert bodies[0]["stream"] is True and seen == []
    assert run["transcript"][1][:2] == ("alice", "Bring sandwiches.")


def test_streamed_tool_calls_are_the_same_on_both_paths(warm):
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    out = streamed_both(lambda: [tool_call("weather", {"city": "Paris"}), text("Hats.")],
                        lambda base, t: RoundRobinSwarm(agents=[agent(base, "alice", t, tools=[weather])], max_loops=1))
    for transport in PATHS:  # the server numbers call ids across servers: the calls are compared without them
        run, bodies, seen = out[transport]
        calls = [(c["name"], c["arguments"], c["result"]) for c in run["transcript"][1][2]["tool_calls"]]
        assert (run["transcript"][1][1], calls, seen) == ("Hats.", [("weather", {"city": "Paris"}, "sunny in Paris")],
                                                          [("TokenDelta", "Hats.")])
        assert [b["stream"] for b in bodies] == [True, True]
    assert out["fast"][0]["usage"] == out["litellm"][0]["usage"] and out["fast"][0]["events"] == []


def test_a_streamed_error_is_the_same_on_both_paths(warm):
    out = streamed_both(lambda: [error(400, "bad request here")],
                        lambda base, t: RoundRobinSwarm(agents=[agent(base, "alice", t)], max_loops=1))
    run, _, seen = same(out)
    assert run["error"][0] == "ModelCallError" and "bad request here" in run["error"][1] and seen == []


def test_a_stall_cut_by_the_timeout_is_the_same_on_both_paths(warm):
    out = streamed_both(lambda: [streamed(["Bring ", "sand", "wiches."], stall_after=2)],
                        lambda base, t: RoundRobinSwarm(agents=[agent(base, "alice", t, timeout=1)], max_loops=1))
    run, _, seen = same(out)
    assert [e["event"] for e in run["events"]] == ["partial_reply"] and run["events"][0]["text"] == "Bring sand"
    assert seen == [("TokenDelta", "Bring "), ("TokenDelta", "sand")]
