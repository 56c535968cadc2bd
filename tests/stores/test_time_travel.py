"""Time travel: per-step state deltas, ``checkpoint.history(run_id)`` and ``fsmchat.fork``; older stores."""
import json
import sqlite3

import pytest
from hypothesis import example, given, settings, strategies as st

import fsmchat
from fsmchat import AgentFlow, Bid, Discussion, GroupChat, OneOnOneDebate, RoundRobinSwarm, parallel
from fsmchat.store.checkpoint import CheckpointMismatch, CheckpointStoreError, MemoryCheckpointer, SqliteCheckpointer
from fsmchat.store import statelog
from fsmchat.store.statelog import HELD, AppendLog, Frozen, StateDiff, apply_ops, parse_delta
from fsmchat.testing import ScriptedModel, assert_path, assert_stop, assert_trace_is_path
from fsmchat.store.protocol import Capabilities
from fsmchat.store.timetravel import ForkEdit, ForkError, fork
from fsmchat.store.writer import RunWriter


def speaker(name, score=0.0):
    """A participant: bids ``score`` in a GroupChat; in a flow's Discussion it is called with the flow's context."""
    def fn(turn):
        text = f"{name} says {len(turn.transcript)}"
        return Bid(score, text) if getattr(turn, "kind", None) == "bid" else text
    fn.__name__ = name
    return fn


def chat(max_loops=8):
    return GroupChat(agents=[speaker("a", 0.9), speaker("b", 0.8), speaker("c", 0.0)], max_loops=max_loops,
                     threshold=0.1, recency_penalty=0.5)


def topic_step(name):
    def fn(ctx):
        return f"{name} on {ctx.variables['topic']}"
    fn.__name__ = name
    return fn


def topic_flow():
    return AgentFlow(steps=[topic_step("first"), topic_step("second"), Discussion([speaker("x"), speaker("y")], rounds=2),
                            topic_step("third")], variables={"topic": "cats"})


def fan_flow():
    return AgentFlow(steps=[topic_step("first"),
                            parallel([Discussion([speaker("l1"), speaker("l2")], rounds=1, name="left"),
                                      Discussion([speaker("r1"), speaker("r2")], rounds=1, name="right")]),
                            topic_step("last")], variables={"topic": "cats"}, name="fan")


def debate():
    return OneOnOneDebate(agents=[speaker("a"), speaker("b")], max_loops=6)


def sqlite_store(tmp_path, name="runs.db"):
    return SqliteCheckpointer(tmp_path / name)


STORES = {"sqlite": sqlite_store, "memory": lambda tmp_path: MemoryCheckpointer()}


class Recording:
    """Wraps a store: keeps (events stored so far, JSON of the state the writer was handed) per commit."""

    def __init__(self, store, monkeypatch):
        self.store, self.commits, self.events, self.state = store, [], 0, None
        commit = RunWriter.commit

        def recording(writer, event, messages, state, earlier=()):
            self.state = state
            commit(writer, event, messages, state, earlier)

        monkeypatch.setattr(RunWriter, "commit", recording)

    def __getattr__(self, name):
        return getattr(self.store, name)

    def append(self, run_id, commit, fence=None):
        self.store.append(run_id, commit, fence)
        self.events += len(commit.rows)
        if self.state is not None and "/" not in run_id:
            self.commits.append((self.events - 1, json.loads(json.dumps(self.state, default=repr))))


# ---- history ----
@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("make, task", [(chat, "pets?"), (topic_flow, "go"), (debate, "tea or coffee?")])
def test_history_gives_every_step_and_the_state_committed_after_it(tmp_path, store, make, task, monkeypatch):
    cp = Recording(STORES[store](tmp_path), monkeypatch)
    res = make().execute(task, checkpoint=cp, run_id="R")
    steps = cp.history("R")
    assert [s.step for s in steps] == list(range(len(res.path)))
    assert [s.state for s in steps] == res.path and [s.dest for s in steps[:-1]] == res.path[1:]
    assert steps[-1].dest is None and steps[-1].message_count == len(res.transcript)
    assert [m.content for m in steps[-1].messages] == [m.content for m in res.transcript]
    counts = [s.message_count for s in steps]
    assert counts == sorted(counts) and all(s.messages == res.transcript[:s.message_count] for s in steps)
    log = cp.log("R")
    stored = {i: s for s, i in zip(steps, log.path_indexes())}
    for event_index, committed in cp.commits:  # the fold of the deltas equals each committed state
        assert log.state_after(event_index) == committed
        if event_index in stored:
            assert stored[event_index].snapshot == committed and stored[event_index].stored
    assert cp.load("R").state == cp.commits[-1][1]


