"""A person's answer is applied atomically: a SIGKILL at any point while ``resume(..., input=...)``
runs leaves either the waiting run (the answer can be given again) or the continued run, never a
run that looks waiting with nothing pending. Kill points are deterministic: the resuming process
kills itself (SIGKILL) just before its k-th SQL statement, for every k of the resume."""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from fsmchat import Agent, Approve, Edit, GroupChat, Human, RoundRobinSwarm
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.speakers.human import NotWaiting

EDITED = "EDITED BY A PERSON: cats, with a caveat."
SAID = "Lead: ship it on Monday."


def review_chat():
    """A GroupChat that waits before each post for a person's review."""
    return GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs."),
                             Agent("c", system_prompt="You love birds and feathers.")], max_loops=3,
                     interrupt_before=["post"])


def human_swarm():
    """A RoundRobinSwarm whose second speaker is a person."""
    return RoundRobinSwarm(agents=[Agent("dev", system_prompt="You write the release notes."), Human("Lead"),
                                   Agent("qa", system_prompt="You test the release.")], max_loops=2)


# (pattern factory, its task, the answer under test, the answer of every later wait, what it posts)
CASES = {"group_chat_edit": ("review_chat", "pets?", f"Edit(text={EDITED!r})", "Approve()", ("a", EDITED)),
         "human_say": ("human_swarm", "Ship the release?", repr(SAID), repr("Looks fine."), ("Lead", SAID))}

HARNESS = textwrap.dedent('''
    import json, os, signal, sqlite3, sys, traceback
    sys.path.insert(0, sys.argv[4])
    from fsmchat import Approve, Edit
    from fsmchat.store.checkpoint import SqliteCheckpointer
    import test_answer_atomic as cases

    make, task, answer, _later, _posted = cases.CASES[sys.argv[1]]
    template, out, points = sys.argv[2], sys.argv[3], json.loads(sys.argv[5])
    pattern = getattr(cases, make)
    real_connect = sqlite3.connect
    armed = {"n": None, "kill_at": None}

    def traced(*args, **kwargs):  # every connection the store opens counts the statements it runs
        con = real_connect(*args, **kwargs)

        def count(statement):
            if armed["n"] is not None:
                armed["n"] += 1
                if armed["n"] == armed["kill_at"]:
                    os.kill(os.getpid(), signal.SIGKILL)  # just before the k-th statement runs
        con.set_trace_callback(count)
        return con
    sqlite3.connect = traced
    from fsmchat.speakers.llm import get_litellm
    get_litellm()  # imported once, before the first fork (no thread is running yet)
    outcome = {}
    for k in points:
        db = f"{out}/k{k}.db"
        src, dst = real_connect(template), real_connect(db)
        src.backup(dst)
        src.close(), dst.close()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                store = SqliteCheckpointer(db)
                armed["n"], armed["kill_at"] = 0, k
                pattern().resume("R", store, input=eval(answer))
                with open(f"{out}/count", "w") as f:
                    f.write(str(armed["n"]))
                code = 0
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        outcome[k] = "killed" if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL else \\
            f"exit {os.WEXITSTATUS(status)}"
    print(json.dumps(outcome), flush=True)
''')

TESTS = os.path.dirname(os.path.abspath(__file__))


def harness(tmp_path, case, template, points):
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    out = tmp_path / "kills"
    out.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, str(script), case, str(template), str(out), TESTS, json.dumps(points)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {int(k): v for k, v in json.loads(proc.stdout.splitlines()[-1]).items()}, out, proc.stderr


def finish(make, cp, answer, later):
    """What a person does after a crash: resume; answer the wait the run shows (the first answer
    again if it still waits at the same point), until the run ends."""
    res = make().resume("R", cp)
    asked = []
    while res.stop_reason == "interrupted":
        assert res.pending is not None, "a run that waits must say for what"
        first = POSTED[make.__name__] not in [(m.role, m.content) for m in res.transcript]
        asked.append(res.pending.prompt)
        res = make().resume("R", cp, input=eval(answer if first else later))
    return res, asked


POSTED = {CASES[c][0]: CASES[c][4] for c in CASES}
FIRST_PROMPT = {"review_chat": "a won turn 1: post its message?",
                "human_swarm": "You are Lead, agent 2 of 3 in loop 1 of 2. Previous speaker: dev. Next speaker: qa. "
                               "Other participants: dev, qa.\n\nReview the transcript above and build on the prior "
                               "speaker's contribution. Add your own perspective concisely; if you are the opening "
                               "speaker, address the original task directly.\n\nYour response:"}


