"""One redaction rule for every channel. Distinct secrets are planted in each place a user can put
one (an ``api_key``, an ``extra_headers`` value, an ``Authorization`` header, provider-specific key
fields, credential variables of the environment); a provider echoes all of them in its error text
(a local OpenAI-compatible server, and a litellm custom provider that sees every option); then
every channel is searched for them: ``str``/``repr`` of the error, ``traceback.format_exception``,
a ``logging.exception`` capture, the traceback of a raising ``run()``, ``result.to_dict()``, the
checkpoint file's bytes, ``fsmchat report``'s HTML, the viewer's JSON and pages, a batch failure
as it crosses processes, and the CLI's stdout and stderr."""
import io
import json
import logging
import os
import pickle
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import httpx
import pytest
from support.openai_server import OpenAIServer, error

from fsmchat import Agent, GroupChat, SqliteCheckpointer
from fsmchat.patterns.distributed import TaskFailure
from fsmchat.common.masking import redact, redact_chain, secret_values
from fsmchat.speakers import llm
from fsmchat.ui import write_report
from fsmchat.ui.server import start

ROOT = Path(__file__).resolve().parents[2]
# no sk-/Bearer shape: each is masked because it is known (registered by its agent, or in the environment)
API_KEY = "plantAPIKEY-1q2w3e4r"
X_TOKEN = "plantXTOKEN-5t6y7u8i"
TENANT = "plantTENANT-3e4r5t6y"  # a header whose name says nothing: its value counts all the same
AUTH = "plantAUTH-9o0p1a2s"
AWS = "plantAWS-3d4f5g6h"
AZURE = "plantAZURE-7j8k9l0z"
VERTEX = "plantVERTEX-1x2c3v4b"
ENV = {"OPENAI_API_KEY": "plantOPENAIENV-5n6m7q8w", "ANTHROPIC_API_KEY": "plantANTHROPICENV-9e0r1t2y"}
SENT_OVER_HTTP = [API_KEY, X_TOKEN, TENANT, AUTH, *ENV.values()]  # what an OpenAI-compatible server receives
ALL = [API_KEY, X_TOKEN, TENANT, AUTH, AWS, AZURE, VERTEX, *ENV.values()]


def agents(api_base, model="openai/test-model"):
    own = {"model": model, "num_retries": 0, **({"api_base": api_base} if api_base else {})}
    return [Agent("alice", api_key=API_KEY, extra_headers={"X-Token": X_TOKEN, "X-Tenant": TENANT}, **own),
            Agent("bob", extra_headers={"Authorization": f"Bearer {AUTH}"}, **own),
            Agent("carol", aws_secret_access_key=AWS, azure_ad_token=AZURE,
                  vertex_credentials=json.dumps({"type": "service_account", "private_key": VERTEX}), **own)]


def env_dump():
    return " ".join(f"{k}={os.environ.get(k)}" for k in ENV)


def leaks(text):
    """The planted secrets found in ``text``."""
    return [s for s in ALL if s in text]


