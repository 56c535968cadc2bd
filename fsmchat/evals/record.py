"""An eval's results as the run store keeps them: one ``EvalRecord`` per eval, each case naming its run.

``Eval(..., checkpoint=store)`` (and ``fsmchat eval --db``) keeps every run in the store and, as
the eval ends, this record beside them (``store.put_eval``): the eval's name, time and variants,
and per case, variant and repeat the run's id, its output, each evaluator's value and reason, and
whether it ran. The viewer lists the records (``/evals``) and shows one side by side per variant,
each case linked to its run.
"""
from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Mapping, Protocol, Sequence, TypedDict

from pydantic_evals.reporting import EvaluationReport, ReportCase, ReportCaseFailure

from ..store.checkpoint import EvalRecord
from .dataset import CaseInputs
from .trajectory import Trajectory

_REPEAT = re.compile(r" \[(\d+)/\d+\]\Z")  # pydantic-evals names a repeated case's runs "name [i/n]"


class Scored(Protocol):
    """What a record keeps of one evaluator's result (pydantic-evals' ``EvaluationResult``)."""

    @property
    def value(self) -> object: ...

    @property
    def reason(self) -> str | None: ...


class Summed(Protocol):
    """What a record keeps of one evaluator's results over a variant (``fsmchat.evals.run.Stat``)."""

    @property
    def mean(self) -> float: ...

    @property
    def low(self) -> float: ...

    @property
    def high(self) -> float: ...

    @property
    def n(self) -> int: ...


class ResultEntry(TypedDict):
    """One evaluator's result in a record's case: its value as JSON data, and its reason."""

    value: object
    reason: str | None


class CaseEntry(TypedDict):
    """One case of a record: a run of one case under one variant (``case_entry``)."""

    case: str
    variant: str
    repeat: int
    run_id: str | None
    task: str
    output: object  # the run's output: text, or JSON data
    ok: bool
    error: str | None
    scores: dict[str, ResultEntry]
    assertions: dict[str, ResultEntry]
    labels: dict[str, ResultEntry]
    calls: int
    tokens: int
    cost_usd: float | None
    stop_reason: str | None


