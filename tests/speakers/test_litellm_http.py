"""GroupChat over real HTTP: fsmchat -> litellm -> openai SDK -> httpx -> a local stdlib
OpenAI-compatible server (tests/support/openai_server.py). No network beyond 127.0.0.1, no API key."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from support.openai_server import (DEFAULT_USAGE, OpenAIServer, error, json_text, per_agent, respond)

from fsmchat import RESPOND_TOOL, Agent, GroupChat, ModelCallError

LULL_PATH = ["seed", "bid", "select", "post", "penalize", "bid", "select", "stop"]
SILENT = respond(0.0, "")
TASK = "Plan a picnic for Saturday."


@pytest.fixture
def server():
    with OpenAIServer(max_requests=50, max_lifetime=30) as srv:
        yield srv
        srv.assert_clean()


def agent(srv: OpenAIServer, name: str, **kw) -> Agent:
    opts = dict(system_prompt=f"You are {name}, a terse planner.", model="openai/test-model",
                api_base=srv.url + "/v1", api_key="sk-test", tool_mode="native", num_retries=0, timeout=120)
    opts.update(kw)
    return Agent(name, **opts)


def chat(srv: OpenAIServer, *agents: Agent) -> GroupChat:
    return GroupChat(agents=list(agents), max_loops=10, threshold=0.5)


# --------------------------------------------------------------------------- happy path
def test_group_chat_over_http_one_post_then_lull(server):
    server.set_script(per_agent({
        "alice": [respond(0.9, "Bring sandwiches."), SILENT],
        "bob": [respond(0.2, ""), SILENT],
    }))
    result = chat(server, agent(server, "alice"), agent(server, "bob")).execute(TASK)

    assert result.error is None
    assert result.path == LULL_PATH
    assert result.stop_reason == "lull"
    posts = result.transcript[1:]
    assert [(m.role, m.content) for m in posts] == [("alice", "Bring sandwiches.")]
    assert posts[0].metadata["score"] == pytest.approx(0.9)
    assert result.events == []

    # N agents x (posts + 1) bid rounds, every one a completion request
    assert len(server.requests) == 2 * (len(posts) + 1)
    assert [r.path for r in server.records] == ["/v1/chat/completions"] * 4
    assert all(r.status == 200 for r in server.records)
    assert all(r.headers.get("authorization") == "Bearer sk-test" for r in server.records)
    assert result.calls == 4
    assert result.usage == {k: 4 * v for k, v in DEFAULT_USAGE.items()}

    for req in server.requests:
        assert req["model"] == "test-model"
        assert req["tools"] == [RESPOND_TOOL]
        assert req["tool_choice"] == {"type": "function", "function": {"name": "respond"}}
        assert "response_format" not in req
        assert not req.get("stream")
        # fsmchat's own bookkeeping must not leak into the provider request
        assert "metadata" not in req and "max_retries" not in req and "num_retries" not in req

    alice1, alice2 = server.requests_for("alice")
    bob1, bob2 = server.requests_for("bob")
    for req, name in ((alice1, "alice"), (bob1, "bob")):
        msgs = req["messages"]
        assert msgs[0] == {"role": "system", "content": f"You are {name}, a terse planner."}
        assert msgs[1] == {"role": "user", "content": TASK}  # the seed, plain (no "User:" prefix)
        assert len(msgs) == 3
        assert msgs[-1]["role"] == "user"
        assert msgs[-1]["content"].startswith(f"You are {name} in a group chat with ")
        assert "The latest message is from User" in msgs[-1]["content"]
        assert "respond tool" in msgs[-1]["content"]

    # turn 2: the speaker sees its own post as assistant, the others as "alice: ..."
    assert [m["role"] for m in alice2["messages"]] == ["system", "user", "assistant", "user"]
    assert alice2["messages"][2] == {"role": "assistant", "content": "Bring sandwiches."}
    assert [m["role"] for m in bob2["messages"]] == ["system", "user", "user", "user"]
    assert bob2["messages"][2] == {"role": "user", "content": "alice: Bring sandwiches."}
    for req in (alice2, bob2):
        assert req["messages"][1] == {"role": "user", "content": TASK}
        assert "The latest message is from alice" in req["messages"][-1]["content"]


# --------------------------------------------------------------------------- retries
def test_server_500_is_retried_exactly_once(server):
    server.set_script(per_agent({
        "alice": [error(500, retry_after=0), respond(0.8, "Retried and here."), SILENT],
        "bob": [SILENT, SILENT],
    }))
    result = chat(server, agent(server, "alice", num_retries=1), agent(server, "bob")).execute(TASK)

    assert result.error is None and result.path == LULL_PATH
    assert [(m.role, m.content) for m in result.transcript[1:]] == [("alice", "Retried and here.")]
    alice = server.requests_for("alice")
    assert len(alice) == 3  # 500 + one retry in turn 1, one bid in turn 2
    assert alice[0] == alice[1]  # the retry resends the same request
    assert [r.status for r in server.records if r.body in alice] == [500, 200, 200]
    assert len(server.requests_for("bob")) == 2
    assert result.calls == 4 and result.context.stats.attempts == 5
    assert result.events == []


def test_persistent_500_gives_up_after_one_retry(server):
    server.set_script(per_agent({"alice": [error(500, retry_after=0)] * 2, "bob": [SILENT]}))
    result = chat(server, agent(server, "alice", num_retries=1), agent(server, "bob")).execute(TASK)

    assert result.error is None
    assert result.path == ["seed", "bid", "select", "stop"] and result.stop_reason == "lull"
    assert len(server.requests_for("alice")) == 2
    [event] = result.events
    assert event["event"] == "invalid_bid" and event["agent"] == "alice"
    assert "2 attempt(s)" in event["reason"] and "InternalServerError" in event["reason"]


def test_bad_request_400_is_not_retried_and_ends_the_run(server):
    server.set_script(per_agent({"alice": [error(400, "bad tool schema")], "bob": [SILENT]}))
    result = chat(server, agent(server, "alice", num_retries=2), agent(server, "bob")).execute(TASK)

    # a request error no retry can fix ends the chat as an error, never as a lull (docs/semantics.md)
    assert result.path == ["seed", "bid"] and result.stop_reason == "error" and not result.ok
    assert isinstance(result.error, ModelCallError) and result.error.kind == "bad_request"
    assert result.error.agent == "alice" and result.error.model == "openai/test-model"
    assert "bad tool schema" in str(result.error) and "1 attempt(s)" in str(result.error)
    assert len(server.requests_for("alice")) == 1  # a bad request is never retried
    assert len(server.requests) == 2
    assert result.events == []


# --------------------------------------------------------------------------- json mode
def test_json_mode_agent_sends_response_format_and_parses_content(server):
    server.set_script(per_agent({
        "alice": [json_text({"score": 0.8, "message": "JSON says hi."}), json_text({"score": 0, "message": ""})],
        "bob": [SILENT, SILENT],
    }))
    result = chat(server, agent(server, "alice", tool_mode="json"), agent(server, "bob")).execute(TASK)

    assert result.error is None and result.events == []
    assert result.path == LULL_PATH and result.stop_reason == "lull"
    [post] = result.transcript[1:]
    assert (post.role, post.content) == ("alice", "JSON says hi.")
    assert post.metadata["score"] == pytest.approx(0.8)

    alice = server.requests_for("alice")
    assert len(alice) == 2
    for req in alice:
        fmt = req["response_format"]
        assert fmt["type"] == "json_schema"
        assert fmt["json_schema"]["name"] == "respond"
        assert fmt["json_schema"]["schema"] == RESPOND_TOOL["function"]["parameters"]
        assert "tools" not in req and "tool_choice" not in req
        assert req["messages"][0]["role"] == "system" and req["messages"][-1]["role"] == "user"
    for req in server.requests_for("bob"):  # the native agent is unaffected
        assert req["tools"] == [RESPOND_TOOL] and "response_format" not in req


# --------------------------------------------------------------------------- the harness itself
def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_server_is_bounded_by_max_requests_and_lifetime():
    with OpenAIServer([respond(0.5, "a")], default=SILENT, max_requests=2, max_lifetime=0.5) as srv:
        status, body = _post(srv.url, {"model": "m", "messages": []})
        assert status == 200 and body["model"] == "m" and body["usage"] == DEFAULT_USAGE
        call = body["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == "respond" and json.loads(call["arguments"]) == {"score": 0.5, "message": "a"}
        assert _post(srv.url, {"model": "m", "messages": []})[0] == 200
        assert _post(srv.url, {"model": "m", "messages": []})[0] == 503  # over max_requests
        assert srv.refused == 1 and len(srv.records) == 3 and len(srv.requests) == 2
        assert "max_requests" in srv.errors[0]
        hung = time.monotonic() + 300  # a hang guard: the server expires 0.5 s after it started
        while not srv.expired and time.monotonic() < hung:
            time.sleep(0.05)
        assert srv.expired
        with pytest.raises(OSError):
            _post(srv.url, {"model": "m", "messages": []})
