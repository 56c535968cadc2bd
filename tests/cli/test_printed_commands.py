"""Every command fsmchat prints works when pasted: the resume commands of a waiting run, the one
`fsmchat fork` prints (an example's run, a module's run), and the commands in error hints are run
here exactly as printed, each in a new process, and succeed. A trust refusal on the command line
names the flags that allow it, never a Python keyword.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fsmchat.cli import EXIT_WAITING

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 600  # seconds before a hung CLI process is killed (never a verdict)

PROJECT = '''\
from fsmchat import Agent, GroupChat, Human, RoundRobinSwarm

TASK = "plan the launch"


def build():
    """Offline agents; a person approves each winning message before it is posted."""
    return GroupChat(name="reviewed", agents=[Agent("a", system_prompt="You plan launches."),
                                              Agent("b", system_prompt="You worry about risks.")],
                     max_loops=2, interrupt_before=["post"])


turns = RoundRobinSwarm(agents=[Agent("a", system_prompt="You plan launches."), Human("h")], max_loops=2)
chat = RoundRobinSwarm(agents=[Agent("x", system_prompt="You plan."), Agent("y", system_prompt="You check.")],
                       max_loops=1)
'''


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("FSMCHAT_MODEL", "FSMCHAT_API_BASE")
         and not k.endswith("_API_KEY")}
    e.update(PYTHONPATH=str(ROOT), COLUMNS="200")
    return e


def fsmchat(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fsmchat.cli", *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=HANG_GUARD, stdin=subprocess.DEVNULL)


def pasted(cwd: Path, line: str) -> subprocess.CompletedProcess[str]:
    """Run ``line`` (a command fsmchat printed, maybe with a trailing ``# comment``) as a shell would."""
    argv = shlex.split(line, comments=True)
    assert argv[0] == "fsmchat", line
    return fsmchat(cwd, *argv[1:])


def backticked(text: str) -> list[str]:
    """The `fsmchat ...` commands quoted in a message."""
    return re.findall(r"`(fsmchat [^`]+)`", text)


@pytest.fixture
def here(tmp_path):
    (tmp_path / "project.py").write_text(PROJECT)
    return tmp_path


def copy_of(folder: Path, name: str) -> Path:
    """A copy of ``folder`` (its store included): each pasted command answers the same waiting run."""
    return Path(shutil.copytree(folder, folder.parent / f"{folder.name}-{name}"))


def test_every_resume_command_of_a_waiting_run_works_as_printed(here):
    first = fsmchat(here, "run", "project.py", "--checkpoint", "runs.db", "--no-input")
    assert first.returncode == EXIT_WAITING, first.stderr
    lines = [line.strip() for line in first.stderr.splitlines() if line.strip().startswith("fsmchat resume ")]
    assert [shlex.split(line, comments=True)[-2:] for line in lines] == [
        ["project.py", "--approve"], ["--edit", "TEXT"], ["--reject", "REASON"], ["--input", "TEXT"]]
    for i, line in enumerate(lines):
        done = pasted(copy_of(here, str(i)), line)
        assert done.returncode in (0, EXIT_WAITING) and "Error" not in done.stderr, (line, done.stderr)


def test_the_resume_command_a_resumed_run_prints_works_as_printed(here):
    def commands(stderr):
        return [line.strip() for line in stderr.splitlines() if line.strip().startswith("fsmchat resume ")]
    first = fsmchat(here, "run", "project:turns", "--checkpoint", "runs.db", "--no-input")
    assert first.returncode == EXIT_WAITING and len(commands(first.stderr)) == 1, first.stderr
    again = pasted(here, commands(first.stderr)[0])  # h's first turn answered; the run waits for its second
    assert again.returncode == EXIT_WAITING and len(commands(again.stderr)) == 1, again.stderr
    done = pasted(here, commands(again.stderr)[0])
    assert done.returncode == 0, done.stderr


def fork_command(stderr: str) -> str:
    return stderr.split("continue it with: ", 1)[1].strip()


@pytest.mark.parametrize("target", [str(ROOT / "examples" / "round_robin.py"), "project:chat"])
def test_the_resume_command_fork_prints_works_as_printed(here, target):
    ran = fsmchat(here, "run", target, "--checkpoint", "runs.db", "--quiet")
    assert ran.returncode == 0, ran.stderr
    run_id = ran.stderr.split("run id ")[1].split()[0]
    forked = fsmchat(here, "fork", run_id, "--at", "1", "--db", "runs.db", "--replace-message", "1", "edited")
    assert forked.returncode == 0, forked.stderr
    command = fork_command(forked.stderr)
    assert command.startswith(f"fsmchat resume {forked.stdout.strip()} --db runs.db --target ")
    resumed = pasted(here, command)
    assert resumed.returncode == 0, (command, resumed.stderr)


def test_the_commands_in_error_hints_work_as_printed(here):
    ran = fsmchat(here, "run", "project:chat", "--checkpoint", "runs.db", "--quiet")
    run_id = ran.stderr.split("run id ")[1].split()[0]
    for args, shows in [(["history", "nope", "--db", "runs.db"], "fsmchat runs --db runs.db"),
                        (["fork", run_id, "--at", "99", "--db", "runs.db"], f"fsmchat history {run_id} --db runs.db")]:
        refused = fsmchat(here, *args)
        assert refused.returncode == 2 and backticked(refused.stderr) == [shows], refused.stderr
        done = pasted(here, shows)
        assert done.returncode == 0 and run_id in done.stdout, done.stderr


def test_a_trust_refusal_names_the_flags_and_each_named_way_works(here):
    ran = fsmchat(here, "run", "project.py", "--checkpoint", "runs.db", "--no-input")
    assert ran.returncode == EXIT_WAITING, ran.stderr
    run_id = ran.stderr.split("run id ")[1].split()[0]
    refused = fsmchat(here, "resume", run_id, "--db", "runs.db", "--approve")
    assert refused.returncode == 2
    factory = f"{here / 'project.py'}:build"
    assert f"name the pattern with --target {shlex.quote(factory)}, or pass --trusted" in refused.stderr
    assert "trusted=True" not in refused.stderr and "allow=" not in refused.stderr
    for extra in (["--target", factory], ["--trusted"]):
        done = fsmchat(copy_of(here, extra[0].strip("-")), "resume", run_id, "--db", "runs.db", "--approve", *extra)
        assert done.returncode in (0, EXIT_WAITING) and "Error" not in done.stderr, (extra, done.stderr)

    module_run = fsmchat(here, "run", "project:chat", "--checkpoint", "runs.db", "--quiet")
    module_id = module_run.stderr.split("run id ")[1].split()[0]
    forked = fsmchat(here, "fork", module_id, "--at", "1", "--db", "runs.db").stdout.strip()
    refused = fsmchat(here, "resume", forked, "--db", "runs.db")
    assert refused.returncode == 2
    assert ("it is module 'project'; name the pattern with --target project:chat, or pass --allow project or "
            "--trusted") in refused.stderr
    assert "trusted=True" not in refused.stderr and "allow=[" not in refused.stderr
    done = fsmchat(here, "resume", forked, "--db", "runs.db", "--allow", "project", "--quiet")
    assert done.returncode == 0, done.stderr
