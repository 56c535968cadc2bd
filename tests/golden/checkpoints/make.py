"""The runs whose SQLite checkpoint files are kept here, written by fsmchat's first delta format,
so a newer fsmchat must still load and resume them (tests/test_golden_checkpoints.py).

``python tests/golden/checkpoints/make.py`` wrote them once; it is kept to show what each file is,
not to be run again (a new run would be written in the current format)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fsmchat import Agent, GroupChat, Human, RoundRobinSwarm
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.flow import AgentFlow, Discussion, parallel
from fsmchat.testing import Fail, ScriptedModel

HERE = Path(__file__).resolve().parent


def group_chat() -> GroupChat:
    """Three offline agents; a person reviews each post (the run waits before every post)."""
    return GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs."),
                             Agent("c", system_prompt="You love birds and feathers.")], max_loops=3,
                     interrupt_before=["post"])


FAILS = {"at": 0, "calls": 0}  # make(): the strategist's call that fails (0: none)


def analyst(turn: Any) -> str:
    return "Data first."


def strategist(turn: Any) -> str:
    FAILS["calls"] += 1
    if FAILS["calls"] == FAILS["at"]:
        raise RuntimeError("the strategist's tool is down")
    return "Then the plan."


def round_robin() -> RoundRobinSwarm:
    """Two function agents, three loops; the file's run failed at the strategist's second turn."""
    return RoundRobinSwarm(agents=[analyst, strategist], max_loops=3)


def waiting() -> RoundRobinSwarm:
    """A writer and a person: the file's run waits for the person's answer."""
    return RoundRobinSwarm(agents=[analyst, Human("editor")], max_loops=2)


def branch_model(b2_fails: bool) -> ScriptedModel:
    """The branches' model, under the id the file's run was made with (the first of its process):
    the run's fingerprint names each agent's model by it."""
    return ScriptedModel({"a1": ["x"], "a2": ["y"], "b1": ["z"], "b2": [Fail(400)] if b2_fails else ["w"]},
                         id="scripted-1")


def branches(model: ScriptedModel) -> AgentFlow:
    """Two discussions in parallel, then a join; the file's run failed in the right branch."""
    a1, a2 = Agent("a1", model=model.model), Agent("a2", model=model.model)
    b1, b2 = Agent("b1", model=model.model), Agent("b2", model=model.model)
    return AgentFlow(steps=[parallel([Discussion([a1, a2], rounds=1, name="left"),
                                      Discussion([b1, b2], rounds=1, name="right")]),
                            lambda ctx: "joined"], name="fan")


def make() -> None:
    for name in ("group_chat", "round_robin", "waiting", "branches"):
        (HERE / f"{name}.db").unlink(missing_ok=True)

    def store(name: str) -> SqliteCheckpointer:
        return SqliteCheckpointer(HERE / f"{name}.db")

    cp = store("group_chat")
    assert group_chat().execute("pets?", checkpoint=cp, run_id="chat").stop_reason == "interrupted"
    cp.close()

    cp = store("round_robin")
    FAILS["at"] = 2
    assert round_robin().execute("Plan the launch.", checkpoint=cp, run_id="plan").stop_reason == "error"
    FAILS["at"] = 0
    assert round_robin().execute("Plan again.", checkpoint=cp, run_id="done").stop_reason == "max_loops"
    cp.close()

    cp = store("waiting")
    assert waiting().execute("Announce the launch.", checkpoint=cp, run_id="launch").stop_reason == "interrupted"
    cp.close()

    cp = store("branches")
    res = branches(branch_model(True)).execute("go", checkpoint=cp, run_id="fan")
    assert res.stop_reason == "error", res.stop_reason
    cp.close()


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    make()