def test_held_steps_are_listed_as_not_stored_and_usage_so_far_is_given():
    cp = MemoryCheckpointer()
    res = chat().execute("pets?", checkpoint=cp, run_id="R")
    steps = cp.history("R")
    # the bid round, select and penalize are carried: committed with the post (commit="turn")
    assert {s.state for s in steps if not s.stored} == {"bid", "select", "penalize"}
    assert all(s.snapshot is None for s in steps if not s.stored)
    posts = [s for s in steps if s.state == "post"]
    assert [s.snapshot["turn"] for s in posts] == list(range(1, len(posts) + 1))
    assert [s.message_count for s in posts] == list(range(2, len(posts) + 2))
    assert steps[-1].calls == res.calls and steps[-1].usage == res.usage
    assert "select --has_winner--> post" in steps[2].line() and "(state not stored on its own)" in steps[2].line()


def test_a_snapshot_is_a_copy():
    cp = MemoryCheckpointer()
    chat().execute("pets?", checkpoint=cp, run_id="R")
    step = cp.history("R")[3]
    step.snapshot["turn"] = 99
    assert step.snapshot["turn"] == 1 and cp.load("R").state["turn"] != 99


# ---- the delta format ----
JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.5, 1.0, 2.0]) |
                    st.text(max_size=3), lambda inner: st.lists(inner, max_size=4) |
                    st.dictionaries(st.text(max_size=2), inner, max_size=4), max_leaves=12)


def fold(folded, delta):
    """What a reader holds after applying ``delta`` (None: nothing changed) to ``folded``."""
    if delta is None:
        return folded
    kind, body = parse_delta(delta)
    if kind == "all":
        return body
    apply_ops(folded, body)
    return folded


def fold_each(states):
    diff, folded = StateDiff(), None
    for state in states:
        folded = fold(folded, diff.delta(state))
        expected = json.loads(json.dumps(state))
        assert json.dumps(folded, sort_keys=True) == json.dumps(expected, sort_keys=True)  # 1, 1.0, true stay apart


STATES = st.lists(st.dictionaries(st.sampled_from(["turn", "scratch", "memory", "events"]), JSON, max_size=4),
                  min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(states=STATES)
def test_deltas_fold_back_to_every_state_exactly(states):
    fold_each(states)


@settings(max_examples=150, deadline=None)
@given(states=STATES, items=st.lists(JSON, max_size=12), text=st.text(max_size=12))
def test_deltas_fold_back_when_every_value_is_diffed_part_by_part(states, items, text):
    growing = [{"memory": {"a": items[:i], "b": text[:i], "c": [text[:i]], "n": [int("1" * (i + 1))]},
                "frames": [[1, {"lines": items[:i], "t": i}]]} for i in range(len(items) + 1)]
    saved = statelog.SPLIT_CHARS, statelog.SPLIT_ITEMS, statelog.EXTEND_CHARS
    statelog.SPLIT_CHARS, statelog.SPLIT_ITEMS, statelog.EXTEND_CHARS = 4, 3, 2  # split and extend everything
    try:
        fold_each(states + growing + states)
    finally:
        statelog.SPLIT_CHARS, statelog.SPLIT_ITEMS, statelog.EXTEND_CHARS = saved


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.lists(st.tuples(st.sampled_from(["a", "b", "c", 3]), st.integers(0, 11)), max_size=4),
                      min_size=1, max_size=10), split=st.booleans())
@example(steps=[[("a", 0)], [("a", 8)], [("a", 0)]], split=False)  # a str, a log in its place, the str again
@example(steps=[[("a", 6), (3, 2)], [("a", 10)], [("a", 6)], [(3, 0)]], split=True)
def test_deltas_fold_back_when_snapshots_hand_back_the_same_objects(steps, split):
    """Snapshots hand the same objects back commit after commit (a status str, a Frozen dict, a
    log that grew since, a live dict holding one): a commit skips an immutable object it wrote
    last at that key, and what a reader folds back still equals every state (also with a key
    that is not a str, and with every dict diffed part by part)."""
    log, other = AppendLog(["x"]), AppendLog()
    pool = ["s", "t" * 70, 1, 1.0, True, None, Frozen(k=1), Frozen(k=[1, "y"]), log, other, {"d": log}, {"d": 2}]
    saved = statelog.SPLIT_CHARS
    statelog.SPLIT_CHARS = 4 if split else saved
    try:
        diff, folded, state = StateDiff(), None, {}
        for n, step in enumerate(steps):
            for key, i in step:
                state[key] = pool[i]
            log.append(n)  # grows between commits, wherever it stands
            delta = diff.delta(dict(state))  # a new dict each commit, as ctx.snapshot() makes
            folded = fold(folded, delta)
            expected = json.loads(json.dumps(state))
            assert json.dumps(folded, sort_keys=True) == json.dumps(expected, sort_keys=True), (n, delta)
    finally:
        statelog.SPLIT_CHARS = saved


