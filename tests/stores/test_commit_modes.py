"""Commit batching is a run-level option, not a graph flag: ``commit="turn"`` (the default) carries a
step that posted nothing, did not stop the run and did only replayable work into the next commit;
``commit="step"`` commits every step on its own. The mode is kept with the run (resume and fork
use it), a wrong value is refused before any model call, and a crash between carried steps
resumes to the same result. Commits are counted at the store."""
import asyncio
import sqlite3

import pytest

from fsmchat import AgentFlow, Bid, Discussion, GroupChat, RoundRobinSwarm, StateGraph, Task, fork
from fsmchat.store.checkpoint import CheckpointMismatch, MemoryCheckpointer, SqliteCheckpointer
from fsmchat.engine import GraphRun, StepWork, mark_effects_pending, mark_replayable
from fsmchat.errors import ConfigError, ConfigTypeError
from fsmchat.graph.state_graph import FlatState, State
from fsmchat.models import TraceEvent, Transcript
from fsmchat.testing import ScriptedModel, ToolCall
from fsmchat.store.writer import Recorder

TURN_TEXT = ("'turn' (the default: a step that posted nothing, did not stop the run and did only work that can be "
             "done again is committed with the next step, so a GroupChat or Discussion turn is one commit) or 'step' "
             "(every step is its own commit)")


class CountingStore(MemoryCheckpointer):
    """A memory store that counts its transactions (one ``append`` per commit) and their rows."""

    def __init__(self):
        super().__init__()
        self.commits = []  # rows per commit, in order

    def append(self, run_id, commit, fence=None):
        self.commits.append(len(commit.rows))
        return super().append(run_id, commit, fence)


def speaker(name, score, said=None):
    def fn(turn):
        if said is not None:
            said.append(name)
        return Bid(score, f"{name} says {len(turn.transcript)}") if turn.kind == "bid" else f"{name} here"
    fn.__name__ = name
    return fn


def group_chat(said=None):
    """Four turns (max_loops counts the task): a and b alternate, c stays quiet."""
    return GroupChat(agents=[speaker("a", 0.9, said), speaker("b", 0.8, said), speaker("c", 0.0, said)], max_loops=5,
                     threshold=0.1, recency_penalty=0.5, recency_window=1)


def round_robin():
    return RoundRobinSwarm(agents=[speaker("a", 0), speaker("b", 0), speaker("c", 0)], max_loops=2)


SENT = []  # what the flow's user step did outside the run, once per time it ran


def send_report(ctx):
    """a user step with an effect outside the run, posting nothing"""
    SENT.append(ctx.previous_result)
    return "sent"


def say(name):
    def fn(ctx):
        return f"{name} says {len(ctx.transcript)}"
    fn.__name__ = name
    return fn


def discussion_flow():
    """A Discussion of 2 rounds of 2 speakers with an until check, then a user step that posts nothing."""
    return AgentFlow(steps=[Discussion([say("x"), say("y")], rounds=2, until=lambda ctx: False),
                            Task(name="send_report", handler=send_report, post=False)])


@pytest.fixture(autouse=True)
def _clear_sent():
    SENT.clear()


