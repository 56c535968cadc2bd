"""The run viewer without a browser: what it reads from a store, the page data, the server's pages
for empty and corrupted stores, read-only access, exports and the CLI's errors."""
import hashlib
import json
import re
import sqlite3
from contextlib import contextmanager
from pathlib import Path

import httpx

import pytest

from fsmchat import cli
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.graph.render import drawing_data, drawing_from_data, dot_source, to_dot
from fsmchat.ui import RunNotFound, Store, StoreUnreadable, write_report
from fsmchat.ui.page import data_json
from fsmchat.ui.report import run_data
from fsmchat.ui.view import run_view
from support.ui_runs import FLOW_TASK, TASK, XSS, group_chat_run, store_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return store_of(tmp_path_factory.mktemp("ui") / "runs.db")


def page_data(html: str) -> dict:
    """The data a viewer page renders (its JSON block)."""
    return json.loads(re.search(r'id="fsmchat-data">(.*?)</script>', html).group(1))


def fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def test_runs_are_listed_newest_first_with_their_numbers(store):
    runs = Store(store).summaries()
    assert [r["run_id"] for r in runs] == ["flow-1", "chat-1"]
    flow, chat = runs
    assert (chat["pattern"], chat["task"], chat["status"], chat["stop_reason"]) == ("GroupChat", TASK, "finished", "lull")
    assert (chat["messages"], chat["calls"], chat["tokens"], chat["steps"]) == (3, 9, 135, 12)  # 15 tokens a call
    assert (flow["pattern"], flow["task"], flow["stop_reason"], flow["messages"], flow["calls"]) == \
        ("AgentFlow", FLOW_TASK, "done", 5, 5)
    assert chat["duration"] >= 0 and flow["started"] >= chat["started"]


def test_a_bid_turn_shows_every_bid_and_why_the_winner_won(store):
    view = run_view(Store(store).run("chat-1"), 0)
    turn_two = view["turns"][1]
    rows = {a["name"]: a for a in turn_two["agents"]}
    assert (rows["a"]["raw"], rows["a"]["adjusted"], rows["a"]["message"]) == (0.8, 0.5, "a again")
    assert "recency penalty" in rows["a"]["note"] and "not above the threshold 0.5" in rows["a"]["note"]
    assert (rows["b"]["raw"], rows["b"]["adjusted"], turn_two["winner"]) == (0.85, 0.85, "b")
    assert rows["c"]["invalid"] == "no tool call (plain text instead of respond)" and rows["c"]["adjusted"] is None
    assert turn_two["why"] == "b won with 0.85, the best recency-adjusted bid strictly above the threshold 0.5"
    assert view["turns"][0]["agents"][0]["message"] == XSS
    assert view["turns"][2]["winner"] is None and "lull" in view["turns"][2]["why"]
    bid_steps = [s for s in view["steps"] if s["state"] in ("bid", "select")]
    assert [s["turn"] for s in bid_steps] == [0, 0, 1, 1, 2, 2]


def test_each_step_knows_its_place_in_the_picture_and_the_transcript(store):
    view = run_view(Store(store).run("chat-1"), 0)
    steps = view["steps"]
    assert [s["state"] for s in steps] == ["seed", "bid", "select", "post", "penalize", "bid", "select", "post",
                                           "penalize", "bid", "select", "stop"]
    assert [s["upto"] for s in steps] == [1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3]
    assert view["per_step_transcript"] and view["notes"] == []
    d = drawing_from_data(Store(store).run("chat-1").meta["graph"])
    assert d.nodes[steps[1]["node"]].id == "bid" and d.nodes[steps[-1]["node"]].id == "stop"
    took = d.edges[steps[-2]["edge"]]
    assert (took.origin, took.dest, took.label) == ("select", "stop", "lull")
    assert steps[-1]["edge"] is None  # the final state's event takes no edge
    svg = view["svg"]
    assert svg.startswith("<svg") and f'id="n{steps[1]["node"]}"' in svg and f'id="e{steps[1]["edge"]}"' in svg
    flow = run_view(Store(store).run("flow-1"), 0)
    assert [s["upto"] for s in flow["steps"]][:4] == [0, 1, 1, 2] and flow["steps"][-2]["upto"] == 5


def test_the_stored_drawing_draws_what_the_graph_draws(store):
    from fsmchat.patterns.group_chat import compile_group_chat

    g = compile_group_chat(description="Agents take turns; one speaker per turn.")
    d = drawing_from_data(json.loads(json.dumps(drawing_data(g.drawing()))))
    assert dot_source(d) == to_dot(g)


