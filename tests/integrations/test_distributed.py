"""Batches on Ray (the ``ray`` extra): a local Ray with 2 CPUs, 2 workers. Results equal the local
``run_batch``; a failing task is isolated; a killed worker loses nothing; a re-run with the same
checkpoint_dir makes no model call for finished tasks."""
import pytest

ray = pytest.importorskip("ray")

from fsmchat import Agent, AgentFlow, Bid, Discussion, GroupChat, loop  # noqa: E402
from fsmchat.patterns.distributed import TaskFailure, execute_batch  # noqa: E402
from fsmchat.testing import Delay, FunctionModel  # noqa: E402
from support.scripted import bid_fn  # noqa: E402  (one scripted model for config and Ray tests)

N = 200


def slow_bid_fn(req):
    return Delay(0.02, bid_fn(req))


def grumpy(turn):
    """A callable participant that raises on tasks mentioning 'boom'."""
    if "boom" in turn.transcript[0].content:
        raise RuntimeError(f"grumpy refuses {turn.transcript[0].content!r}")
    return Bid(0.1, "")


pytestmark = pytest.mark.usefixtures("local_ray")  # tests/integrations/conftest.py


def chat(fn=bid_fn, extra=()):
    m = FunctionModel(fn)
    agents = [m.agent("alice", system_prompt="You like cats."), m.agent("bob", system_prompt="You like dogs."),
              m.agent("carol"), *extra]
    return m, GroupChat(agents=agents, max_loops=3, threshold=0.3)


TASKS = [f"topic {i}: {'pets' if i % 3 else 'parks'}" for i in range(N)]


@pytest.fixture(scope="module")
def expected():
    """The local run_batch of TASKS (a slower model with the same answers gives the same results)."""
    return chat()[1].run_batch(TASKS)


def test_200_group_chats_on_2_workers_equal_the_local_batch(expected):
    m, gc = chat()
    assert len(set(expected)) > N // 2  # the chats differ from one another
    report = execute_batch(gc, TASKS, address=None, workers=2, max_concurrency_per_worker=16)
    assert report.results == expected
    assert report.workers == 2 and report.failed == 0 and report.dead_workers == 0
    assert {o.worker for o in report.outcomes} and len({o.worker for o in report.outcomes}) == 2
    assert report.model_calls > N and report.startup_s > 0
    # the Pattern method is the same path
    assert gc.run_batch(TASKS[:20], executor="ray", max_concurrency_per_worker=4) == expected[:20]


def test_offline_model_and_flows_run_on_workers():
    offline = GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                                Agent("b", system_prompt="You argue for dogs.")], max_loops=4)
    tasks = ["pets?", "which pet is best?", "cats or dogs"]
    assert offline.run_batch(tasks, executor="ray") == offline.run_batch(tasks)
    m = FunctionModel(bid_fn)
    flow = AgentFlow(steps=[loop(steps=[Discussion([m.agent("critic"), m.agent("author")], rounds=2)], over="items")],
                     variables={"items": ["draft A", "draft B"]})
    assert flow.run_batch(tasks, executor="ray") == flow.run_batch(tasks)


def test_a_failing_task_is_isolated():
    m, gc = chat(extra=[grumpy])
    tasks = [f"{'boom ' if i % 10 == 3 else ''}topic {i}" for i in range(20)]
    report = execute_batch(gc, tasks, workers=2, max_concurrency_per_worker=8)
    fine = [t for t in tasks if "boom" not in t]
    expected = dict(zip(fine, gc.run_batch(fine)))
    assert report.failed == 2 and report.completed == 18
    for i, (task, result) in enumerate(zip(tasks, report.results)):
        if "boom" in task:
            assert isinstance(result, TaskFailure) and result.index == i and result.task == task
            assert result.error_type == "RuntimeError" and "grumpy refuses" in result.message
            assert result.transcript[0]["content"] == task and "Traceback" in result.traceback
        else:
            assert result == expected[task]


def test_rerun_with_checkpoint_dir_makes_no_model_call_for_finished_tasks(tmp_path, expected):
    m, gc = chat()
    tasks, expected = TASKS[:60], expected[:60]
    first = execute_batch(gc, tasks, workers=2, checkpoint_dir=tmp_path)
    assert first.results == expected and first.model_calls > 0 and first.resumed == 0
    assert len(list(tmp_path.glob("worker-*.db"))) == 2  # one SQLite file per worker
    again = execute_batch(gc, tasks, workers=2, checkpoint_dir=tmp_path)
    assert again.results == expected
    assert again.model_calls == 0 and again.resumed == len(tasks)
    grown = execute_batch(gc, tasks + ["one more topic"], workers=2, checkpoint_dir=tmp_path)
    assert grown.results[:60] == expected and grown.resumed == 60
    assert grown.model_calls == grown.outcomes[60].model_calls > 0


def test_a_config_the_workers_cannot_import_fails_before_any_task(tmp_path, monkeypatch):
    (tmp_path / "driver_only_mod.py").write_text("def speak(turn):\n    return 'hi'\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # after Ray started: the workers never see this folder
    import driver_only_mod

    gc = GroupChat(agents=[Agent("a"), driver_only_mod.speak])
    with pytest.raises(RuntimeError, match="could not rebuild the pattern.*driver_only_mod"):
        execute_batch(gc, ["t"], workers=2)


def test_killing_a_worker_mid_batch_loses_nothing(tmp_path, expected):
    """Last in the file: the pool replaces the killed worker only when a later batch asks for it."""
    m, gc = chat(fn=slow_bid_fn)
    killed = []

    def kill_first_worker(progress):
        if not killed:
            killed.append(progress.done)
            ray.kill(progress.actors[0])

    report = execute_batch(gc, TASKS, workers=2, max_concurrency_per_worker=4, chunk_size=10,
                           on_progress=kill_first_worker, checkpoint_dir=tmp_path)
    assert killed and killed[0] < N
    assert report.dead_workers == 1 and report.requeued_chunks >= 1
    assert len(report.outcomes) == N and [o.index for o in report.outcomes] == list(range(N))
    assert report.failed == 0 and report.results == expected
    # the dead worker's finished runs were checkpointed: a re-run rebuilds all of them without a model call
    again = execute_batch(gc, TASKS, executor="local", checkpoint_dir=tmp_path)
    assert again.results == expected and again.model_calls == 0
