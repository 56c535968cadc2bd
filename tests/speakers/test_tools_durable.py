"""Tool calls are durable and never repeated: a committed result is never asked for again; a call
cut off by a dead process is run again only when its tool is idempotent, otherwise a person
decides at the drawn wait point. And people approve, edit or reject calls before they run."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fsmchat import Approve, Edit, MemoryCheckpointer, Reject, RoundRobinSwarm, Say, Tool
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.speakers.human import NeedsCheckpoint
from fsmchat.testing import ScriptedModel, ToolCall, assert_trace_is_path

PAID: list[int] = []


def pay(amount: int) -> str:
    """Pay an amount.

    Args:
        amount: How much.
    """
    PAID.append(amount)
    return f"paid {amount}"


@pytest.fixture(autouse=True)
def _clear():
    PAID.clear()


def shop(script, tool, **kw):
    m = ScriptedModel(script)
    return m, RoundRobinSwarm(agents=[m.agent("a", tools=[tool]), m.agent("b")], **kw)


def test_an_approval_tool_waits_with_the_call_and_runs_once_approved():
    m, rr = shop({"a": [ToolCall("pay", {"amount": 5}, id="c1"), "Paid."], "b": ["ok"]}, Tool(pay, approval=True))
    assert rr.graph.states["approve_a"].waits
    with pytest.raises(NeedsCheckpoint, match="waits for a person at approve_a"):
        rr.execute("pay")  # a run that may wait for a person needs a checkpoint
    store = MemoryCheckpointer()
    r = rr.execute("pay", checkpoint=store, run_id="p")
    assert r.stop_reason == "interrupted" and PAID == []
    assert r.path == ["seed", "a", "tools_a", "approve_a"]
    p = r.pending
    assert (p.state, p.kind, p.proposed) == ("approve_a", "tool_call",
                                             {"speaker": "a", "tool": "pay", "arguments": {"amount": 5}, "call_id": "c1"})
    assert list(p.allowed) == ["approve", "edit", "reject"] and p.edit == "arguments"
    done = rr.resume("p", store, input=Approve())
    assert done.ok and PAID == [5] and [x.content for x in done.transcript] == ["pay", "Paid.", "ok"]
    assert done.transcript[1].tool_calls[0].result == "paid 5"
    assert_trace_is_path(rr.graph, done)


def test_edit_arguments_are_checked_against_the_schema_and_reject_tells_the_model_why():
    m, rr = shop({"a": [ToolCall("pay", {"amount": 5}), "Paid."], "b": ["ok"]}, Tool(pay, approval=True))
    store = MemoryCheckpointer()
    rr.execute("pay", checkpoint=store, run_id="e")
    again = rr.resume("e", store, input=Edit(arguments={"amount": "lots"}))
    assert again.stop_reason == "interrupted" and PAID == []
    assert "the edited arguments were refused: invalid arguments for pay: amount:" in again.pending.prompt
    done = rr.resume("e", store, input=Edit(arguments={"amount": 7}))
    assert done.ok and PAID == [7] and done.transcript[1].tool_calls[0].arguments == {"amount": 7}

    m2, rr2 = shop({"a": [ToolCall("pay", {"amount": 5}), "Not paid."], "b": ["ok"]}, Tool(pay, approval=True))
    store2 = MemoryCheckpointer()
    rr2.execute("pay", checkpoint=store2, run_id="r")
    done2 = rr2.resume("r", store2, input=Reject("over the limit"))
    assert done2.ok and PAID == [7]  # the rejected call never ran
    assert m2.requests_of("a")[1].messages[-1]["content"] == "rejected: over the limit"
    assert done2.transcript[1].tool_calls[0].status == "rejected"


def test_interrupt_before_tools_makes_every_call_wait():
    m, rr = shop({"a": [ToolCall("pay", {"amount": 1}), "ok"], "b": ["ok"]}, pay, interrupt_before=["tools"])
    assert rr.graph.states["approve_a"].waits and rr.interrupt_before == ()
    store = MemoryCheckpointer()
    r = rr.execute("go", checkpoint=store, run_id="t")
    assert r.pending.kind == "tool_call" and PAID == []
    assert rr.resume("t", store, input=Approve()).ok and PAID == [1]


KILL_SCRIPT = textwrap.dedent('''
    import os, sys
    from fsmchat import RoundRobinSwarm, Tool
    from fsmchat.store.checkpoint import SqliteCheckpointer
    from fsmchat.testing import FunctionModel, ToolCall
    db, log, idempotent, where = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
    def pay(amount: int) -> str:
        """Pay an amount."""
        with open(log, "a") as f:
            f.write(f"pay {amount}\\n")
        if where == "call":  # the payment went out; its result was never committed
            os.kill(os.getpid(), signal_kill)
        return f"paid {amount}"
    signal_kill = 9
    def answer(req):
        if req.agent == "a" and req.n == 1:
            return ToolCall("pay", {"amount": 5}, id="c1")
        if req.agent == "a" and where == "commit":  # the result is committed: die before the reply
            os.kill(os.getpid(), signal_kill)
        return "done"
    m = FunctionModel(answer, id="kill-model")
    rr = RoundRobinSwarm(agents=[m.agent("a", tools=[Tool(pay, idempotent=idempotent)]), m.agent("b")])
    rr.execute("pay", checkpoint=SqliteCheckpointer(db), run_id="k")
''')


def killed_run(tmp_path, idempotent, where):
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    db, log = tmp_path / "k.db", tmp_path / "pay.log"
    proc = subprocess.run([sys.executable, str(script), str(db), str(log), "1" if idempotent else "0", where],
                          env={**os.environ}, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert log.read_text() == "pay 5\n"  # the call ran once before the process died
    return SqliteCheckpointer(db), log


def resumer(log, idempotent):
    def pay_again(amount: int) -> str:
        """Pay an amount."""
        with open(log, "a") as f:
            f.write(f"pay {amount}\n")
        return f"paid {amount}"
    pay_again.__name__ = "pay"
    m = ScriptedModel({"a": ["Paid."], "b": ["ok"]}, id="kill-model")
    return m, RoundRobinSwarm(agents=[m.agent("a", tools=[Tool(pay_again, idempotent=idempotent)]), m.agent("b")])


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_committed_result_is_never_asked_again(tmp_path, idempotent):
    store, log = killed_run(tmp_path, idempotent, "commit")
    m, rr = resumer(log, idempotent)
    r = rr.resume("k", store)
    assert r.ok, r.error
    assert log.read_text() == "pay 5\n"  # not repeated
    assert [x.content for x in r.transcript] == ["pay", "Paid.", "ok"]
    assert r.transcript[1].tool_calls[0].result == "paid 5"
    assert m.requests_of("a")[0].messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "paid 5"}


def test_an_uncommitted_idempotent_call_is_run_again(tmp_path):
    store, log = killed_run(tmp_path, True, "call")
    m, rr = resumer(log, True)
    r = rr.resume("k", store)
    assert r.ok and log.read_text() == "pay 5\npay 5\n"
    assert [x.content for x in r.transcript] == ["pay", "Paid.", "ok"]


def test_an_uncommitted_call_of_a_tool_that_is_not_idempotent_waits_for_a_person(tmp_path):
    store, log = killed_run(tmp_path, False, "call")
    m, rr = resumer(log, False)
    r = rr.resume("k", store)
    assert r.stop_reason == "interrupted" and log.read_text() == "pay 5\n" and m.calls() == 0
    p = r.pending
    assert (p.state, p.kind, p.proposed["tool"], p.proposed["arguments"]) == ("approve_a", "tool_call", "pay",
                                                                               {"amount": 5})
    assert list(p.allowed) == ["approve", "say", "reject"]
    assert "may have run before the run stopped" in p.prompt
    done = rr.resume("k", store, input=Say("paid 5 (bank statement)"))
    assert done.ok and log.read_text() == "pay 5\n"  # the person supplied the result: not run again
    assert m.requests_of("a")[0].messages[-1]["content"] == "paid 5 (bank statement)"


def test_a_person_may_approve_the_re_run(tmp_path):
    store, log = killed_run(tmp_path, False, "call")
    m, rr = resumer(log, False)
    rr.resume("k", store)
    done = rr.resume("k", store, input=Approve())
    assert done.ok and log.read_text() == "pay 5\npay 5\n"


def test_a_flow_with_interrupt_before_tools_waits_at_its_drawn_point():
    from fsmchat import AgentFlow

    m = ScriptedModel({"a": [ToolCall("pay", {"amount": 3}), "Paid."]})
    flow = AgentFlow(steps=[m.agent("a", tools=[pay])], interrupt_before=["tools"])
    assert flow.graph.states["approve_a"].waits
    plain = AgentFlow(steps=[m.agent("a", tools=[pay])])
    assert not plain.graph.states["approve_a"].waits
    store = MemoryCheckpointer()
    r = flow.execute("pay", checkpoint=store, run_id="f")
    assert r.pending.kind == "tool_call" and r.pending.state == "approve_a" and PAID == []
    done = flow.resume("f", store, input=Approve())
    assert done.ok and PAID == [3]


def test_fsmchat_run_leaves_a_tool_call_waiting_and_resume_set_edits_its_arguments(tmp_path):
    import json
    import shlex

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "FSMCHAT_MODEL" and not k.endswith("_API_KEY")}
    env.update(PYTHONPATH=root, LITELLM_LOCAL_MODEL_COST_MAP="True", NO_COLOR="1", COLUMNS="200")
    example = os.path.join(root, "examples", "tools.py")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "fsmchat.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, env=env, timeout=300)

    first = cli("run", example, "--checkpoint", "runs.db", "--no-input")
    assert first.returncode == 3, first.stderr[-2000:]
    assert "-- waiting for a person at approve_chair (tool_call): Chair asks to call publish_decision(" in \
        first.stdout + first.stderr
    lines = [ln for ln in first.stderr.splitlines() if ln.strip().startswith("fsmchat resume ")]
    (set_line,) = [ln for ln in lines if " --set " in ln]
    # the hint names the waiting call's own arguments, with the values proposed
    assert set_line.split("#")[0].rstrip().endswith(
        "--set 'summary=Should our 120-person team try a four-day week?'"), set_line
    base = shlex.split(set_line.split("#")[0])[1:-2]
    wrong = cli(*base, "--set", "sumary=Try it.", "--no-input")  # a typo: refused, the run still waits
    assert wrong.returncode == 3
    assert "(the edited arguments were refused: invalid arguments for publish_decision: sumary: Extra inputs are " \
           "not permitted)" in wrong.stderr
    done = cli(*base, "--set", "summary=Try it for one quarter.", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    chair = [m for m in out["transcript"] if m["role"] == "chair"][0]
    assert chair["metadata"]["tool_calls"][0]["arguments"] == {"summary": "Try it for one quarter."}
    assert chair["metadata"]["tool_calls"][0]["result"] == "published to #team"