def new_eval_id(name: str) -> str:
    """A new evaluation id: the dataset's name (letters, digits, ``_.-`` kept) and a random suffix.

    Args:
        name: The dataset's name.

    Returns:
        The id, unique with overwhelming odds.

    Examples:
        >>> new_eval_id("support triage").startswith("support-triage-")
        True
    """
    return (re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")[:60] or "eval") + f"-{uuid.uuid4().hex[:8]}"


def _data(value: object) -> object:
    """``value`` as JSON data (anything else as its ``repr``): a variant's settings may hold objects."""
    data: object = json.loads(json.dumps(value, default=repr))
    return data


def _results(results: Mapping[str, Scored]) -> dict[str, ResultEntry]:
    return {name: {"value": _data(r.value), "reason": r.reason} for name, r in results.items()}


def case_entry(variant: str, case: ReportCase[Any, Any, Any] | ReportCaseFailure[Any, Any, Any],
               run: Trajectory | None) -> CaseEntry:
    """One case of a record: a run of one case under one variant, as pydantic-evals reported it.

    Args:
        variant: The variant's name.
        case: pydantic-evals' report of the run (``ReportCase``, or ``ReportCaseFailure`` when it failed).
        run: The run's trajectory (None when the case failed before a run: no recording, no budget).

    Returns:
        ``{"case", "variant", "repeat", "run_id", "task", "output", "ok", "error", "scores",
        "assertions", "labels", "calls", "tokens", "cost_usd", "stop_reason"}``.

    Examples:
        >>> from pydantic_evals.reporting import ReportCaseFailure
        >>> failed = ReportCaseFailure(name="refund [2/3]", source_case_name="refund", inputs=CaseInputs(task="Hi"),
        ...                            metadata=None, expected_output=None, error_message="EvalError: no recording",
        ...                            error_stacktrace="")
        >>> entry = case_entry("terse", failed, None)
        >>> entry["case"], entry["repeat"], entry["ok"], entry["error"], entry["run_id"]
        ('refund', 2, False, 'EvalError: no recording', None)
    """
    repeat = _REPEAT.search(case.name) if case.source_case_name is not None else None
    inputs = case.inputs
    entry: CaseEntry = {
        "case": case.source_case_name or case.name, "variant": variant, "repeat": int(repeat.group(1)) if repeat else 1,
        "run_id": run.run_id if run is not None else None,
        "task": inputs.task if isinstance(inputs, CaseInputs) else str(inputs),
        "output": run.output if run is not None else None, "ok": False, "error": None,
        "scores": {}, "assertions": {}, "labels": {},
        "calls": run.calls if run is not None else 0, "tokens": run.tokens if run is not None else 0,
        "cost_usd": run.cost_usd if run is not None else None, "stop_reason": run.stop_reason if run else None}
    if isinstance(case, ReportCaseFailure):
        entry["error"] = case.error_message
        return entry
    failures = [f"evaluator {f.name} raised {f.error_message}" for f in case.evaluator_failures]
    entry["output"] = case.output if isinstance(case.output, str) else _data(case.output)
    entry["ok"], entry["error"] = not failures, "; ".join(failures) or None
    entry["scores"], entry["assertions"] = _results(case.scores), _results(case.assertions)
    entry["labels"] = _results(case.labels)
    return entry


def eval_record(name: str, variants: Mapping[str, Mapping[str, object]], repeat: int, order: Sequence[str],
                reports: Mapping[str, EvaluationReport[Any, Any, Any]], runs: Mapping[str, Mapping[str, Trajectory]],
                summary: Mapping[str, Mapping[str, Summed]], *, calls: int = 0, recorded: int = 0,
                eval_id: str | None = None, created: float | None = None) -> EvalRecord:
    """The record of an eval that ran: its variants, every case of every variant, and its summary.

    Args:
        name: The dataset's name.
        variants: Variant name -> the factory's keywords (kept as JSON data; other values as their repr),
            the baseline first.
        repeat: Runs per case and variant.
        order: The cases' names in the dataset's order (as pydantic-evals names them).
        reports: Variant name -> pydantic-evals' report.
        runs: Variant name -> report case name (``"refund [2/3]"``) -> the run's trajectory.
        summary: Variant name -> evaluator name -> its ``Stat`` (``EvalResult.summary()``).
        calls: Model calls the eval made.
        recorded: Runs taken from the cassette.
        eval_id: The record's id (a new one by default).
        created: When it ran (now by default).

    Returns:
        The ``EvalRecord``: its cases by case (in ``order``), then variant, then repeat; its
        ``summary`` the variants, the counts and each evaluator's mean, interval and count per variant.

    Examples:
        >>> record = eval_record("triage", {"terse": {}}, 1, [], {}, {}, {}, eval_id="triage-1")
        >>> record.eval_id, record.summary["variants"], record.summary["runs"], record.cases
        ('triage-1', {'terse': {}}, 0, [])
    """
    cases: list[CaseEntry] = []
    for variant, report in reports.items():
        ran: list[ReportCase[Any, Any, Any] | ReportCaseFailure[Any, Any, Any]] = [*report.cases, *report.failures]
        cases += [case_entry(variant, case, runs.get(variant, {}).get(case.name)) for case in ran]
    rank, kinds = {n: i for i, n in enumerate(order)}, {v: i for i, v in enumerate(variants)}
    cases.sort(key=lambda c: (rank.get(c["case"], len(rank)), kinds.get(c["variant"], len(kinds)), c["repeat"]))
    means = {v: {e: {"mean": s.mean, "low": s.low, "high": s.high, "n": s.n} for e, s in stats.items()}
             for v, stats in summary.items()}
    return EvalRecord(eval_id or new_eval_id(name), name, time.time() if created is None else created, {
        "variants": {v: _data(dict(s)) for v, s in variants.items()}, "repeat": repeat, "cases": len(order),
        "runs": len(cases), "failed": sum(not c["ok"] for c in cases), "calls": calls, "recorded": recorded,
        "means": means}, [dict(c) for c in cases])
