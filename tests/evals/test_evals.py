"""fsmchat.evals: datasets checked with line and field, each evaluator's pass and fail, a matrix of
variants x cases x repeats counted at a local OpenAI-compatible server, re-scoring from a cassette
with no request, a killed eval going on from its recorded runs, budgets, the judge's typed grade,
and `fsmchat eval`'s exit codes."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pydantic_evals.evaluators import EvaluatorContext

from fsmchat import Agent, RoundRobinSwarm
from fsmchat.errors import ConfigError
from fsmchat.ui import Store
from fsmchat.evals import (Check, Eval, Judge, MatchesSchema, PathInGraph, Regex, SpeakersAre, SpeakersInOrder,
                           StoppedBecause, ToolCalled, ToolUse, Trajectory, Visited, WithinBudget, load_dataset)
from support.openai_server import OpenAIServer, text, tool_call

ROOT = Path(__file__).resolve().parents[2]

RUN = Trajectory(output='{"team": "billing"}', stop_reason="answered", speakers=["triage", "billing", "billing"],
                 tools=[ToolUse(speaker="billing", name="refund", arguments={"order": 1042, "note": {"why": "twice"}})],
                 path=["triage", "billing", "tools_billing", "billing", "answered"], calls=4, tokens=900,
                 cost_usd=0.002, edges=[("triage", "billing"), ("billing", "tools_billing"),
                                        ("tools_billing", "billing"), ("billing", "answered")])


def score(evaluator, run=RUN):
    ctx = EvaluatorContext(name="c", inputs="t", metadata=None, expected_output=None, output=run.output,
                           duration=0.0, _span_tree=None, attributes={"fsmchat": run}, metrics={})
    result = evaluator.evaluate(ctx)
    return (result.value, result.reason)


@pytest.mark.parametrize("evaluator, expected", [
    (Regex(r'"team": "bill'), (True, None)),
    (Regex("refund"), (False, """no match for 'refund' in '{"team": "billing"}'""")),
    (MatchesSchema({"type": "object", "required": ["team"]}), (True, None)),
    (MatchesSchema({"type": "object", "required": ["order"]}), (False, "at (the root): 'order' is a required property")),
    (SpeakersInOrder(["triage", "billing"]), (True, None)),
    (SpeakersInOrder(["billing", "triage"]), (False, "spoke: triage -> billing -> billing")),
    (SpeakersInOrder(["triage", "billing"], exact=True), (False, "spoke: triage -> billing -> billing")),
    (SpeakersAre(["billing", "triage"]), (True, None)),
    (SpeakersAre(["triage"]), (False, "spoke: ['billing', 'triage']")),
    (ToolCalled("refund", arguments={"order": 1042}), (True, None)),
    (ToolCalled("refund", arguments={"note": {"why": "twice"}}, speaker="billing", times=1), (True, None)),
    (ToolCalled("refund", arguments={"order": lambda v: v > 2000}),
     (False, '0 matching call(s); calls made: billing: refund({"order": 1042, "note": {"why": "twice"}})')),
    (ToolCalled("refund", speaker="triage"), (False, '0 matching call(s); calls made: billing: refund({"order": 1042, '
                                                     '"note": {"why": "twice"}})')),
    (ToolCalled("refund", called=False), (False, '1 matching call(s); calls made: billing: refund({"order": 1042, '
                                                 '"note": {"why": "twice"}})')),
    (Visited("tools_billing"), (True, None)),
    (Visited("tools_billing", avoided=True), (False, "path: triage -> billing -> tools_billing -> billing -> answered")),
    (StoppedBecause("answered"), (True, None)),
    (StoppedBecause(["max_turns", "livelock"]), (False, "stopped: answered")),
    (WithinBudget(max_calls=4, max_tokens=900, max_cost_usd=0.002), (True, None)),
    (WithinBudget(max_calls=3, max_tokens=100), (False, "4 calls > 3; 900 tokens > 100")),
    (PathInGraph(), (True, None)),
    (Check(lambda output, run: (run.calls < 3, f"{run.calls} calls")), (False, "4 calls")),
])
def test_each_evaluator_passes_and_fails_on_a_known_trajectory(evaluator, expected):
    assert score(evaluator) == expected


def test_a_path_off_the_drawn_graph_fails_path_in_graph():
    off = RUN.model_copy(update={"path": ["triage", "tools_billing", "answered"]})
    assert score(PathInGraph(), off) == (False, "no transition 'triage' -> 'tools_billing' in the drawn graph")


def test_evaluators_refuse_bad_arguments_when_built():
    with pytest.raises(ConfigError, match=r"Regex\(pattern='\(' \) is invalid|Regex\(pattern='\('\) is invalid"):
        Regex("(")
    with pytest.raises(ConfigError, match=r"MatchesSchema\(schema=...\) is invalid at type: 'bogus' is not valid"):
        MatchesSchema({"type": "bogus"})
    with pytest.raises(ConfigError, match=r"WithinBudget\(\) is invalid: give max_calls, max_tokens or max_cost_usd"):
        WithinBudget()
    with pytest.raises(ConfigError, match=r"Judge\(threshold=2\) is invalid: a number from 0 to 1"):
        Judge("Polite.", threshold=2)


# ---- datasets ----
def test_a_yaml_dataset_error_names_the_line_the_field_and_the_closest_key(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("name: t\ncases:\n  - name: a\n    task: Hi\n  - name: b\n    taks: Hello\n")
    with pytest.raises(ConfigError) as err:
        load_dataset(path)
    assert str(err.value) == (f"{path}:5: cases.1.task: Field required\n"
                              f"{path}:6: cases.1.taks: unknown key (did you mean 'task'?); allowed: name, task, "
                              "inputs, expected_output, metadata, evaluators")


def test_a_jsonl_dataset_error_names_its_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"task": "Hi"}\n\n{"task": 3}\n')
    with pytest.raises(ConfigError) as err:
        load_dataset(path)
    assert str(err.value) == f"{path}:3: task: Input should be a valid string"
    path.write_text('{"task": "Hi"}\n{"task": \n')
    with pytest.raises(ConfigError, match=r"d.jsonl:2: not JSON \(Expecting value at column 10\)"):
        load_dataset(path)


def test_duplicate_case_names_and_unknown_evaluators_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"dataset: cases.1.name: 'a' is taken by an earlier case"):
        load_dataset([{"name": "a", "task": "x"}, {"name": "a", "task": "y"}])
    with pytest.raises(ConfigError, match=r"dataset: an evaluator is invalid: .*ToolCaled.*fsmchat's evaluators: Regex"):
        load_dataset([{"task": "x", "evaluators": [{"ToolCaled": "refund"}]}])
    with pytest.raises(ConfigError, match=r"a dataset is a .yaml, .yml, .json or .jsonl file"):
        load_dataset(tmp_path / "d.txt")


def test_the_example_dataset_loads_24_cases_with_their_evaluators():
    ds = load_dataset(ROOT / "examples" / "evals" / "support_triage.yaml")
    assert (ds.name, len(ds.cases)) == ("support_triage", 24)
    assert [type(e).__name__ for e in ds.evaluators] == ["StoppedBecause", "PathInGraph", "WithinBudget"]
    assert [type(e).__name__ for e in ds.cases[0].evaluators] == ["SpeakersInOrder", "ToolCalled"]


# ---- a matrix at a local server ----
def matrix(url, cassette=None, **options):
    cases = [{"name": f"c{i:02d}", "task": f"Question {i}?"} for i in range(20)]
    ds = load_dataset({"name": "m", "cases": cases, "evaluators": [{"Contains": "ok"}, "PathInGraph"]})

    def build(model="test-model"):
        return RoundRobinSwarm(agents=[Agent("alice", model=f"openai/{model}", api_base=url, api_key="sk-test",
                                             num_retries=0)], max_loops=1)

    return Eval(ds, build, variants={"a": {"model": "model-a"}, "b": {"model": "model-b"}}, repeat=3,
                cassette=cassette, **options)


def test_two_variants_by_20_cases_by_3_repeats_make_120_requests_and_re_scoring_makes_none(tmp_path):
    tape = tmp_path / "runs.jsonl"
    with OpenAIServer(lambda req: text("ok, " + req["model"]), max_requests=500) as srv:
        result = matrix(srv.url + "/v1", tape).run()
        assert len(srv.requests) == 120
        assert sorted({r["model"] for r in srv.requests}) == ["model-a", "model-b"]
        assert [len(r.cases) for r in result.reports.values()] == [60, 60]
        assert (result.ok, result.calls, result.recorded) == (True, 120, 0)
        summary = result.summary()
        assert {v: (s["Contains"].mean, s["Contains"].n) for v, s in summary.items()} == {"a": (1.0, 60), "b": (1.0, 60)}
        assert len(tape.read_text().splitlines()) == 120
        again = matrix(srv.url + "/v1", tape).run()  # the same cassette: every run is re-scored, none made
        rescored = matrix(srv.url + "/v1", tape, rescore=True).run()
        assert len(srv.requests) == 120
        srv.assert_clean()
    assert (again.calls, again.recorded, rescored.calls, rescored.recorded) == (0, 120, 0, 120)
    assert again.table() == result.table() == (
        "evaluator    a     b\nContains     1.00  1.00\nPathInGraph  1.00  1.00\nfailed runs  0     0")


def test_rescoring_without_a_recording_fails_each_case_and_calls_no_model(tmp_path):
    with OpenAIServer(lambda req: text("ok"), max_requests=10) as srv:
        result = matrix(srv.url + "/v1", tmp_path / "none.jsonl", rescore=True).run()
        assert srv.requests == []
    assert result.ok is False and len(result.failures()) == 120
    assert result.failures()[0].startswith("a / c00 [1/3]: EvalError: no recorded run of this case under variant 'a'")


def test_max_calls_bounds_the_whole_eval_and_the_cases_past_it_fail_saying_why():
    with OpenAIServer(lambda req: text("ok"), max_requests=200) as srv:
        result = matrix(srv.url + "/v1", max_calls=7, max_concurrency=3).run()
        assert len(srv.requests) == 7
    assert result.calls == 7 and len(result.failures()) == 113
    assert "the eval's max_calls=7: 0 call(s) left, and this run may make up to 1; this case did not run" in \
        result.failures()[-1]


def test_a_failing_model_fails_its_case_loudly_and_keeps_the_others():
    from support.openai_server import error

    with OpenAIServer(lambda req: error(500) if "Question 3?" in json.dumps(req["messages"]) else text("ok"),
                      max_requests=500) as srv:
        result = matrix(srv.url + "/v1").run()
    assert result.ok is False
    failed = sorted({line.split(":")[0] for line in result.failures()})
    assert failed == ["a / c03 [1/3]", "a / c03 [2/3]", "a / c03 [3/3]", "b / c03 [1/3]", "b / c03 [2/3]",
                      "b / c03 [3/3]"]
    assert [len(r.cases) for r in result.reports.values()] == [57, 57]


def test_variants_are_checked_before_any_model_call():
    with pytest.raises(Exception, match=r"Eval: variant 'x': build\(\*\*\{'modle': 'y'\}\) failed: .*modle"):
        with OpenAIServer(lambda req: text("ok"), max_requests=1) as srv:
            Eval([{"task": "Hi"}], lambda model="m": RoundRobinSwarm(
                agents=[Agent("a", model=f"openai/{model}", api_base=srv.url + "/v1", api_key="k")], max_loops=1),
                variants={"x": {"modle": "y"}})
    with pytest.raises(Exception, match=r"Eval\(repeat=...\)|repeat"):
        Eval([{"task": "Hi"}], lambda: RoundRobinSwarm(agents=[lambda t: "x"]), repeat="3")


# ---- the judge ----
def test_the_judge_grades_through_its_forced_tool_and_asks_again_once_after_an_invalid_grade():
    replies = [tool_call("grade", {"score": 7, "reason": "way off"}), tool_call("grade", {"score": 0.3, "reason": "Vague."})]
    with OpenAIServer(replies, max_requests=5) as srv:
        judge = Judge("The reply names the refund.", model="openai/judge", api_base=srv.url + "/v1", api_key="k",
                      threshold=0.5)
        import asyncio

        ctx = EvaluatorContext(name="c", inputs="t", metadata=None, expected_output=None, output="x", duration=0.0,
                               _span_tree=None, attributes={"fsmchat": RUN.model_copy(update={"transcript": [
                                   {"role": "User", "content": "Refund me."}, {"role": "billing", "content": "Hm."}]})},
                               metrics={})
        result = asyncio.run(judge.evaluate(ctx))
        assert len(srv.requests) == 2
        first, second = srv.requests
    assert (result.value, result.reason) == (False, "0.30: Vague.")
    assert first["tool_choice"] == {"type": "function", "function": {"name": "grade"}}
    assert first["tools"][0]["function"]["parameters"]["properties"]["score"] == {
        "type": "number", "minimum": 0, "maximum": 1,
        "description": "0 when the conversation fails the rubric, 1 when it meets it fully"}
    assert "Rubric: The reply names the refund." in first["messages"][-1]["content"]
    assert "not a valid grade (Input should be less than or equal to 1)" in second["messages"][-1]["content"]


# ---- the command line ----
EVAL_FILE = textwrap.dedent('''
    from fsmchat import RoundRobinSwarm
    from fsmchat.evals import Eval, load_dataset

    def build(reply="Not yet."):
        def critic(turn):
            return reply
        return RoundRobinSwarm(agents=[critic], max_loops=1)

    EVAL = Eval(load_dataset([{"name": f"c{i}", "task": f"Ship {i}?", "evaluators": [{"Contains": "yet"}]}
                              for i in range(4)]), build, variants={"no": {}, "yes": {"reply": "Yes."}})
    THRESHOLDS = {"Contains": 1.0}
''')


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fsmchat.cli", "eval", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_fsmchat_eval_exits_1_naming_the_missed_threshold_0_when_met_and_2_on_bad_input(tmp_path):
    path = tmp_path / "ev.py"
    path.write_text(EVAL_FILE)
    missed = cli(str(path))
    assert missed.returncode == 1, missed.stderr
    assert missed.stderr.splitlines()[-2:] == ["FAILED:", "  yes: Contains 0.00 < 1.0"]
    assert "Contains     1.00  0.00" in missed.stdout
    met = cli(str(path), "--variant", "no")
    assert met.returncode == 0, met.stderr
    assert met.stdout.splitlines()[-1] == "passed: Contains >= 1.0"
    bad = cli(str(path), "--threshold", "Contains=high")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("fsmchat eval: ConfigError: --threshold: Contains='high' is invalid: a number "
                                  "from 0 to 1 (the lowest mean that passes)")
    typo = cli(str(path), "--variant", "yse")
    assert typo.returncode == 2 and "--variant yse: no such variant; " in typo.stderr and "has no, yes" in typo.stderr


def test_fsmchat_eval_keeps_every_run_in_a_store_for_the_viewer(tmp_path):
    path = tmp_path / "ev.py"
    path.write_text(EVAL_FILE)
    done = cli(str(path), "--db", str(tmp_path / "runs.db"), "--variant", "no")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (f"-- every run is kept in {tmp_path / 'runs.db'} (run ids eval-<dataset>-"
                                            f"<variant>-<case>-<id>); review them with: fsmchat ui --db "
                                            f"{tmp_path / 'runs.db'}")
    listed = subprocess.run([sys.executable, "-m", "fsmchat.cli", "runs", "--db", str(tmp_path / "runs.db"), "--json"],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    runs = json.loads(listed.stdout)
    assert sorted(r["run_id"].rsplit("-", 1)[0] for r in runs) == [f"eval-dataset-no-c{i}" for i in range(4)]
    assert {(r["status"], r["stop_reason"]) for r in runs} == {("finished", "max_loops")}
    [kept] = Store(tmp_path / "runs.db").evaluations()  # and the eval's record beside them, each case linked
    assert (f"-- evaluation {kept.eval_id} is kept in the store beside its runs (fsmchat ui: /evals/{kept.eval_id})"
            in done.stdout.splitlines())
    record = Store(tmp_path / "runs.db").evaluation(kept.eval_id)
    assert [(c["case"], c["variant"], c["output"], c["assertions"]["Contains"]["value"]) for c in record.cases] == \
        [(f"c{i}", "no", "Not yet.", True) for i in range(4)]
    assert sorted(c["run_id"] for c in record.cases) == sorted(r["run_id"] for r in runs)


KILLABLE = textwrap.dedent('''
    import sys
    from fsmchat import Agent, RoundRobinSwarm
    from fsmchat.evals import Eval, load_dataset

    def build():
        return RoundRobinSwarm(agents=[Agent("alice", model="openai/m", api_base=sys.argv[1], api_key="k",
                                             num_retries=0)], max_loops=1)

    batch = {"executor": sys.argv[3], "max_concurrency_per_worker": 2} if len(sys.argv) > 3 else {}
    result = Eval(load_dataset([{"name": f"c{i:02d}", "task": f"Q{i}?"} for i in range(20)]), build,
                  max_concurrency=2, cassette=sys.argv[2], **batch).run()
    print("calls", result.calls, "recorded", result.recorded, "ok", result.ok)
''')


@pytest.mark.parametrize("executor", [[], ["local"]], ids=["case by case", "one local batch"])
def test_a_killed_eval_goes_on_from_its_recorded_runs_without_repeating_them(tmp_path, executor):
    """Killed once 6 runs are in its cassette: by default each case's run is appended as it ends; with
    executor="local" the 20 runs are one batch, and each is appended as it ends too, not as the batch does."""
    script, tape = tmp_path / "kill.py", tmp_path / "runs.jsonl"
    script.write_text(KILLABLE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with OpenAIServer(lambda req: text("ok").after(0.2), max_requests=200, max_lifetime=120) as srv:
        proc = subprocess.Popen([sys.executable, str(script), srv.url + "/v1", str(tape), *executor], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not tape.exists() or len(tape.read_text().splitlines()) < 6:  # 6 runs finished
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        recorded = len(tape.read_text().splitlines())
        before = len(srv.requests)
        assert 6 <= recorded < 20 and before >= recorded
        done = subprocess.run([sys.executable, str(script), srv.url + "/v1", str(tape), *executor], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert len(srv.requests) - before == 20 - recorded  # only the runs not recorded are made again
    assert done.stdout.split() == ["calls", str(20 - recorded), "recorded", str(recorded), "ok", "True"]
    assert len(tape.read_text().splitlines()) == 20


def test_the_example_eval_passes_offline_and_re_scores_from_its_cassette_with_no_model_call(tmp_path):
    tape = tmp_path / "runs.jsonl"
    first = cli(str(ROOT / "examples" / "evals" / "support_triage.py"), "--cassette", str(tape), cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "-- support_triage: 48 runs over 2 variant(s); 120 model calls, 0 runs from the cassette" in first.stdout
    again = cli(str(ROOT / "examples" / "evals" / "support_triage.py"), "--cassette", str(tape), "--rescore",
                cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "48 runs over 2 variant(s); 0 model calls, 48 runs from the cassette" in again.stdout
    assert again.stdout.split("evaluator", 1)[1] == first.stdout.split("evaluator", 1)[1].replace(
        "120 model calls, 0 runs", "0 model calls, 48 runs")


def test_a_run_that_raises_counts_what_it_spent_against_the_eval_s_budget():
    """A run that raised still made its calls: the partial result it carries (``result_of``) is spent
    out of ``max_calls``, so the eval cannot go past its budget through failing runs."""
    import types

    from fsmchat.errors import attach_result

    started = []

    class Raising:  # anything with aexecute(task) and max_calls() is a pattern to an eval
        def max_calls(self):
            return 2

        async def aexecute(self, task):
            started.append(task)
            raise attach_result(RuntimeError("the worker died"), types.SimpleNamespace(calls=2, cost_usd=0.0))

    ds = load_dataset({"name": "m", "cases": [{"name": f"c{i}", "task": f"Question {i}?"} for i in range(4)],
                       "evaluators": [{"Contains": "ok"}]})
    result = Eval(ds, Raising, max_calls=5, max_concurrency=1).run()
    assert started == ["Question 0?", "Question 1?"]
    assert result.calls == 4
    assert result.failures() == [
        "default / c0: RuntimeError: the worker died", "default / c1: RuntimeError: the worker died",
        "default / c2: BudgetExceeded: the eval's max_calls=5: 1 call(s) left, and this run may make up to 2; "
        "this case did not run",
        "default / c3: BudgetExceeded: the eval's max_calls=5: 1 call(s) left, and this run may make up to 2; "
        "this case did not run"]
