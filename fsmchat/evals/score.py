"""Score each case's run with pydantic-evals' evaluators into pydantic-evals' report: fsmchat's case driver.

An eval's cases run here, ``max_concurrency`` at once: each case's task (its fsmchat run, or the
recording of one) gives a ``Trajectory``; the case's and the dataset's evaluators score it through
pydantic-evals' ``EvaluatorContext`` (the output, ``attributes["fsmchat"]``: the trajectory, and the
metrics ``calls`` and ``tokens``), and the results go into pydantic-evals' ``ReportCase`` /
``ReportCaseFailure`` and ``EvaluationReport``, which print, compare and serialize as pydantic-evals'
own. Case names, repeats (``"name [2/3]"``), the assertion/score/label split, evaluator failures and
durations are as ``Dataset.evaluate`` makes them.

Why not ``Dataset.evaluate``: it wraps every case and every evaluator in an anyio task of its own and
a Logfire span, and records a span tree per case. Measured (docs/evals.md): 145 µs of CPU per case
of an instant task in one process against 36 µs here, and about 300 µs per case against a local
server, more than the whole of fsmchat's run. A run's trajectory, not a span tree, is what
fsmchat's evaluators read, so ``ctx.span_tree`` says so (``SpanTreeRecordingError``).
"""
from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from typing import Awaitable, Callable, Mapping, Sequence

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic_evals import Case
from pydantic_evals.evaluators import (EvaluationReason, EvaluationResult, Evaluator, EvaluatorContext,
                                       EvaluatorFailure, EvaluatorOutput, EvaluatorSpec)
from pydantic_evals.evaluators.evaluator import EvaluationScalar
from pydantic_evals.otel import SpanTreeRecordingError
from pydantic_evals.reporting import EvaluationReport, ReportCase, ReportCaseFailure
from rich.progress import Progress

from ..errors import FsmchatError
from .dataset import CaseInputs
from .trajectory import Trajectory


class EvalError(FsmchatError):
    """A case could not be run: no recording to re-score, the eval's budget spent, or the run failed.

    Examples:
        >>> str(EvalError("no recording"))
        'no recording'
    """


NO_SPANS = ("fsmchat's Eval records no span tree: a run's speakers, tools, states and stop reason are in "
            "ctx.attributes['fsmchat'] (a Trajectory), which fsmchat's trajectory evaluators read")
_OUTPUT = TypeAdapter[EvaluatorOutput](EvaluatorOutput, config=ConfigDict(revalidate_instances="always"))
Task = Callable[[CaseInputs], Awaitable[Trajectory]]
AnyEvaluator = Evaluator[CaseInputs, object, object]
Result = EvaluationResult[EvaluationScalar]
Context = EvaluatorContext[CaseInputs, object, object]
OneCase = Case[CaseInputs, object, object]
Outcome = ReportCase[CaseInputs, object, object] | ReportCaseFailure[CaseInputs, object, object]


def report_names(cases: Sequence[OneCase],
                 repeat: int) -> list[tuple[OneCase, str, str | None]]:
    """Each run of the cases in order: (case, its name in the report, the case's own name when repeated).

    Args:
        cases: The dataset's cases.
        repeat: Runs per case.

    Returns:
        ``(case, "name", None)``, or with ``repeat > 1`` ``(case, "name [k/repeat]", "name")``; a case
        without a name is ``Case i`` (from 1), as pydantic-evals names it.

    Examples:
        >>> c = Case(name="refund", inputs=CaseInputs(task="Hi"))
        >>> [n for _, n, _ in report_names([c, Case(inputs=CaseInputs(task="Yo"))], 2)]
        ['refund [1/2]', 'refund [2/2]', 'Case 2 [1/2]', 'Case 2 [2/2]']
    """
    out: list[tuple[OneCase, str, str | None]] = []
    for i, case in enumerate(cases, 1):
        name = case.name or f"Case {i}"
        out += [(case, name, None)] if repeat == 1 else \
            [(case, f"{name} [{k}/{repeat}]", name) for k in range(1, repeat + 1)]
    return out