def test_usage_limits_events_and_the_masked_config_are_shown(store):
    view = run_view(Store(store).run("chat-1"), 0)
    assert view["usage"]["calls"] == 9 and view["usage"]["usage"]["total_tokens"] == 135
    assert {"event": "invalid_bid", "turn": 1, "agent": "c",
            "reason": "no tool call (plain text instead of respond)"} in view["events"]
    assert view["config"]["threshold"] == 0.5 and view["limits"] is None
    assert [a["name"] for a in view["config"]["agents"]] == ["a", "b", "c"]


def test_secrets_in_a_stored_config_are_masked(tmp_path):
    db = store_of(tmp_path / "s.db", [group_chat_run])
    con = sqlite3.connect(db)  # a store written by something that kept a key (the viewer masks what it shows)
    meta = json.loads(con.execute("SELECT meta FROM runs").fetchone()[0])
    meta["config"]["agents"][0]["litellm"] = {"api_key": "sk-live-123", "extra_headers": {"Authorization": "Bearer x"}}
    con.execute("UPDATE runs SET meta=?", (json.dumps(meta),))
    con.commit()
    con.close()
    shown = run_view(Store(db).run("chat-1"), 0)["config"]["agents"][0]["litellm"]
    assert shown == {"api_key": "***", "extra_headers": {"Authorization": "***"}}
    assert "sk-live-123" not in write_report(db, "chat-1", tmp_path / "r.html").read_text()