def test_growing_lists_strings_and_large_dicts_are_written_as_appends():
    diff = StateDiff()
    memory = {"a": [{"role": "user", "content": "x" * 600}], "b": []}
    frames = {"__dict__": [[1, {"t": 0, "lines": ["y" * 600]}]]}
    diff.delta({"memory": memory, "steps": [1, 2], "frames": frames, "text": "z" * 70})
    memory["a"].append({"role": "assistant", "content": "hi"})
    frames["__dict__"][0][1]["lines"].append("more")
    frames["__dict__"][0][1]["t"] = 1
    assert diff.delta({"memory": memory, "steps": [1, 2, 3], "frames": frames, "text": "z" * 70 + 'q"'}) == (
        '[["a",["memory","a"],[{"role":"assistant","content":"hi"}]],["a",["steps"],[3]],'
        '["s",["frames","__dict__",0,1,"t"],1],["a",["frames","__dict__",0,1,"lines"],["more"]],'
        '["x",["text"],"q\\""]]')
    assert diff.delta({"memory": memory, "steps": [1, 2, 3], "frames": frames, "text": "z" * 70 + 'q"'}) is None
    assert diff.delta({"steps": [2]}) == '[["s",["steps"],[2]],["d",["memory"]],["d",["frames"]],["d",["text"]]]'


def encoded_values(monkeypatch):
    """Every value statelog encodes to JSON, as text, in order."""
    seen = []
    real = statelog.encode_json

    def seeing(obj):
        seen.append(real(obj))
        return seen[-1]
    monkeypatch.setattr(statelog, "encode_json", seeing)
    return seen


def test_an_append_log_is_written_from_where_the_last_commit_stopped(monkeypatch):
    diff, log = StateDiff(), AppendLog(["a"])
    assert diff.delta({"log": log, "n": 1}) == '{"all":{"log":["a"],"n":1}}'
    seen = encoded_values(monkeypatch)
    log.append("b")
    log.extend(["c"])
    log += ["d"]
    assert diff.delta({"log": log, "n": 1}) == '[["a",["log"],["b","c","d"]]]'
    # the new items and their path, each encoded once: the earlier items are not encoded, nor the same int again
    assert seen == ['["b","c","d"]', '["log"]']
    assert diff.delta({"log": log, "n": 1}) is None and len(seen) == 2  # nothing looked at
    seen.clear()
    log[0] = "A"  # a rewrite: the next commit writes the list whole
    assert log.rewrites == 1 and diff.delta({"log": log, "n": 1}) == '[["s",["log"],["A","b","c","d"]]]'
    assert seen == ['["A","b","c","d"]', '["log"]']
    for change in (lambda x: x.pop(), lambda x: x.insert(0, "z"), lambda x: x.remove("b"), lambda x: x.sort(),
                   lambda x: x.reverse(), lambda x: x.__delitem__(0), lambda x: x.__imul__(2), lambda x: x.clear()):
        before = log.rewrites
        change(log)
        assert log.rewrites == before + 1
    other = AppendLog(["x", "y"])
    diff.delta({"log": other, "n": 1})
    other.append("z")  # another list in the same place: written whole once, then from where it stopped
    assert diff.delta({"log": other, "n": 2}) == '[["a",["log"],["z"]],["s",["n"],2]]'
    assert diff.delta({"log": ["x", "y", "z"], "n": 2}) is None  # a plain list with the same JSON: no change
    assert diff.text() == '{"log":["x","y","z"],"n":2}'


def test_the_same_immutable_object_is_written_again_after_something_else_stood_in_its_place(monkeypatch):
    """A commit skips an immutable value (or a Frozen dict) that is the very object it wrote last
    at that key; after a log or another dict was written there, the old object is a change again."""
    diff, kept, log, frozen = StateDiff(), "kept", AppendLog(["l"]), Frozen(k=1)
    assert diff.delta({"x": kept, "n": 1}) == '{"all":{"x":"kept","n":1}}'
    assert diff.delta({"x": log, "n": 1}) == '[["s",["x"],["l"]]]'
    assert diff.delta({"x": kept, "n": 1}) == '[["s",["x"],"kept"]]'
    assert diff.delta({"x": frozen, "n": 1}) == '[["s",["x"],{"k":1}]]'
    assert diff.delta({"x": {"k": 2}, "n": 1}) == '[["s",["x"],{"k":2}]]'
    assert diff.delta({"x": frozen, "n": 1}) == '[["s",["x"],{"k":1}]]'
    seen = encoded_values(monkeypatch)
    assert diff.delta({"x": frozen, "n": 1}) is None and seen == []  # the same objects: nothing encoded


