"""``fsmchat serve`` bounds every request before accepting it: a body over ``max_body_bytes`` is 413
(by its Content-Length, before any of it is read; a chunked one once it passes the limit), a text in a
body over ``max_text_chars`` is 422 naming the field, a task over the pattern's ``max_message_chars`` is 422
with the pattern's own refusal (no run is created), and a resume that has nothing to do is 409 saying
why. The 413 tests talk raw HTTP over a socket with a timeout: a server that waited for the rest of the
body would make them fail by that timeout, never by measuring time."""
import json
import socket
from contextlib import contextmanager
from urllib.parse import urlsplit

import httpx
import pytest

from fsmchat import Agent, AgentFlow, Bid, GroupChat
from fsmchat.testing import Delay, ScriptedModel
from fsmchat.ui import serve as fserve
from support.ui_runs import sse_events

MIB = 1024 * 1024
TOO_MUCH = 50 * MIB  # the Content-Length the 413 tests claim, far more than they send
WAIT = 20  # seconds a raw-socket read may block: only reached when the server waits for a body it should refuse


def chat():
    """An offline GroupChat of two agents, one round."""
    return GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs.")], max_loops=2)


def held():
    """A chat whose first bids never come (an hour-long scripted delay), under a fixed model id, so a
    resume rebuilds the same pattern and is held in flight as the start was."""
    model = ScriptedModel({"a": [Delay(3600, Bid(0.9, "late"))], "b": [Delay(3600, Bid(0.8, "later"))]},
                          id="serve-limits-held")
    return GroupChat(agents=[model.agent("a"), model.agent("b")], max_loops=2)


def capped():
    """The chat with a 50-character message cap: a longer task is refused as a run of it would refuse it."""
    return chat().with_limits(max_message_chars=50)


def capped_flow():
    """An offline flow of one step, under the same cap."""
    return AgentFlow(steps=[Agent("a", system_prompt="You argue for cats.")]).with_limits(max_message_chars=50)


PATTERNS = {"chat": chat, "held": held, "capped": capped, "capped_flow": capped_flow}


@contextmanager
def server(db, **limits):
    running = fserve.start(db, PATTERNS, **limits)
    try:
        with httpx.Client(base_url=running.url, timeout=60) as client:
            yield client
    finally:
        running.stop()


def raw_post(base_url, path, head, sent):
    """POST ``path`` with the header lines ``head`` and the bytes ``sent``, then read the response
    until the server closes the connection: ``(status, headers, JSON body)``."""
    url = urlsplit(str(base_url))
    with socket.create_connection((url.hostname, url.port), timeout=WAIT) as sock:
        request = [f"POST {path} HTTP/1.1", f"Host: {url.netloc}", "Content-Type: application/json", *head]
        sock.sendall(("\r\n".join(request) + "\r\n\r\n").encode() + sent)
        got = b""
        while True:
            data = sock.recv(65536)  # socket.timeout here: the server is still waiting for the body
            if not data:
                break
            got += data
    top, _, body = got.partition(b"\r\n\r\n")
    status_line, *header_lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, json.loads(body)


def too_large(size, limit):
    told = f"is {size} bytes (its Content-Length)" if size is not None else "came chunked and passed"
    return {"error": f"the request body {told}, over the {limit} bytes this server accepts (max_body_bytes); "
                     "send a smaller body, or start the server with a larger max_body_bytes (fsmchat serve "
                     "--max-body-bytes N)",
            "size": size, "limit": limit, "setting": "max_body_bytes"}


@pytest.mark.parametrize("path", ["/api/runs", "/api/runs/r/answer", "/api/runs/r/resume", "/api/runs/r/fork"])
def test_a_content_length_over_the_limit_is_413_before_the_body_is_read(tmp_path, path):
    with server(tmp_path / "runs.db") as client:
        status, headers, body = raw_post(client.base_url, path, [f"Content-Length: {TOO_MUCH}"], b'{"pattern": ')
        assert status == 413 and headers["connection"] == "close"  # the other 50 MB are never waited for
        assert body == too_large(TOO_MUCH, MIB)
        assert client.get("/api/runs").json()["runs"] == []


