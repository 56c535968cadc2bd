"""The command line as a new user meets it: live runs, targets from the current folder,
help text, --version, and `fsmchat graphs` for a user's own project.

The live tests never time anything: the second speaker of the scripted run waits until the test
opens a gate file, so the run cannot end before the test has seen what it looks for.
"""
from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.cli import main, parser

ROOT = Path(__file__).resolve().parents[2]

SLOW = '''\
from pathlib import Path

from fsmchat.patterns.round_robin import RoundRobinSwarm
from fsmchat.testing import Delay, FunctionModel

GATE = Path(__file__).with_name("gate")
TASK = "plan the launch"


def answer(req):
    if req.agent == "b" and not GATE.exists():
        return Delay(0.02, answer)  # b thinks until the test opens the gate
    return f"{req.agent} says {req.n}"


MODEL = FunctionModel(answer)


def build():
    return RoundRobinSwarm(name="launch", agents=[MODEL.agent("a"), MODEL.agent("b")], max_loops=1,
                           output_type="str")
'''

CHAT = '''\
from fsmchat.patterns.round_robin import RoundRobinSwarm
from fsmchat.testing import FunctionModel

MODEL = FunctionModel(lambda req: f"{req.agent} here")
chat = RoundRobinSwarm(agents=[MODEL.agent("x"), MODEL.agent("y")], max_loops=1)
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's folder: slow.py and mychat.py, as the current directory, and not on sys.path."""
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "mychat.py").write_text(CHAT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path), os.getcwd())])
    for name in ("mychat", "slow"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "argv", ["fsmchat"])
    return tmp_path


def _spawn(cwd: Path, *args: str, stderr: int | None = subprocess.PIPE) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "TERM": "xterm"}
    return subprocess.Popen([sys.executable, "-m", "fsmchat.cli", "run", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=stderr)


HANG_GUARD = 600  # seconds of silence before a hung process fails the test (a loaded machine takes minutes)


def _read_until(fd: int, wanted: str, what: str) -> str:
    """What ``fd`` gives until ``wanted`` has appeared (fails, saying so, at end of output; the
    guard only turns a hang into a failure, nothing here is timed: the output that matters is
    held back by the gate file, so a slow machine only waits longer)."""
    seen = b""
    while wanted.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], HANG_GUARD)
        assert ready, f"{what}: hung (nothing more for {HANG_GUARD} s); got {seen.decode(errors='replace')!r}"
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # a pty whose other end closed
            chunk = b""
        assert chunk, f"{what}: the output ended without {wanted!r}; got {seen.decode(errors='replace')!r}"
        seen += chunk
    return seen.decode(errors="replace")


# ---------------------------------------------------------------- live runs
def test_run_prints_each_message_while_the_run_is_still_going(project):
    proc = _spawn(project, "slow.py")
    try:
        first = _read_until(proc.stdout.fileno(), "a: a says 1\n", "messages while b thinks")
        assert first == "User: plan the launch\na: a says 1\n"
        # b is still thinking (it cannot answer before the gate opens): the run has not ended
        assert proc.poll() is None
        (project / "gate").touch()
        rest = proc.stdout.read().decode()
        assert proc.wait(timeout=HANG_GUARD) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rest.startswith("b: b says 1\n\n-- stopped: max_loops after 3 messages, 2 model calls (worst case 2), 30 tokens, $0.0000")
    assert rest.rstrip().endswith("; path: seed -> a -> b -> stop")


def test_status_line_moves_on_a_terminal_while_a_model_thinks(project):
    master, slave = pty.openpty()
    proc = _spawn(project, "slow.py", stderr=slave)
    os.close(slave)
    try:
        _read_until(proc.stdout.fileno(), "a: a says 1\n", "messages while b thinks")
        seen = _read_until(master, "b · turn 1 · 2 msgs · 2 calls · 15 tok · $0.0000", "the status line")
        # drawn while b thinks (its call is made, not answered), before the run ended
        assert proc.poll() is None
        (project / "gate").touch()
        assert proc.wait(timeout=HANG_GUARD) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert "launch · b · turn" in seen  # the pattern's name, then the current state


def test_run_json_quiet_and_limits(project, capsys):
    (project / "gate").touch()
    assert main(["run", "slow.py", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ok"], doc["stop_reason"], doc["calls"], doc["path"]) == (True, "max_loops", 2, ["seed", "a", "b", "stop"])
    assert [(m["role"], m["content"]) for m in doc["transcript"]] == [
        ("User", "plan the launch"), ("a", "a says 1"), ("b", "b says 1")]
    assert doc["usage"] == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}

    assert main(["run", "slow.py", "--quiet", "--task", "ship it"]) == 0
    assert capsys.readouterr().out == "User: ship it\n\na: a says 1\n\nb: b says 1\n"

    assert main(["run", "slow.py", "--json", "--max-calls", "1"]) == 5  # stopped at the budget: not its job done
    doc = json.loads(capsys.readouterr().out)
    assert (doc["stop_reason"], doc["calls"], [m["role"] for m in doc["transcript"]]) == ("budget", 1, ["User", "a"])

    assert main(["run", "slow.py", "--max-calls", "0"]) == 2
    assert "max_model_calls=0 is invalid" in capsys.readouterr().err


def test_run_deadline_ends_a_run_that_would_wait_forever(project, capsys):
    # no gate: b would think forever; the deadline ends the run through its drawn edge
    assert main(["run", "slow.py", "--json", "--deadline", "1.5"]) == 4  # cut by the deadline
    doc = json.loads(capsys.readouterr().out)
    assert doc["stop_reason"] == "deadline" and doc["path"][-1] == "past_deadline"


def test_run_checkpoint_commits_the_run(project, capsys):
    (project / "gate").touch()
    assert main(["run", "slow.py", "--checkpoint", "runs.db", "--quiet"]) == 0
    err = capsys.readouterr().err
    run_id = err.split("run id ")[1].split()[0]
    saved = SqliteCheckpointer(project / "runs.db").load(run_id)
    assert saved.finished and saved.stop_reason == "max_loops"
    assert [m.content for m in saved.messages] == ["plan the launch", "a says 1", "b says 1"]


def test_run_refuses_what_it_cannot_run_before_any_call(project, capsys):
    (project / "notask.py").write_text(SLOW.replace('TASK = "plan the launch"\n', ""))
    assert main(["run", "notask.py"]) == 2
    assert "no task for notask.py: pass --task TEXT (or define TASK" in capsys.readouterr().err
    (project / "script.py").write_text("print('a plain script')\n")
    assert main(["run", "script.py"]) == 0
    assert capsys.readouterr().out == "a plain script\n"
    assert main(["run", "script.py", "--json"]) == 2
    assert "--json need(s) a pattern, and script.py is a plain script" in capsys.readouterr().err
    assert main(["run", "missing.py"]) == 2
    assert "no such file: missing.py" in capsys.readouterr().err


# ---------------------------------------------------------------- runs, history, fork
def test_runs_history_and_fork_over_a_checkpoint_store(project, capsys):
    from fsmchat.targets import load_target_with_module

    assert main(["run", "mychat:chat", "--task", "hello", "--checkpoint", "runs.db", "--quiet"]) == 0
    run_id = capsys.readouterr().err.split("run id ")[1].split()[0]
    assert main(["runs", "--db", "runs.db"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RUN", "ID", "PATTERN", "STATUS", "MESSAGES", "STARTED", "TASK"]
    assert lines[1].split()[:5] == [run_id, "RoundRobinSwarm", "finished", "(max_loops)", "3"]
    assert lines[1].endswith("hello") and len(lines) == 2
    assert main(["history", run_id, "--db", "runs.db"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run {run_id}: RoundRobinSwarm, 4 steps, stop reason max_loops"
    assert [line.split()[:2] for line in out[1:]] == [["0", "seed"], ["1", "x"], ["2", "y"], ["3", "stop"]]
    assert "seed --next--> x  (1 messages, t=" in out[1] and "(3 messages" in out[3]

    assert main(["fork", run_id, "--at", "1", "--db", "runs.db", "--replace-message", "1", "x was edited"]) == 0
    captured = capsys.readouterr()
    new_id = captured.out.strip()
    assert f"fsmchat resume {new_id} --db runs.db" in captured.err
    chat = load_target_with_module("mychat:chat")[0]
    res = chat.resume(new_id, SqliteCheckpointer(project / "runs.db"))
    assert [m.content for m in res.transcript] == ["hello", "x was edited", "y here"] and res.path[0] == "seed"
    assert main(["runs", "--db", "runs.db", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in listed] == [new_id, run_id]
    assert listed[0]["forked_from"] == {"run_id": run_id, "step": 1} and listed[0]["status"] == "finished"
    assert main(["history", new_id, "--db", "runs.db", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)
    assert [(s["step"], s["state"], s["messages"]) for s in steps[:3]] == [(0, "seed", 1), (1, "x", 2), (2, "y", 3)]


def test_run_commit_flag_sets_the_runs_commit_mode(project, capsys):
    assert main(["run", "mychat:chat", "--task", "hello", "--checkpoint", "runs.db", "--commit", "step",
                 "--quiet"]) == 0
    run_id = capsys.readouterr().err.split("run id ")[1].split()[0]
    assert SqliteCheckpointer(project / "runs.db").load(run_id).meta["commit"] == "step"
    assert main(["run", "mychat:chat", "--task", "hello", "--commit", "step", "--quiet"]) == 2
    assert ("--commit step says how a checkpointed run commits its steps; pass --checkpoint PATH too (nothing was "
            "run)") in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["run", "mychat:chat", "--checkpoint", "runs.db", "--commit", "turns"])
    assert exc.value.code == 2
    assert "argument --commit: invalid choice: 'turns' (choose from 'turn', 'step')" in capsys.readouterr().err


def test_runs_history_and_fork_refuse_bad_input_with_exit_2(project, capsys):
    assert main(["runs", "--db", "none.db"]) == 2
    assert "no checkpoint store at none.db (`fsmchat run TARGET --checkpoint none.db` writes one)" in \
        capsys.readouterr().err
    assert not (project / "none.db").exists()  # never created by a listing
    assert main(["run", "mychat:chat", "--task", "hello", "--checkpoint", "runs.db", "--quiet"]) == 0
    run_id = capsys.readouterr().err.split("run id ")[1].split()[0]
    assert main(["history", "nope", "--db", "runs.db"]) == 2
    assert f"no run 'nope' in runs.db; newest runs: {run_id}" in capsys.readouterr().err
    assert main(["fork", "nope", "--at", "1", "--db", "runs.db"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    assert main(["fork", run_id, "--at", "9", "--db", "runs.db"]) == 2
    assert "at=9 is invalid: a step number from 0 to 2" in capsys.readouterr().err
    assert main(["fork", run_id, "--at", "1", "--db", "runs.db", "--replace-message", "one", "x"]) == 2
    assert "--replace-message 'one': I must be a message index" in capsys.readouterr().err
    assert main(["fork", run_id, "--at", "1", "--db", "runs.db", "--drop-message", "5"]) == 2
    assert "drop index 5 is invalid: a message index from 0 to 1" in capsys.readouterr().err
    assert main(["fork", run_id, "--at", "1", "--db", "runs.db", "--set", "topic=dogs"]) == 2
    assert "no flow variables" in capsys.readouterr().err
    assert main(["fork", run_id, "--at", "1", "--db", "runs.db", "--set", "topic"]) == 2
    assert "--set 'topic' is not NAME=VALUE" in capsys.readouterr().err
    assert [r.run_id for r in SqliteCheckpointer(project / "runs.db").list_runs()] == [run_id]  # nothing written


# ---------------------------------------------------------------- targets, help, version
def test_module_attr_targets_resolve_from_the_current_folder(project, capsys):
    assert main(["plan", "mychat:chat"]) == 0
    assert capsys.readouterr().out.startswith("round_robin: ")
    assert main(["run", "mychat:chat", "--task", "hello", "--quiet"]) == 0
    assert capsys.readouterr().out == "y here\n"
    assert main(["run", "mychat:chatt", "--task", "hello"]) == 2  # a typo: refused, with the name it meant
    assert "mychat has no attribute 'chatt' (did you mean 'chat'?)" in capsys.readouterr().err


def test_every_argument_has_help_and_there_is_a_version(capsys):
    p = parser()
    subs = next(a for a in p._actions if a.dest == "cmd").choices
    assert sorted(subs) == ["eval", "fork", "graphs", "history", "plan", "render", "report", "resume", "run", "runs", "serve",
                            "ui"]
    missing = [f"{name} {a.dest}" for name, sp in subs.items() for a in sp._actions if not a.help]
    assert missing == []
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == "fsmchat 0.1.0\n"


# ---------------------------------------------------------------- graphs for a user's project
def test_graphs_in_a_folder_without_a_gallery_explains_and_writes_nothing(project, capsys):
    before = sorted(p.name for p in project.iterdir())
    assert main(["graphs"]) == 2
    err = capsys.readouterr().err
    assert "nothing to draw here" in err and "fsmchat graphs --target mychat:chat --dir graphs" in err
    assert "[tool.fsmchat.graphs]" in err and "Nothing was written." in err
    assert sorted(p.name for p in project.iterdir()) == before


def test_graphs_target_check_orphans_and_prune(project, capsys):
    assert main(["graphs", "--target", "mychat:chat", "--dir", "out"]) == 0
    assert sorted(p.name for p in (project / "out").iterdir()) == ["chat.dot", "chat.mmd", "chat.svg"]
    assert main(["graphs", "--check", "--target", "mychat:chat", "--dir", "out"]) == 0
    (project / "out" / "old_chat.svg").write_text("<svg/>")
    (project / "out" / "notes.txt").write_text("not a graph file")
    capsys.readouterr()
    assert main(["graphs", "--check", "--target", "mychat:chat", "--dir", "out"]) == 1
    err = capsys.readouterr().err
    assert "old_chat.svg (orphan: nothing draws it" in err and "notes.txt" not in err
    assert main(["graphs", "--target", "mychat:chat", "--dir", "out", "--prune"]) == 0
    assert sorted(p.name for p in (project / "out").iterdir()) == ["chat.dot", "chat.mmd", "chat.svg", "notes.txt"]


def test_graphs_prints_one_summary_line_and_rewrites_only_what_changed(project, capsys):
    assert main(["graphs", "--target", "mychat:chat", "--dir", "out"]) == 0
    assert capsys.readouterr().out == "out/: 1 drawing up to date (3 files; 3 rewritten)\n"
    svg = project / "out" / "chat.svg"
    svg.write_text(svg.read_text() + "<!-- kept: the file is current, so it is not rendered again -->")
    assert main(["graphs", "--target", "mychat:chat", "--dir", "out"]) == 0
    assert capsys.readouterr().out == "out/: 1 drawing up to date (3 files)\n"
    assert svg.read_text().endswith("<!-- kept: the file is current, so it is not rendered again -->")
    (project / "out" / "chat.mmd").write_text("stale")
    assert main(["graphs", "--target", "mychat:chat", "--dir", "out", "-v"]) == 0
    assert capsys.readouterr().out == (f"out/: 1 drawing up to date (3 files; 1 rewritten)\n"
                                       f"  wrote {Path('out') / 'chat.mmd'}\n")
    assert main(["graphs", "--target", "mychat:chat", "--dir", "out", "--force"]) == 0
    assert capsys.readouterr().out == "out/: 1 drawing up to date (3 files; 3 rewritten)\n"
    assert "kept:" not in svg.read_text()


def test_graphs_examples_imports_only_build_files(project, capsys):
    ex = project / "ex"
    ex.mkdir()
    (ex / "scratch.py").write_text("open('IMPORTED', 'w').write('scratch ran')\n")
    (ex / "_helpers.py").write_text("open('IMPORTED', 'w').write('helper ran')\n")
    (ex / "chat.py").write_text(CHAT + "\n\ndef build():\n    return chat\n")
    assert main(["graphs", "--examples", "ex", "--dir", "out"]) == 0
    assert not (project / "IMPORTED").exists()
    assert sorted(p.name for p in (project / "out").iterdir()) == [
        "example_chat.dot", "example_chat.mmd", "example_chat.svg"]
    assert f"skipped {Path('ex') / 'scratch.py'}: no top-level def build() (not imported)" in capsys.readouterr().err


def test_graphs_reads_the_projects_pyproject_from_a_subfolder(project, capsys):
    (project / "pyproject.toml").write_text(textwrap.dedent('''\
        [project]
        name = "mine"

        [tool.fsmchat.graphs]
        dir = "docs/graphs"
        targets = {main_chat = "mychat:chat"}
        '''))
    sub = project / "src"
    sub.mkdir()
    os.chdir(sub)
    assert main(["graphs"]) == 0
    assert sorted(p.name for p in (project / "docs" / "graphs").iterdir()) == [
        "main_chat.dot", "main_chat.mmd", "main_chat.svg"]
    assert main(["graphs", "--check"]) == 0
    assert "docs/graphs/ is up to date" in capsys.readouterr().out
    (project / "pyproject.toml").write_text("[tool.fsmchat.graphs]\ntarget = 'mychat:chat'\n")
    assert main(["graphs"]) == 2
    assert "unknown key(s) ['target']" in capsys.readouterr().err


# ---------------------------------------------------------------- this repository's gallery
BUILTINS = ["discussion_channel", "discussion_turns", "expert_panel", "group_chat", "handoffs", "one_on_one_debate",
            "one_on_one_debate_function", "round_robin", "selector_group_chat"]


def test_the_repository_gallery_is_configured_current_and_complete():
    from fsmchat import gallery

    g, pyproject = gallery.configured(ROOT)
    assert pyproject == ROOT / "pyproject.toml" and g is not None
    assert g.check() == [], "graphs/ is stale; run `fsmchat graphs`"
    # every built-in pattern and every example with a build(), read here without fsmchat's help
    examples = [p.stem for p in sorted((ROOT / "examples").glob("*.py"))
                if not p.name.startswith("_") and "\ndef build(" in p.read_text()]
    assert len(examples) >= 9
    stems = {p.stem for p in (ROOT / "graphs").glob("*.dot")}
    assert stems == set(BUILTINS) | {f"example_{e}" for e in examples}
