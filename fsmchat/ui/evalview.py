"""What the evaluation pages show, as JSON-able data: built from an ``EvalRecord`` the store keeps
(``fsmchat.evals`` with ``checkpoint=``) and rendered by the page's script, text only.

Three pages: the evaluations list; one evaluation, its variants side by side per case with each
evaluator's mean over the repeats and its difference from a baseline variant (the first variant
unless the page names another); and one case, each variant's runs with their values and reasons,
and the transcripts of two of its runs diffed message by message (difflib, words marked inside a
changed message), read from the runs the store keeps.
"""
from __future__ import annotations

import difflib
import re
from itertools import zip_longest
from typing import Callable, Mapping, Sequence, TypedDict

from ..store.checkpoint import EvalInfo, EvalRecord
from .store import EvalNotFound, RunNotFound, RunRecord

KINDS = ("assertions", "scores", "labels")  # a case's results, each evaluator name -> {"value", "reason"}


class _Result(TypedDict):
    kind: str
    value: object
    reason: object


class _Cell(TypedDict):
    values: dict[str, float | None]
    labels: dict[str, list[str]]
    runs: list[dict[str, object]]
    deltas: dict[str, float | None]


class Line(TypedDict):
    """A message as ``transcript_diff`` compares it."""

    role: str
    content: str


class _Side(TypedDict):
    variant: str
    repeat: int
    run_id: object
    messages: list[Line] | None
    note: str | None


def _float(value: object) -> float | None:
    """A stored mean (a number), or None."""
    return value if isinstance(value, (int, float)) else None


def _number(value: object) -> float | None:
    """An assertion as 1 or 0, a score as itself; a label (text) has no number."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return float(value) if isinstance(value, (int, float)) else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _delta(value: float | None, base: float | None) -> float | None:
    return None if value is None or base is None else value - base


def _variants(record: EvalRecord) -> list[str]:
    """The record's variants in the order they ran (the summary's, else the cases')."""
    listed = record.summary.get("variants")
    names = list(listed) if isinstance(listed, dict) else []
    return names + [v for v in dict.fromkeys(str(c.get("variant")) for c in record.cases) if v not in names]


def _results(case: Mapping[str, object]) -> dict[str, _Result]:
    """One case's results, every kind together: evaluator name -> ``{"kind", "value", "reason"}``."""
    out: dict[str, _Result] = {}
    for kind in KINDS:
        given = case.get(kind)
        for name, r in (given.items() if isinstance(given, dict) else ()):
            if isinstance(r, dict):
                out[str(name)] = {"kind": kind, "value": r.get("value"), "reason": r.get("reason")}
    return out


def evals_view(infos: Sequence[EvalInfo]) -> list[dict[str, object]]:
    """The evaluations list: one row per evaluation, newest first."""
    rows = []
    for info in infos:
        s = info.summary
        means = m if isinstance(m := s.get("means"), dict) else {}
        rows.append({"eval_id": info.eval_id, "name": info.name, "created": info.created,
                     "variants": list(listed) if isinstance(listed := s.get("variants"), dict) else [],
                     **{k: s.get(k) for k in ("repeat", "cases", "runs", "failed", "calls", "recorded")},
                     "means": {v: {e: m.get("mean") for e, m in stats.items() if isinstance(m, dict)}
                               for v, stats in means.items() if isinstance(stats, dict)}})
    return rows


def check_variant(record: EvalRecord, name: str | None, what: str) -> str:
    """``name`` when it is a variant of ``record``; ``EvalNotFound`` naming its variants when not."""
    variants = _variants(record)
    if name is None or name not in variants:
        raise EvalNotFound(f"no variant {name!r} ({what}) in evaluation {record.eval_id!r}; its variants: "
                           f"{', '.join(variants) or 'none'}")
    return name


def _cell(runs: Sequence[Mapping[str, object]], evaluators: Sequence[str]) -> _Cell:
    """One case under one variant: each evaluator's mean over the runs (a label: its values), the runs."""
    values: dict[str, float | None] = {}
    labels: dict[str, list[str]] = {}
    for name in evaluators:
        got = [r[name]["value"] for r in map(_results, runs) if name in r]
        values[name] = _mean([n for n in map(_number, got) if n is not None])
        if any(_number(v) is None for v in got):
            labels[name] = [str(v) for v in got]
    return {"values": values, "labels": labels,
            "runs": [{k: r.get(k) for k in ("repeat", "run_id", "ok", "error", "output")} for r in runs],
            "deltas": {}}  # (set by eval_view)