def test_an_old_store_still_displays_and_says_what_is_missing(tmp_path):
    db = store_of(tmp_path / "old.db", [group_chat_run])
    con = sqlite3.connect(db)  # as fsmchat wrote stores before the viewer: no graph, no config, no events.nmsg
    meta = json.loads(con.execute("SELECT meta FROM runs").fetchone()[0])
    con.execute("UPDATE runs SET meta=?", (json.dumps({k: meta[k] for k in ("pattern", "name", "task", "factory",
                                                                            "fingerprint")}),))
    con.execute("ALTER TABLE events DROP COLUMN nmsg")
    con.commit()
    con.close()
    view = run_view(Store(db).run("chat-1"), 0)
    assert view["svg"] is None and not view["per_step_transcript"] and len(view["steps"]) == 12
    assert any("before runs kept their graph" in n for n in view["notes"])
    assert any("whole transcript" in n for n in view["notes"])
    assert any(n.startswith("no config") for n in view["notes"])
    assert view["turns"][1]["agents"][2]["invalid"] == "no tool call (plain text instead of respond)"
    SqliteCheckpointer(db).close()  # opened writable, an old store gains the column
    assert "nmsg" in {r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info('events')")}


def test_the_viewer_never_writes_the_store(store, tmp_path):
    before = fingerprint(store)
    Store(store).summaries()
    run_data(Store(store), "chat-1")
    write_report(store, "flow-1", tmp_path / "r.html")
    assert fingerprint(store) == before
    with Store(store)._open() as o:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            o.db.execute("DELETE FROM runs")


@pytest.mark.parametrize("content, expect", [(b"", "No runs"), (b"not a database at all" * 100, "corrupted")])
def test_empty_and_corrupted_stores(tmp_path, content, expect):
    db = tmp_path / "x.db"
    db.write_bytes(content)
    if expect == "No runs":
        assert Store(db).summaries() == []
        with pytest.raises(RunNotFound):
            Store(db).run("x")
    else:
        with pytest.raises(StoreUnreadable, match="corrupted or not an SQLite database"):
            Store(db).summaries()


def test_a_foreign_sqlite_file_is_refused_by_name(tmp_path):
    db = tmp_path / "other.db"
    sqlite3.connect(db).execute("CREATE TABLE notes (x TEXT)").connection.commit()
    with pytest.raises(StoreUnreadable, match="not an fsmchat checkpoint store"):
        Store(db).summaries()


def test_page_data_cannot_close_its_script_block():
    text = data_json({"x": "</script><script>alert(1)</script><!--"})
    assert "<" not in text and ">" not in text and json.loads(text)["x"].startswith("</script>")


def test_the_report_is_one_offline_file_with_model_text_escaped(store, tmp_path):
    html = write_report(store, "chat-1", tmp_path / "r.html").read_text()
    assert "connect-src 'none'" in html and page_data(html)["svg"].startswith("<svg")
    assert XSS not in html and "<script>window.__pwned" not in html
    assert html.count("<script") == 3  # settings, data, the viewer's script: nothing else
    assert {u.split("/")[2] for u in re.findall(r"https?://[^\s\"'<>)]+", html)} <= {"www.w3.org"}  # SVG namespaces
    assert not re.search(r"""(src|href)=["'](?!#)""", html.split("<svg", 1)[0])  # nothing loaded from anywhere


# ---- the server's pages (no browser) ----
@contextmanager
def serving(db):
    from fsmchat.ui.server import start

    running = start(db)
    try:
        yield lambda path: httpx.get(running.url + path, timeout=30)
    finally:
        running.stop()


def test_the_server_binds_this_machine_only_by_default(store):
    from fsmchat.ui.server import start

    running = start(store)
    try:
        assert running.url.startswith("http://127.0.0.1:")
    finally:
        running.stop()
    assert cli.parser().parse_args(["ui", "--db", "x.db"]).host == "127.0.0.1"


def test_the_server_serves_pages_and_their_data(store):
    with serving(store) as get:
        runs = get("/api/runs").json()
        assert [r["run_id"] for r in runs["runs"]] == ["flow-1", "chat-1"]
        page = get("/runs/chat-1")
        assert page.status_code == 200 and page_data(page.text)["svg"].startswith("<svg") and XSS not in page.text
        assert "connect-src 'self'" in page.text
        assert get("/api/runs/chat-1?steps=12&status=finished").json() == {"unchanged": True}
        assert len(get("/api/runs/chat-1?steps=3&status=running").json()["steps"]) == 12
        missing = get("/runs/nope")
        assert missing.status_code == 404 and "no run &#x27;nope&#x27;" in missing.text
        assert get("/api/runs/nope").status_code == 404


@pytest.mark.parametrize("content, status, says", [
    (b"", 200, "No runs in this store yet"),
    (b"SQLite format 3\x00" + b"\xff" * 5000, 500, "the file is corrupted or not an SQLite database"),
    (b"plain text, not a database\n" * 200, 500, "file is not a database")])
def test_empty_and_corrupted_stores_get_a_clear_page(tmp_path, content, status, says):
    db = tmp_path / "runs.db"
    db.write_bytes(content)
    with serving(db) as get:
        page = get("/")
        assert page.status_code == status
        body = page.text if status != 200 else json.dumps(get("/api/runs").json())
        assert "Traceback" not in page.text and (says in page.text or (status == 200 and '"runs": []' in body))
        assert get("/runs/anything").status_code == (404 if status == 200 else 500)


# ---- the CLI ----
def test_report_cli_writes_the_page_and_refuses_bad_input_with_exit_2(store, tmp_path, capsys):
    out = tmp_path / "run.html"
    assert cli.main(["report", "chat-1", "--db", str(store), "-o", str(out)]) == 0
    assert page_data(out.read_text())["run"]["run_id"] == "chat-1"
    assert cli.main(["report", "nope", "--db", str(store), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no run 'nope'" in err and "its runs, newest first: flow-1, chat-1" in err
    assert cli.main(["report", "chat-1", "--db", str(tmp_path / "missing.db"), "-o", str(out)]) == 2
    assert "no such checkpoint store" in capsys.readouterr().err
    (tmp_path / "bad.db").write_bytes(b"garbage" * 1000)
    assert cli.main(["report", "chat-1", "--db", str(tmp_path / "bad.db"), "-o", str(out)]) == 2
    assert "corrupted" in capsys.readouterr().err
    assert cli.main(["ui", "--db", str(tmp_path / "missing.db")]) == 2
    assert "no such checkpoint store" in capsys.readouterr().err


def test_run_report_writes_the_run_it_just_made(tmp_path, capsys):
    out = tmp_path / "run.html"
    example = str(ROOT / "examples" / "group_chat.py")
    assert cli.main(["run", example, "-q", "--report", str(out)]) == 0
    assert "report written to" in capsys.readouterr().err
    data = page_data(out.read_text())
    assert data["run"]["pattern"] == "GroupChat" and data["turns"] and data["svg"].startswith("<svg")
    assert cli.main(["run", example, "-q", "--report", str(tmp_path / "no" / "such" / "dir.html")]) == 2
    assert "its folder does not exist" in capsys.readouterr().err
    db = tmp_path / "kept.db"
    assert cli.main(["run", example, "-q", "--checkpoint", str(db), "--report", str(out)]) == 0
    assert [r["status"] for r in Store(db).summaries()] == ["finished"]


def test_branch_runs_are_replayed_inside_their_fork(tmp_path):
    from fsmchat import AgentFlow, Discussion, parallel
    from fsmchat.testing import ScriptedModel

    m = ScriptedModel({"x": ["x1", "x2"], "y": ["y1", "y2"], "z": ["z1"]})
    x, y, z = m.agent("x"), m.agent("y"), m.agent("z")
    cp = SqliteCheckpointer(tmp_path / "p.db")
    AgentFlow(steps=[x, parallel([Discussion([x, y], rounds=1), y]), z]).execute("go", checkpoint=cp, run_id="p")
    cp.close()
    view = run_view(Store(tmp_path / "p.db").run("p"), 0)
    assert [(s["lane"], s["state"]) for s in view["steps"]] == [
        ("", "x"), ("1:parallel|1", "parallel|1.discussion.begin"), ("1:parallel|1", "parallel|1.discussion.turn"),
        ("1:parallel|1", "parallel|1.discussion.turn"), ("1:parallel|1", "parallel|1.discussion.done"),
        ("1:parallel|1", "parallel|1.done"), ("1:parallel|2", "parallel|2.y"), ("1:parallel|2", "parallel|2.done"),
        ("", "parallel"), ("", "z"), ("", "end")]
    marks = [(s["upto"], s.get("open")) for s in view["steps"]]
    assert marks[2] == (1, {"1:parallel|1": 1}) and marks[6] == (1, {"1:parallel|1": 2, "1:parallel|2": 1})
    assert marks[8] == (4, None)  # the join: the branches' messages are now the run's own
    assert [m["content"] for m in view["lanes"]["1:parallel|1"]] == ["x2", "y2"]
    d = drawing_from_data(Store(tmp_path / "p.db").run("p").meta["graph"])
    assert d.nodes[view["steps"][2]["node"]].id == "parallel|1.discussion.turn"


def test_ui_cli_refuses_a_port_in_use_with_exit_2(store, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["ui", "--db", str(store), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_failed_run_shows_its_error(tmp_path):
    from fsmchat import Bid, GroupChat
    from fsmchat.testing import Fail, ScriptedModel

    m = ScriptedModel({"a": [Bid(0.9, "hi"), Fail(401, "bad key")], "b": [Bid(0.1, ""), Fail(401, "bad key")]})
    db = store_of(tmp_path / "e.db", [lambda cp: GroupChat(agents=[m.agent("a"), m.agent("b")]).execute(
        "x", checkpoint=cp, run_id="e")])
    assert [(r["status"], r["stop_reason"]) for r in Store(db).summaries()] == [("failed", "error")]
    [error] = run_view(Store(db).run("e"), 0)["errors"]
    assert error["state"] == "bid" and "AuthenticationError" in error["text"] and "bad key" in error["text"]


def test_a_run_whose_process_died_is_unfinished_in_the_viewer_as_in_fsmchat_runs(tmp_path, capsys):
    db = store_of(tmp_path / "d.db", [group_chat_run])
    with sqlite3.connect(db) as con:  # what a SIGKILL leaves: no stop reason, no live lease
        con.execute("UPDATE runs SET stop_reason = NULL")
        con.execute("DELETE FROM leases")
    assert [(r["run_id"], r["status"], r["stop_reason"]) for r in Store(db).summaries()] == [
        ("chat-1", "unfinished", None)]
    assert Store(db).run("chat-1").status == "unfinished"
    cp = SqliteCheckpointer(db)
    assert [(r.run_id, r.status) for r in cp.list_runs()] == [("chat-1", "unfinished")]
    cp.close()


def test_a_live_poll_of_an_unchanged_run_does_not_read_the_run(store, monkeypatch):
    """A live page polls every second: while the run has the same steps and status, the answer
    comes from a count, not from reading (and folding the states of) the whole run."""
    s = Store(store)
    n, status = s.progress("chat-1")
    assert (n, status) == (len(s.run("chat-1").steps), "finished") == (12, "finished")
    assert s.progress("flow-1") == (len(s.run("flow-1").steps), "finished")
    read = []
    monkeypatch.setattr(Store, "run", lambda self, run_id: read.append(run_id) or (_ for _ in ()).throw(
        AssertionError("the run was read")))
    assert run_data(s, "chat-1", known=("12", "finished")) == {"unchanged": True}
    assert read == []
    with pytest.raises(AssertionError, match="the run was read"):
        run_data(s, "chat-1", known=("11", "finished"))  # a new step: the run is read
    with pytest.raises(RunNotFound):
        s.progress("nope")
