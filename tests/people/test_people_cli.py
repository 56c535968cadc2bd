"""People in the loop across processes and on the command line: a run pauses, its process exits,
and a new process resumes it with the answer (the result equals a run answered inline);
`fsmchat run` asks on a terminal, `--no-input` leaves the run waiting with the exact resume
command, `fsmchat resume` answers it; a Human hub client is told its turn and never called.
Nothing here is timed: a terminal prompt is waited for, never slept on."""
from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fsmchat import EV_TEXT, Agent, Approve, Edit, Human, Hub
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.cli import main
from fsmchat.testing import answer

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = '''\
from fsmchat import Agent, GroupChat, Human, RoundRobinSwarm

TASK = "plan the launch"


def build():
    """Offline agents: the same replies in every process."""
    return GroupChat(name="reviewed", agents=[Agent("a", system_prompt="You plan launches."),
                                              Agent("b", system_prompt="You worry about risks.")],
                     max_loops=3, interrupt_before=["post"])


def turns():
    return RoundRobinSwarm(agents=[Agent("a", system_prompt="You plan launches."), Human("h")], max_loops=1)
'''


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "FSMCHAT_MODEL" and not k.endswith("_API_KEY")}
    e.update(PYTHONPATH=f"{ROOT}{os.pathsep}{e.get('PYTHONPATH', '')}", LITELLM_LOCAL_MODEL_COST_MAP="True",
             NO_COLOR="1", COLUMNS="200")
    return e


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / "hitl_script.py").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def cli(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fsmchat.cli", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, env=env(), timeout=300)


def resume_lines(stderr: str) -> dict[str, list[str]]:
    """The resume commands a waiting run printed, by answer flag."""
    out = {}
    for line in stderr.splitlines():
        if line.strip().startswith("fsmchat resume "):
            args = shlex.split(line.split("#")[0])
            out[args[-2] if args[-1] in ("TEXT", "REASON", "NAME=VALUE") else args[-1]] = args
    return out


def test_pause_exit_and_resume_in_new_processes_equals_an_inline_run(here):
    import hitl_script

    inline, asked = answer(hitl_script.build(), hitl_script.TASK, [Approve(), Edit("b, but with a rollback plan")])
    assert [p.kind for p in asked] == ["post", "post"]

    first = cli("run", "hitl_script.py", "--checkpoint", "runs.db", "--no-input", cwd=here)
    assert first.returncode == 3, first.stderr[-2000:]
    assert "the run waits (exit code 3)" in first.stderr and "-- waiting for a person at before_post" in first.stdout
    commands = resume_lines(first.stderr)
    assert sorted(commands) == ["--approve", "--edit", "--input", "--reject"]
    run_id = commands["--approve"][2]
    assert commands["--approve"][:7] == ["fsmchat", "resume", run_id, "--db", "runs.db", "--target", "hitl_script.py"]
    saved = SqliteCheckpointer(here / "runs.db").load(run_id)
    assert saved.stop_reason == "interrupted" and not saved.finished

    second = cli(*commands["--approve"][1:], cwd=here)
    assert second.returncode == 3, second.stderr[-2000:]
    edit = resume_lines(second.stderr)["--edit"][1:-2]
    third = cli(*edit, "--edit", "b, but with a rollback plan", "--json", cwd=here)
    assert third.returncode == 0, third.stderr[-2000:]
    done = json.loads(third.stdout)
    assert done["stop_reason"] == inline.stop_reason == "max_loops" and done["pending"] is None
    assert [(m["role"], m["content"]) for m in done["transcript"]] == [(m.role, m.content) for m in inline.transcript]
    assert done["path"] == inline.path and done["calls"] == inline.calls == 4


PAUSE = textwrap.dedent('''
    import sys
    from fsmchat import SqliteCheckpointer
    from hitl_script import turns
    pattern = turns()
    pattern.factory = "hitl_script:turns"
    r = pattern.execute("plan the launch", checkpoint=SqliteCheckpointer(sys.argv[1]), run_id="later")
    print(r.stop_reason, r.pending.state, r.pending.person)
''')
RESUME = textwrap.dedent('''
    import json, sys
    import fsmchat
    r = fsmchat.resume("later", fsmchat.SqliteCheckpointer(sys.argv[1]), input=sys.argv[2], allow=["hitl_script"])
    print(json.dumps([[m.role, m.content] for m in r.transcript] + [r.stop_reason]))
''')


def test_the_top_level_resume_answers_a_run_another_process_left_waiting(here):
    e = {**env(), "PYTHONPATH": f"{here}{os.pathsep}{env()['PYTHONPATH']}"}
    db = str(here / "later.db")
    paused = subprocess.run([sys.executable, "-c", PAUSE, db], capture_output=True, text=True, env=e, timeout=300)
    assert paused.stdout.split() == ["interrupted", "h", "h"], paused.stderr[-2000:]
    resumed = subprocess.run([sys.executable, "-c", RESUME, db, "my part of the plan"], capture_output=True, text=True,
                             env=e, timeout=300)
    got = json.loads(resumed.stdout.strip().splitlines()[-1])
    import hitl_script
    ref = hitl_script.turns()
    ref.agents[1] = Human("h", answers=["my part of the plan"])
    ref._graph = None
    inline = ref.execute("plan the launch", checkpoint=SqliteCheckpointer(here / "inline.db"))
    assert got == [[m.role, m.content] for m in inline.transcript] + [inline.stop_reason]
    assert got[-2] == ["h", "my part of the plan"]


def test_fsmchat_run_asks_on_a_terminal(here):
    """A real terminal (a pty): the run shows the proposal and its answers, takes `/edit`, goes on."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "fsmchat.cli", "run", "hitl_script.py", "--checkpoint", "t.db"],
                            cwd=here, stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=env(), text=True)
    os.close(slave)
    seen = ""
    answers = ["/bogus", "/edit the edited turn", "/approve"]
    try:
        while proc.poll() is None or select.select([master], [], [], 0)[0]:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(master, 4096).decode(errors="replace")
            except OSError:
                break
            seen += chunk
            if seen.rstrip().endswith(">") and answers:  # the prompt: answer it
                os.write(master, (answers.pop(0) + "\n").encode())
                seen += "\n"
    finally:
        out = proc.stdout.read()
        proc.wait(timeout=120)
        os.close(master)
    assert proc.returncode == 0, seen[-3000:]
    assert "-- waiting for a person at before_post (post)" in seen and "/edit TEXT" in seen and "/approve" in seen
    assert "unknown command '/bogus'" in seen
    assert "the edited turn" in out and "-- stopped: max_loops" in out
    assert not answers


def test_fsmchat_run_uses_a_default_store_and_piped_runs_never_wait_on_stdin(here):
    r = cli("run", "hitl_script:turns", "--task", "plan it", cwd=here, stdin="this is not read\n")
    assert r.returncode == 3, r.stderr[-2000:]
    assert (here / ".fsmchat" / "runs.db").is_file()
    assert "checkpointed in .fsmchat/runs.db" in r.stderr and "--input TEXT" in r.stderr
    run_id = resume_lines(r.stderr)["--input"][2]
    again = cli("resume", run_id, "--db", ".fsmchat/runs.db", "--allow", "hitl_script", "--input", "done", "-q",
                cwd=here)
    assert again.returncode == 0 and again.stdout.strip() == "done", again.stderr[-2000:]


def test_fsmchat_resume_refuses_bad_input_before_running(here, capsys):
    r = cli("run", "hitl_script.py", "--checkpoint", "runs.db", "--no-input", cwd=here)
    run_id = resume_lines(r.stderr)["--approve"][2]
    before = len(SqliteCheckpointer(here / "runs.db").load(run_id).events)
    cases = [(["--approve", "--input", "x"], "give one answer, not 2"),
             (["--set", "x=1"], "an Edit here replaces the proposed message"),
             (["--approve"], "refused .*hitl_script.py:build.*: it is a file path")]  # the stored factory, untrusted
    for extra, needle in cases:
        code = main(["resume", run_id, "--db", "runs.db", *(["--target", "hitl_script.py"] if "--set" in extra else []),
                     *extra, "--no-input"])
        err = capsys.readouterr().err
        assert code == 2 and re.search(needle, err), (extra, err)
    assert len(SqliteCheckpointer(here / "runs.db").load(run_id).events) == before
    assert main(["resume", "nope", "--db", "runs.db"]) == 2
    assert "no checkpointed run 'nope'" in capsys.readouterr().err
    assert main(["resume", run_id, "--db", "missing.db"]) == 2


def test_a_human_hub_client_is_told_its_turn_and_never_called():
    async def go():
        async with await Hub.open(ttl_sweep_interval=0) as hub:
            turns = []
            hub.listen(lambda e: turns.append((e.agent_id, e.data["turn"])) if e.kind == "person_turn" else None)
            bot = await hub.register(Agent("bot", system_prompt="You chat."))
            alice = await hub.register(Human("alice"))
            channel = await alice.open(type="discussion", target=[bot.agent_id])
            await hub.drain(30)
            assert turns == [("alice", 0)] and hub.stats(channel.channel_id).model_calls == 0
            await channel.send("hello bot")
            await hub.drain(30)
            texts = [e.sender for e in channel.log() if e.event_type == EV_TEXT]
            assert texts == ["alice", "bot"] and turns == [("alice", 0), ("alice", 2)]
            assert hub.turn_graph(channel.channel_id).states["awaiting_alice"].waits
            assert not hub.turn_graph(channel.channel_id).states["awaiting_bot"].waits
    asyncio.run(go())
