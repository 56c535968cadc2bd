"""Per-turn work does not grow with the conversation: counted in executed Python lines and in bytes
written to the checkpoint (deterministic counts, never time; speed itself is measured in bench/)."""
import json
import sys

import pytest

from fsmchat import Bid, GroupChat, RoundRobinSwarm
from fsmchat.store.checkpoint import MemoryCheckpointer, SqliteCheckpointer


def speaker(name, score):
    def fn(turn):
        return Bid(score, f"{name} says {len(turn.transcript)}") if turn.kind == "bid" else f"{name} here"
    fn.__name__ = name
    return fn


def group_chat(turns):
    # max_loops counts the transcript's messages, the task included (docs/semantics.md)
    # a and b alternate (the recency penalty sends the floor back and forth); c stays quiet
    return GroupChat(agents=[speaker("a", 0.9), speaker("b", 0.8), speaker("c", 0.0)], max_loops=turns,
                     threshold=0.1, recency_penalty=0.5, recency_window=1)


def round_robin(turns):
    return RoundRobinSwarm(agents=[speaker("a", 0), speaker("b", 0), speaker("c", 0)], max_loops=turns // 3)


class CountingStore(MemoryCheckpointer):
    """Counts the bytes each commit writes (the state deltas and the new messages)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def append(self, run_id, commit, fence=None):
        self.bytes += sum(len(r.delta or "") for r in commit.rows) + sum(len(m.content) for m in commit.messages)
        return super().append(run_id, commit, fence)


def traced_lines(pattern, checkpoint=None, files=None):
    """(Python lines executed by one run, its result): sys.settrace 'line' events, in ``files`` only
    when given (other code is left untraced)."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if files is not None and frame.f_code.co_filename not in files:
            return None
        if event == "line":
            count += 1
        return tracer
    sys.settrace(tracer)
    try:
        res = pattern.execute("go", checkpoint=checkpoint)
    finally:
        sys.settrace(None)
    assert res.ok, res.error
    return count, res


def lines_per_turn(pattern, turns, checkpoint=None):
    """Python lines executed per turn by one run."""
    count, res = traced_lines(pattern, checkpoint)
    return count / (len(res.transcript) - 1), res


@pytest.mark.parametrize("make", [group_chat, round_robin])
def test_per_turn_python_work_is_flat_from_60_to_600_turns(make):
    lines_per_turn(make(6), 6)  # warm-up: imports, caches
    small, r1 = lines_per_turn(make(60), 60)
    large, r2 = lines_per_turn(make(600), 600)
    extra = 0 if make is group_chat else 1
    assert (len(r1.transcript), len(r2.transcript)) == (60 + extra, 600 + extra)
    assert large <= small * 1.02 + 2, (small, large)


@pytest.mark.parametrize("make", [group_chat, round_robin])
def test_checkpointed_per_turn_bytes_are_flat(make):
    per_turn = []
    for turns in (60, 600):
        store = CountingStore()
        res = make(turns).execute("go", checkpoint=store)
        assert res.ok and len(res.transcript) == turns + (0 if make is group_chat else 1)
        per_turn.append(store.bytes / turns)
    assert per_turn[1] <= per_turn[0] * 1.05 + 8, per_turn


def test_checkpointed_group_chat_python_work_is_flat(tmp_path):
    lines_per_turn(group_chat(6), 6, SqliteCheckpointer(tmp_path / "w.db"))  # warm-up
    small, _ = lines_per_turn(group_chat(60), 60, SqliteCheckpointer(tmp_path / "a.db"))
    large, _ = lines_per_turn(group_chat(600), 600, SqliteCheckpointer(tmp_path / "b.db"))
    assert large <= small * 1.02 + 2, (small, large)


def test_the_recency_window_state_stays_bounded():
    store = CountingStore()
    res = group_chat(50).execute("go", checkpoint=store)
    recent = store.load(res.run_id).state["scratch"]["recent"]
    assert len(res.transcript) == 50 and res.transcript[-1].role == "a"
    assert recent == ["a"]  # window 1: only the last winner is kept (it was every winner, growing)


def test_a_turn_sees_a_read_only_view_that_later_posts_do_not_change():
    seen = []

    def a(turn):
        seen.append(turn.transcript)
        return "a"

    res = RoundRobinSwarm(agents=[a], max_loops=3).execute("go")
    assert [len(v) for v in seen] == [1, 2, 3]  # each turn's view stops where that turn began
    assert [m.content for m in seen[0]] == ["go"] and seen[2][-1].content == "a" and seen[1][0:1][0].content == "go"
    assert seen[2] == res.transcript[:3] and type(seen[0]).__name__ == "TranscriptView"
    with pytest.raises(TypeError):
        seen[0][0] = None  # read-only
    with pytest.raises(IndexError):
        seen[0][1]


def test_a_large_batch_tunes_the_collector_and_restores_it():
    import gc

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    during = []

    def a(turn):
        during.append((gc.get_threshold(), gc.get_freeze_count() > 0))
        return "a"

    chat = RoundRobinSwarm(agents=[a], max_loops=1)
    assert chat.run_batch(["t"] * 64) == chat.run_batch(["t"] * 63)[:1] * 64
    assert during[0] == ((50_000, 20, 100), True)  # the 64-run batch ran tuned
    assert during[-1] == (before, frozen > 0)  # the 63-run batch left the collector alone
    assert gc.get_threshold() == before  # and everything is restored: frozen again only if it was before
    assert (gc.get_freeze_count() > 0) == (frozen > 0)


def test_a_large_batch_leaves_an_earlier_freeze_in_place():
    """Objects frozen before a batch (fsmchat freezes litellm's import) stay frozen after it: the
    batch unfreezes only what it froze itself."""
    import gc

    gc.freeze()  # what fsmchat does once litellm is imported
    frozen = gc.get_freeze_count()
    assert frozen > 0
    chat = RoundRobinSwarm(agents=[lambda turn: "a"], max_loops=1)
    assert len(chat.run_batch(["t"] * 64)) == 64
    assert gc.get_freeze_count() > frozen - 1000  # (a frozen object freed by its last reference leaves the count)


def test_the_scripted_models_request_log_is_bounded_and_says_so():
    from fsmchat.testing import KEEP_MESSAGES, ScriptedModel

    assert KEEP_MESSAGES == 256
    m = ScriptedModel(fn=lambda req: "ok", keep_messages=2)
    RoundRobinSwarm(agents=[m.agent("a")], max_loops=4).execute("go")
    assert [r.n for r in m.requests] == [1, 2, 3, 4] and [len(r.messages) for r in m.requests] == [2, 3, 4, 5]
    assert m.requests[0].prompt.startswith("You are a, agent 1 of 1 in loop 1 of 4.")  # kept with the messages dropped
    assert m.requests[3].messages[-2]["content"] == "ok"
    with pytest.raises(LookupError, match=r"this request's 2 messages were dropped: a ScriptedModel keeps the whole "
                                          r"message lists of its last 2 requests only .* keep_messages=None"):
        m.requests[0].messages[0]
    full = ScriptedModel(fn=lambda req: "ok", keep_messages=None)
    RoundRobinSwarm(agents=[full.agent("a")], max_loops=4).execute("go")
    assert full.requests[0].messages[0] == {"role": "user", "content": "go"}
    with pytest.raises(ValueError, match="keep_messages=0: expected None"):
        ScriptedModel(keep_messages=0)


class BatchingStore(MemoryCheckpointer):
    """Counts its transactions (appends)."""

    def __init__(self):
        super().__init__()
        self.commits = 0

    def append(self, run_id, commit, fence=None):
        self.commits += 1
        return super().append(run_id, commit, fence)


def test_group_chat_commits_once_per_turn_and_stores_every_step():
    store = BatchingStore()
    res = group_chat(20).execute("go", checkpoint=store)
    assert len(res.transcript) == 20 and len(res.trace) == 78  # seed + 19 x (bid, select, post, penalize) + stop
    # seed, then the post of each of the 19 turns (penalize, bid and select ride along), then the end
    assert store.commits == 1 + 19 + 1
    saved = store.load(res.run_id)
    assert [(e.state, e.dest) for e in saved.events] == [(e.state, e.dest) for e in res.trace]
    assert saved.state["scratch"]["recent"] == [res.transcript[-1].role]  # the final snapshot, after penalize


# ---- what a durable run writes per turn: deltas, not states ----
def say(name):
    """A participant called with a turn (patterns) or the flow's context (a Discussion step)."""
    def fn(turn_or_ctx):
        return f"{name} says {len(turn_or_ctx.transcript)}"
    fn.__name__ = name
    return fn


def debate(turns):
    from fsmchat import OneOnOneDebate

    return OneOnOneDebate(agents=[say("a"), say("b")], max_loops=turns)  # private memories grow every turn


def discussion_flow(turns):
    from fsmchat import AgentFlow, Discussion

    return AgentFlow(steps=[Discussion([say("x"), say("y")], rounds=turns // 2)])  # the step records grow


def stored_bytes_per_turn(path, turns):
    import sqlite3

    con = sqlite3.connect(path)
    try:
        events = con.execute("SELECT SUM(LENGTH(COALESCE(delta, '')) + LENGTH(COALESCE(payload, ''))) FROM events"
                             ).fetchone()[0]
        messages = con.execute("SELECT SUM(LENGTH(content) + LENGTH(metadata)) FROM messages").fetchone()[0]
    finally:
        con.close()
    return (events + messages) / turns


@pytest.mark.parametrize("make", [group_chat, round_robin, debate, discussion_flow])
def test_sqlite_rows_written_per_turn_are_flat_even_where_the_state_grows(make, tmp_path):
    per_turn, pages = [], []
    for turns in (60, 600):
        store = SqliteCheckpointer(tmp_path / f"{turns}.db")
        store._db.execute("PRAGMA wal_autocheckpoint=0")  # every page written stays in the WAL: count them
        res = make(turns).execute("go", checkpoint=store)
        assert res.ok, res.error
        per_turn.append(stored_bytes_per_turn(tmp_path / f"{turns}.db", turns))
        pages.append(store._db.execute("PRAGMA wal_checkpoint").fetchone()[1] / turns)
        store.close()
    assert per_turn[1] <= per_turn[0] * 1.05 + 8, per_turn  # the whole state is written once, then what changed
    assert pages[1] <= pages[0] * 1.1 + 0.5, pages  # pages (WAL frames) written per turn


class CountingCommits(SqliteCheckpointer):
    commits = 0

    def append(self, *args, **kw):
        CountingCommits.commits += 1
        return super().append(*args, **kw)


def store_lines_per_commit(pattern, path):
    """Python lines executed per commit in the checkpoint modules (the recorder, the store, the
    state delta), other code left untraced."""
    import fsmchat.store.checkpoint
    import fsmchat.store.statelog
    import fsmchat.store.protocol
    import fsmchat.store.writer

    CountingCommits.commits = 0
    files = {m.__file__ for m in (fsmchat.store.checkpoint, fsmchat.store.statelog, fsmchat.store.protocol,
                                  fsmchat.store.writer)}
    count, _ = traced_lines(pattern, CountingCommits(path), files)
    return count / CountingCommits.commits


@pytest.mark.parametrize("make", [group_chat, debate])
def test_python_work_per_commit_is_flat(make, tmp_path):
    store_lines_per_commit(make(6), tmp_path / "w.db")  # warm-up
    small = store_lines_per_commit(make(60), tmp_path / "a.db")
    large = store_lines_per_commit(make(600), tmp_path / "b.db")
    assert large <= small * 1.02 + 2, (small, large)


# ---- a commit's work follows what the step changed, not how long the run is ----
def discussion(turns):
    from fsmchat import AgentFlow, Discussion

    return AgentFlow(steps=[Discussion([say("x"), say("y"), say("z")], rounds=turns // 3)])


class Work:
    """What checkpointing a run did: JSON characters and values encoded (every JSON text of a
    commit -- state deltas, payloads, metadata -- is written by statelog's encoder) and the
    characters of the messages handed to the store."""

    def __init__(self):
        self.chars = self.values = self.message_chars = self.commits = 0


def checkpoint_work(make, turns, kind, tmp_path):
    """(Work per posted message, messages posted) of one checkpointed run of ``make(turns)``."""
    from fsmchat.store import statelog

    work = Work()
    base = MemoryCheckpointer if kind == "memory" else SqliteCheckpointer

    class Counting(base):
        def append(self, run_id, commit, fence=None):
            work.message_chars += sum(len(m.content) for m in commit.messages)
            work.commits += 1
            return super().append(run_id, commit, fence)

    def counted(text):
        work.chars += len(text)
        work.values += 1
        return text

    class CountingEncoder(json.JSONEncoder):
        def encode(self, o):
            return counted(super().encode(o))

    real = statelog._ENCODER  # statelog's encoder writes every JSON value of a commit

    store = Counting() if kind == "memory" else Counting(tmp_path / f"{make.__name__}-{turns}.db")
    pattern = make(turns)
    statelog._ENCODER = CountingEncoder(default=repr, separators=(",", ":"))
    try:
        res = pattern.execute("go", checkpoint=store)
    finally:
        statelog._ENCODER = real
    assert res.ok, res.error
    posted = sum(m.role != "User" for m in res.transcript)  # the task is not a turn
    return {k: v / posted for k, v in vars(work).items()}, posted


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("make, posted, most", [(group_chat, (99, 999), 600), (round_robin, (99, 999), 60),
                                                (discussion, (99, 999), 400)])
def test_checkpoint_work_per_turn_is_the_same_at_1000_turns_as_at_100(make, posted, most, kind, tmp_path):
    """Deterministic (counts, not time): what a commit encodes is what the step changed (a changed
    value is encoded to compare it, then in the delta; the caps are far below a whole state). It was
    O(state) for a flow with a Discussion (its step records, lines and joined transcript encoded
    again at every step: 4,100 -> 37,800 characters per turn from T=100 to T=1,000)."""
    small, n_small = checkpoint_work(make, 100, kind, tmp_path)
    large, n_large = checkpoint_work(make, 1000, kind, tmp_path)
    assert (n_small, n_large) == posted
    assert large["chars"] <= small["chars"] * 1.1 + 8 and large["chars"] <= most, (small, large)
    assert large["values"] <= small["values"] * 1.05 + 0.1, (small, large)
    assert large["message_chars"] <= small["message_chars"] + 1.1, (small, large)  # "x says 999": one digit more
    assert small["commits"] == pytest.approx(1.0, abs=0.04) and large["commits"] == pytest.approx(1.0, abs=0.004)


def test_group_chat_writes_one_transaction_per_turn(tmp_path):
    """Every SQLite transaction that writes events, from the statements the store ran: the
    seed, then one per turn (its penalize, bid, select and post rows together), then the end."""
    store = SqliteCheckpointer(tmp_path / "gc.db")
    sql = []
    store._db.set_trace_callback(sql.append)
    res = group_chat(20).execute("go", checkpoint=store, run_id="R")
    assert len(res.transcript) == 20 and len(res.trace) == 78
    txns, current = [], None
    for s in sql:
        if s.startswith("BEGIN"):
            current = []
        elif s == "COMMIT":
            txns.append(current)
            current = None
        elif current is not None:
            current.append(s)
        else:
            txns.append([s])  # one statement outside BEGIN..COMMIT: a transaction of its own
    # a row's insert is traced again when the events_reopen trigger runs for it (the same text: its
    # seq makes each row's text its own, and a second insert of a row would break the primary key)
    txns = [list(dict.fromkeys(t)) for t in txns]
    written = [t for t in txns if any(s.startswith("INSERT INTO events") for s in t)]
    rows = [sum(s.count("('R', ") for s in t if s.startswith("INSERT INTO events")) for t in written]
    posts = [sum(s.startswith("INSERT INTO messages") for s in t) for t in written]
    assert rows == [1, 3] + [4] * 18 + [2]  # seed; bid, select, post; then penalize, bid, select, post; end
    assert posts == [1] * 20 + [0]
    assert sum(rows) == len(res.trace) and store.load("R").messages == res.transcript


def test_a_discussion_with_until_commits_once_per_turn():
    from fsmchat import AgentFlow, Discussion

    store = BatchingStore()
    flow = AgentFlow(steps=[Discussion([say("x"), say("y")], rounds=5, until=lambda ctx: False)])
    res = flow.execute("go", checkpoint=store)
    assert res.path.count("discussion.turn") == 10 and res.path.count("discussion.check_until") == 10
    assert store.commits == 1 + 10 + 2  # begin, each turn (its until check rides along), done, the end
    assert [s.state for s in store.history(res.run_id) if not s.stored] == ["discussion.check_until"] * 10
