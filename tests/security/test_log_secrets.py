"""Secrets never reach a log. A real request over HTTP (litellm -> the OpenAI SDK -> the local
server in tests/support/openai_server.py) at DEBUG, with ``extra_headers`` carrying secrets and an
``api_key``: litellm's request log (its curl command and the request body), the OpenAI SDK's
request options and httpx/httpcore show the header names with ``***`` and never a secret value,
on every handler (the root logger's and litellm's own). Each mode runs in a fresh process, as a
user's script would, so logging state never leaks between tests."""
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from fsmchat.speakers.log_secrets import LOGGERS, SecretLogFilter, install, mask_log_text

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {"X-Api-Token": "tok-AAAA1111", "Cookie": "session=COOKIE2222", "X-Auth-Token": "auth-BBBB3333",
           "Proxy-Authorization": "Basic PROXY4444", "Authorization": "Bearer hdr-CCCC5555"}
API_KEY = "plainkey-DDDD6666"  # no sk- prefix: masked by its name, not by its shape
CORES = ["AAAA1111", "COOKIE2222", "BBBB3333", "PROXY4444", "CCCC5555", "DDDD6666"]

SCRIPT = f"""
import logging, sys
sys.path.insert(0, {str(ROOT / "tests")!r})
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="ROOT %(name)s %(message)s")
from support.openai_server import OpenAIServer, text
from fsmchat import Agent, RoundRobinSwarm
import litellm
mode = sys.argv[1]
if mode == "turn_on_debug":
    litellm._turn_on_debug()
elif mode == "set_verbose":
    litellm.set_verbose = True
with OpenAIServer([], default=text("hello")) as srv:
    agent = Agent("alice", model="openai/test-model", api_base=srv.url + "/v1", api_key={API_KEY!r},
                  extra_headers={SECRETS!r}, num_retries=0)
    result = RoundRobinSwarm(agents=[agent], max_loops=1).run("hi")
    sent = {{k.lower(): v for k, v in srv.records[0].headers.items()}}
assert result == "hello", result
assert all(sent.get(k.lower()) == v for k, v in {SECRETS!r}.items() if k != "Authorization"), sent  # still sent
print("DONE", flush=True)
"""


def run_script(mode):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120,
                          cwd=str(ROOT))
    assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("mode", ["basicConfig", "turn_on_debug", "set_verbose"])
def test_no_secret_in_debug_logs_over_http(mode):
    out = run_script(mode)
    assert "POST Request Sent from LiteLLM" in out  # litellm's request log was written
    assert "ROOT openai._base_client Sending HTTP Request: POST" in out  # the OpenAI SDK's, through the root logger
    for core in CORES:
        assert core not in out, f"{core} leaked: ...{out[max(0, out.find(core) - 300):out.find(core) + 50]}"
    for name in SECRETS:  # the names stay readable, their values masked
        assert f"'{name}': '***'" in out
    assert "api_key='***'" in out


def test_the_filter_masks_children_created_later_extras_and_exceptions(caplog):
    """A child logger made after ``install()`` is masked by the record factory (message and
    exception); ``extra`` fields are masked by the filter on the installed loggers."""
    install()
    assert all(any(isinstance(f, SecretLogFilter) for f in logging.getLogger(n).filters) for n in LOGGERS)
    child = logging.getLogger("httpcore.created_after_install_%d" % id(caplog))
    caplog.set_level(logging.DEBUG)
    child.debug("headers %s", {"X-Api-Token": "tok-EEEE7777", "Accept": "json"})
    try:
        raise RuntimeError("failed with Authorization: Bearer FFFF8888")
    except RuntimeError:
        logging.getLogger("fsmchat").exception("call failed", extra={"api_key": "GGGG9999", "note": "x"})
    logging.getLogger("someone.else").debug("not ours: token=HHHH0000")  # other loggers are left alone
    text = caplog.text
    assert "headers {'X-Api-Token': '***', 'Accept': 'json'}" in text and "EEEE7777" not in text
    assert "Authorization: ***" in text and "FFFF8888" not in text
    record = [r for r in caplog.records if r.name == "fsmchat"][0]
    assert (record.api_key, record.note) == ("***", "x")
    assert "not ours: token=HHHH0000" in text


@pytest.mark.parametrize("raw,masked", [
    ("{'X-Api-Token': 'tok-1', 'max_tokens': 5}", "{'X-Api-Token': '***', 'max_tokens': 5}"),
    ('{"Cookie": "a=b; c=d", "model": "m"}', '{"Cookie": "***", "model": "m"}'),
    ("-H 'Proxy-Authorization: Basic abc' -H 'Content-Type: application/json'",
     "-H 'Proxy-Authorization: ***' -H 'Content-Type: application/json'"),
    ("acompletion(api_key='k-123', temperature=0.3)", "acompletion(api_key='***', temperature=0.3)"),
    ("[(b'x-auth-token', b'zz-9'), (b'accept', b'*/*')]", "[(b'x-auth-token', b'***'), (b'accept', b'*/*')]"),
    ("OPENAI_API_KEY=abc123 and more", "OPENAI_API_KEY=*** and more"),
    ("Authorization: Bearer sk-abcdefghij", "Authorization: ***"),
    ("use max_tokens=5, budget_tokens: 64", "use max_tokens=5, budget_tokens: 64"),
])
def test_mask_log_text_shapes(raw, masked):
    assert mask_log_text(raw) == masked