@pytest.fixture
def planted_env(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


class EchoProvider:
    """A litellm custom provider whose error repeats every option it was given, and the environment."""

    echoes: list[str] = []

    async def acompletion(self, *args, **kwargs):
        text = f"provider refused the call; it was given {kwargs!r}; environment: {env_dump()}"
        self.echoes.append(text)
        raise RuntimeError(text)

    def completion(self, *args, **kwargs):
        raise AssertionError("fsmchat calls acompletion")


@pytest.fixture(params=["http", "custom"])
def failed_run(request, planted_env, tmp_path):
    """A GroupChat whose three agents' bids all fail with an error echoing their secrets, checkpointed."""
    db = tmp_path / "runs.db"
    if request.param == "http":
        echoes = []

        def echo(body):
            text = (f"upstream refused: headers={json.dumps(srv.records[-1].headers)} body={json.dumps(body)} "
                    f"environment: {env_dump()}")
            echoes.append(text)
            return error(500, text)

        with OpenAIServer(echo) as srv:
            chat = GroupChat(agents=agents(srv.url + "/v1"), max_loops=2)
            result = chat.execute("Ship it?", checkpoint=SqliteCheckpointer(db), run_id="r")
            with pytest.raises(Exception) as raised:  # the same run, raising
                GroupChat(agents=agents(srv.url + "/v1"), max_loops=2).run("Ship it?")
        carried = SENT_OVER_HTTP
    else:
        import litellm

        EchoProvider.echoes = []
        llm.register_provider("echo-provider", type("Echo", (EchoProvider, litellm.CustomLLM), {})())
        chat = GroupChat(agents=agents(None, model="echo-provider/m"), max_loops=2)
        result = chat.execute("Ship it?", checkpoint=SqliteCheckpointer(db), run_id="r")
        with pytest.raises(Exception) as raised:
            GroupChat(agents=agents(None, model="echo-provider/m"), max_loops=2).run("Ship it?")
        echoes, carried = EchoProvider.echoes, [s for s in ALL if s != VERTEX]  # litellm keeps vertex_credentials
    assert result.stop_reason == "error" and type(result.error).__name__ == "NoBidHeard", result
    # the provider really echoed every secret it could see (else this test could not fail)
    assert [s for s in carried if s not in "".join(echoes)] == []
    return result, raised.value, db


def test_no_secret_in_the_error_its_chain_or_any_traceback(failed_run):
    result, raised, _ = failed_run
    err = result.error
    texts = {"str": str(err), "repr": repr(err), "format_exception": "".join(traceback.format_exception(err)),
             "raising run()": "".join(traceback.format_exception(raised)),
             "causes": " ".join(f"{e!s} {e!r} {getattr(e, 'message', '')}" for e in chain(err))}
    buf = io.StringIO()
    log = logging.getLogger("an.application.of.its.own")  # not one of the loggers fsmchat filters
    log.addHandler(handler := logging.StreamHandler(buf))
    try:
        try:
            raise raised
        except Exception:
            log.exception("the run failed")
    finally:
        log.removeHandler(handler)
    texts["logging.exception"] = buf.getvalue()
    assert "Traceback" in texts["logging.exception"] and "NoBidHeard" in texts["logging.exception"]
    assert {k: leaks(v) for k, v in texts.items() if leaks(v)} == {}
    assert "***" in str(err)  # the echo is still there, masked


def chain(exc):
    seen, todo, out = set(), [exc], []
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        todo += [e.__cause__, e.__context__, getattr(e, "cause", None)]
        todo += [f for _, f in getattr(e, "failures", [])]
    return out


def test_no_secret_in_the_result_the_checkpoint_the_report_or_the_viewer(failed_run, tmp_path):
    result, _, db = failed_run
    found = {"to_dict": leaks(json.dumps(result.to_dict())), "repr/str": leaks(repr(result) + str(result)),
             "events": leaks(repr(result.events) + repr(result.trace))}
    for f in tmp_path.glob("runs.db*"):  # the database and its WAL: every row's bytes
        found[f.name] = leaks(f.read_bytes().decode("latin-1"))
    report = write_report(db, "r", tmp_path / "run.html").read_text()
    found["report"] = leaks(report)
    running = start(db)
    try:
        for path in ("/api/runs", "/api/runs/r", "/runs/r", "/"):
            found[path] = leaks(httpx.get(running.url + path, timeout=30).text)
    finally:
        running.stop()
    assert {k: v for k, v in found.items() if v} == {}
    assert "NoBidHeard: GroupChat turn 1" in report  # the stored error is shown (masked)


def test_a_batch_failure_crosses_processes_without_secrets(failed_run):
    result, raised, _ = failed_run
    failure = TaskFailure.from_exception(0, "Ship it?", raised, run_id="r")
    wire = pickle.dumps(failure)
    assert leaks(wire.decode("latin-1")) == [] and leaks(failure.traceback + failure.message) == []
    assert "NoBidHeard" in failure.traceback


SCRIPT = textwrap.dedent('''
    import json, os, sys
    from support.openai_server import OpenAIServer, error
    from fsmchat import Agent, GroupChat

    TASK = "Ship it?"
    P = json.loads(os.environ["PLANTED"])

    def build():
        base = os.environ["SERVER"]
        return GroupChat(agents=[
            Agent("alice", model="openai/test-model", api_base=base, api_key=P["api_key"],
                  extra_headers={"X-Token": P["x_token"], "X-Tenant": P["tenant"]}, num_retries=0),
            Agent("bob", model="openai/test-model", api_base=base, num_retries=0,
                  extra_headers={"Authorization": "Bearer " + P["auth"]}),
            Agent("carol", model="openai/test-model", api_base=base, num_retries=0,
                  aws_secret_access_key=P["aws"], azure_ad_token=P["azure"],
                  vertex_credentials=json.dumps({"private_key": P["vertex"]}))], max_loops=2)

    if __name__ == "__main__":
        build().run(TASK)  # raises: Python prints the traceback
''')


def test_no_secret_on_the_cli(planted_env, tmp_path):
    (tmp_path / "chat.py").write_text(SCRIPT)

    echoes = []

    def echo(body):
        echoes.append(f"upstream refused: headers={json.dumps(srv.records[-1].headers)} environment: {env_dump()}")
        return error(500, echoes[-1])

    planted = {"api_key": API_KEY, "x_token": X_TOKEN, "tenant": TENANT, "auth": AUTH, "aws": AWS, "azure": AZURE,
               "vertex": VERTEX}
    with OpenAIServer(echo) as srv:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", "SERVER": srv.url + "/v1",
               "PLANTED": json.dumps(planted), "COLUMNS": "200"}
        runs = {" ".join(args): subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True,
                                               text=True, timeout=300)
                for args in (["-m", "fsmchat.cli", "run", "chat.py"],
                             ["-m", "fsmchat.cli", "run", "chat.py", "--json", "--checkpoint", "cli.db"],
                             ["-m", "fsmchat.cli", "report", "r", "--db", "cli.db", "-o", "cli.html"],
                             ["chat.py"])}
    assert [s for s in SENT_OVER_HTTP if s not in "".join(echoes)] == []  # the secrets were sent, and echoed
    found = {cmd: leaks(p.stdout + p.stderr) for cmd, p in runs.items()}
    assert {k: v for k, v in found.items() if v} == {}
    assert runs["chat.py"].returncode == 1 and "Traceback" in runs["chat.py"].stderr
    assert "NoBidHeard" in runs["-m fsmchat.cli run chat.py"].stderr
    assert json.loads(runs["-m fsmchat.cli run chat.py --json --checkpoint cli.db"].stdout)["stop_reason"] == "error"