def test_a_state_that_gains_a_key_other_than_a_str_is_written_whole_while_it_has_it():
    """JSON would write such a key as a str, so no change could name it: the whole state is
    written at each commit until the key is gone; then changes again."""
    diff = StateDiff()
    assert diff.delta({"a": 1}) == '{"all":{"a":1}}'
    assert diff.delta({"a": 1, 2: "two"}) == '{"all":{"a":1,"2":"two"}}'
    assert diff.delta({"a": 1, 2: "two"}) == '{"all":{"a":1,"2":"two"}}'
    assert diff.delta({"a": 3}) == '{"all":{"a":3}}'
    assert diff.delta({"a": 4}) == '[["s",["a"],4]]'
    log = AppendLog(["x"])
    assert diff.delta({"a": 4, 5: log}) == '{"all":{"a":4,"5":["x"]}}'  # a log there too


def test_append_logs_inside_large_dicts_are_appended_to_where_they_are(monkeypatch):
    diff = StateDiff()
    frames = {"1": {"t": 0, "lines": AppendLog(["y" * 600]), "topic": "t" * 80}}
    memory = {"a": AppendLog([{"role": "user", "content": "x" * 600}])}
    diff.delta({"frames": frames, "memory": memory})
    seen = encoded_values(monkeypatch)
    frames["1"]["lines"].append("more")
    frames["1"]["t"] = 1
    memory["a"].append({"role": "assistant", "content": "hi"})
    assert diff.delta({"frames": {"1": dict(frames["1"])}, "memory": memory}) == (
        '[["s",["frames","1","t"],1],["a",["frames","1","lines"],["more"]],'
        '["a",["memory","a"],[{"role":"assistant","content":"hi"}]]]')
    # each change's value and path encoded once (the changed int's text, made to compare it, is the
    # text written); the long texts are not encoded again
    assert seen == ["1", '["frames","1","t"]', '["more"]', '["frames","1","lines"]',
                    '[{"role":"assistant","content":"hi"}]', '["memory","a"]']


LOG_OPS = st.lists(st.one_of(st.tuples(st.just("commit"), st.none()), st.tuples(st.just("append"), JSON), st.tuples(st.just("extend"), st.lists(JSON, max_size=3)),
                             st.tuples(st.just("set"), JSON), st.tuples(st.just("pop"), st.none()),
                             st.tuples(st.just("new"), st.lists(JSON, max_size=3)), st.tuples(st.just("commit"), st.none()),
                             st.tuples(st.just("times"), st.integers(0, 2))),
                   max_size=20)


@settings(max_examples=300, deadline=None)
@given(ops=LOG_OPS, split=st.booleans())
@example(ops=[("append", 1), ("commit", None), ("times", 0), ("append", 2), ("append", 3)], split=False)  # emptied, refilled
@example(ops=[("append", 1), ("commit", None), ("pop", None), ("append", 2)], split=True)
def test_append_logs_fold_back_to_every_state_exactly(ops, split):
    """Whatever is done to a log between commits (appends, rewrites, a new list), what a reader
    folds back equals what was snapshotted, also where it sits inside a dict diffed part by part."""
    saved = statelog.SPLIT_CHARS
    statelog.SPLIT_CHARS = 4 if split else saved  # split: the dict holding the log is diffed key by key
    try:
        log, diff, folded = AppendLog(), StateDiff(), None
        for op, arg in [*ops, ("commit", None)]:  # a commit at each "commit" op: several changes between two
            if op == "append":
                log.append(arg)
            elif op == "extend":
                log.extend(arg)
            elif op == "set" and log:
                log[-1] = arg
            elif op == "pop" and log:
                log.pop()
            elif op == "new":
                log = AppendLog(arg)
            elif op == "times":
                log *= arg
            if op != "commit":
                continue
            state = {"memory": {"a": log, "pad": "p" * 20}, "log": log}
            folded = fold(folded, diff.delta(state))
            assert json.dumps(folded, sort_keys=True) == json.dumps(state, sort_keys=True)  # 1, 1.0, true stay apart
    finally:
        statelog.SPLIT_CHARS = saved


@pytest.mark.parametrize("bad, why", [("{not json", "not JSON"), ('{"all": 3}', "other than"), ("3", "not a list"),
                                      ('[["q", ["k"], 1]]', "malformed change"), ('[["a", ["k"], 1]]', "wrong kind"),
                                      ('[["s", "k", 1]]', "malformed change"), ('[["s", [], 1]]', "malformed change"),
                                      ('[["x", ["k"], 1]]', "wrong kind"), ('[["s", [true], 1]]', "malformed change")])