def waiting_template(tmp_path, make, task):
    path = tmp_path / "template.db"
    cp = SqliteCheckpointer(path)
    waiting = make().execute(task, checkpoint=cp, run_id="R")
    assert waiting.stop_reason == "interrupted" and waiting.pending.prompt == FIRST_PROMPT[make.__name__]
    cp.close()
    return path, waiting


@pytest.mark.parametrize("case", CASES)
def test_a_sigkill_anywhere_in_an_answered_resume_leaves_the_waiting_or_the_continued_run(tmp_path, case):
    make_name, task, answer, later, posted = CASES[case]
    make = globals()[make_name]
    template, waiting = waiting_template(tmp_path, make, task)
    # the run answered without a crash: what every killed run must end as
    ref_path = tmp_path / "ref.db"
    shutil.copy(template, ref_path)
    ref = SqliteCheckpointer(ref_path)
    reference, ref_asked = finish(make, ref, answer, later)
    assert reference.ok and (posted[0], posted[1]) in [(m.role, m.content) for m in reference.transcript]

    counted, out, errors = harness(tmp_path, case, template, [0])
    assert counted == {0: "exit 0"}, errors[-3000:]
    n = int((out / "count").read_text())
    assert n >= 20, f"the resume ran only {n} SQL statements"
    points = list(range(1, n + 1))  # every statement of the resume: 20+ kill points
    outcomes, out, errors = harness(tmp_path, case, template, points)
    assert outcomes == {k: "killed" for k in points}  # each point was reached, and the process died there

    states = {"waiting": 0, "continued": 0}
    for k in points:
        cp = SqliteCheckpointer(out / f"k{k}.db")
        saved = cp.load("R")
        roles_contents = [(m.role, m.content) for m in saved.messages]
        if saved.stop_reason == "interrupted" and posted not in roles_contents:
            # the waiting run, exactly as before the answer: the answer can be given again
            assert roles_contents == [(m.role, m.content) for m in waiting.transcript], k
            assert make().resume("R", cp).pending.prompt == FIRST_PROMPT[make_name], k
            states["waiting"] += 1
        else:
            # the continued run: the answer is in, once; a resume goes on from it
            assert roles_contents.count(posted) == 1, (k, saved.stop_reason, roles_contents)
            assert saved.stop_reason is None or saved.events[-1].trigger == "interrupted" or saved.finished, k
            if saved.events[-1].trigger != "interrupted":
                with pytest.raises(NotWaiting):  # never answered twice
                    make().resume("R", cp, input=eval(answer))
            states["continued"] += 1
        done, asked = finish(make, cp, answer, later)
        assert done.ok and done.stop_reason == reference.stop_reason, k
        assert [(m.role, m.content) for m in done.transcript] == [(m.role, m.content) for m in reference.transcript], k
        assert [(m.role, m.content) for m in done.transcript].count(posted) == 1, k
        assert done.path == reference.path, k
        cp.close()
    assert states["waiting"] >= 1 and states["continued"] >= 1, states  # both sides of the one commit were hit


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_run_cut_between_its_wait_and_its_end_takes_the_answer(tmp_path, store):
    """A crash after a wait's commit but before the run's end (its stop reason never written):
    the run waits all the same, and takes the answer."""
    from fsmchat.store.checkpoint import MemoryCheckpointer

    cp = MemoryCheckpointer() if store == "memory" else SqliteCheckpointer(tmp_path / "cut.db")
    waiting = review_chat().execute("pets?", checkpoint=cp, run_id="R")
    assert waiting.stop_reason == "interrupted"
    if store == "memory":
        cp.data["R"].stop_reason = None
    else:
        import sqlite3
        con = sqlite3.connect(tmp_path / "cut.db")
        con.execute("UPDATE runs SET stop_reason=NULL WHERE run_id='R'")
        con.commit()
        con.close()
    done = review_chat().resume("R", cp, input=Edit(text=EDITED))
    assert ("a", EDITED) in [(m.role, m.content) for m in done.transcript]
    assert done.stop_reason == "interrupted" and done.pending.prompt.endswith("won turn 2: post its message?")