def _stat(summary: Mapping[str, object], variant: str, evaluator: str) -> dict[str, object] | None:
    """The summary's mean, interval and count of one evaluator under one variant (None: no results)."""
    means = summary.get("means")
    stats = means.get(variant) if isinstance(means, dict) else None
    stat = stats.get(evaluator) if isinstance(stats, dict) else None
    return dict(stat) if isinstance(stat, dict) else None


def eval_view(record: EvalRecord, baseline: str | None = None) -> dict[str, object]:
    """The evaluation page: per case, each variant's runs and each evaluator's mean over them, and
    its difference from ``baseline`` (the first variant by default); the summary per variant."""
    variants = _variants(record)
    base = check_variant(record, baseline, "the baseline") if baseline is not None else \
        (variants[0] if variants else None)
    evaluators: dict[str, str] = {}  # name -> kind, in the order first seen
    for c in record.cases:
        for name, r in _results(c).items():
            evaluators.setdefault(name, r["kind"])
    by_case: dict[str, list[dict[str, object]]] = {}  # in the record's order: the dataset's
    for c in record.cases:
        by_case.setdefault(str(c.get("case")), []).append(c)
    rows = []
    for case, runs in by_case.items():
        cells = {v: _cell([r for r in runs if r.get("variant") == v], list(evaluators)) for v in variants}
        for variant, cell in cells.items():
            cell["deltas"] = {} if base is None or variant == base else \
                {n: _delta(x, cells[base]["values"].get(n)) for n, x in cell["values"].items()}
        rows.append({"case": case, "task": runs[0].get("task"), "cells": cells})
    summary = []
    for name, kind in evaluators.items():
        stats = {v: _stat(record.summary, v, name) for v in variants}
        base_mean = _float((stats.get(base) or {}).get("mean")) if base is not None else None
        for variant, st in stats.items():
            if st is not None:
                st["delta"] = None if variant == base else _delta(_float(st.get("mean")), base_mean)
        summary.append({"evaluator": name, "kind": kind, "cells": stats})
    failed = {v: sum(1 for c in record.cases if c.get("variant") == v and not c.get("ok")) for v in variants}
    s = record.summary
    return {"kind": "eval", "eval": {"eval_id": record.eval_id, "name": record.name, "created": record.created,
                                     **{k: s.get(k) for k in ("repeat", "cases", "runs", "calls", "recorded")},
                                     "failed": sum(failed.values())},
            "variants": variants, "baseline": base,
            "settings": s.get("variants") if isinstance(s.get("variants"), dict) else {},
            "evaluators": [{"name": n, "kind": k} for n, k in evaluators.items()],
            "summary": summary, "failed": failed, "cases": rows}


# ---- one case: its runs, and two transcripts diffed ----
_WORDS = re.compile(r"\s+|\S+\s*")  # a word with the space after it (or the space a text starts with)


