"""`fsmchat run` asks on a real terminal for a tool call that needs approval: the run of
examples/tools.py is spawned on a pseudo-terminal (stdin and stdout a tty), the test reads until the
approval prompt appears and answers /approve, /reject REASON or /edit NAME=VALUE, then checks the
run's exit code and its JSON result. Reads wait for text (the timeout only fails the test)."""
import json
import os
import sys

import pytest

pexpect = pytest.importorskip("pexpect", reason="pexpect is needed to drive a pseudo-terminal")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "tools.py")
PROMPT = ("-- waiting for a person at approve_chair (tool_call): Chair asks to call "
          "publish_decision(summary='Should our 120-person team try a four-day week?'): run it?")
SAFETY_S = 300  # only a hung run reaches it: the test then fails


def spawn(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FSMCHAT_MODEL" and not k.endswith("_API_KEY")}
    env.update(PYTHONPATH=ROOT, LITELLM_LOCAL_MODEL_COST_MAP="True", NO_COLOR="1", COLUMNS="200", TERM="dumb")
    return pexpect.spawn(sys.executable, ["-m", "fsmchat.cli", "run", EXAMPLE, "--checkpoint", "runs.db", "--json"],
                         cwd=str(tmp_path), env=env, encoding="utf-8", timeout=SAFETY_S, dimensions=(50, 200))


def answer(tmp_path, *lines):
    """Spawn the run, wait for the approval prompt, send ``lines`` (each after a "> " prompt), and
    return (exit code, the run's JSON result, everything the terminal showed)."""
    child = spawn(tmp_path)
    child.expect_exact(PROMPT)
    shown = child.before + child.after
    for line in lines:
        child.expect_exact("> ")
        shown += child.before + child.after
        child.sendline(line)
    child.expect(pexpect.EOF)
    shown += child.before
    child.close()
    text = shown.replace("\r\n", "\n")
    return child.exitstatus, json_of(text), text


def json_of(text):
    """The run's ``--json`` result in what the terminal showed (it starts a line with ``{``)."""
    return json.loads(text[text.index("{\n  \""):text.rindex("\n}\n") + 2])


def chair_call(result):
    [chair] = [m for m in result["transcript"] if m["role"] == "chair"]
    [call] = chair["metadata"]["tool_calls"]
    return call


def test_approve_on_the_terminal_runs_the_call_and_the_run_completes(tmp_path):
    code, result, shown = answer(tmp_path, "/approve")
    assert code == 0 and result["stop_reason"] == "done" and result["pending"] is None
    call = chair_call(result)
    assert (call["name"], call["status"], call["result"]) == ("publish_decision", "done", "published to #team")
    assert call["arguments"] == {"summary": "Should our 120-person team try a four-day week?"}
    assert "   /approve           run the call as proposed" in shown


def test_reject_with_a_reason_on_the_terminal_does_not_run_it_and_the_reason_is_the_result(tmp_path):
    code, result, _ = answer(tmp_path, "/reject not before the board meets")
    assert code == 0 and result["stop_reason"] == "done"
    call = chair_call(result)
    assert (call["status"], call["result"]) == ("rejected", "not before the board meets")


def test_edit_on_the_terminal_checks_the_arguments_and_runs_the_call_with_the_edited_ones(tmp_path):
    code, result, shown = answer(tmp_path, "/edit town=3", "/edit summary=Pilot_it_for_a_quarter.")
    assert "the edited arguments were refused" in shown  # the schema refused town=3; the prompt came again
    assert code == 0 and result["stop_reason"] == "done"
    call = chair_call(result)
    assert call["arguments"] == {"summary": "Pilot_it_for_a_quarter."}
    assert (call["status"], call["result"]) == ("done", "published to #team")


def test_end_of_input_on_the_terminal_leaves_the_run_waiting_with_exit_code_3(tmp_path):
    child = spawn(tmp_path)
    child.expect_exact(PROMPT)
    child.expect_exact("> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    text = child.before.replace("\r\n", "\n")
    child.close()
    assert child.exitstatus == 3
    assert json_of(text)["pending"]["kind"] == "tool_call"
