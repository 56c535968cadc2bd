"""`fsmchat run`'s exit code says whether the run did its job: a run cut by its deadline or stopped
at a budget exits with a code of its own (4, 5), every ending a pattern is built for (lull,
max_loops, until, rounds, done) exits 0. Each case runs the CLI in a fresh process, as a shell or
CI job would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fsmchat.cli import EXIT_BUDGET, EXIT_DEADLINE

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 600  # seconds before a hung CLI process is killed (never a verdict)

PATTERNS = {
    "roundrobin.py": '''
        from fsmchat import RoundRobinSwarm
        from fsmchat.testing import FunctionModel

        TASK = "plan the launch"
        MODEL = FunctionModel(lambda req: f"{req.agent} says {req.n}")

        def build():
            return RoundRobinSwarm(agents=[MODEL.agent("a"), MODEL.agent("b")], max_loops=2)
        ''',
    "forever.py": '''
        from fsmchat import RoundRobinSwarm
        from fsmchat.testing import Delay, FunctionModel

        TASK = "think about it"

        def answer(req):
            if req.agent == "b":
                return Delay(0.05, answer)  # b never answers: only the deadline can end the run
            return "a is quick"

        MODEL = FunctionModel(answer)

        def build():
            return RoundRobinSwarm(agents=[MODEL.agent("a"), MODEL.agent("b")], max_loops=1)
        ''',
    "quiet_room.py": '''
        from fsmchat import Bid, GroupChat
        from fsmchat.testing import ScriptedModel

        TASK = "anyone?"
        MODEL = ScriptedModel({"a": [Bid(0.9, "me first"), Bid(0.1, "")], "b": [Bid(0.2, ""), Bid(0.0, "")]})

        def build():
            return GroupChat(agents=[MODEL.agent("a"), MODEL.agent("b")], max_loops=5)
        ''',
    "panel.py": '''
        from fsmchat.patterns.panel import ExpertPanelDiscussion
        from fsmchat.testing import ScriptedModel

        TASK = "Is AGI near?"
        MODEL = ScriptedModel(fn=lambda req: f"{req.agent}-{req.n}")

        def build():
            return ExpertPanelDiscussion(agents=[MODEL.agent("E1"), MODEL.agent("E2")], moderator=MODEL.agent("M"),
                                         max_rounds=1)
        ''',
    "agreeing.py": '''
        from fsmchat import AgentFlow, Discussion
        from fsmchat.testing import ScriptedModel

        TASK = "Draft: ship on Friday."
        MODEL = ScriptedModel({"critic": ["too soon", "fine"], "author": ["revised", "AGREED"]})

        def agreed(ctx):
            """the author agreed"""
            return "AGREED" in (ctx.previous_result or "")

        def build():
            return AgentFlow(steps=[Discussion([MODEL.agent("critic"), MODEL.agent("author")], rounds=5,
                                               until=agreed)])
        ''',
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    where = tmp_path_factory.mktemp("exits")
    for name, text in PATTERNS.items():
        (where / name).write_text(textwrap.dedent(text))
    return where


def cli(folder: Path, *args: str) -> tuple[int, dict, str]:
    """(exit code, the --json RunResult, stderr) of ``fsmchat run ARGS --json`` in a new process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "fsmchat.cli", "run", *args, "--json"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def test_the_limit_exit_codes_are_their_own():
    assert (EXIT_DEADLINE, EXIT_BUDGET) == (4, 5)


@pytest.mark.parametrize("args, stop_reason, code", [
    (["roundrobin.py"], "max_loops", 0),
    (["quiet_room.py"], "lull", 0),
    (["panel.py"], "rounds", 0),
    (["agreeing.py"], "done", 0),  # the Discussion ended on `until`, then the flow had run all its steps
    (["roundrobin.py", "--max-calls", "1"], "budget", 5),
    (["forever.py", "--deadline", "1"], "deadline", 4),
])
def test_the_exit_code_says_whether_the_run_did_its_job(folder, args, stop_reason, code):
    got, result, err = cli(folder, *args)
    assert (got, result.get("stop_reason")) == (code, stop_reason), err
    if code:
        assert f"(stop reason {stop_reason!r}); exit code {code}" in err
    else:
        assert "exit code" not in err


def test_a_discussion_stopped_by_until_is_a_successful_run(folder):
    got, result, err = cli(folder, "agreeing.py")
    assert got == 0, err
    assert "discussion.check_until" in result["path"] and result["transcript"][-1]["content"] == "AGREED"
    assert len(result["transcript"]) == 4  # four turns of the five rounds: until stopped it


def test_the_exit_codes_are_documented_in_help_and_readme(capsys):
    from fsmchat.cli import parser

    readme = (ROOT / "README.md").read_text()
    for row in ("| 4 | ", "| 5 | ", "| 0 | ", "| 3 | "):
        assert row in readme
    for command in ("run", "resume"):
        with pytest.raises(SystemExit):
            parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "4 stopped by the deadline, 5 stopped by a budget" in text
