"""Layer 11: a store's rows and the values they hold: a run's log read back from its rows (every
stored value checked as it is read), the rows a commit writes, and an evaluation's row. The SQLite,
memory and PostgreSQL stores share them, so each reads and writes the same rows."""
from __future__ import annotations

import json
from typing import Sequence, Union

from ..errors import CheckpointStoreError, bad_value
from ..checks import JsonObject, JsonValue
from ..models import Message, TraceEvent
from .protocol import Commit, EvalInfo, EvalRecord
from .statelog import RunLog, encode_json, encode_value

EventRow = tuple[str, int, int, str, Union[str, None], Union[str, None], float, str, int, Union[str, None]]
"""An ``events`` row as a commit writes it: run id, seq, step, state, trigger, dest, t, payload, nmsg, delta."""
MessageRow = tuple[str, int, str, str, str]
"""A ``messages`` row as a commit writes it: run id, seq, role, content, metadata."""
EvalRow = tuple[str, str, float, str, str]
"""An ``evals`` row: eval id, name, created, summary, cases."""


def loads(text: object) -> JsonValue:
    """``json.loads(text)`` of a stored column; one that is not text raises the ``TypeError`` json
    gives for it."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(text).__name__}")
    value: JsonValue = json.loads(text)
    return value


def _json(text: object, what: str, log: RunLog) -> JsonValue:
    """A JSON column of ``log``'s run, parsed (data only: ``json.loads`` never runs code)."""
    if text is None:
        return None
    try:
        return loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise log.bad(f"{what} is not JSON ({exc})") from None


def _event(row: Sequence[object], log: RunLog) -> TraceEvent:
    seq, step, state, trigger, dest, t, payload = row[:7]
    if not (isinstance(seq, int) and isinstance(state, str) and isinstance(step, (int, type(None)))
            and isinstance(trigger, (str, type(None))) and isinstance(dest, (str, type(None)))
            and isinstance(t, (int, float, type(None)))):
        raise log.bad(f"event {seq} has a malformed row ({encode_json(list(row[:6]))[:120]})")
    return TraceEvent(step if step is not None else seq, state, trigger, dest, t or 0.0,
                      _json(payload, f"the payload of event {seq}", log))


def _message(seq: object, role: object, content: object, metadata: object, log: RunLog) -> Message:
    md = _json(metadata, f"the metadata of message {seq}", log)
    if not (isinstance(role, str) and isinstance(content, str) and isinstance(md, (dict, type(None)))):
        raise log.bad(f"message {seq} has a malformed row")
    return Message(role=role, content=content, metadata=md or {})


def listed_meta(text: object) -> JsonObject | None:
    """A stored run's metadata as a run list shows it (``{}`` when unreadable), or None for a
    branch lane (it has a ``parent``: listed with its run, not on its own)."""
    try:
        meta = loads(text)
    except (TypeError, ValueError):
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    return None if "parent" in meta else meta


def log_of_rows(run_id: str, run: Sequence[object], events: Sequence[Sequence[object]],
                messages: Sequence[Sequence[object]], where: str) -> RunLog:
    """A run as its store's rows hold it (``run``: meta, stop reason, created, updated; each event
    row: seq, step, state, trigger, dest, t, payload, nmsg, delta; each message row: seq, role,
    content, metadata), every column checked (``log.bad`` names what is malformed)."""
    stop_reason, created, updated = run[1], run[2], run[3]
    log = RunLog(run_id, {}, None, [], [], [], [], where=where)
    if not (isinstance(stop_reason, (str, type(None))) and isinstance(created, (int, float, type(None)))
            and isinstance(updated, (int, float, type(None)))):
        raise log.bad("its run row is malformed")
    log.stop_reason, log.created, log.updated = stop_reason, created, updated
    meta = _json(run[0], "its meta", log)
    if not isinstance(meta, dict):
        raise log.bad("its meta is not a JSON object")
    log.meta = meta
    for r in events:
        log.events.append(_event(r, log))
        nmsg, delta = r[7], r[8]
        if not (isinstance(nmsg, (int, type(None))) and isinstance(delta, (str, type(None)))):
            raise log.bad(f"event {r[0]} has a malformed state column")
        log.counts.append(nmsg)
        log.deltas.append(delta)
    log.messages = [_message(seq, role, content, md, log) for seq, role, content, md in messages]
    return log