def test_what_counts_as_a_secret():
    """The values an agent's options hold as credentials or headers, and nothing else."""
    options = {"api_key": "k-0123456789", "temperature": 0.2, "api_base": "http://127.0.0.1:9/v1",
               "extra_headers": {"X-Region": "eu-west-1", "Authorization": "Bearer tok-0123456789"},
               "aws_secret_access_key": "aws-0123456789", "extra_body": {"user": "ann", "auth_token": "t-0123456789"},
               "vertex_credentials": json.dumps({"type": "service_account", "private_key": "pk-0123456789"})}
    assert secret_values(options) == [
        "k-0123456789", "eu-west-1", "Bearer tok-0123456789", "tok-0123456789", "aws-0123456789", "t-0123456789",
        json.dumps({"type": "service_account", "private_key": "pk-0123456789"}), "pk-0123456789"]


def test_registered_and_environment_secrets_are_masked_in_any_text(monkeypatch):
    monkeypatch.setenv("MISTRAL_API_KEY", "mistral-value-123")
    monkeypatch.setenv("DEPLOY_REGION", "plain-value-456")
    Agent("dave", api_key="agent-value-789", extra_headers={"X-Trace": "trace-value-000"})
    text = "saw mistral-value-123, plain-value-456, agent-value-789 and trace-value-000 (short: abc)"
    assert redact(text) == "saw ***, plain-value-456, *** and *** (short: abc)"


def test_the_chain_is_masked_in_place():
    secret = "chain-value-" + "4242"  # never written whole in this file: tracebacks print source lines
    Agent("erin", api_key=secret)
    try:
        try:
            raise OSError(5, f"device said {secret}")
        except OSError:
            raise ValueError({"detail": secret})
    except ValueError as outer:
        outer.add_note(f"note: {secret}")
        redact_chain(outer)
        text = "".join(traceback.format_exception(outer))
    assert secret not in text
    assert "OSError: [Errno 5] device said ***" in text and "ValueError: {'detail': '***'}" in text
    assert text.endswith("note: ***\n")


@pytest.mark.parametrize("plain", [
    "MissingCredentials: missing credentials: agents 'a', 'b' (model 'gpt-4o-mini') need OPENAI_API_KEY.",
    "AuthenticationError: Incorrect API key provided [authentication, not retried: check the API key]",
    "ModelCallError: ... [missing_credentials, not retried: no API key was found for this provider]",
    "use max_tokens=5, budget_tokens: 64; tokens: 120",
    "TokenError: the tokenizer failed",
    "Key: the main point is that the release slipped. Token: the smallest unit a model reads.",
])
def test_fsmchat_texts_are_not_mistaken_for_secrets(plain):
    assert redact(plain) == plain