class _Scorer:
    """One evaluator as the eval calls it: its name, version and spec read once (not per case)."""

    __slots__ = ("evaluator", "name", "version", "source", "inline")

    def __init__(self, evaluator: AnyEvaluator):
        self.evaluator = evaluator
        self.name = evaluator.get_default_evaluation_name()
        self.version = evaluator.get_evaluator_version()
        self.source: EvaluatorSpec = evaluator.as_spec()
        # a plain ``def evaluate`` is called in place; one that awaits runs beside the case's others
        self.inline = type(evaluator).evaluate_async is Evaluator.evaluate_async and \
            not inspect.iscoroutinefunction(evaluator.evaluate)

    def results(self, raw: object) -> list[Result]:
        """What ``evaluate`` returned, checked (a bool, a number, a string, an ``EvaluationReason`` or a
        mapping of names to those) and named: a single value by the evaluator's name."""
        try:
            value = _OUTPUT.validate_python(raw)
        except ValidationError:
            raise TypeError(f"{self.evaluator!r}.evaluate returned {type(raw).__name__} {raw!r:.200}: a bool, a "
                            "number, a string, an EvaluationReason, or a dict of names to those") from None
        named = value if isinstance(value, Mapping) else {self.name: value}
        out: list[Result] = []
        for name, one in named.items():
            reason = one if isinstance(one, EvaluationReason) else EvaluationReason(value=one)
            out.append(EvaluationResult(name=name, value=reason.value, reason=reason.reason, source=self.source,
                                        evaluator_version=self.version))
        return out

    def failure(self, exc: Exception) -> EvaluatorFailure:
        """The evaluator raised ``exc`` (or returned what is no result): the case keeps its other results."""
        return EvaluatorFailure(name=self.name, error_message=f"{type(exc).__name__}: {exc}",
                                error_stacktrace=traceback.format_exc(), source=self.source,
                                error_type=type(exc).__name__, evaluator_version=self.version)

    async def awaited(self, ctx: Context) -> list[Result] | EvaluatorFailure:
        try:
            return self.results(await self.evaluator.evaluate_async(ctx))
        except Exception as exc:  # an evaluator's error is its result, as in pydantic-evals
            return self.failure(exc)

    def called(self, ctx: Context) -> list[Result] | EvaluatorFailure:
        try:
            return self.results(self.evaluator.evaluate(ctx))
        except Exception as exc:
            return self.failure(exc)


async def _score(scorers: list[_Scorer], ctx: Context,
                 ) -> tuple[dict[str, EvaluationResult[bool]], dict[str, EvaluationResult[int | float]],
                            dict[str, EvaluationResult[str]], list[EvaluatorFailure]]:
    """Every evaluator's results on one run, split into assertions, scores and labels (a repeated name gets
    ``_2``, ``_3``, ...), and the evaluators that failed; evaluators that await run at once."""
    outcomes: list[list[Result] | EvaluatorFailure | None] = \
        [s.called(ctx) if s.inline else None for s in scorers]
    waiting = [(i, s) for i, s in enumerate(scorers) if not s.inline]
    if len(waiting) == 1:
        outcomes[waiting[0][0]] = await waiting[0][1].awaited(ctx)
    elif waiting:
        for (i, _), got in zip(waiting, await asyncio.gather(*(s.awaited(ctx) for _, s in waiting))):
            outcomes[i] = got
    assertions: dict[str, EvaluationResult[bool]] = {}
    scores: dict[str, EvaluationResult[int | float]] = {}
    labels: dict[str, EvaluationResult[str]] = {}
    failures: list[EvaluatorFailure] = []
    seen: set[str] = set()
    for outcome in outcomes:
        if isinstance(outcome, EvaluatorFailure):
            failures.append(outcome)
            continue
        for result in outcome or ():
            name, k = result.name, 2
            while name in seen:
                name, k = f"{result.name}_{k}", k + 1
            seen.add(name)
            if (assertion := result.downcast(bool)) is not None:
                assertions[name] = assertion
            elif (score := result.downcast(int, float)) is not None:
                scores[name] = score
            elif (label := result.downcast(str)) is not None:
                labels[name] = label
    return assertions, scores, labels, failures


