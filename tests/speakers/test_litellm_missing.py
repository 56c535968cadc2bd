"""Without litellm installed (``make demo``'s environment installs only what an offline run
imports), offline and fast-path runs work, and whatever needs litellm fails saying so: it is not
installed, why the call needs it, and how to install it; never a bare ``ModuleNotFoundError``."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.openai_server import OpenAIServer, error, text  # noqa: E402

MISSING = ("litellm is not installed in this environment, and this call needs it (a provider the fast path does "
           "not serve, transport='litellm', litellm callbacks, or the error of a failed request, which is "
           "litellm's). Install it with pip install -e . (in this repository: make install); make demo installs "
           "only what an offline run imports.")

SCRIPT = textwrap.dedent('''
    import json, sys
    sys.modules["litellm"] = sys.modules["tiktoken"] = None  # as if not installed: importing them raises
    from fsmchat import Agent, RoundRobinSwarm

    def outcome(agent):
        try:
            r = RoundRobinSwarm(agents=[agent], max_loops=1).execute("Hello there")
        except Exception as exc:
            return ["raised", type(exc).__name__, str(exc)]
        return ["result", r.ok, r.stop_reason, type(r.error).__name__, str(r.error), r.output]

    out = {"offline": outcome(Agent("A", system_prompt="You are A."))}
    out["counted"] = outcome(Agent("A", system_prompt="You are A.", max_input_tokens=1000))  # no tokenizer
    out["other provider"] = outcome(Agent("A", model="anthropic/claude-3-haiku-20240307", api_key="sk-ant-12345678"))
    out["fast path"] = outcome(Agent("A", model="openai/m", api_base=sys.argv[1], api_key="sk-12345678",
                                     num_retries=0))
    out["fast path failing"] = outcome(Agent("A", model="openai/m", api_base=sys.argv[2], api_key="sk-12345678",
                                             num_retries=0))
    out["litellm"] = sys.modules["litellm"]
    print(json.dumps(out))
''')


def test_without_litellm_offline_and_fast_path_runs_work_and_a_call_that_needs_it_says_how_to_install_it():
    good = OpenAIServer(lambda req: text("Hi from the server."))
    bad = OpenAIServer(lambda req: error(500, "the server broke"))
    good.start()
    bad.start()
    try:
        env = {k: v for k, v in os.environ.items() if k != "FSMCHAT_MODEL"}
        env.update(PYTHONPATH=str(ROOT), FSMCHAT_CHECK_KEYS="1")
        proc = subprocess.run([sys.executable, "-c", SCRIPT, good.api_base, bad.api_base], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=120)
    finally:
        good.stop()
        bad.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["offline"][:3] == ["result", True, "max_loops"]
    assert out["other provider"] == ["raised", "ImportError", MISSING]  # before any request
    assert out["counted"][:5] == ["result", False, "error", "ImportError", MISSING]  # its prompt cannot be counted
    assert out["fast path"] == ["result", True, "max_loops", "NoneType", "None", "Hi from the server."]
    assert out["fast path failing"][:3] == ["result", False, "error"]
    assert out["fast path failing"][3:5] == [  # what failed, then why it is not litellm's exception
        "ModelCallError", "model call for agent 'A' (model 'openai/m') failed after 1 attempt(s): ImportError: the "
        f"request failed (Error code: 500 - the server broke); {MISSING}"]
    assert (len(good.requests), len(bad.requests)) == (1, 1)
    assert out["litellm"] is None  # nothing imported it behind the test's back
