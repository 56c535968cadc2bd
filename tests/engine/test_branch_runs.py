"""Fork states run their branches as child runs of the one runner: traced under qualified names,
streamed, checkpointed per branch, lit in the render overlay, and resumed without repeating a
finished branch's model calls."""
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from fsmchat import Agent
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer
from fsmchat.flow import AgentFlow, Discussion, loop, parallel
from fsmchat.testing import ScriptedModel, assert_trace_is_path


def two_branch_flow(model):
    a1, a2 = Agent("a1", model=model), Agent("a2", model=model)
    b1, b2 = Agent("b1", model=model), Agent("b2", model=model)
    return AgentFlow(steps=[parallel([Discussion([a1, a2], rounds=1, name="left"),
                                      Discussion([b1, b2], rounds=1, name="right")]),
                            lambda ctx: "joined"], name="fan")


def test_branch_steps_are_traced_streamed_and_checked_as_paths():
    sm = ScriptedModel({"a1": ["x"], "a2": ["y"], "b1": ["z"], "b2": ["w"]})
    flow = two_branch_flow(sm.model)
    seen = []
    res = flow.execute("go", observers=[seen.append])
    assert res.ok and res.stop_reason == "done", res.error
    assert res.path == ["parallel", "lambda", "end"]  # the top-level run
    assert res.paths["parallel|1"] == ["parallel|1.left.begin", "parallel|1.left.turn", "parallel|1.left.turn",
                                       "parallel|1.left.done", "parallel|1.done"]
    assert res.paths["parallel|2"][0] == "parallel|2.right.begin" and res.paths["parallel|2"][-1] == "parallel|2.done"
    assert sorted(res.paths) == ["", "parallel|1", "parallel|2"]
    assert seen == res.trace  # the observers saw every step, the branches' included, in order
    assert_trace_is_path(flow.graph, res)
    dot = flow.graph.to_dot(trace=res)
    assert '"parallel|1.left.turn" [label="turn' in dot and 'fillcolor=lightblue' in dot
    node = re.search(r'"parallel\|2\.right\.turn" \[label="turn[^\]]*\]', dot).group(0)
    assert "lightblue" in node  # a branch state that ran is lit
    mmd = flow.graph.to_mermaid(trace=res)
    assert "parallel_1_left_turn" in mmd.splitlines()[-1]  # the visited class lists branch states


def test_stream_yields_branch_steps():
    sm = ScriptedModel({"a1": ["x"], "a2": ["y"], "b1": ["z"], "b2": ["w"]})
    flow = two_branch_flow(sm.model)

    async def collect():
        return [item async for item in flow.stream("go")]

    items = asyncio.run(collect())
    states = [getattr(i, "state", None) for i in items]
    assert "parallel|1.left.turn" in states and "parallel|2.right.turn" in states


def test_parallel_loop_items_are_child_runs_named_by_item():
    seen = []

    def work(ctx):
        seen.append(ctx.variables["item"])
        return f"did {ctx.variables['item']}"

    flow = AgentFlow(steps=[loop(work, over="items", parallel=True)], variables={"items": ["a", "b", "c"]})
    res = flow.execute("go")
    assert res.ok and sorted(seen) == ["a", "b", "c"]
    assert sorted(k for k in res.paths if k) == ["loop|1[0]", "loop|1[1]", "loop|1[2]"]
    assert res.paths["loop|1[1]"] == ["loop|1[1].work", "loop|1[1].done"]
    assert_trace_is_path(flow.graph, res)
    assert "item" not in res.output["variables"] and "loop_index" not in res.output["variables"]


def test_checkpoint_records_each_branch_in_its_own_lane():
    sm = ScriptedModel({"a1": ["x"], "a2": ["y"], "b1": ["z"], "b2": ["w"]})
    cp = MemoryCheckpointer()
    res = two_branch_flow(sm.model).execute("go", checkpoint=cp, run_id="R")
    assert res.ok
    assert sorted(cp.data) == ["R", "R/0:parallel|1", "R/0:parallel|2"]
    lane = cp.data["R/0:parallel|1"]
    assert [e.state for e in lane.events][:2] == ["parallel|1.left.begin", "parallel|1.left.turn"]
    assert [m.content for m in lane.messages] == ["x", "y"] and lane.stop_reason == "done"
    assert [m.content for m in cp.data["R"].messages] == ["x", "y", "z", "w", "joined"]