async def evaluate(name: str, dataset_name: str, cases: Sequence[OneCase],
                   evaluators: Sequence[AnyEvaluator], task: Task, *, repeat: int = 1, max_concurrency: int = 4,
                   progress: bool = False, kept: dict[str, Trajectory] | None = None,
                   ) -> EvaluationReport[CaseInputs, object, object]:
    """Run and score every case ``repeat`` times, ``max_concurrency`` at once, into pydantic-evals' report.

    Args:
        name: The report's name (the variant).
        dataset_name: The dataset's name.
        cases: The cases, in the report's order.
        evaluators: The dataset's evaluators (each case's own come first).
        task: Gives a case's run (``Trajectory``); an exception is that case's failure.
        repeat: Runs per case.
        max_concurrency: Cases at once.
        progress: Show a progress bar (rich's, as pydantic-evals shows).
        kept: Filled with report case name -> its run, failed runs too.

    Returns:
        The ``EvaluationReport``: a failed run or a task that raised is a ``ReportCaseFailure``.

    Examples:
        >>> async def task(inputs):
        ...     return Trajectory(output=inputs.task.upper())
        >>> from pydantic_evals.evaluators import Contains
        >>> case = Case(name="hi", inputs=CaseInputs(task="Hi"))
        >>> report = asyncio.run(evaluate("v", "d", [case], [Contains("HI")], task))
        >>> [(c.name, c.output, c.assertions["Contains"].value) for c in report.cases]
        [('hi', 'HI', True)]
    """
    runs = report_names(cases, repeat)
    scorers: dict[int, _Scorer] = {}

    def scorer(evaluator: AnyEvaluator) -> _Scorer:
        found = scorers.get(id(evaluator))
        if found is None:
            found = scorers[id(evaluator)] = _Scorer(evaluator)
        return found

    shared = [scorer(e) for e in evaluators]
    limit = asyncio.Semaphore(max_concurrency)
    bar, bar_task = None, None
    if progress:
        bar = Progress()
        bar_task = bar.add_task(f"Evaluating {name}", total=len(runs))

    async def one(case: OneCase, report_name: str,
                  source: str | None) -> Outcome:
        async with limit:
            began, t0 = time.time(), time.perf_counter()
            try:
                run = await task(case.inputs)
                took = time.perf_counter() - t0
                if kept is not None:
                    kept[report_name] = run
                if not run.ok:
                    raise EvalError(f"the run failed: {run.error}")
                metrics: dict[str, int | float] = {k: v for k, v in (("calls", run.calls), ("tokens", run.tokens)) if v}
                attributes: dict[str, object] = {"fsmchat": run}
                ctx = EvaluatorContext[CaseInputs, object, object](
                    name=case.name, inputs=case.inputs, metadata=case.metadata, expected_output=case.expected_output,
                    output=run.output, duration=took, _span_tree=SpanTreeRecordingError(NO_SPANS),
                    attributes=attributes, metrics=metrics)
                mine = [scorer(e) for e in case.evaluators] + shared
                assertions, scores, labels, failed = await _score(mine, ctx)
                result: Outcome = ReportCase(
                    name=report_name, inputs=case.inputs, metadata=case.metadata, expected_output=case.expected_output,
                    output=run.output, metrics=metrics, attributes=attributes, scores=scores, labels=labels,
                    assertions=assertions, task_duration=took, total_duration=time.time() - began,
                    source_case_name=source, trace_id=None, span_id=None, evaluator_failures=failed)
            except Exception as exc:  # the case failed; the others go on
                result = ReportCaseFailure(name=report_name, inputs=case.inputs, metadata=case.metadata,
                                           expected_output=case.expected_output,
                                           error_message=f"{type(exc).__name__}: {exc}",
                                           error_stacktrace=traceback.format_exc(), source_case_name=source)
            if bar is not None and bar_task is not None:
                bar.update(bar_task, advance=1)
            return result

    if bar is not None:
        bar.start()
    try:
        done = await asyncio.gather(*(one(*r) for r in runs))
    finally:
        if bar is not None:
            bar.stop()
    return EvaluationReport(name=name, cases=[r for r in done if isinstance(r, ReportCase)],
                            failures=[r for r in done if isinstance(r, ReportCaseFailure)], dataset_name=dataset_name)
