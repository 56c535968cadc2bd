"""fsmchat.evals.score, the case driver: pydantic-evals' report as its own ``Dataset.evaluate`` makes it
(names, repeats, the assertion/score/label split, evaluator failures), awaiting evaluators at once,
``max_concurrency`` held, a failed run kept and reported, and no span tree (said so)."""
import asyncio
from dataclasses import dataclass

from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import Contains, Evaluator, HasMatchingSpan

from fsmchat.evals import CaseInputs, Trajectory
from fsmchat.evals.score import evaluate

REPLY = "Hello there."


@dataclass
class Boom(Evaluator):
    def evaluate(self, ctx):
        raise ValueError("nope")


@dataclass
class Several(Evaluator):
    def evaluate(self, ctx):
        return {"length": len(ctx.output), "kind": "greeting", "polite": True}


@dataclass
class Wrong(Evaluator):
    def evaluate(self, ctx):
        return [1]


@dataclass
class Slow(Evaluator):
    label: str
    log: list

    async def evaluate(self, ctx):
        self.log.append(f"{self.label} start")
        await asyncio.sleep(0)
        self.log.append(f"{self.label} end")
        return True


def cases():
    return [Case(name="hi", inputs=CaseInputs(task="Hi")), Case(inputs=CaseInputs(task="Bye"))]


async def reply(inputs):
    return Trajectory(output=REPLY, calls=1, tokens=0)


def drive(evaluators, task=reply, **kw):
    return asyncio.run(evaluate("v", "d", cases(), evaluators, task, **kw))


def test_repeats_are_named_as_pydantic_evals_names_them_in_case_order():
    report = drive([], repeat=2)
    assert [(c.name, c.source_case_name) for c in report.cases] == [
        ("hi [1/2]", "hi"), ("hi [2/2]", "hi"), ("Case 2 [1/2]", "Case 2"), ("Case 2 [2/2]", "Case 2")]
    assert [c.name for c in drive([]).cases] == ["hi", "Case 2"]
    assert [c.source_case_name for c in drive([]).cases] == [None, None]


def test_results_split_into_assertions_scores_and_labels_and_a_repeated_name_is_numbered():
    case = drive([Contains("Hello"), Several(), Contains("there")]).cases[0]
    assert {k: r.value for k, r in case.assertions.items()} == {"Contains": True, "polite": True, "Contains_2": True}
    assert {k: r.value for k, r in case.scores.items()} == {"length": 12}
    assert {k: r.value for k, r in case.labels.items()} == {"kind": "greeting"}
    assert case.metrics == {"calls": 1}  # a zero metric is left out, as pydantic-evals' increment leaves it
    assert case.attributes["fsmchat"].output == REPLY and case.output == REPLY


def test_an_evaluator_that_raises_or_returns_no_result_fails_alone_and_the_case_keeps_the_rest():
    case = drive([Boom(), Wrong(), Contains("Hello")]).cases[0]
    assert [(f.name, f.error_message) for f in case.evaluator_failures] == [
        ("Boom", "ValueError: nope"),
        ("Wrong", "TypeError: Wrong().evaluate returned list [1]: a bool, a number, a string, an EvaluationReason, "
                  "or a dict of names to those")]
    assert list(case.assertions) == ["Contains"]


def test_the_span_tree_is_not_recorded_and_an_evaluator_reading_it_fails_saying_where_the_run_is():
    case = drive([HasMatchingSpan(query={"name_contains": "turn"})]).cases[0]
    [failure] = case.evaluator_failures
    assert failure.error_message.startswith("SpanTreeRecordingError: fsmchat's Eval records no span tree")
    assert "ctx.attributes['fsmchat']" in failure.error_message


def test_a_case_s_evaluators_that_await_run_at_once():
    log = []
    drive([Slow("a", log), Slow("b", log)], repeat=1, max_concurrency=1)
    assert log[:4] == ["a start", "b start", "a end", "b end"]


def test_max_concurrency_cases_run_at_once_and_no_more():
    live, most = [0], [0]

    async def task(inputs):
        live[0] += 1
        most[0] = max(most[0], live[0])
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        live[0] -= 1
        return Trajectory(output=REPLY)

    drive([], task=task, repeat=3, max_concurrency=2)
    assert most == [2]


def test_a_failed_run_or_a_task_that_raises_is_a_case_failure_and_a_failed_run_is_kept():
    async def task(inputs):
        if inputs.task == "Hi":
            return Trajectory(output="", ok=False, error="RuntimeError: broke")
        raise KeyError("missing")

    kept = {}
    report = drive([Contains("Hello")], task=task, kept=kept)
    assert report.cases == []
    assert [(f.name, f.error_message) for f in report.failures] == [
        ("hi", "EvalError: the run failed: RuntimeError: broke"), ("Case 2", "KeyError: 'missing'")]
    assert list(kept) == ["hi"] and kept["hi"].error == "RuntimeError: broke"


def test_the_report_matches_pydantic_evals_own_evaluate_on_the_same_cases():
    evaluators = [Contains("Hello"), Several(), Boom(), Contains("nowhere")]
    mine = drive(evaluators, repeat=2)

    async def task(inputs):
        return REPLY

    theirs = asyncio.run(Dataset(name="d", cases=cases(), evaluators=evaluators).evaluate(
        task, name="v", progress=False, repeat=2))

    def shape(report):
        return [(c.name, c.source_case_name, c.output, {k: (r.value, r.reason) for k, r in c.assertions.items()},
                 {k: r.value for k, r in c.scores.items()}, {k: r.value for k, r in c.labels.items()},
                 [(f.name, f.error_message) for f in c.evaluator_failures]) for c in report.cases]

    assert shape(mine) == shape(theirs)
    assert mine.name == theirs.name == "v" and mine.dataset_name == theirs.dataset_name == "d"