def test_a_malformed_delta_is_refused_with_what_is_wrong(bad, why):
    with pytest.raises(ValueError, match=why):
        parse_delta(bad)


# ---- fork ----
def rows(db, run_id):
    con = sqlite3.connect(db)
    try:
        out = {t: con.execute(f"SELECT * FROM {t} WHERE run_id = ? OR run_id LIKE ? ORDER BY run_id{', seq' if t in ('events', 'messages') else ''}",
                              (run_id, run_id + "/%")).fetchall() for t in ("runs", "events", "messages", "states")}
    finally:
        con.close()
    return out


@pytest.mark.parametrize("make, task, at", [(chat, "pets?", 7), (topic_flow, "go", 4), (debate, "tea?", 3),
                                            (fan_flow, "go", 2)])
def test_fork_resumes_from_the_step_and_leaves_the_original_alone(tmp_path, make, task, at):
    db = tmp_path / "runs.db"
    cp = SqliteCheckpointer(db)
    original = make().execute(task, checkpoint=cp, run_id="R")
    before = rows(db, "R")
    new = fork("R", at=at, checkpoint=cp)
    assert cp.history(new)[-1].step == at and [s.state for s in cp.history(new)] == original.path[:at + 1]
    assert cp.load(new).meta["forked_from"] == {"run_id": "R", "step": at} and cp.load(new).stop_reason is None
    resumed = make().resume(new, cp)
    assert rows(db, "R") == before  # the original's rows, byte for byte
    assert_path(resumed, original.path)  # deterministic speakers: the same path, prefix and continuation
    assert_trace_is_path(make().graph, resumed)
    assert [m.content for m in resumed.transcript] == [m.content for m in original.transcript]
    assert resumed.output == original.output and resumed.run_id == new


def test_a_fork_before_a_parallel_step_runs_its_branches_again_after_it_copies_them(tmp_path):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    fan_flow().execute("go", checkpoint=cp, run_id="R")
    assert cp.lanes("R") == ["R/1:parallel|1", "R/1:parallel|2"]
    early, late = fork("R", at=0, checkpoint=cp, fork_id="early"), fork("R", at=1, checkpoint=cp, fork_id="late")
    assert cp.lanes(early) == [] and cp.lanes(late) == ["late/1:parallel|1", "late/1:parallel|2"]
    assert cp.load("late/1:parallel|1").meta == {"parent": "late", "branch": "1:parallel|1"}
    assert cp.load("late/1:parallel|1").events == cp.load("R/1:parallel|1").events
    assert (cp.log("late/1:parallel|1").stop_reason, cp.log("late").stop_reason) == ("done", None)  # a copied lane stays ended
    assert fan_flow().resume("early", cp).ok and cp.lanes("early") == ["early/1:parallel|1", "early/1:parallel|2"]
    assert fan_flow().resume("late", cp).ok
    assert [r.run_id for r in cp.list_runs()] == ["late", "early", "R"]  # lanes are not runs


@pytest.mark.parametrize("store", STORES)
def test_fork_at_a_held_step_starts_before_it_and_runs_it_again(tmp_path, store):
    cp = STORES[store](tmp_path)
    original = chat().execute("pets?", checkpoint=cp, run_id="R")
    assert cp.history("R")[6].state == "select" and not cp.history("R")[6].stored
    new = fork("R", at=6, checkpoint=cp)
    # up to the first post: penalize, the bid round and select run again
    assert [s.state for s in cp.history(new)] == original.path[:4] == ["seed", "bid", "select", "post"]
    assert cp.load(new).meta["forked_from"] == {"run_id": "R", "step": 6}
    assert_path(chat().resume(new, cp), original.path)


@pytest.mark.parametrize("store", STORES)
def test_fork_edits_messages(tmp_path, store):
    cp = STORES[store](tmp_path)
    original = chat().execute("pets?", checkpoint=cp, run_id="R")
    replaced = fork("R", at=5, checkpoint=cp, edit={"replace": {1: "a new opening"}})
    steps = cp.history(replaced)
    assert steps[-1].messages[1].content == "a new opening" and steps[-1].messages[1].metadata["edited"] is True
    assert steps[-1].messages[1].role == original.transcript[1].role
    res = chat().resume(replaced, cp)
    assert res.transcript[1].content == "a new opening" and res.transcript[2:] == original.transcript[2:]
    dropped = fork("R", at=3, checkpoint=cp, edit=ForkEdit(drop=[-1]))  # after the first post
    assert cp.history(dropped)[-1].message_count == 1
    res = chat().resume(dropped, cp)
    assert len(res.transcript) == len(original.transcript)  # max_loops counts messages: one more turn
    assert res.transcript[1].content == "b says 1"  # bid again on the task alone; a is penalized (recency)
    assert cp.load("R").messages == original.transcript