def test_a_chunked_body_is_read_only_until_it_passes_the_limit(tmp_path):
    with server(tmp_path / "runs.db", max_body_bytes=1000) as client:
        chunks = b"".join(b"%x\r\n%s\r\n" % (400, b"x" * 400) for _ in range(3))  # 1,200 bytes, no last chunk
        status, headers, body = raw_post(client.base_url, "/api/runs", ["Transfer-Encoding: chunked"], chunks)
        assert status == 413 and headers["connection"] == "close"
        assert body == too_large(None, 1000)


def test_a_body_of_exactly_the_limit_is_accepted_and_one_byte_more_is_not(tmp_path):
    sent = json.dumps({"pattern": "chat", "task": "Cats or dogs?", "run_id": "ok"}).encode()
    with server(tmp_path / "runs.db", max_body_bytes=len(sent)) as client:
        over = client.post("/api/runs", content=sent + b" ", headers={"Content-Type": "application/json"})
        assert over.status_code == 413 and over.json() == too_large(len(sent) + 1, len(sent))
        ok = client.post("/api/runs", content=sent, headers={"Content-Type": "application/json"})
        assert ok.status_code == 202 and sse_events(client, "ok")[-1][1]["stop_reason"] == "max_loops"


def too_long(field, size, limit):
    return {"field": field, "size": size, "limit": limit,
            "problem": f"{size} characters, over the {limit} a text of a request may have (max_text_chars); "
                       "shorten it, or start the server with a larger max_text_chars (fsmchat serve "
                       "--max-text-chars N)"}


def test_a_task_over_the_default_text_limit_is_422_and_nothing_runs(tmp_path):
    with server(tmp_path / "runs.db") as client:
        refused = client.post("/api/runs", json={"pattern": "chat", "task": "x" * 100_001, "run_id": "big"})
        assert refused.status_code == 422
        problem = too_long("task", 100_001, 100_000)
        assert refused.json() == {"error": f"the body is not valid: task: {problem['problem']}", "errors": [problem]}
        assert client.get("/api/runs").json()["runs"] == []
        assert client.get("/api/runs/big/events").status_code == 404  # never accepted, so never started


@pytest.mark.parametrize("body, owner", [
    ({"pattern": "capped"}, "GroupChat"),
    ({"pattern": "capped_flow"}, "AgentFlow"),
    ({"pattern": "chat", "limits": {"max_message_chars": 50}}, "GroupChat"),  # the request's own limits
])
def test_a_task_over_the_patterns_message_cap_is_422_before_any_run_is_created(tmp_path, body, owner):
    with server(tmp_path / "runs.db") as client:
        refused = client.post("/api/runs", json={**body, "task": "x" * 60, "run_id": "long"})
        assert refused.status_code == 422
        assert refused.json() == {"error": f"{owner}.run(task): the task has 60 characters, over max_message_chars=50; "
                                           "shorten it or raise the cap with with_limits(max_message_chars=...)"}
        assert client.get("/api/runs").json()["runs"] == []
        assert client.get("/api/runs/long/events").status_code == 404  # never accepted, so never started
        at_cap = client.post("/api/runs", json={**body, "task": "x" * 50, "run_id": "fifty"})
        assert at_cap.status_code == 202 and sse_events(client, "fifty")[-1][0] == "end"
        assert [r["run_id"] for r in client.get("/api/runs").json()["runs"]] == ["fifty"]


