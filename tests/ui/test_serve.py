"""``fsmchat serve`` over real HTTP: a uvicorn server on 127.0.0.1 (a free port) that each test starts
and stops, httpx as the client, the SSE stream read line by line. Nothing here waits on the clock:
every test reads a run's stream up to its ``end`` event."""
import json
from contextlib import contextmanager

import httpx
import pytest

from fsmchat import Agent, GroupChat, RoundRobinSwarm
from fsmchat.ui import serve as fserve
from support.ui_runs import sse_events

TOKEN = "s3cret-token"


def chat():
    """An offline GroupChat of two agents, one round."""
    return GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs.")], max_loops=2)


def review():
    """The same chat, waiting for a person before each post."""
    return GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs.")], max_loops=2,
                     interrupt_before=["post"])


def relay():
    """One offline agent replying once: its reply streams."""
    return RoundRobinSwarm(agents=[Agent("a", system_prompt="You argue for cats.")], max_loops=1)


PATTERNS = {"chat": chat, "review": review}


@contextmanager
def server(db, token=None, patterns=PATTERNS):
    running = fserve.start(db, patterns, token=token)
    try:
        with httpx.Client(base_url=running.url, timeout=60,
                          headers={"Authorization": f"Bearer {token}"} if token else {}) as client:
            yield client
    finally:
        running.stop()


def shape(events):
    """Each event as its kind, a trace event as "trace:STATE", a message as "message:ROLE"."""
    return [f"trace:{d['state']}" if k == "trace" else f"message:{d['role']}" if k == "message" else k
            for k, d in events]


def test_a_started_run_streams_its_events_in_order_then_its_stop_reason(tmp_path):
    with server(tmp_path / "runs.db") as client:
        started = client.post("/api/runs", json={"pattern": "chat", "task": "Cats or dogs?", "run_id": "r1"})
        assert started.status_code == 202 and started.json()["run_id"] == "r1"
        events = sse_events(client, "r1")
        kinds = shape(events)
        assert [k for k in kinds if k != "bid"] == ["message:User", "trace:seed", "trace:bid", "trace:select",
                                                    "message:a", "trace:post", "trace:penalize", "trace:stop", "end"]
        # each bid's message streams as it is written (word by word offline), before the round's bid step ends
        bids = [d for k, d in events if k == "bid"]
        assert set(kinds[kinds.index("trace:seed") + 1:kinds.index("trace:bid")]) == {"bid"}
        assert bids[0] == {"agent": "a", "step": "bid", "text": "Since ", "attempt": 1}
        assert "".join(d["text"] for d in bids if d["agent"] == "a") == events[kinds.index("message:a")][1]["content"]
        assert events[-1][1] == {"run_id": "r1", "stop_reason": "max_loops", "waiting": False}
        assert events[0][1]["content"] == "Cats or dogs?"
        listed = client.get("/api/runs").json()
        assert [r["run_id"] for r in listed["runs"]] == ["r1"]
        one = client.get("/api/runs/r1")
        assert one.status_code == 200 and one.json()["run"]["run_id"] == "r1"
        assert client.get("/").status_code == 200 and "r1" in client.get("/").text  # the viewer's page
        again = sse_events(client, "r1")  # a finished run streams what it committed, then the same end
        assert again[-1] == ("end", {"run_id": "r1", "stop_reason": "max_loops", "waiting": False})


def test_a_waiting_run_is_answered_and_goes_on(tmp_path):
    with server(tmp_path / "runs.db") as client:
        assert client.post("/api/runs", json={"pattern": "review", "task": "Cats?", "run_id": "w"}).status_code == 202
        waited = sse_events(client, "w")
        assert shape(waited)[-2:] == ["trace:before_post", "end"]
        assert waited[-1][1]["waiting"] is True and waited[-1][1]["stop_reason"] == "interrupted"
        assert waited[-1][1]["allowed"] == ["approve", "edit", "reject", "say"]
        answered = client.post("/api/runs/w/answer", json={"type": "edit", "text": "Birds, by a person."})
        assert answered.status_code == 202
        went_on = sse_events(client, "w")
        assert [d["content"] for k, d in went_on if k == "message"] == ["Birds, by a person."]
        assert went_on[-1] == ("end", {"run_id": "w", "stop_reason": "max_loops", "waiting": False})
        again = client.post("/api/runs/w/answer", json={"type": "approve"})
        assert again.status_code == 409 and "not waiting" in again.json()["error"]


