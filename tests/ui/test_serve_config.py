"""``fsmchat serve`` registering patterns from configs (``to_config()``'s JSON) under the trust rules:
a config's references are imported only from fsmchat's modules and the ``--allow`` prefixes, and a
refused one stops the server before it serves anything. A request still names a pattern only."""
import json

import httpx
import pytest

from fsmchat import Agent, GroupChat, RoundRobinSwarm
from fsmchat.cli import main
from fsmchat.trust import UntrustedReference
from fsmchat.ui import serve as fserve
from support.ui_runs import sse_events


def host(turn):
    """A plain function agent: configs name it by its module path, which the trust rules must allow."""
    return f"Welcome, turn {len(turn.transcript)}."


def test_a_config_is_served_and_its_runs_resume_by_it(tmp_path):
    cfg = GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                            Agent("b", system_prompt="You argue for dogs.")], max_loops=2,
                    interrupt_before=["post"]).to_config().model_dump_json()
    running = fserve.start(tmp_path / "runs.db", {"review": fserve.Registered.config("review", cfg)})
    try:
        with httpx.Client(base_url=running.url, timeout=60) as client:
            assert client.post("/api/runs", json={"pattern": "review", "task": "Cats?", "run_id": "c"}).status_code == 202
            assert sse_events(client, "c")[-1][1]["waiting"] is True
            assert client.post("/api/runs/c/answer", json={"type": "say", "text": "Birds."}).status_code == 202
            went_on = sse_events(client, "c")  # resumed by the config that started it (its digest)
            assert [d["content"] for k, d in went_on if k == "message"] == ["Birds."]
            assert went_on[-1][1] == {"run_id": "c", "stop_reason": "max_loops", "waiting": False}
            code = client.post("/api/runs", json={"pattern": "review", "task": "x", "config": cfg})
            assert code.status_code == 422 and "config" in code.json()["error"]  # a request carries no config
    finally:
        running.stop()


def test_a_config_naming_code_outside_the_allowed_modules_is_refused_before_serving(tmp_path):
    cfg = RoundRobinSwarm(agents=[host], max_loops=1).to_config().model_dump_json()
    assert f"{__name__}:host" in cfg
    with pytest.raises(UntrustedReference, match=f"refused '{__name__}:host'"):
        fserve.Registered.config("hosted", cfg)
    allowed = fserve.Registered.config("hosted", cfg, allow=[__name__])
    running = fserve.start(tmp_path / "runs.db", {"hosted": allowed})
    try:
        with httpx.Client(base_url=running.url, timeout=60) as client:
            assert client.post("/api/runs", json={"pattern": "hosted", "task": "Hello?", "run_id": "h"}).status_code == 202
            ev = sse_events(client, "h")
            assert [d["content"] for k, d in ev if k == "message"] == ["Hello?", "Welcome, turn 1."]
    finally:
        running.stop()


def test_the_cli_refuses_a_config_with_a_foreign_reference_and_names_the_flag(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "round_robin", "agents": [{"kind": "callable", "ref": "os:system"}]}))
    assert main(["serve", "--store", str(tmp_path / "runs.db"), "--config", f"bad={bad}", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "refused 'os:system'" in err and "module 'os' is not allowed" in err
    assert not (tmp_path / "runs.db").exists()  # nothing was served, no store created
    assert main(["serve", "--store", str(tmp_path / "runs.db"), "--config", "bad"]) == 2
    assert "NAME=FILE.json" in capsys.readouterr().err
    assert main(["serve", "--store", str(tmp_path / "runs.db")]) == 2
    assert "--target NAME=TARGET or --config NAME=FILE.json" in capsys.readouterr().err