KILLED_FLOW = textwrap.dedent('''
    import os, signal, sys, threading
    from fsmchat import Agent
    from fsmchat.store.checkpoint import SqliteCheckpointer
    from fsmchat.flow import AgentFlow, Discussion, parallel
    from fsmchat.testing import Delay, FunctionModel

    def reply(request):
        agent = request.agent
        if agent == "b2" and os.environ.get("KILL_AT_B2"):
            # b2's first call hangs; meanwhile branch "left" runs to its end; then the process dies
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
            return Delay(60)
        with open(sys.argv[2], "a") as log:
            log.write(agent + "\\n")
        return f"{agent} says hi"

    fm = FunctionModel(reply)
    m = fm.model
    flow = AgentFlow(steps=[parallel([Discussion([Agent("a1", model=m), Agent("a2", model=m)], rounds=2, name="left"),
                                      Discussion([Agent("b1", model=m), Agent("b2", model=m)], rounds=2, name="right")]),
                            lambda ctx: "joined"], name="fan")
    cp = SqliteCheckpointer(sys.argv[1])
    if sys.argv[3] == "run":
        r = flow.execute("go", checkpoint=cp, run_id="R")
    else:
        r = flow.resume("R", cp)
    print(r.stop_reason, len(r.transcript), r.ok, r.error, r.calls)
''')


def test_resume_after_a_kill_mid_fork_repeats_no_model_call(tmp_path):
    script = tmp_path / "flow.py"
    script.write_text(KILLED_FLOW)
    db, log = tmp_path / "runs.db", tmp_path / "calls.log"
    env = {**os.environ, "KILL_AT_B2": "1"}
    first = subprocess.run([sys.executable, str(script), str(db), str(log), "run"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stderr
    calls_before = log.read_text().split()
    assert sorted(calls_before) == ["a1", "a1", "a2", "a2", "b1"]  # "left" finished, "right" mid-way
    env.pop("KILL_AT_B2")
    second = subprocess.run([sys.executable, str(script), str(db), str(log), "resume"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    stop, posted, ok, error, reported = second.stdout.split()
    assert (stop, posted, ok, error) == ("done", "9", "True", "None")  # 8 discussion turns + "joined"
    calls = log.read_text().split()
    # every agent spoke exactly twice across both processes: nothing finished was re-run
    assert sorted(calls) == sorted(["a1", "a2", "b1", "b2"] * 2), calls
    assert int(reported) == len(calls) == 8  # result.calls: the calls the model answered, each once
    lanes = SqliteCheckpointer(db).runs()
    assert lanes == ["R", "R/0:parallel|1", "R/0:parallel|2"]


KILLED_AT_CALL = textwrap.dedent('''
    import json, os, signal, sys
    from fsmchat import Agent
    from fsmchat.store.checkpoint import SqliteCheckpointer
    from fsmchat.flow import AgentFlow, Discussion, loop, parallel
    from fsmchat.testing import FunctionModel

    db, log, mode, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    asked = [0]

    def reply(request):
        asked[0] += 1
        if mode == "run" and asked[0] == kill_at:  # the process dies with this request unanswered
            os.kill(os.getpid(), signal.SIGKILL)
        text = f"{request.agent} answers {mode} call {asked[0]}"
        with open(log, "a") as f:
            f.write(json.dumps([mode, text]) + "\\n")
        return text

    m = FunctionModel(reply).model

    def pair(x, rounds, name):
        return Discussion([Agent(x + "1", model=m), Agent(x + "2", model=m)], rounds=rounds, name=name)

    flow = AgentFlow(steps=[Agent("intro", model=m),
                            parallel([pair("a", 3, "left"),  # 6 calls
                                      loop(steps=[pair("b", 2, "item")], over="items", parallel=True)]),  # 3 x 4
                            Agent("sum", model=m), Agent("fin", model=m)],
                     variables={"items": ["x", "y", "z"]}, name="fan")
    cp = SqliteCheckpointer(db)
    r = flow.execute("go", checkpoint=cp, run_id="R") if mode == "run" else flow.resume("R", cp)
    print(json.dumps({"ok": r.ok, "calls": r.calls, "transcript": [m.content for m in r.transcript]}))
''')


@pytest.mark.parametrize("kill_at", [3, 8, 12, 17])
def test_a_resumed_flow_with_parallel_counts_each_call_it_made_once(tmp_path, kill_at):
    """Killed at its k-th model request and resumed, a flow with nested parallel branches reports
    the calls the model answered for it: those the run kept from the killed process (their
    replies are in the transcript) plus every call of the resumed one; 21 in all, as uninterrupted."""
    script = tmp_path / "flow.py"
    script.write_text(KILLED_AT_CALL)
    db, log = tmp_path / "runs.db", tmp_path / "calls.log"
    first = subprocess.run([sys.executable, str(script), str(db), str(log), "run", str(kill_at)],
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = subprocess.run([sys.executable, str(script), str(db), str(log), "resume", "0"],
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    out = json.loads(second.stdout.splitlines()[-1])
    answered = [json.loads(line) for line in log.read_text().splitlines()]
    kept = [text for mode, text in answered if mode == "run" and text in out["transcript"]]
    resumed = [text for mode, text in answered if mode == "resume"]
    assert len(answered) - len(resumed) == kill_at - 1  # the killed process's answered calls
    assert out["ok"] and out["calls"] == len(kept) + len(resumed) == 21, (out["calls"], len(kept), len(resumed))