def test_runs_survive_a_server_restart(tmp_path):
    db = tmp_path / "runs.db"
    with server(db) as client:
        client.post("/api/runs", json={"pattern": "review", "task": "Cats?", "run_id": "kept"})
        assert sse_events(client, "kept")[-1][1]["waiting"] is True
    with server(db) as client:  # a new server, a new event loop, the same store
        assert [r["run_id"] for r in client.get("/api/runs").json()["runs"]] == ["kept"]
        assert sse_events(client, "kept")[-1][1]["stop_reason"] == "interrupted"
        assert client.post("/api/runs/kept/answer", json={"type": "approve"}).status_code == 202
        assert sse_events(client, "kept")[-1][1] == {"run_id": "kept", "stop_reason": "max_loops", "waiting": False}
        forked = client.post("/api/runs/kept/fork", json={"at": 0, "fork_id": "kept-2"})
        assert forked.status_code == 201 and forked.json()["run_id"] == "kept-2"
        assert client.post("/api/runs/kept-2/resume").status_code == 202
        assert sse_events(client, "kept-2")[-1][1]["stop_reason"] == "interrupted"


def test_the_token_is_required_when_set(tmp_path):
    running = fserve.start(tmp_path / "runs.db", PATTERNS, token=TOKEN)
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            refused = httpx.get(f"{running.url}/api/runs", headers=headers)
            assert refused.status_code == 401 and "Bearer" in refused.json()["error"]
        assert httpx.post(f"{running.url}/api/runs", json={"pattern": "chat", "task": "x"}).status_code == 401
        ok = httpx.get(f"{running.url}/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and ok.json()["runs"] == []
    finally:
        running.stop()


def test_a_foreign_host_gets_421(tmp_path):
    with server(tmp_path / "runs.db") as client:
        refused = client.get("/api/runs", headers={"Host": "evil.example"})
        assert refused.status_code == 421 and refused.headers["x-frame-options"] == "DENY"


def test_a_public_address_without_a_token_is_refused(tmp_path):
    with pytest.raises(fserve.ServeError, match="needs an access token"):
        fserve.start(tmp_path / "runs.db", PATTERNS, host="0.0.0.0")
    assert not (tmp_path / "runs.db").exists()


@pytest.mark.parametrize("path, body, field, allowed", [
    ("/api/runs", {"pattern": "chat"}, "task", None),
    ("/api/runs", {"pattern": "chat", "task": "x", "code": "import os"}, "code", None),
    ("/api/runs", {"pattern": "chat", "task": "x", "limits": {"max_model_calls": "many"}},
     "limits", None),  # the problem names max_model_calls
    ("/api/runs/w/answer", {"type": "shrug"}, "(body)", ["approve", "edit", "reject", "say"]),
    ("/api/runs/w/fork", {"at": -1}, "at", None),
])
def test_bad_bodies_get_422_naming_the_field(tmp_path, path, body, field, allowed):
    with server(tmp_path / "runs.db") as client:
        refused = client.post(path, json=body)
        assert refused.status_code == 422
        errors = refused.json()["errors"]
        assert [e["field"] for e in errors] == [field]
        if allowed:
            assert errors[0]["allowed"] == allowed


def test_unknown_patterns_and_runs(tmp_path):
    with server(tmp_path / "runs.db") as client:
        unknown = client.post("/api/runs", json={"pattern": "nope", "task": "x"})
        assert unknown.status_code == 404 and unknown.json()["error"] == ("no pattern named 'nope'; registered: "
                                                                          "chat, review")
        assert client.get("/api/runs/ghost/events").status_code == 404
        assert client.post("/api/runs/ghost/cancel").status_code == 409
        assert client.post("/api/runs", content=b"not json").status_code == 422
        empty_edit = client.post("/api/runs/ghost/answer", json={"type": "edit"})
        assert empty_edit.status_code == 422 and "give the new text" in empty_edit.json()["error"]
        taken = client.post("/api/runs", json={"pattern": "review", "task": "x", "run_id": "t"})
        assert taken.status_code == 202 and sse_events(client, "t")[-1][0] == "end"
        again = client.post("/api/runs", json={"pattern": "chat", "task": "x", "run_id": "t"})
        assert again.status_code == 409 and "already exists" in again.json()["error"]


def test_openapi_is_written_from_the_models(tmp_path):
    with server(tmp_path / "runs.db") as client:
        doc = client.get("/openapi.json").json()
    assert doc["openapi"] == "3.1.0"
    assert sorted(doc["paths"]) == ["/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/answer",
                                    "/api/runs/{run_id}/cancel", "/api/runs/{run_id}/events",
                                    "/api/runs/{run_id}/fork", "/api/runs/{run_id}/resume"]
    start = doc["components"]["schemas"]["StartRun"]
    assert start["required"] == ["pattern", "task"] and start["properties"]["pattern"]["enum"] == ["chat", "review"]
    assert sorted(doc["components"]["schemas"]["Answer"]["discriminator"]["mapping"]) == ["approve", "edit",
                                                                                          "reject", "say"]


def test_the_cli_serves_named_targets_and_refuses_a_public_address_without_a_token(tmp_path):
    import os
    import re
    import signal
    import subprocess
    import sys
    here = os.path.abspath(__file__)
    tests = os.path.dirname(os.path.dirname(here))  # tests/: the support package (support.ui_runs) this module imports
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(tests), tests])}
    env.pop("FSMCHAT_SERVE_TOKEN", None)
    cmd = [sys.executable, "-m", "fsmchat.cli", "serve", "--store", str(tmp_path / "runs.db"),
           "--target", f"talk={here}:chat"]
    refused = subprocess.run([*cmd, "--host", "0.0.0.0"], env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "needs an access token" in refused.stderr
    proc = subprocess.Popen([*cmd, "--port", "0"], env={**env, "FSMCHAT_SERVE_TOKEN": TOKEN},
                            stdout=subprocess.PIPE, text=True)
    try:
        banner = proc.stdout.readline()
        url = re.search(r"(http://\S+)/ ", banner).group(1)
        assert "talk over" in banner and "token required" in banner
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{url}/api/runs").status_code == 401
        with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
            assert client.post("/api/runs", json={"pattern": "talk", "task": "Cats or dogs?",
                                                  "run_id": "c"}).status_code == 202
            assert sse_events(client, "c")[-1][1]["stop_reason"] == "max_loops"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait()


def stuck():
    """A chat whose agents' first answers never come (an hour-long scripted delay): it runs until cancelled."""
    from fsmchat import Bid
    from fsmchat.testing import Delay, ScriptedModel
    model = ScriptedModel({"a": [Delay(3600, Bid(0.9, "late"))], "b": [Delay(3600, Bid(0.8, "later"))]})
    return GroupChat(agents=[model.agent("a"), model.agent("b")], max_loops=2)


def test_a_running_run_streams_as_it_goes_and_is_cancelled(tmp_path):
    running = fserve.start(tmp_path / "runs.db", {"stuck": stuck})
    try:
        with httpx.Client(base_url=running.url, timeout=60) as client, \
                httpx.Client(base_url=running.url, timeout=60) as other:
            assert client.post("/api/runs", json={"pattern": "stuck", "task": "Wait.", "run_id": "s"}).status_code == 202
            seen = []
            with client.stream("GET", "/api/runs/s/events") as response:
                lines = response.iter_lines()
                for line in lines:  # the run is still in its first model call: these came as they happened
                    if line.startswith("event: "):
                        seen.append(line[len("event: "):])
                    if seen == ["message", "trace"]:
                        break
                assert other.get("/api/runs").json()["runs"][0]["status"] == "running"
                assert other.post("/api/runs/s/cancel").status_code == 202
                end = None
                for line in lines:
                    if line.startswith("event: "):
                        seen.append(line[len("event: "):])
                    elif line.startswith("data: ") and seen[-1] == "end":
                        end = json.loads(line[len("data: "):])
                        break
            assert seen[-1] == "end" and end["stop_reason"] == "cancelled"
            assert other.post("/api/runs/s/cancel").status_code == 409
    finally:
        running.stop()


def test_a_streamed_reply_relays_its_tokens_before_its_message(tmp_path):
    with server(tmp_path / "runs.db", patterns={"relay": relay}) as client:
        assert client.post("/api/runs", json={"pattern": "relay", "task": "Cats or dogs?", "run_id": "t1"}).status_code == 202
        events = sse_events(client, "t1")
        kinds = [k for k, _ in events]
        first, posted = kinds.index("token"), kinds.index("message", 1)
        tokens = [d for k, d in events if k == "token"]
        assert first < posted and set(kinds[first:posted]) == {"token"}  # every token before the reply's message
        assert tokens[0] == {"agent": "a", "step": "a", "text": "As ", "attempt": 1}
        assert "".join(d["text"] for d in tokens) == events[posted][1]["content"]
