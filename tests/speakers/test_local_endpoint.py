"""A local OpenAI-compatible endpoint needs no API key: an agent with ``api_base`` and no ``api_key``
reaches it (fsmchat gives the OpenAI client the placeholder key it demands), is never reported as
``MissingCredentials``, and ``fsmchat run/resume --api-base URL`` sends every agent there.

The server is tests/support/openai_server.py on 127.0.0.1; it records every request and its headers.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.openai_server import OpenAIServer, text

from fsmchat import Agent, RoundRobinSwarm
from fsmchat.speakers import llm

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 600  # seconds before a hung process or server is stopped (never a verdict)
TASK = "Plan a picnic for Saturday."


@pytest.fixture
def keyless(monkeypatch):
    for var in ("OPENAI_API_KEY", "FSMCHAT_MODEL", "FSMCHAT_CHECK_KEYS", llm.API_BASE_ENV):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server():
    with OpenAIServer(lambda request: text("local answer"), max_lifetime=HANG_GUARD) as srv:
        yield srv
        srv.assert_clean()


def test_an_agent_with_api_base_and_no_key_reaches_a_local_server(keyless, server):
    local = Agent("Local", model="openai/my-model", api_base=server.api_base, num_retries=0)
    assert llm.missing_credentials([local]) is None
    r = RoundRobinSwarm(agents=[local], max_loops=1).execute(TASK)
    assert r.ok, r.error
    assert [m.content for m in r.transcript] == [TASK, "local answer"]
    assert [rec.headers.get("authorization") for rec in server.records] == [f"Bearer {llm.NO_KEY}"]


def test_a_key_of_the_users_own_is_sent_instead_of_the_placeholder(keyless, server, monkeypatch):
    given = Agent("Given", model="openai/my-model", api_base=server.api_base, api_key="sk-local-1", num_retries=0)
    assert RoundRobinSwarm(agents=[given], max_loops=1).execute(TASK).ok
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-2")
    from_env = Agent("FromEnv", model="openai/my-model", api_base=server.api_base, num_retries=0)
    assert "api_key" not in from_env.litellm_kwargs  # the client finds the environment's key itself
    assert RoundRobinSwarm(agents=[from_env], max_loops=1).execute(TASK).ok
    assert [rec.headers.get("authorization") for rec in server.records] == ["Bearer sk-local-1",
                                                                            "Bearer sk-from-env-2"]


def test_an_agent_without_an_endpoint_still_needs_its_key(keyless):
    hosted = Agent("Hosted", model="openai/my-model")
    assert "api_key" not in hosted.litellm_kwargs
    assert llm.missing_credentials([hosted]).missing == [("Hosted", "openai/my-model", ["OPENAI_API_KEY"])]


PROJECT = '''
from fsmchat import Agent, RoundRobinSwarm

TASK = "Plan a picnic for Saturday."


def build():
    return RoundRobinSwarm(agents=[Agent("Planner", num_retries=0), Agent("Critic", num_retries=0)], max_loops=1)
'''


def fsmchat(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "FSMCHAT_MODEL", llm.API_BASE_ENV)}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "fsmchat.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=HANG_GUARD)


def test_fsmchat_run_and_resume_take_api_base(tmp_path, server):
    (tmp_path / "picnic.py").write_text(textwrap.dedent(PROJECT))
    done = fsmchat(tmp_path, "run", "picnic.py", "--model", "openai/my-model", "--api-base", server.api_base,
                   "--checkpoint", "runs.db", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "local answer\n"  # the run's output: the last message
    assert len(server.records) == 2 and {r.headers["authorization"] for r in server.records} == {f"Bearer {llm.NO_KEY}"}
    run_id = done.stderr.split("run id ")[1].split()[0]
    forked = fsmchat(tmp_path, "fork", run_id, "--at", "1", "--db", "runs.db")
    assert forked.returncode == 0, forked.stderr
    resumed = fsmchat(tmp_path, "resume", forked.stdout.strip(), "--db", "runs.db", "--target", "picnic.py",
                      "--model", "openai/my-model", "--api-base", server.api_base, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert len(server.records) == 3  # the fork's one missing turn, asked of the same server


def test_api_base_that_is_not_a_url_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "picnic.py").write_text(textwrap.dedent(PROJECT))
    done = fsmchat(tmp_path, "run", "picnic.py", "--api-base", "localhost:8000")
    assert done.returncode == 2
    assert "--api-base 'localhost:8000' is invalid: the URL of an OpenAI-compatible server" in done.stderr