def test_fork_edits_flow_variables(tmp_path):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    topic_flow().execute("go", checkpoint=cp, run_id="R")
    new = fork("R", at=0, checkpoint=cp, edit={"variables": {"topic": "dogs"}})
    assert cp.history(new)[-1].snapshot["variables"]["topic"] == "dogs"
    assert cp.history("R")[0].snapshot["variables"]["topic"] == "cats"
    res = topic_flow().resume(new, cp)
    assert res.output["steps"][0]["output"] == "first on cats"  # before the fork
    assert [s["output"] for s in res.output["steps"][1:2]] == ["second on dogs"] and res.output["output"] == "third on dogs"


def test_fork_changes_limits_and_the_resume_applies_them(tmp_path):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    model = ScriptedModel(fn=lambda request: "ok")
    budgeted = lambda: RoundRobinSwarm(agents=[model.agent("a"), model.agent("b")],  # noqa: E731
                                       max_loops=4).with_limits(max_model_calls=100)
    original = budgeted().execute("go", checkpoint=cp, run_id="R")
    assert_stop(original, "max_loops") and original.calls == 8
    new = fork("R", at=2, checkpoint=cp, edit={"limits": {"max_model_calls": 5}})
    meta = cp.load(new).meta
    assert meta["limits"]["max_model_calls"] == 5 and meta["fingerprint"] == cp.load("R").meta["fingerprint"]
    assert meta["edit"] == {"limits": {"max_model_calls": 5}}
    res = budgeted().resume(new, cp)  # checked against the pattern that started the run, run with the new limits
    assert_stop(res, "budget")
    assert res.calls == 5 and cp.history(new)[2].calls == 2
    assert budgeted().resume(new, cp).stop_reason == "budget"  # rebuilt, with the same limits
    with pytest.raises(CheckpointMismatch):  # another pattern is still refused
        RoundRobinSwarm(agents=[model.agent("a"), model.agent("b")], max_loops=5).resume(new, cp)
    unlimited = fork("R", at=2, checkpoint=cp, edit={"limits": {"max_model_calls": None}})
    assert_stop(budgeted().resume(unlimited, cp), "max_loops")


def test_a_fork_is_resumable_from_its_stored_factory(tmp_path):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    pattern = round_robin_factory()
    pattern.factory = "test_time_travel:round_robin_factory"
    original = pattern.execute("go", checkpoint=cp, run_id="R")
    new = fsmchat.fork("R", at=2, checkpoint=cp)
    assert cp.load(new).meta["factory"] == pattern.factory
    assert_path(fsmchat.resume(new, cp, allow=["test_time_travel"]), original.path)


def round_robin_factory():
    return RoundRobinSwarm(agents=[speaker("a"), speaker("b")], max_loops=2)


def flow_of_the_run(tmp_path):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    chat().execute("pets?", checkpoint=cp, run_id="R")
    return cp


@pytest.mark.parametrize("kwargs, match", [
    ({"run_id": "nope", "at": 1}, r"no run 'nope' in .*runs\.db; runs in this store \(newest first\): R"),
    ({"at": 30}, r"at=30 is invalid: a step number from 0 to 28 .*; step 29 is where it ended \(max_loops\)"),
    ({"at": 29}, r"at=29 is invalid: a step number from 0 to 28"),
    ({"at": -1}, r"at=-1 is invalid"),
    ({"at": True}, r"at=True is invalid"),
    ({"at": "3"}, r"at='3' is invalid"),
    ({"at": 3, "edit": {"replace": {2: "x"}}}, r"replace index 2 is invalid: a message index from 0 to 1 "
                                               r"\(or -2 to -1 from the end\); the transcript after the step has 2"),
    ({"at": 3, "edit": {"drop": [-3]}}, r"drop index -3 is invalid"),
    ({"at": 3, "edit": {"drop": [1], "replace": {1: "x"}}}, r"message 1 is both replaced and dropped"),
    ({"at": 3, "edit": {"replace": {1: 5}}}, r"replace\[1\]=5 is invalid: the new text"),
    ({"at": 3, "edit": {"variables": {"topic": "x"}}}, r"is a GroupChat run, which has no flow variables"),
    ({"at": 3, "edit": {"limits": {"max_model_calls": 0}}}, r"edit limits: Limits: max_model_calls=0 is invalid"),
    ({"at": 3, "edit": {"limits": {"speed": 1}}}, r"unknown option 'speed'"),
    ({"at": 3, "edit": {"messages": {}}}, r"edit=\{'messages': \{\}\} is invalid: a ForkEdit or a dict with keys"),
    ({"at": 3, "fork_id": "R"}, r"run id 'R' is already checkpointed"),
    ({"at": 3, "fork_id": "a/b"}, r"fork_id='a/b' is invalid"),
])
def test_bad_fork_arguments_are_refused_before_anything_is_written(tmp_path, kwargs, match):
    cp = flow_of_the_run(tmp_path)
    before = rows(tmp_path / "runs.db", "")
    with pytest.raises(ForkError, match=match):
        fork(**{"run_id": "R", "checkpoint": cp, **kwargs})
    assert cp.runs() == ["R"] and rows(tmp_path / "runs.db", "") == before