# ---- the graph IR carries no persistence policy ----
def test_state_takes_no_pure_or_hold_and_states_have_no_such_fields():
    for flag in ("pure", "hold"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{flag}'"):
            StateGraph("g").state("x", None, **{flag: True})
    g = StateGraph("g").state("x").final("done").edge("x", "done")
    for obj in (g.states["x"], g.flatten().states["x"]):
        assert not hasattr(obj, "pure") and not hasattr(obj, "hold")
    assert {"pure", "hold"}.isdisjoint(State.__dataclass_fields__) and {"pure", "hold"}.isdisjoint(
        FlatState.__dataclass_fields__)


# ---- commits per turn, counted at the store, per mode ----
@pytest.mark.parametrize("mode, commits, not_stored", [
    # seed; each of the 4 turns' post (its bid and select ride along, and the turn before's penalize); the end
    # (the last penalize rides along)
    ("turn", [1, 3, 4, 4, 4, 2], ["bid", "select", "penalize"] * 4),
    ("step", [1] * 18, []),
])
def test_group_chat_commits_once_per_turn_or_once_per_step(mode, commits, not_stored):
    store = CountingStore()
    res = group_chat().execute("go", checkpoint=store, commit=mode)
    assert len(res.transcript) == 5 and len(res.trace) == 18  # seed, 4 x (bid, select, post, penalize), stop
    assert store.commits == commits
    assert [s.state for s in store.history(res.run_id) if not s.stored] == not_stored
    assert store.load(res.run_id).meta["commit"] == mode


@pytest.mark.parametrize("mode", ["turn", "step"])
def test_round_robin_commits_once_per_turn_in_either_mode(mode):
    """Every RoundRobinSwarm step posts (or ends the run): nothing is carried in either mode."""
    store = CountingStore()
    res = round_robin().execute("go", checkpoint=store, commit=mode)
    assert res.path == ["seed", "a", "b", "c", "a", "b", "c", "stop"]
    assert store.commits == [1] * 8


@pytest.mark.parametrize("mode, commits, not_stored", [
    # begin; each of the 4 turns (the turn before's until check rides along); done (with the last until
    # check); the user step, on its own; the end
    ("turn", [1, 1, 2, 2, 2, 2, 1, 1], ["discussion.check_until"] * 4),
    ("step", [1] * 12, []),
])
def test_a_flow_with_a_discussion_and_a_user_step_commits_per_mode(mode, commits, not_stored):
    store = CountingStore()
    res = discussion_flow().execute("plan", checkpoint=store, commit=mode)
    assert res.path == ["discussion.begin"] + ["discussion.turn", "discussion.check_until"] * 4 + [
        "discussion.done", "send_report", "end"]
    assert store.commits == commits
    assert [s.state for s in store.history(res.run_id) if not s.stored] == not_stored


# ---- a crash between carried steps ----
class Crash(BaseException):
    """The process dies here: nothing after it is written (no stop event, no finish)."""


def crash_at(state, nth):
    seen = []

    def observer(ev):
        if ev.state == state and ev.dest is not None:
            seen.append(ev)
            if len(seen) == nth:
                raise Crash(state)
    return observer


def outcome(res):
    return (res.path, [(m.role, m.content) for m in res.transcript], res.stop_reason, res.output)


@pytest.mark.parametrize("mode, last_stored", [("turn", "post"), ("step", "select")])
def test_a_group_chat_crashed_between_carried_steps_resumes_to_the_same_result(mode, last_stored):
    said = []
    full = group_chat(said).execute("go")
    assert len(said) == 12  # the speakers are asked for bids only: 3 a turn
    store = CountingStore()
    with pytest.raises(Crash):
        group_chat(said).execute("go", checkpoint=store, run_id="R", commit=mode, observers=[crash_at("select", 2)])
    saved = store.load("R")
    assert saved.stop_reason is None and saved.events[-1].state == last_stored
    assert [m.content for m in saved.messages] == ["go", "a says 1"]  # the first turn's post; the second's not yet
    said.clear()
    resumed = group_chat(said).resume("R", store)
    assert outcome(resumed) == outcome(full)
    # turn: the second turn's penalize, bid round and select were never committed, so its bids are asked
    # again (turns 2 to 4); step: they were, and the resume starts at its post (turns 3 and 4)
    assert len(said) == (9 if mode == "turn" else 6)
    assert resumed.trace[-1].state == "stop"


@pytest.mark.parametrize("mode", ["turn", "step"])
def test_a_flow_crashed_after_its_until_check_resumes_to_the_same_result(mode):
    full = discussion_flow().execute("plan")
    assert len(SENT) == 1  # the user step ran once in the plain run
    SENT.clear()
    store = CountingStore()
    with pytest.raises(Crash):
        discussion_flow().execute("plan", checkpoint=store, run_id="F", commit=mode,
                                  observers=[crash_at("discussion.check_until", 3)])
    assert store.load("F").events[-1].state == ("discussion.turn" if mode == "turn" else "discussion.check_until")
    resumed = discussion_flow().resume("F", store)
    assert outcome(resumed) == outcome(full)
    assert len(SENT) == 1


@pytest.mark.parametrize("mode", ["turn", "step"])
def test_a_user_step_that_posts_nothing_is_committed_on_its_own_so_a_crash_never_runs_it_twice(mode):
    """A flow's user step may act outside the run: it is not carried in either mode, so a crash right
    after it resumes past it (carrying it would run it again, sending the report twice)."""
    full = discussion_flow().execute("plan")
    assert len(SENT) == 1 and [m.role for m in full.transcript] == ["x", "y", "x", "y"]  # it posted nothing
    SENT.clear()
    store = CountingStore()
    with pytest.raises(Crash):
        discussion_flow().execute("plan", checkpoint=store, run_id="U", commit=mode,
                                  observers=[crash_at("send_report", 1)])
    assert store.load("U").events[-1].state == "send_report"
    resumed = discussion_flow().resume("U", store)
    assert outcome(resumed) == outcome(full)
    assert SENT == ["y says 3"]  # once, across both processes (the Discussion's last line)


# ---- the mode is kept with the run: resume and fork use it ----
@pytest.mark.parametrize("mode, resumed_commits", [
    ("turn", [4, 4, 4, 2]),  # the second turn's penalize, bid, select and post; the third and fourth turns; the end
    ("step", [1] * 11),      # post 2, then every step of turns 3 and 4, and the end
])
def test_a_resume_commits_in_the_mode_the_run_was_started_with(mode, resumed_commits):
    store = CountingStore()
    with pytest.raises(Crash):
        group_chat().execute("go", checkpoint=store, run_id="R", commit=mode, observers=[crash_at("select", 2)])
    store.commits.clear()
    group_chat().resume("R", store)
    assert store.commits == resumed_commits


def test_a_fork_of_a_step_run_commits_every_step():
    store = CountingStore()
    group_chat().execute("go", checkpoint=store, run_id="R", commit="step")
    new_id = fork("R", at=4, checkpoint=store, fork_id="F")  # after the first turn's penalize
    assert store.load(new_id).meta["commit"] == "step"
    store.commits.clear()
    res = group_chat().resume(new_id, store)
    assert res.stop_reason == "max_loops" and store.commits == [1] * 13  # 3 turns of 4 steps, the end


def crashed_run_with_meta(tmp_path, at, sql):
    """A GroupChat run "R" crashed at its ``at``-th post, its stored metadata then edited by ``sql``."""
    store = SqliteCheckpointer(tmp_path / "runs.db")
    with pytest.raises(Crash):
        group_chat().execute("go", checkpoint=store, run_id="R", observers=[crash_at("post", at)])
    db = sqlite3.connect(tmp_path / "runs.db")
    db.execute(f"UPDATE runs SET meta = {sql} WHERE run_id = 'R'")
    db.commit()
    db.close()
    return store


def test_a_run_stored_before_modes_resumes_as_turn(tmp_path):
    """A run whose metadata has no commit mode (written by an earlier fsmchat) carries as "turn" does."""
    store = crashed_run_with_meta(tmp_path, 2, "json_remove(meta, '$.commit')")
    assert "commit" not in store.load("R").meta
    res = group_chat().resume("R", store)
    assert res.stop_reason == "max_loops"
    assert [s.state for s in store.history("R") if not s.stored] == ["bid", "select", "penalize"] * 4


def test_a_stored_mode_fsmchat_does_not_know_is_refused_on_resume(tmp_path):
    store = crashed_run_with_meta(tmp_path, 1, "json_set(meta, '$.commit', 'often')")
    with pytest.raises(CheckpointMismatch, match=r"^run 'R' stores commit='often', which is no commit mode of this "
                                                 r"fsmchat \('turn', 'step'\); nothing was written$"):
        group_chat().resume("R", store)


# ---- a wrong value: refused before any model call ----
@pytest.mark.parametrize("value, error, allowed", [
    ("turns", ConfigError, TURN_TEXT),
    ("Step", ConfigError, TURN_TEXT),
    (1, ConfigTypeError, "a str, " + TURN_TEXT),
    (None, ConfigTypeError, "a str, " + TURN_TEXT),
])
def test_a_wrong_commit_value_is_refused_before_any_model_call(value, error, allowed):
    said = []
    with pytest.raises(error) as caught:
        group_chat(said).execute("go", checkpoint=MemoryCheckpointer(), commit=value)
    assert str(caught.value) == f"GroupChat: commit={value!r} is invalid: {allowed}"
    with pytest.raises(error) as caught:
        discussion_flow().execute("plan", checkpoint=MemoryCheckpointer(), commit=value)
    assert str(caught.value) == f"AgentFlow: commit={value!r} is invalid: {allowed}"
    assert said == [] and SENT == []


def test_a_mode_other_than_the_default_needs_a_store(tmp_path):
    said = []
    with pytest.raises(ConfigError) as caught:
        group_chat(said).execute("go", commit="step")
    assert str(caught.value) == ("GroupChat: commit='step' is invalid: it says how a checkpointed run commits its "
                                 "steps, and this run has no checkpoint= (pass one, or leave commit= out)")
    with pytest.raises(ConfigError) as caught:
        group_chat(said).run_batch(["go"], commit="step")
    assert str(caught.value) == ("GroupChat.run_batch: commit='step' is invalid: it says how a checkpointed run "
                                 "commits its steps, and this run has no checkpoint_dir= (pass one, or leave commit= "
                                 "out)")
    with pytest.raises(ConfigError) as caught:
        group_chat(said).run_batch(["go"], checkpoint_dir=tmp_path, commit="each")
    assert str(caught.value) == f"GroupChat.run_batch: commit='each' is invalid: {TURN_TEXT}"
    assert said == [] and list(tmp_path.iterdir()) == []
    assert group_chat(said).execute("go", commit="turn").stop_reason == "max_loops"  # the default needs nothing


def pro(turn):
    return Bid(0.9, f"pro says {len(turn.transcript)}")


def con(turn):
    return Bid(0.8, f"con says {len(turn.transcript)}")


def test_a_checkpointed_batch_commits_each_run_in_its_mode(tmp_path):
    chat = GroupChat(agents=[pro, con], max_loops=3, threshold=0.1, recency_penalty=0.5)  # shipped by its config
    assert chat.run_batch(["go", "again"], checkpoint_dir=tmp_path, commit="step", progress=False) == \
        [chat.run("go"), chat.run("again")]
    store = SqliteCheckpointer(next(tmp_path.glob("*.db")))
    runs = store.list_runs()
    assert len(runs) == 2
    for r in runs:
        assert store.load(r.run_id).meta["commit"] == "step"
        assert [s.state for s in store.history(r.run_id) if not s.stored] == []


# ---- the rule, decided by the recorder from what the step did ----
class Ctx:
    def __init__(self):
        self.transcript = Transcript()

    def snapshot(self):
        return {"n": len(self.transcript)}


def work(replayable=False, effects=False):
    w = StepWork()
    w.replayable, w.effects_pending = replayable, effects
    return w


@pytest.mark.parametrize("posts, dest, step_work, carried", [
    (False, "next", work(replayable=True), True),  # the only carried case
    (True, "next", work(replayable=True), False),  # it posted
    (False, None, work(replayable=True), False),  # it stopped the run
    (False, "next", work(), False),  # it did not say its work can be done again (a user's step)
    (False, "next", work(replayable=True, effects=True), False),  # tool calls about to run
    (False, "next", None, False),
])
def test_the_recorder_carries_only_a_replayable_step_that_posted_nothing_and_went_on(posts, dest, step_work,
                                                                                     carried):
    for mode in ("turn", "step"):
        store = CountingStore()
        ctx = Ctx()
        rec = Recorder(store, f"R-{mode}", ctx.transcript, ctx.snapshot, commit=mode)
        rec.start({})
        if posts:
            ctx.transcript.post("a", "hello")
        rec(TraceEvent(0, "x", "next" if dest else "error", dest, 0.0), step_work)
        assert rec.pending == ([TraceEvent(0, "x", "next", dest, 0.0)] if carried and mode == "turn" else [])
        assert store.commits == ([] if carried and mode == "turn" else [1])


def test_an_action_says_what_its_step_did_through_the_engine():
    handed = []

    def choose(ctx):
        mark_replayable()

    def call_tools(ctx):
        mark_replayable()
        mark_effects_pending()

    g = (StateGraph("g").state("choose", choose).state("plain", lambda ctx: None).state("tools", call_tools)
         .final("done").edge("choose", "plain").edge("plain", "tools").edge("tools", "done"))
    run = GraphRun(g, recorder=lambda ev, w=None: handed.append(
        (ev.state, None if w is None else (w.replayable, w.effects_pending))))

    async def walk():
        for _ in range(3):
            await run.step()
    asyncio.run(walk())
    assert handed == [("choose", (True, False)), ("plain", (False, False)), ("tools", (True, True)), ("done", None)]
    mark_replayable()  # outside an action: nothing to say it to, nothing happens
    mark_effects_pending()


def test_a_bid_that_asks_for_tools_is_committed_before_they_run_and_the_bid_after_them_is_carried():
    weather_runs = []

    def weather(city: str) -> str:
        """The weather.

        Args:
            city: Where.
        """
        weather_runs.append(city)
        return f"sunny in {city}"

    m = ScriptedModel({"a": [ToolCall("weather", {"city": "Oslo"}), Bid(0.9, "Sunny in Oslo."), Bid(0.1, "")],
                       "b": [Bid(0.2, "Hm."), Bid(0.1, "")]})
    chat = GroupChat(agents=[m.agent("a", tools=[weather]), m.agent("b")], max_loops=3)
    store = CountingStore()
    res = chat.execute("Weather?", checkpoint=store)
    assert res.ok, res.error
    assert res.path[:6] == ["seed", "bid", "tools_bid", "bid", "select", "post"] and weather_runs == ["Oslo"]
    steps = store.history(res.run_id)
    assert [(s.state, s.payload if s.state == "bid" else None, s.stored) for s in steps[:6]] == [
        ("seed", None, True), ("bid", "tool_calls", True), ("tools_bid", None, True),
        ("bid", {"a": 0.9, "b": 0.2}, False), ("select", None, False), ("post", None, True)]