@pytest.mark.parametrize("path, body, field", [
    ("/api/runs", {"pattern": "chat", "task": "x" * 11}, "task"),
    ("/api/runs/r/answer", {"type": "say", "text": "x" * 11}, "text"),
    ("/api/runs/r/answer", {"type": "edit", "text": "ok", "vars": {"note": ["ok", "x" * 11]}}, "vars.note.1"),
    ("/api/runs/r/answer", {"type": "reject", "reason": "x" * 11}, "reason"),
    ("/api/runs/r/fork", {"at": 0, "edit": {"replace": {"1": "x" * 11}}}, "edit.replace.1"),
])
def test_a_text_over_a_set_limit_is_422_naming_the_field_its_size_and_the_limit(tmp_path, path, body, field):
    with server(tmp_path / "runs.db", max_text_chars=10) as client:
        refused = client.post(path, json=body)
        assert refused.status_code == 422
        assert refused.json()["errors"] == [too_long(field, 11, 10)]
        assert refused.json()["error"].startswith(f"the body is not valid: {field}: 11 characters, over the 10 ")
        at_limit = client.post("/api/runs", json={"pattern": "chat", "task": "x" * 10, "run_id": "ten"})
        assert at_limit.status_code == 202 and sse_events(client, "ten")[-1][0] == "end"


def test_a_resume_of_a_finished_run_is_409_with_its_stop_reason(tmp_path):
    with server(tmp_path / "runs.db") as client:
        assert client.post("/api/runs", json={"pattern": "chat", "task": "Cats?", "run_id": "f"}).status_code == 202
        assert sse_events(client, "f")[-1][1]["stop_reason"] == "max_loops"
        refused = client.post("/api/runs/f/resume")
        assert refused.status_code == 409
        assert refused.json() == {"error": "run 'f' has finished (stop reason 'max_loops'): a resume has nothing to "
                                           "continue; fork it (POST /api/runs/f/fork) to go on from one of its steps",
                                  "run_id": "f", "stop_reason": "max_loops"}


def test_a_resume_of_a_run_in_flight_here_is_409_naming_what_is_in_flight(tmp_path):
    with server(tmp_path / "runs.db") as client:
        assert client.post("/api/runs", json={"pattern": "held", "task": "Wait.", "run_id": "h"}).status_code == 202
        during_start = client.post("/api/runs/h/resume")
        assert during_start.status_code == 409
        assert during_start.json() == {"error": "run 'h' is running in this server (its start is in flight); wait "
                                                "for its end event (GET /api/runs/h/events) or cancel it",
                                       "run_id": "h", "in_flight": "start"}
        assert client.post("/api/runs/h/cancel").status_code == 202
        assert sse_events(client, "h")[-1][1]["stop_reason"] == "cancelled"
        assert client.post("/api/runs/h/resume").status_code == 202  # a cancelled run is resumed, and held again
        again = client.post("/api/runs/h/resume")
        assert again.status_code == 409
        assert again.json() == {"error": "run 'h' is running in this server (a resume of it is in flight); wait for "
                                         "its end event (GET /api/runs/h/events) or cancel it",
                                "run_id": "h", "in_flight": "resume"}
        assert client.post("/api/runs/h/cancel").status_code == 202  # the resume was really running
        assert sse_events(client, "h")[-1][1]["stop_reason"] == "cancelled"


@pytest.mark.parametrize("limits, message", [
    ({"max_body_bytes": 0}, "max_body_bytes=0 is invalid: a whole number >= 1 (the default is 1048576)"),
    ({"max_body_bytes": True}, "max_body_bytes=True is invalid"),
    ({"max_text_chars": "100"}, "max_text_chars='100' is invalid: a whole number >= 1 (the default is 100000)"),
])
def test_a_bad_limit_is_refused_before_anything_is_served(tmp_path, limits, message):
    with pytest.raises(fserve.ServeError) as refused:
        fserve.start(tmp_path / "runs.db", PATTERNS, **limits)
    assert str(refused.value).startswith(message)
    assert not (tmp_path / "runs.db").exists()


def test_openapi_lists_413_for_the_routes_that_take_a_body(tmp_path):
    with server(tmp_path / "runs.db") as client:
        paths = client.get("/openapi.json").json()["paths"]
    with_413 = sorted(f"{m} {p}" for p, ops in paths.items() for m, op in ops.items() if "413" in op["responses"])
    assert with_413 == ["post /api/runs", "post /api/runs/{run_id}/answer", "post /api/runs/{run_id}/fork",
                        "post /api/runs/{run_id}/resume"]
