"""Eval(executor=...): the runs an eval needs are made first as batches through the batch runner
(``execute_batch``, one batch per pattern config), each run's trajectory coming back from where it
ran, then pydantic-evals scores them from the cassette. A 2 x 20 x 3 matrix counted at a local
OpenAI-compatible server, re-scoring with no request, only the runs a cassette lacks made, budgets
and rate limits on the batch path, failures scored as the default path scores them, a closure
refused for Ray before any request, ``fsmchat eval --executor``, and a small eval on a local Ray."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fsmchat import Agent, RateLimit, RoundRobinSwarm, SqliteCheckpointer, rate_limit
from fsmchat.errors import ConfigError, ConfigTypeError
from fsmchat.evals import Eval, StoppedBecause, load_dataset
from fsmchat.evals import batch as batch_module
from support.openai_server import OpenAIServer, error, text

ROOT = Path(__file__).resolve().parents[2]
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason='needs Ray: pip install "fsmchat[ray]"')
AB = {"a": {"model": "model-a"}, "b": {"model": "model-b"}}


@pytest.fixture(scope="module")
def local_ray():
    """A local two-CPU Ray cluster for this module's Ray test, shut down after the module (the
    fixture tests/integrations/conftest.py gives its modules; by its name, tests/conftest.py puts
    every test using it in the one xdist group "ray")."""
    from fsmchat.patterns.distributed import shutdown, start_local_ray

    start_local_ray(num_cpus=2, log_to_driver=False)
    yield
    shutdown()


@pytest.fixture
def batches(monkeypatch):
    """Every batch the eval hands the batch runner: (the pattern's model, tasks, executor, runs at once
    per worker, the report's executor and workers)."""
    seen = []
    real = batch_module.execute_batch

    def spy(pattern, tasks, **kw):
        report = real(pattern, tasks, **kw)
        seen.append((pattern.agents[0].model, len(tasks), kw["executor"], kw["max_concurrency_per_worker"],
                     report.executor, report.workers))
        return report

    monkeypatch.setattr(batch_module, "execute_batch", spy)
    return seen


def dataset(n=20):
    cases = [{"name": f"c{i:02d}", "task": f"Question {i}?"} for i in range(n)]
    return load_dataset({"name": "m", "cases": cases, "evaluators": [{"Contains": "ok"}, "PathInGraph"]})


def builder(url):
    def build(model="test-model"):
        return RoundRobinSwarm(agents=[Agent("alice", model=f"openai/{model}", api_base=url, api_key="sk-test",
                                             num_retries=0)], max_loops=1)
    return build


def matrix(url, cassette=None, variants=AB, n=20, repeat=3, **options):
    return Eval(dataset(n), builder(url), variants=variants, repeat=repeat, cassette=cassette, **options)


TABLE = "evaluator    a     b\nContains     1.00  1.00\nPathInGraph  1.00  1.00\nfailed runs  0     0"


# ---- the matrix through the local batch runner ----
def test_a_2_by_20_by_3_matrix_is_two_batches_of_60_making_120_requests_and_re_scoring_makes_none(tmp_path,
                                                                                                    batches):
    tape = tmp_path / "runs.jsonl"
    with OpenAIServer(lambda req: text("ok, " + req["model"]), max_requests=500) as srv:
        result = matrix(srv.url + "/v1", tape, executor="local").run()
        assert len(srv.requests) == 120  # 2 variants x 20 cases x 3 repeats, 1 call per run
        assert sorted({r["model"] for r in srv.requests}) == ["model-a", "model-b"]
        assert batches == [("openai/model-a", 60, "local", 4, "local", 1),
                           ("openai/model-b", 60, "local", 4, "local", 1)]
        again = matrix(srv.url + "/v1", tape, executor="local").run()  # every run in the cassette: no batch
        rescored = matrix(srv.url + "/v1", tape, rescore=True).run()
        assert len(srv.requests) == 120 and len(batches) == 2
        srv.assert_clean()
    assert [len(r.cases) for r in result.reports.values()] == [60, 60]
    assert (result.ok, result.calls, result.recorded) == (True, 120, 0)
    assert (again.calls, again.recorded, rescored.calls, rescored.recorded) == (0, 120, 0, 120)
    assert result.table() == again.table() == rescored.table() == TABLE
    lines = [json.loads(line) for line in tape.read_text().splitlines()]
    assert len(lines) == 120
    # each run is appended as it ends (a killed eval keeps the finished ones), so in the order the runs end
    assert sorted({(line["variant"], line["case"]) for line in lines})[:2] == [("a", "c00"), ("a", "c01")]
    first = next(line for line in lines if (line["variant"], line["case"]) == ("a", "c00"))  # as the worker sent it
    assert {k: first["run"][k] for k in ("output", "ok", "stop_reason", "speakers", "path", "calls", "tokens")} == {
        "output": "ok, model-a", "ok": True, "stop_reason": "max_loops", "speakers": ["alice"],
        "path": ["seed", "alice", "stop"], "calls": 1, "tokens": 15}
    assert first["run"]["transcript"] == [{"role": "User", "content": "Question 0?"},
                                          {"role": "alice", "content": "ok, model-a"}]
    run = result.reports["b"].cases[0].attributes["fsmchat"]  # what pydantic-evals' evaluators read
    assert (run.output, run.speakers, run.tokens) == ("ok, model-b", ["alice"], 15)


def test_only_the_runs_the_cassette_lacks_are_made(tmp_path, batches):
    tape = tmp_path / "runs.jsonl"
    with OpenAIServer(lambda req: text("ok"), max_requests=500) as srv:
        once = matrix(srv.url + "/v1", tape, repeat=1).run()  # the default path: 40 runs recorded
        assert len(srv.requests) == 40
        thrice = matrix(srv.url + "/v1", tape, executor="local", max_concurrency_per_worker=8).run()
        assert len(srv.requests) == 120  # 80 more: the 2 repeats per case and variant the cassette lacked
    assert batches == [("openai/model-a", 40, "local", 8, "local", 1), ("openai/model-b", 40, "local", 8, "local", 1)]
    assert (once.calls, thrice.calls, thrice.recorded, thrice.ok) == (40, 80, 40, True)
    assert len(tape.read_text().splitlines()) == 120


def test_two_batch_evals_keep_their_runs_in_one_store_under_ids_of_their_own(tmp_path, batches):
    """Both evals make the same batch (one config, the same tasks): each names its runs with its own
    prefix, so the second makes its 6 runs instead of taking the first's, and each record links its own."""
    store = SqliteCheckpointer(tmp_path / "runs.db")
    with OpenAIServer(lambda req: text("ok"), max_requests=100) as srv:
        first = matrix(srv.url + "/v1", variants={"a": {"model": "model-a"}}, n=3, repeat=2, executor="local",
                       checkpoint=store).run()
        second = matrix(srv.url + "/v1", variants={"a": {"model": "model-a"}}, n=3, repeat=2, executor="local",
                        checkpoint=store).run()
        assert len(srv.requests) == 12
    assert batches == [("openai/model-a", 6, "local", 4, "local", 1)] * 2
    assert (first.ok, first.calls, second.ok, second.calls, second.recorded) == (True, 6, True, 6, 0)
    linked = []
    for result in (first, second):
        record = store.load_eval(result.eval_id)
        ids = [c["run_id"] for c in record.cases]
        assert len(ids) == 6 and len(set(ids)) == 6
        assert {i.rsplit("-", 2)[0] for i in ids} == {"eval-m-" + ids[0].split("-")[2]}  # eval-<dataset>-<its id>
        linked += ids
    assert len(set(linked)) == 12  # no run id is shared by the two evals
    runs = {r.run_id: r.stop_reason for r in store.list_runs()}
    assert sorted(runs) == sorted(linked) and set(runs.values()) == {"max_loops"}
    store.close()


def test_variants_with_the_same_config_share_a_batch(batches):
    with OpenAIServer(lambda req: text("ok"), max_requests=100) as srv:
        result = matrix(srv.url + "/v1", n=4, repeat=2, executor="local",
                        variants={"a": {"model": "model-a"}, "a_again": {"model": "model-a"}, "b": {"model": "model-b"}}
                        ).run()
        assert len(srv.requests) == 24  # 3 variants x 4 cases x 2 repeats
    assert batches == [("openai/model-a", 16, "local", 4, "local", 1), ("openai/model-b", 8, "local", 4, "local", 1)]
    assert [len(r.cases) for r in result.reports.values()] == [8, 8, 8] and result.ok


# ---- budgets, rate limits, failures ----
def test_max_calls_bounds_the_batches_and_the_runs_past_it_fail_saying_why(batches):
    with OpenAIServer(lambda req: text("ok"), max_requests=200) as srv:
        result = matrix(srv.url + "/v1", max_calls=7, executor="local").run()
        assert len(srv.requests) == 7
    assert batches == [("openai/model-a", 7, "local", 4, "local", 1)]  # model-b's batch never starts
    assert result.calls == 7 and len(result.failures()) == 113
    assert result.failures()[-1] == ("b / c19 [3/3]: BudgetExceeded: the eval's max_calls=7: 0 call(s) left, and this "
                                     "run may make up to 1; this case did not run")


def test_max_cost_runs_a_batch_in_waves_and_starts_none_once_the_cost_is_spent(batches):
    with OpenAIServer(lambda req: text("ok"), max_requests=200) as srv:  # gpt-4o-mini: $4.5e-06 per run here
        result = matrix(srv.url + "/v1", variants={"a": {"model": "gpt-4o-mini"}}, executor="local",
                        max_cost_usd=1e-05, max_concurrency_per_worker=2).run()
        assert len(srv.requests) == 4  # a wave of 2 ($9e-06), a second ($1.8e-05), then none
    assert batches == [("openai/gpt-4o-mini", 2, "local", 2, "local", 1),
                       ("openai/gpt-4o-mini", 2, "local", 2, "local", 1)]
    assert (result.calls, len(result.failures())) == (4, 56)
    assert result.failures()[-1] == ("a / c19 [3/3]: BudgetExceeded: the eval's max_cost_usd=1e-05 is spent ($0.0000); "
                                     "this case did not run")


def test_a_rate_limit_holds_across_the_batch():
    with OpenAIServer(lambda req: text("ok"), max_requests=100) as srv:
        rate_limit(srv.api_base, RateLimit(rpm=4, window=3600))  # an hour: exactly 4 requests ever get room

        def build():
            return RoundRobinSwarm(agents=[Agent("alice", model="openai/m", api_base=srv.api_base, api_key="sk-test",
                                                 num_retries=0)], max_loops=1).with_limits(deadline_s=1)
        try:
            result = Eval(dataset(10), build, evaluators=[StoppedBecause("max_loops")], executor="local",
                          max_concurrency_per_worker=10).run()
        finally:
            rate_limit(srv.api_base, None)
        assert len(srv.requests) == 4
    stops = sorted(c.attributes["fsmchat"].stop_reason for c in result.reports["default"].cases)
    assert stops == ["deadline"] * 6 + ["max_loops"] * 4  # the runs without room waited to their deadline


def test_a_failing_model_fails_the_same_cases_with_the_same_errors_as_the_default_path():
    def answer(req):
        return error(500) if "Question 3?" in json.dumps(req["messages"]) else text("ok")

    with OpenAIServer(answer, max_requests=500) as srv:
        batched = matrix(srv.url + "/v1", n=6, executor="local").run()
        plain = matrix(srv.url + "/v1", n=6).run()
        assert len(srv.requests) == 72  # 2 x 36 runs, one request each (num_retries=0)
    failed = sorted(line.split(":")[0] for line in batched.failures())
    assert failed == ["a / c03 [1/3]", "a / c03 [2/3]", "a / c03 [3/3]", "b / c03 [1/3]", "b / c03 [2/3]",
                      "b / c03 [3/3]"]
    assert sorted(batched.failures()) == sorted(plain.failures())
    assert batched.failures()[0].startswith("a / c03 [1/3]: EvalError: the run failed: ")
    assert batched.table() == plain.table()
    assert [len(r.cases) for r in batched.reports.values()] == [15, 15]


# ---- bad input, refused before any model call ----
@needs_ray
def test_a_closure_for_ray_is_refused_before_any_request_naming_the_variant():
    with OpenAIServer(lambda req: text("ok"), max_requests=1) as srv:
        def build(style="plain"):
            def polite(turn):
                return "ok, kindly"
            agent = Agent("alice", model="openai/m", api_base=srv.url + "/v1", api_key="sk-test")
            return RoundRobinSwarm(agents=[agent, polite] if style == "polite" else [agent], max_loops=1)

        with pytest.raises(ConfigTypeError) as err:
            Eval(dataset(3), build, variants={"plain": {}, "polite": {"style": "polite"}}, executor="ray")
        # a case whose inputs build the closure: refused as the eval starts, before any batch
        ds = load_dataset([{"name": "x", "task": "Hi"}, {"name": "y", "task": "Hi", "inputs": {"style": "polite"}}])
        with pytest.raises(ConfigTypeError, match=r"^Eval\(executor='ray'\): variant 'default' builds a Round"):
            Eval(ds, build, executor="ray").run()
        assert srv.requests == []
    assert str(err.value) == (
        "Eval(executor='ray'): variant 'polite' builds a RoundRobinSwarm that cannot be sent to Ray workers: "
        "RoundRobinSwarm agent 'polite': test_a_closure_for_ray_is_refused_before_any_request_naming_the_variant."
        "<locals>.build.<locals>.polite is defined inside a function (a closure), which cannot be shipped in a config "
        "(it has no import path); define it at module level and pass state as data. Build it from module-level "
        "functions and importable objects (its to_config() must succeed), or run the eval with executor='local'")


def test_batch_options_are_checked_before_any_model_call(tmp_path):
    with OpenAIServer(lambda req: text("ok"), max_requests=1) as srv:
        build = builder(srv.url + "/v1")
        cases = [{"task": "Hi"}]
        with pytest.raises(ConfigError) as err:
            Eval(cases, build, executor="rya")
        assert str(err.value) == ("Eval(executor='rya') is invalid: 'local' (the batch runner in this process), 'ray' "
                                  "(Ray workers), or None (each case run by pydantic-evals' task)")
        with pytest.raises(ConfigTypeError) as err:
            Eval(cases, build, address="auto")
        assert str(err.value) == "Eval(address=...) is for the batch runner: give executor='local' or 'ray' too"
        with pytest.raises(ConfigTypeError) as err:
            Eval(cases, build, executor="local", address="auto")
        assert str(err.value) == "Eval(address='auto') is for executor='ray' (the Ray cluster to join)"
        with pytest.raises(ConfigTypeError) as err:
            Eval(cases, build, executor="local", batch_options={"workers": 2})
        assert str(err.value) == ("Eval(batch_options={'workers': ...}) is for executor='ray' (Ray's workers and "
                                  "chunks); locally a batch runs max_concurrency_per_worker runs at once")
        with pytest.raises(ConfigTypeError) as err:
            Eval(cases, build, executor="local", batch_options={"chunk": 4})
        assert str(err.value) == ("Eval(batch_options={'chunk': ...}) is invalid: execute_batch's options an eval "
                                  "passes on are workers, chunk_size, runtime_env, worker_options, max_chunk_attempts")
        with pytest.raises(ConfigError) as err:
            Eval(cases, build, executor="local", max_concurrency_per_worker=0)
        assert str(err.value) == "Eval: max_concurrency_per_worker=0 is invalid: an int >= 1"
        if importlib.util.find_spec("ray") is not None:
            with pytest.raises(ConfigTypeError) as err:
                Eval(cases, build, executor="ray", checkpoint=SqliteCheckpointer(tmp_path / "runs.db"))
            assert str(err.value) == ("Eval(executor='ray', checkpoint=SqliteCheckpointer(...)) is invalid: Ray "
                                      "workers keep their runs in one store they all reach, a PostgresCheckpointer "
                                      "opened with a postgresql:// URI; or run the batches with executor='local'")
        with pytest.raises(ConfigTypeError) as err:
            Eval(cases, lambda: _Loop(), executor="local")
        assert str(err.value) == ("Eval(executor='local'): variant 'default' builds a _Loop, which the batch runner "
                                  "cannot run (a pattern or flow: run_batch's preflight and to_config); leave executor "
                                  "unset to run it case by case")
        assert srv.requests == []


class _Loop:
    """Something with aexecute(task) that is no pattern: the default path runs it, the batch runner cannot."""

    async def aexecute(self, task):
        raise AssertionError("never run")


# ---- the command line ----
EVAL_FILE = textwrap.dedent('''
    from fsmchat import RoundRobinSwarm
    from fsmchat.evals import Eval, load_dataset

    def build(reply="Not yet."):
        def critic(turn):
            return reply
        return RoundRobinSwarm(agents=[critic], max_loops=1)

    EVAL = Eval(load_dataset([{"name": f"c{i}", "task": f"Ship {i}?", "evaluators": [{"Contains": "yet"}]}
                              for i in range(4)]), build, variants={"no": {}, "yes": {"reply": "Yes."}}, repeat=2)
    THRESHOLDS = {"Contains": 1.0}
''')


def cli(*args):
    return subprocess.run([sys.executable, "-m", "fsmchat.cli", "eval", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_fsmchat_eval_executor_runs_the_batches_and_refuses_bad_input_with_exit_2(tmp_path):
    path, tape = tmp_path / "ev.py", tmp_path / "runs.jsonl"
    path.write_text(EVAL_FILE)
    met = cli(str(path), "--executor", "local", "--variant", "no", "--cassette", str(tape))
    assert met.returncode == 0, met.stderr
    assert met.stdout.splitlines()[-2:] == [
        f"-- dataset: 8 runs over 1 variant(s); 0 model calls, 0 runs from the cassette ({tape})",
        "passed: Contains >= 1.0"]
    assert len(tape.read_text().splitlines()) == 8
    missed = cli(str(path), "--executor", "local")
    assert missed.returncode == 1 and missed.stderr.splitlines()[-2:] == ["FAILED:", "  yes: Contains 0.00 < 1.0"]
    ray = cli(str(path), "--executor", "ray")
    assert ray.returncode == 2
    assert ray.stderr.startswith("fsmchat eval: ConfigTypeError: Eval(executor='ray'): variant 'no' builds a "
                                 "RoundRobinSwarm that cannot be sent to Ray workers: RoundRobinSwarm agent 'critic': ")
    assert ray.stderr.rstrip().endswith("or run the eval with executor='local'")
    address = cli(str(path), "--address", "auto")
    assert (address.returncode, address.stderr.strip()) == (
        2, "fsmchat eval: ConfigTypeError: Eval(address=...) is for the batch runner: give executor='local' or "
           "'ray' too")
    unknown = cli(str(path), "--executor", "threads")
    assert unknown.returncode == 2 and "argument --executor: invalid choice: 'threads'" in unknown.stderr


# ---- on Ray ----
@needs_ray
def test_a_small_eval_on_a_local_ray_gets_each_trajectory_back_from_its_worker(local_ray, tmp_path, batches):
    tape = tmp_path / "runs.jsonl"
    with OpenAIServer(lambda req: text("ok, " + req["model"]), max_requests=100, max_lifetime=600) as srv:
        result = matrix(srv.url + "/v1", tape, n=3, repeat=2, executor="ray", max_concurrency_per_worker=2,
                        batch_options={"workers": 2}).run()
        assert len(srv.requests) == 12  # 2 variants x 3 cases x 2 repeats
        again = matrix(srv.url + "/v1", tape, n=3, repeat=2, executor="ray").run()
        assert len(srv.requests) == 12
    assert batches == [("openai/model-a", 6, "ray", 2, "ray", 2), ("openai/model-b", 6, "ray", 2, "ray", 2)]
    assert (result.ok, result.calls, again.calls, again.recorded) == (True, 12, 0, 12)
    assert result.table() == again.table() == TABLE
    runs = [c.attributes["fsmchat"] for c in result.reports["b"].cases]
    assert {(r.output, tuple(r.speakers), tuple(r.path), r.tokens) for r in runs} == {
        ("ok, model-b", ("alice",), ("seed", "alice", "stop"), 15)}