EVAL_COLUMNS = "eval_id, name, created, summary"
"""The columns of a store's ``evals`` table that ``list_evals`` reads (``cases`` follows them)."""


def eval_row(record: EvalRecord) -> EvalRow:
    """The ``evals`` row of ``record``: its id, name and time, its summary and cases as JSON."""
    if not isinstance(record, EvalRecord):
        raise bad_value("put_eval", "record", record, "an fsmchat.store.protocol.EvalRecord", type_error=True)
    return record.eval_id, record.name, float(record.created), encode_json(record.summary), encode_json(record.cases)


def _eval_json(row: Sequence[object], i: int, what: str, where: str) -> JsonValue:
    """Column ``i`` of an ``evals`` row, parsed (``_eval_misfit``: not the kind it must be)."""
    try:
        return loads(row[i])
    except (TypeError, ValueError, RecursionError) as exc:
        raise CheckpointStoreError(f"{where}: evaluation {row[0]!r}: its {what} is not JSON ({exc})") from None


def _eval_misfit(row: Sequence[object], what: str, kind: str, where: str) -> CheckpointStoreError:
    return CheckpointStoreError(f"{where}: evaluation {row[0]!r}: its {what} is not a JSON {kind}")


def eval_info_of_row(row: Sequence[object], where: str) -> EvalInfo:
    """The ``EvalInfo`` an ``evals`` row holds (its ``EVAL_COLUMNS``); ``CheckpointStoreError``
    naming the evaluation and the column when it is not what a store writes."""
    eval_id, name, created = row[0], row[1], row[2]
    if not (isinstance(eval_id, str) and isinstance(name, str) and isinstance(created, (int, float))):
        raise CheckpointStoreError(f"{where}: evaluation {eval_id!r} has a malformed row")
    summary = _eval_json(row, 3, "summary", where)
    if not isinstance(summary, dict):
        raise _eval_misfit(row, "summary", "object", where)
    return EvalInfo(eval_id, name, float(created), dict(summary))


def eval_of_row(row: Sequence[object], where: str) -> EvalRecord:
    """The ``EvalRecord`` an ``evals`` row holds (its ``EVAL_COLUMNS``, then ``cases``), checked as
    ``eval_info_of_row``."""
    info = eval_info_of_row(row, where)
    cases = _eval_json(row, 4, "cases", where)
    if not isinstance(cases, list):
        raise _eval_misfit(row, "cases", "array", where)
    records: list[dict[str, object]] = []
    for c in cases:
        if not isinstance(c, dict):
            raise CheckpointStoreError(f"{where}: evaluation {info.eval_id!r}: a case is not a JSON object")
        records.append(dict(c))
    return EvalRecord(info.eval_id, info.name, info.created, info.summary, records)


def already_kept(eval_id: str) -> str:
    return f"evaluation id {eval_id!r} is already kept in this store; give the evaluation another id"


def event_rows(run_id: str, commit: Commit) -> list[EventRow]:
    """The ``events`` rows of ``commit``, numbered from its ``seq`` (each payload's JSON as the
    writer encoded it, or encoded here)."""
    return [(run_id, commit.seq + i, r.event.step, r.event.state, r.event.trigger, r.event.dest, r.event.t,
             encode_value(r.event.payload) if r.payload is None else r.payload, r.messages, r.delta)
            for i, r in enumerate(commit.rows)]


def message_rows(run_id: str, commit: Commit) -> list[MessageRow]:
    """The ``messages`` rows of ``commit`` (each metadata's JSON as the writer encoded it, or encoded here)."""
    if commit.metadata is not None:
        return [(run_id, commit.first + i, m.role, m.content, md)
                for i, (m, md) in enumerate(zip(commit.messages, commit.metadata))]
    return [(run_id, commit.first + i, m.role, m.content, encode_value(m.metadata))
            for i, m in enumerate(commit.messages)]
