"""The run viewer, ``fsmchat runs``, ``fsmchat report`` and ``fsmchat serve`` reading a PostgreSQL store
(a ``postgresql://`` URI wherever an SQLite path is taken), against the throwaway cluster of
tests/support/pg.py: they show what the SQLite store shows for the same runs."""
import json

import httpx
import pytest

from support.pg import pg_cluster, pg_dsn  # noqa: F401 - fixtures

from fsmchat import Agent, GroupChat, PostgresCheckpointer, RoundRobinSwarm, SqliteCheckpointer
from fsmchat.cli import main
from fsmchat.store.timetravel import fork
from fsmchat.ui import Store, serve as fserve
from fsmchat.ui.server import start as start_viewer
from fsmchat.ui.store import open_view, store_label


def uri(dsn, password=None):
    kv = dict(part.split("=", 1) for part in dsn.split())
    auth = kv["user"] + (f":{password}" if password else "")
    return f"postgresql://{auth}@{kv['host']}:{kv['port']}/{kv['dbname']}"


def greeter(turn):
    return f"Hello after {len(turn.transcript)}."


def fill(cp):
    RoundRobinSwarm(agents=[greeter], max_loops=2).execute("Hi?", checkpoint=cp, run_id="r1")
    GroupChat(agents=[Agent("a", system_prompt="You argue for cats."), Agent("b", system_prompt="You argue for dogs.")],
              max_loops=2, interrupt_before=["post"]).execute("Cats?", checkpoint=cp, run_id="w")
    fork("r1", 1, cp, fork_id="r1-fork")


def comparable(summaries):
    return [{k: v for k, v in s.items() if k not in ("started", "duration")} for s in summaries]


def test_the_viewer_reads_postgres_as_it_reads_sqlite(pg_dsn, tmp_path):
    pg = PostgresCheckpointer(pg_dsn)
    lite = SqliteCheckpointer(tmp_path / "runs.db")
    fill(pg)
    fill(lite)
    pg.close()
    lite.close()
    view, store = open_view(uri(pg_dsn)), Store(tmp_path / "runs.db")
    assert comparable(view.summaries()) == comparable(store.summaries())
    assert [(s["run_id"], s["status"]) for s in view.summaries()] == [("r1-fork", "unfinished"), ("w", "waiting"),
                                                                      ("r1", "finished")]
    for run_id in ("r1", "w", "r1-fork"):
        a, b = view.run(run_id), store.run(run_id)
        assert (a.meta, a.stop_reason, a.status, a.messages, a.state) == (b.meta, b.stop_reason, b.status, b.messages,
                                                                           b.state)
        assert [(s.lane, s.step, s.state, s.trigger, s.dest, s.payload, s.nmsg) for s in a.steps] == \
            [(s.lane, s.step, s.state, s.trigger, s.dest, s.payload, s.nmsg) for s in b.steps]
        assert view.progress(run_id) == store.progress(run_id)
    assert [m["content"] for m in view.run("r1").messages] == ["Hi?", "Hello after 1.", "Hello after 2."]


def test_the_password_of_a_uri_is_never_shown(pg_dsn):
    assert store_label("postgresql://app:secret@db.internal:5433/runs?sslmode=require") == \
        "postgresql://app@db.internal:5433/runs"
    assert store_label("runs.db") == "runs.db"


def test_the_cli_lists_and_reports_runs_of_postgres(pg_dsn, tmp_path, capsys):
    cp = PostgresCheckpointer(pg_dsn)
    fill(cp)
    cp.close()
    db = uri(pg_dsn)
    assert main(["runs", "--db", db, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["status"], r["messages"]) for r in listed] == [("r1-fork", "unfinished", 2),
                                                                           ("w", "waiting", 1), ("r1", "finished", 3)]
    assert main(["history", "r1", "--db", db, "--json"]) == 0
    assert [s["state"] for s in json.loads(capsys.readouterr().out)][:2] == ["seed", "greeter"]
    out = tmp_path / "r1.html"
    assert main(["report", "r1", "--db", db, "-o", str(out)]) == 0
    assert "Hello after 2." in out.read_text()
    assert main(["report", "nope", "--db", db, "-o", str(out)]) == 2
    assert "its runs, newest first: r1-fork, w, r1" in capsys.readouterr().err


def test_the_viewer_and_serve_serve_a_postgres_store(pg_dsn):
    cp = PostgresCheckpointer(pg_dsn)
    fill(cp)
    cp.close()
    viewer = start_viewer(uri(pg_dsn, password="hunter2-pw"))  # the cluster trusts 127.0.0.1: any password
    try:
        page = httpx.get(viewer.url + "/")
        assert page.status_code == 200 and "r1-fork" in page.text and "hunter2-pw" not in page.text
        one = httpx.get(viewer.url + "/api/runs/r1").json()
        assert [m["content"] for m in one["messages"]] == ["Hi?", "Hello after 1.", "Hello after 2."]
        assert one["store"] == uri(pg_dsn)
    finally:
        viewer.stop()

    def chat():
        return RoundRobinSwarm(agents=[greeter], max_loops=1)

    running = fserve.start(uri(pg_dsn), {"chat": chat})
    try:
        with httpx.Client(base_url=running.url, timeout=60) as client:
            assert client.post("/api/runs", json={"pattern": "chat", "task": "Yo?", "run_id": "s1"}).status_code == 202
            with client.stream("GET", "/api/runs/s1/events") as response:
                lines = [line for line in response.iter_lines() if line.startswith("event: end")]
            assert lines == ["event: end"]
            assert client.post("/api/runs", json={"pattern": "chat", "task": "Yo?", "run_id": "s1"}).status_code == 409
            assert [r["run_id"] for r in client.get("/api/runs").json()["runs"]][:1] == ["s1"]
            assert client.post("/api/runs/w/answer", json={"type": "say", "text": "Birds."}).status_code == 404
    finally:
        running.stop()
    again = PostgresCheckpointer(pg_dsn)
    assert [m.content for m in again.load("s1").messages] == ["Yo?", "Hello after 1."]
    again.close()


@pytest.mark.parametrize("target", ["postgresql://nobody@127.0.0.1:1/none"])
def test_an_unreachable_postgres_store_is_a_clear_error(target, capsys):
    assert main(["runs", "--db", target]) == 2
    assert "PostgreSQL" in capsys.readouterr().err


def test_fsmchat_run_and_resume_take_a_postgres_uri(pg_dsn, tmp_path, capsys, monkeypatch):
    (tmp_path / "talk.py").write_text("from fsmchat import GroupChat, Agent\n\n"
                                      "def build():\n"
                                      "    return GroupChat(agents=[Agent('a'), Agent('b')], max_loops=2, "
                                      "interrupt_before=['post'])\n")
    monkeypatch.chdir(tmp_path)
    db = uri(pg_dsn)
    main(["run", "talk.py", "--checkpoint", db, "--task", "Cats?", "--no-input", "--json"])
    out = capsys.readouterr()
    run_id = json.loads(out.out)["run_id"]
    cp = PostgresCheckpointer(pg_dsn)
    assert cp.load(run_id).stop_reason == "interrupted", out.err
    cp.close()
    assert main(["resume", run_id, "--db", db, "--input", "Birds.", "--trusted", "--json"]) == 0, \
        capsys.readouterr().err
    cp = PostgresCheckpointer(pg_dsn)
    assert "Birds." in [m.content for m in cp.load(run_id).messages]
    cp.close()
