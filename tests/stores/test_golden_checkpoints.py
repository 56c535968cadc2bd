"""Checkpoint files written by an earlier fsmchat (tests/golden/checkpoints/, made by its make.py in
the first delta format) still load, list, show their history and resume to the same result."""
import shutil
import sys
from pathlib import Path

import pytest

from fsmchat import Approve
from fsmchat.store.checkpoint import SqliteCheckpointer

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "checkpoints"
sys.path.insert(0, str(GOLDEN))
import make  # noqa: E402  (the patterns the files were written by)

A = "Since I argue for cats, my question is what getting the cats wrong would cost us in the issue at hand. " \
    "I would like the others to challenge that."
C = "I take a's point about the cats. As I love birds and feathers, I would start from the cats and treat the " \
    "issue at hand as the test of it. Let's keep it concrete."


@pytest.fixture
def golden(tmp_path):
    """A copy of one golden file as a store (the kept file is never written)."""
    opened = []

    def open_copy(name):
        shutil.copy(GOLDEN / f"{name}.db", tmp_path / f"{name}.db")
        opened.append(SqliteCheckpointer(tmp_path / f"{name}.db"))
        return opened[-1]

    yield open_copy
    for cp in opened:
        cp.close()


def test_a_waiting_group_chat_resumes_to_the_same_end(golden):
    cp = golden("group_chat")
    saved = cp.load("chat")
    assert (saved.stop_reason, saved.resume_at, [m.role for m in saved.messages]) == ("interrupted", "before_post",
                                                                                    ["User"])
    assert [s.state for s in cp.history("chat")] == ["seed", "bid", "select", "before_post"]
    res = make.group_chat().resume("chat", cp, input=Approve())
    while res.stop_reason == "interrupted":
        res = make.group_chat().resume("chat", cp, input=Approve())
    assert res.stop_reason == "max_loops"
    assert [(m.role, m.content) for m in res.transcript] == [("User", "pets?"), ("a", A), ("c", C)]
    assert res.path == ["seed", "bid", "select", "before_post", "post", "penalize", "bid", "select", "before_post",
                        "post", "penalize", "stop"]


def test_a_failed_round_robin_resumes_and_a_finished_one_is_rebuilt(golden):
    cp = golden("round_robin")
    assert [(r.run_id, r.status, r.messages) for r in cp.list_runs()] == [("done", "finished", 7),
                                                                         ("plan", "failed", 4)]
    res = make.round_robin().resume("plan", cp)
    assert res.stop_reason == "max_loops"
    assert [m.content for m in res.transcript] == ["Plan the launch."] + ["Data first.", "Then the plan."] * 3
    assert res.path == ["seed", "analyst", "strategist", "analyst", "strategist", "analyst", "strategist", "stop"]
    done = make.round_robin().resume("done", cp)
    assert (done.stop_reason, done.output, len(done.transcript)) == ("max_loops", "Then the plan.", 7)


def test_a_run_waiting_for_a_person_continues_with_the_answers(golden):
    cp = golden("waiting")
    res = make.waiting().resume("launch", cp, input="Approved: ship it.")
    assert res.stop_reason == "interrupted"
    res = make.waiting().resume("launch", cp, input="Done.")
    assert res.stop_reason == "max_loops"
    assert [(m.role, m.content) for m in res.transcript] == [
        ("User", "Announce the launch."), ("analyst", "Data first."), ("editor", "Approved: ship it."),
        ("analyst", "Data first."), ("editor", "Done.")]


def test_a_flow_whose_branch_failed_resumes_without_repeating_the_finished_branch(golden):
    cp = golden("branches")
    assert cp.lanes("fan") == ["fan/0:parallel|1", "fan/0:parallel|2"]
    model = make.branch_model(False)
    res = make.branches(model).resume("fan", cp)
    assert (res.stop_reason, res.path) == ("done", ["parallel", "lambda", "end"])
    assert [(m.role, m.content) for m in res.transcript] == [("a1", "x"), ("a2", "y"), ("b1", "z"), ("b2", "w"),
                                                             ("<lambda>", "joined")]
    assert [model.calls(a) for a in ("a1", "a2", "b1", "b2")] == [0, 0, 0, 1]