def test_unknown_flow_variables_and_lanes_are_refused(tmp_path):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    fan_flow().execute("go", checkpoint=cp, run_id="R")
    with pytest.raises(ForkError, match=r"unknown variable 'topc'; the run's variables at that step are \['topic'\]"):
        fork("R", at=0, checkpoint=cp, edit={"variables": {"topc": "dogs"}})
    with pytest.raises(ForkError, match=r"variables\['topic'\]=<object .*> is invalid: a JSON-able value"):
        fork("R", at=0, checkpoint=cp, edit={"variables": {"topic": object()}})
    with pytest.raises(ForkError, match=r"'R/1:parallel\|1' is a branch lane of run 'R'; fork that run"):
        fork("R/1:parallel|1", at=0, checkpoint=cp)
    with pytest.raises(ForkError, match="cannot fork runs"):
        fork("R", at=0, checkpoint=object())
    assert cp.runs() == ["R", "R/1:parallel|1", "R/1:parallel|2"]


# ---- older stores ----
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, meta TEXT NOT NULL, stop_reason TEXT,
                                 created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, step INTEGER, state TEXT,
                                   trigger TEXT, dest TEXT, t REAL, payload TEXT, PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS messages (run_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT, content TEXT,
                                     metadata TEXT, PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS states (run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL);
"""


class OldStore:
    """What SqliteCheckpointer wrote before per-step deltas: its schema, and one whole snapshot per run."""

    capabilities = Capabilities()

    def __init__(self, path):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.executescript(OLD_SCHEMA)
        self.n, self.state = {}, {}

    def start(self, run_id, meta, fence=None):
        self.db.execute("INSERT INTO runs VALUES (?, ?, NULL, 1.0, 1.0)", (run_id, json.dumps(meta)))
        self.n[run_id] = (0, 0)

    def append(self, run_id, commit, fence=None):
        ne, nm = self.n[run_id]
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            [(run_id, ne + i, r.event.step, r.event.state, r.event.trigger, r.event.dest, r.event.t,
                              json.dumps(r.event.payload)) for i, r in enumerate(commit.rows)])
        self.db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)",
                            [(run_id, nm + i, m.role, m.content, json.dumps(m.metadata))
                             for i, m in enumerate(commit.messages)])
        delta = commit.state_delta
        if delta not in (None, HELD):  # the whole state again, folded from the writer's delta
            kind, body = parse_delta(delta)
            if kind == "all":
                self.state[run_id] = body
            else:
                apply_ops(self.state[run_id], body)
        if (commit.rows[-1].event.dest is not None or len(commit.rows) > 1) and run_id in self.state:  # a step with state
            self.db.execute("INSERT OR REPLACE INTO states VALUES (?, ?, ?)", (run_id, ne + len(commit.rows) - 1,
                                                                                json.dumps(self.state[run_id])))
        self.db.execute("COMMIT")
        self.n[run_id] = (ne + len(commit.rows), nm + len(commit.messages))

    def finish(self, run_id, stop_reason, fence=None, state=None):
        self.db.execute("UPDATE runs SET stop_reason=? WHERE run_id=?", (stop_reason, run_id))

    def log(self, run_id):
        raise KeyError(run_id)

    load = history = log


def test_a_store_written_before_per_step_states_is_read_resumed_and_forked_at_its_last_state(tmp_path):
    import asyncio

    db = tmp_path / "old.db"
    full = chat().execute("pets?")
    old = OldStore(db)

    async def cut():  # the run is cancelled after its third post, as a crash would leave it
        me, seen = asyncio.current_task(), []

        def obs(ev):
            if ev.state == "post" and ev.dest is not None:
                seen.append(ev)
                if len(seen) == 3:
                    me.cancel()
        with pytest.raises(asyncio.CancelledError):
            await chat().aexecute("pets?", checkpoint=old, run_id="R", observers=[obs])
    asyncio.run(cut())
    chat().execute("pets?", checkpoint=old, run_id="done")
    old.db.close()
    ro = SqliteCheckpointer(db, read_only=True)  # read as it is, nothing added
    assert "delta" not in {c[1] for c in sqlite3.connect(db).execute("PRAGMA table_info('events')")}
    assert ro.load("done").state["turn"] == 7 and [s.step for s in ro.history("done") if s.stored] == [28, 29]
    assert [s.message_count for s in ro.history("done")] == [None] * 30
    with pytest.raises(ForkError, match=r"checkpointed by an older fsmchat, which kept only the latest state; it "
                                        r"can be forked at step 28"):
        fork("done", at=3, checkpoint=SqliteCheckpointer(db))
    cp = SqliteCheckpointer(db)  # opened for writing: the event columns are added
    assert {"nmsg", "delta"} <= {c[1] for c in sqlite3.connect(db).execute("PRAGMA table_info('events')")}
    resumed = chat().resume("R", cp)
    assert [m.content for m in resumed.transcript] == [m.content for m in full.transcript]
    assert resumed.path == full.path and chat().resume("R", cp).transcript == resumed.transcript
    assert cp.history("R")[-1].snapshot == cp.load("R").state
    new = fork("done", at=28, checkpoint=cp)
    assert chat().resume(new, cp).transcript == full.transcript


# ---- untrusted rows ----
@pytest.mark.parametrize("sql, match", [
    ("UPDATE events SET delta = '{broken' WHERE seq = 5", r"the state delta of event 5 is not JSON"),
    ("UPDATE events SET delta = '[[\"a\", [\"turn\"], [1]]]' WHERE seq = 5",
     r"the state delta of event 5 is an append to \[\"turn\"\], which is a int"),
    ("UPDATE events SET delta = '[[\"s\", [\"memory\", \"q\", 0], 1]]' WHERE seq = 5",
     r"the state delta of event 5 is a change at \[\"memory\",\"q\",0\], which is not there"),
    ("UPDATE events SET delta = '[[\"q\"]]' WHERE seq = 5", r"the state delta of event 5 is a malformed change"),
    ("UPDATE events SET delta = '[]' WHERE seq = 0", r"the state changes of event 0 have no whole state before them"),
    ("UPDATE events SET payload = 'nope' WHERE seq = 2", r"the payload of event 2 is not JSON"),
    ("UPDATE events SET state = NULL WHERE seq = 2", r"event 2 has a malformed row"),
    ("UPDATE events SET nmsg = 'x' WHERE seq = 2", r"event 2 has a malformed state column"),
    ("UPDATE messages SET metadata = '[1]' WHERE seq = 1", r"message 1 has a malformed row"),
    ("UPDATE runs SET meta = '[]'", r"its meta is not a JSON object"),
])
def test_malformed_rows_are_a_store_error_naming_the_row(tmp_path, sql, match):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    chat().execute("pets?", checkpoint=cp, run_id="R")
    con = sqlite3.connect(tmp_path / "runs.db")
    con.execute(sql)
    con.commit()
    con.close()
    with pytest.raises(CheckpointStoreError, match=rf"checkpoint store .*runs\.db: run 'R': {match}"):
        cp.load("R")
        cp.history("R")[-1].snapshot  # noqa: B018
    with pytest.raises(CheckpointStoreError, match=match):
        fork("R", at=7, checkpoint=cp)


def test_held_rows_and_counts_are_on_the_event_rows(tmp_path):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    res = chat().execute("pets?", checkpoint=cp, run_id="R")
    con = sqlite3.connect(tmp_path / "runs.db")
    got = con.execute("SELECT state, nmsg, delta FROM events WHERE run_id='R' ORDER BY seq").fetchall()
    assert got[0][2].startswith('{"all":') and [d for s, _, d in got if s in ("bid", "select", "penalize")] == \
        [HELD] * 21  # 7 turns
    assert [n for _, n, _ in got] == [s.message_count for s in cp.history("R")] and got[-1][1] == len(res.transcript)
    assert all(len(d) < 600 for _, _, d in got[1:] if d)  # deltas, not whole states


@pytest.mark.parametrize("store", STORES)
def test_list_runs_says_how_each_run_stands(tmp_path, store):
    from fsmchat.store.checkpoint import lease_owner

    cp = STORES[store](tmp_path)
    chat().execute("pets?", checkpoint=cp, run_id="done")
    fork("done", at=3, checkpoint=cp, fork_id="forked")
    cp.acquire("forked", lease_owner())  # as a process running it would
    fork("done", at=3, checkpoint=cp, fork_id="idle")
    runs = {r.run_id: r for r in cp.list_runs()}
    assert [r.run_id for r in cp.list_runs()] == ["idle", "forked", "done"]
    assert (runs["done"].status, runs["forked"].status, runs["idle"].status) == ("finished", "running", "unfinished")
    assert runs["idle"].forked_from == {"run_id": "done", "step": 3} and runs["idle"].messages == 2
    assert runs["done"].to_dict()["stop_reason"] == "max_loops" and runs["done"].task == "pets?"