def word_diff(a: str, b: str) -> tuple[list[list[str]], list[list[str]]]:
    """Two texts as segments ``[op, text]`` (``same`` or ``changed``), words compared (difflib)."""
    wa, wb = _WORDS.findall(a), _WORDS.findall(b)
    left: list[list[str]] = []
    right: list[list[str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes():
        kind = "same" if op == "equal" else "changed"
        for out, text in ((left, "".join(wa[i1:i2])), (right, "".join(wb[j1:j2]))):
            if text:
                if out and out[-1][0] == kind:
                    out[-1][1] += text
                else:
                    out.append([kind, text])
    return left, right


def _side(m: Line | None, segments: list[list[str]] | None = None, kind: str = "same") -> object:
    if m is None:
        return None
    return {"role": m["role"], "segments": segments if segments is not None else [[kind, m["content"]]]}


def transcript_diff(a: Sequence[Line], b: Sequence[Line]) -> list[dict[str, object]]:
    """Two transcripts (``{"role", "content"}`` each) side by side, message by message (difflib's
    opcodes): ``equal`` rows, ``delete`` (only in ``a``), ``insert`` (only in ``b``), and ``replace``
    rows pairing a changed message with its counterpart, the changed words marked."""
    keys_a = [(m["role"], m["content"]) for m in a]
    keys_b = [(m["role"], m["content"]) for m in b]
    rows: list[dict[str, object]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False).get_opcodes():
        if op == "equal":
            rows += [{"op": "equal", "a": _side(x), "b": _side(y)} for x, y in zip(a[i1:i2], b[j1:j2])]
            continue
        for x, y in zip_longest(a[i1:i2], b[j1:j2]):
            if x is not None and y is not None:
                left, right = word_diff(x["content"], y["content"])
                rows.append({"op": "replace", "role_changed": x["role"] != y["role"],
                             "a": _side(x, left), "b": _side(y, right)})
            else:
                rows.append({"op": "delete" if y is None else "insert",
                             "a": _side(x, kind="changed"), "b": _side(y, kind="changed")})
    return rows


def case_view(record: EvalRecord, case: str, a: str | None, b: str | None, repeat: int | None,
              read: Callable[[str], RunRecord]) -> dict[str, object]:
    """One case's page: every run of it (each variant, each repeat) with its values and reasons,
    and the transcripts of variant ``a``'s and ``b``'s run of ``repeat`` diffed, read by ``read``
    (the store's runs); ``a`` is the first variant and ``b`` the next by default, ``repeat`` 1."""
    runs = [c for c in record.cases if c.get("case") == case]
    if not runs:
        names = list(dict.fromkeys(str(c.get("case")) for c in record.cases))
        raise EvalNotFound(f"no case {case!r} in evaluation {record.eval_id!r}; its cases: "
                           f"{', '.join(names[:20]) or 'none'}" + (f" (+{len(names) - 20} more)" if len(names) > 20
                                                                   else ""))
    variants = _variants(record)
    a = check_variant(record, a, "variant A") if a is not None else variants[0]
    b = check_variant(record, b, "variant B") if b is not None else \
        next((v for v in variants if v != a), a)
    repeats = sorted({int(r) for c in runs if isinstance(r := c.get("repeat"), int)}) or [1]
    repeat = 1 if repeat is None else repeat
    if repeat not in repeats:
        raise EvalNotFound(f"no repeat {repeat} of case {case!r} in evaluation {record.eval_id!r}; its repeats: "
                           f"{', '.join(map(str, repeats))}")
    shown = [{**{k: c.get(k) for k in ("variant", "repeat", "run_id", "ok", "error", "output", "stop_reason", "calls",
                                        "tokens", "cost_usd")},
              "results": [{"evaluator": n, **r} for n, r in _results(c).items()]}
             for c in runs]  # the record's order: by variant, then repeat
    sides: dict[str, _Side] = {}
    for key, variant in (("a", a), ("b", b)):
        run = next((c for c in runs if c.get("variant") == variant and c.get("repeat") == repeat), None)
        run_id = run.get("run_id") if run is not None else None
        side: _Side = {"variant": variant, "repeat": repeat, "run_id": run_id, "messages": None, "note": None}
        if run is None:
            side["note"] = f"variant {variant} has no run of repeat {repeat} of this case"
        elif not isinstance(run_id, str):
            side["note"] = (f"variant {variant}'s run of this case is not kept in the store (it failed before it ran: "
                            f"{run.get('error') or 'no run'})")
        else:
            try:
                side["messages"] = [{"role": m["role"], "content": m["content"]} for m in read(run_id).messages]
            except RunNotFound:
                side["note"] = (f"run {run_id} is not in this store (a run re-scored from a cassette is kept in "
                                "the store that recorded it)")
        sides[key] = side
    ma, mb = sides["a"]["messages"], sides["b"]["messages"]
    rows = transcript_diff(ma, mb) if ma is not None and mb is not None else []
    return {"kind": "eval_case", "eval": {"eval_id": record.eval_id, "name": record.name}, "case": case,
            "task": runs[0].get("task"), "variants": variants, "repeats": repeats, "a": sides["a"], "b": sides["b"],
            "runs": shown, "diff": rows, "same": bool(rows) and all(r["op"] == "equal" for r in rows)}
