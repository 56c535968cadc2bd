"""``deadline_s`` ends every pattern with stop reason "deadline" and the transcript so far, whether
the slow participant is a model call, a sync callable (abandoned in its thread) or an async one
(cancelled). The first turns are fast; a later one outlives the deadline."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from fsmchat import AgentFlow, Discussion, ExpertPanelDiscussion, GroupChat, OneOnOneDebate, RoundRobinSwarm
from fsmchat.testing import Bid, Delay, ScriptedModel

DEADLINE = 1.0  # time enough for the fast turns on a loaded machine
HANG = 3600  # seconds a slow participant would take: only the deadline ends the run before that
RELEASE = threading.Event()  # set when the module's tests are done: frees the abandoned sync calls


@pytest.fixture(scope="module", autouse=True)
def release_abandoned_calls():
    yield
    RELEASE.set()


class Slow:
    """A participant that answers ``fast`` times at once, then hangs for ``HANG`` seconds."""

    def __init__(self, name: str, kind: str, fast: int, bid: bool = False):
        self.__name__ = self.name = name
        self.kind, self.fast, self.bid, self.calls = kind, fast, bid, 0
        self.lock = threading.Lock()

    def answer(self) -> object:
        return Bid(0.9, f"{self.name} {self.calls}") if self.bid else f"{self.name} {self.calls}"

    def __call__(self, turn):
        with self.lock:
            self.calls += 1
            late = self.calls > self.fast
        if self.kind == "async":
            async def reply():
                if late:
                    await asyncio.sleep(HANG)
                return self.answer()
            return reply()
        if late:
            RELEASE.wait(HANG)
        return self.answer()


def scripted(names, fast, bid=False):
    """Model-backed agents: each answers ``fast`` times at once, then after ``HANG`` seconds."""
    def item(n, name):
        answer = Bid(0.9, f"{name} {n}") if bid else f"{name} {n}"
        return answer if n <= fast else Delay(HANG, answer)
    m = ScriptedModel(fn=lambda req: item(req.n, req.agent))
    return [m.agent(n) for n in names]


def speakers(kind, names, fast, bid=False):
    if kind == "model":
        return scripted(names, fast, bid)
    return [Slow(n, kind, fast, bid) for n in names]


def group_chat(kind):  # round 1: a wins and posts; round 2: every bid hangs
    a, b = speakers(kind, ["a", "b"], fast=1, bid=True)
    return GroupChat(agents=[a, b], max_loops=10), ["t", "a 1"]


def round_robin(kind):  # a and b speak once, then a hangs on its second turn
    return RoundRobinSwarm(agents=speakers(kind, ["a", "b"], fast=1), max_loops=3), ["t", "a 1", "b 1"]


def debate(kind):
    return OneOnOneDebate(max_loops=4, agents=speakers(kind, ["a", "b"], fast=1), send_intros=False,
                          output_type="list"), ["a 1", "b 1"]


def panel(kind):  # briefing (1 call each), then the moderator's opener hangs
    e1, e2, m = speakers(kind, ["e1", "e2", "m"], fast=1)
    return ExpertPanelDiscussion(max_rounds=2, agents=[e1, e2], moderator=m), []


def discussion(kind):
    if kind == "model":
        a, b = scripted(["a", "b"], fast=1)
    else:  # flow speakers take (ctx)
        a, b = Slow("a", kind, 1), Slow("b", kind, 1)
    return AgentFlow(steps=[Discussion([a, b], rounds=3)]), ["a 1", "b 1"]


@pytest.fixture(scope="module", autouse=True)
def warm_litellm():
    """Import litellm and make one call before the clocks start (its first call costs seconds)."""
    RoundRobinSwarm(agents=scripted(["warm"], fast=1)).run("t")


@pytest.mark.parametrize("kind", ["model", "sync", "async"])
@pytest.mark.parametrize("make", [group_chat, round_robin, debate, panel, discussion],
                         ids=["group_chat", "round_robin", "debate", "panel", "discussion"])
def test_a_slow_participant_ends_the_run_at_the_deadline(make, kind):
    pattern, posted = make(kind)
    pattern.with_limits(deadline_s=DEADLINE)
    r = pattern.execute("t")
    assert r.stop_reason == "deadline", (r.stop_reason, r.error)
    assert r.error is None and r.path[-1] == "past_deadline"
    assert [m.content for m in r.transcript] == posted  # everything posted before the deadline is kept


COLD_PROCESS = textwrap.dedent('''
    import json, sys
    import fsmchat
    from fsmchat import Agent, RoundRobinSwarm
    from fsmchat.cli.live import LiveRun
    from fsmchat.speakers import llm

    assert "litellm" not in sys.modules, "import fsmchat imported litellm"
    seen = {}

    class Watch:  # sees litellm's first import begin, in the thread that imports it
        def find_spec(self, name, path=None, target=None):
            if name == "litellm" and "status" not in seen:
                seen["status"] = LiveRun(status=False).line().split(" · ")[0]
            return None

    sys.meta_path.insert(0, Watch())

    def started(ctx):  # the run's clock has just started
        seen["litellm_at_start"] = "litellm" in sys.modules and not llm.loading()

    # transport="litellm": the offline model through litellm (it otherwise answers in process, without it)
    chat = RoundRobinSwarm(agents=[Agent("A", system_prompt="You plan.", transport="litellm"),
                                   Agent("B", system_prompt="You build.", transport="litellm")],
                           max_loops=1000).with_limits(deadline_s=float(sys.argv[1]))
    r = chat.execute("Ship it?", on_start=[started])
    print(json.dumps({**seen, "stop": r.stop_reason, "posts": len(r.transcript) - 1}))
''')


def test_a_cold_process_imports_litellm_before_the_deadline_clock_starts(tmp_path):
    """In a fresh process litellm's first import (seconds, more under load) happens before the run's
    clock starts, with the live status saying so: the deadline then cuts the model's turns, not
    the import (the run posts replies and stops at "deadline")."""
    script = tmp_path / "cold.py"
    script.write_text(COLD_PROCESS)
    env = {**os.environ, "FSMCHAT_OFFLINE_DELAY": "0.2"}
    proc = subprocess.run([sys.executable, str(script), "3"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["status"] == "loading litellm"
    assert out["litellm_at_start"] is True
    assert out["stop"] == "deadline" and out["posts"] >= 1, out
