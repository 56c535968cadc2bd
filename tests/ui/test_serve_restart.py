"""``fsmchat serve`` as its own process, killed mid-run: the run it was executing is resumed by the
next server on the same store (SQLite and PostgreSQL) and finishes exactly once. The model is a
local OpenAI-compatible server that holds one request until the test lets it go, so the first
server is SIGKILLed while that request is in flight; nothing here waits on the clock."""
import json
import os
import re
import signal
import subprocess
import sys
import threading

import httpx
import pytest

from support.openai_server import OpenAIServer, agent_of, text
from support.ui_runs import sse_events
from support.pg import pg_cluster, pg_dsn  # noqa: F401 - fixtures

from fsmchat import Agent, RoundRobinSwarm, SqliteCheckpointer

HERE = os.path.abspath(__file__)
API_BASE_ENV = "FSMCHAT_TEST_API_BASE"
HELD = 3  # the model request the first server dies in (the third: after two agents' messages)


def swarm():
    """Two model-backed agents taking turns, against the test's local server (its URL in the environment)."""
    base = os.environ[API_BASE_ENV]
    return RoundRobinSwarm(agents=[Agent("x", model="openai/test-model", api_base=base, api_key="sk-test"),
                                   Agent("y", model="openai/test-model", api_base=base, api_key="sk-test")],
                           max_loops=2)


class Model:
    """The local model: every request answered with who asked and how long its conversation was,
    except request ``HELD``, which waits until ``release`` (its caller is dead by then)."""

    def __init__(self):
        self.arrived, self.release = threading.Event(), threading.Event()
        self.lock, self.count = threading.Lock(), 0
        self.server = OpenAIServer(self.reply, max_lifetime=600)

    def reply(self, request):
        with self.lock:
            self.count += 1
            n = self.count
        if n == HELD:
            self.arrived.set()
            self.release.wait(600)
        return text(f"{agent_of(request)} after {len(request['messages'])}")


def uri(dsn):
    """A libpq key=value DSN as the postgresql:// URI the CLI takes."""
    kv = dict(part.split("=", 1) for part in dsn.split())
    return f"postgresql://{kv['user']}@{kv['host']}:{kv['port']}/{kv['dbname']}"


def serve(store, api_base):
    tests = os.path.dirname(os.path.dirname(HERE))  # tests/: the support package (support.openai_server) the target's module imports
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(tests), tests]), API_BASE_ENV: api_base}
    env.pop("FSMCHAT_SERVE_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "fsmchat.cli", "serve", "--store", store, "--port", "0",
                             "--target", f"talk={HERE}:swarm"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    banner = proc.stdout.readline()
    found = re.search(r"(http://\S+)/ ", banner)
    if found is None:
        proc.kill()
        raise AssertionError(f"no banner: {banner!r} {proc.communicate()[1][-2000:]}")
    return proc, found.group(1)


FINAL = [("User", "Cats or dogs?"), ("x", "x after 2"), ("y", "y after 3"), ("x", "x after 4"), ("y", "y after 5")]


def stored(store_arg):
    if store_arg.startswith("postgresql://"):
        from fsmchat import PostgresCheckpointer
        cp = PostgresCheckpointer(store_arg)
    else:
        cp = SqliteCheckpointer(store_arg)
    try:
        return cp.load("R"), cp.log("R")
    finally:
        cp.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_run_in_flight_when_its_server_is_killed_is_resumed_by_the_next_and_finishes_once(request, tmp_path, kind):
    store = str(tmp_path / "runs.db") if kind == "sqlite" else uri(request.getfixturevalue("pg_dsn"))
    model = Model()
    with model.server as srv:
        first, url = serve(store, srv.api_base)
        second = None
        try:
            with httpx.Client(base_url=url, timeout=60) as client:
                started = client.post("/api/runs", json={"pattern": "talk", "task": "Cats or dogs?", "run_id": "R"})
                assert started.status_code == 202
            assert model.arrived.wait(300), "the held model request never came"
            second, url = serve(store, srv.api_base)
            with httpx.Client(base_url=url, timeout=60) as client:
                held = client.post("/api/runs/R/resume")  # the first server is alive and holds the run's lease
                assert held.status_code == 409 and "held by another live process" in held.json()["error"]
                assert {r["run_id"]: r["status"] for r in client.get("/api/runs").json()["runs"]} == {"R": "running"}
                first.send_signal(signal.SIGKILL)
                first.wait()
                saved, _ = stored(store)
                assert saved.stop_reason is None  # cut mid-run: what it committed before the held request
                assert [(m.role, m.content) for m in saved.messages] == FINAL[:3]
                listed = {r["run_id"]: r["status"] for r in client.get("/api/runs").json()["runs"]}
                assert listed == {"R": "unfinished"}
                assert client.post("/api/runs/R/resume").status_code == 202  # its owner is dead: resumable at once
                events = sse_events(client, "R")
                assert events[-1] == ("end", {"run_id": "R", "stop_reason": "max_loops", "waiting": False})
                assert [(d["role"], d["content"]) for k, d in events if k == "message"] == FINAL[3:]
        finally:
            model.release.set()
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    proc.wait()
    saved, log = stored(store)
    assert [(m.role, m.content) for m in saved.messages] == FINAL and saved.stop_reason == "max_loops"
    # one model call per agent message, plus the one the first server died in (never answered to it)
    assert model.count == 5
    posted = [e.state for e in log.events if e.state in ("x", "y") and e.dest is not None]
    assert posted == ["x", "y", "x", "y"]
