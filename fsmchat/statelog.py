"""What a checkpoint stores per step, and how a run's history is read back from it.

Each committed trace event carries the transcript length after it and a **state delta**: what
changed in the run's working state (``ctx.snapshot()``) since the previous commit, so a commit
writes what changed and never the whole state again. A delta is JSON text:

- ``{"all": {...}}``: the whole state (a run's first commit, and the first after a resume);
- ``[op, ...]``: changes, each ``["s", key, value]`` (set), ``["a", key, [items]]`` (items appended
  to a list), ``["d", key]`` (removed), or the same with ``key, sub`` for one entry of a dict value
  (a dict whose JSON is over ``SUB_KEYED_CHARS`` is diffed entry by entry from then on, so a
  private memory per agent grows by appends instead of being written again);
- ``HELD`` (``"-"``): not stored at this step (a pure step committed with the next one: a resume
  or a fork runs it again from the state before it);
- no delta (NULL): the state did not change.

``StateDiff`` turns successive snapshots into deltas; ``RunLog`` is a run as a store holds it and
folds the deltas back into the state after any event; ``history_of`` lists a run's steps as
``HistoryStep`` records (``checkpoint.history(run_id)``).
"""
from __future__ import annotations

import json
import json.encoder
from dataclasses import dataclass, field
from typing import Any

from .errors import CheckpointStoreError
from .models import Message, TraceEvent

HELD = "-"
SUB_KEYED_CHARS = 512
_FULL = '{"all":'

_ENCODER = json.JSONEncoder(default=repr, separators=(",", ":"))
_C_ENCODE = (json.encoder.c_make_encoder(None, repr, json.encoder.encode_basestring_ascii, None, ":", ",", False,
                                         False, True) if json.encoder.c_make_encoder is not None else None)


def encode_json(obj: Any) -> str:
    """Compact JSON of checkpoint data (anything not JSON-able is written as its ``repr``), what
    ``json.dumps(obj, default=repr, separators=(",", ":"))`` writes. The C encoder is built once
    (``json.dumps`` builds one per call, a third of its cost on the small values of a commit)."""
    if _C_ENCODE is None:
        return _ENCODER.encode(obj)
    try:
        return "".join(_C_ENCODE(obj, 0))
    except RecursionError:  # a circular structure: the checking encoder says so
        return _ENCODER.encode(obj)


def _set_or_append(path: str, old: Any, text: str) -> str:
    """The op that turns ``old`` (the JSON last written at ``path``) into ``text``: an append when
    ``text`` is the same list with items added at the end, else a set."""
    if (type(old) is str and len(text) > len(old) > 2 and old[0] == "[" and text[len(old) - 1] == ","
            and text.startswith(old[:-1])):
        return f'["a",{path},[{text[len(old):]}]'
    return f'["s",{path},{text}]'


class StateDiff:
    """One run's writer side: remembers the JSON last written per key (per entry for large dicts)
    and gives the delta of the next snapshot. JSON is compared as text, so ``1``, ``1.0`` and
    ``true`` stay distinct and what is folded back equals what was snapshotted."""

    __slots__ = ("prev", "names")

    def __init__(self) -> None:
        self.prev: dict[str, Any] | None = None  # key -> JSON text, or {entry: JSON text} for large dicts
        self.names: dict[str, str] = {}  # key -> its JSON (the same few keys every commit)

    def delta(self, state: dict[str, Any]) -> str | None:
        """The delta from the last snapshot to ``state`` (None: unchanged); the whole state first."""
        prev = self.prev
        if prev is None:
            return self.full(state)
        ops: list[str] = []
        for k, v in state.items():
            if type(k) is not str:
                return self.full(state)
            old = prev.get(k)
            if type(old) is dict and type(v) is dict:
                if not self._entries(k, v, old, ops):
                    return self.full(state)
                continue
            text = encode_json(v)
            if text == old:
                continue
            name = self.names.get(k)
            if name is None:
                name = self.names[k] = encode_json(k)
            ops.append(_set_or_append(name, old, text))
            prev[k] = self._track(v, text)
        if len(prev) > len(state):  # every key of state is in prev now: the extra ones were removed
            for k in [k for k in prev if k not in state]:
                ops.append(f'["d",{encode_json(k)}]')
                del prev[k]
        return "[" + ",".join(ops) + "]" if ops else None

    def _entries(self, key: str, value: dict[str, Any], old: dict[str, str], ops: list[str]) -> bool:
        """Diff a large dict entry by entry (False: a key is not a string; write the whole state)."""
        kj = encode_json(key)
        for sk, sv in value.items():
            if type(sk) is not str:
                return False
            text = encode_json(sv)
            was = old.get(sk)
            if text != was:
                ops.append(_set_or_append(f"{kj},{encode_json(sk)}", was, text))
                old[sk] = text
        if len(old) > len(value):
            for sk in [sk for sk in old if sk not in value]:
                ops.append(f'["d",{kj},{encode_json(sk)}]')
                del old[sk]
        return True

    @staticmethod
    def _track(value: Any, text: str) -> Any:
        if type(value) is dict and len(text) > SUB_KEYED_CHARS and all(type(k) is str for k in value):
            return {k: encode_json(v) for k, v in value.items()}
        return text

    def full(self, state: dict[str, Any]) -> str:
        """The whole state as a delta; later deltas are taken against it."""
        text = encode_json(state)
        if all(type(k) is str for k in state):
            self.prev = {k: self._track(v, encode_json(v)) for k, v in state.items()}
        else:  # JSON would rename such keys: every commit writes the whole state
            self.prev = None
        return _FULL + text + "}"

    def text(self) -> str | None:
        """The whole state last written, as JSON (None: nothing written yet)."""
        if self.prev is None:
            return None
        parts = []
        for k, v in self.prev.items():
            body = v if type(v) is str else "{" + ",".join(f"{encode_json(sk)}:{t}" for sk, t in v.items()) + "}"
            parts.append(f"{encode_json(k)}:{body}")
        return "{" + ",".join(parts) + "}"


# ---- reading deltas back ----
def is_full(delta: str | None) -> bool:
    return delta is not None and delta.startswith(_FULL)


def parse_delta(text: str) -> tuple[str, Any]:
    """``("all", state)`` or ``("ops", [(op, key, entry or None, value)])``; ``ValueError`` naming
    what is wrong for anything else (a checkpoint is untrusted input: data only, never code)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if isinstance(data, dict):
        if list(data) == ["all"] and isinstance(data["all"], dict):
            return "all", data["all"]
        raise ValueError('an object other than {"all": {...}}')
    if not isinstance(data, list):
        raise ValueError(f"a JSON {type(data).__name__}, not a list of changes")
    ops = []
    for op in data:
        ok = isinstance(op, list) and len(op) >= 2 and op[0] in ("s", "a", "d")
        n = len(op) if ok else 0
        arity = {"s": (3, 4), "a": (3, 4), "d": (2, 3)}[op[0]] if ok else ()
        if not ok or n not in arity or not all(isinstance(k, str) for k in op[1:n - (op[0] != "d")]):
            raise ValueError(f"a malformed change {encode_json(op)[:80]}")
        value = None if op[0] == "d" else op[-1]
        if op[0] == "a" and not isinstance(value, list):
            raise ValueError(f"an append of a non-list {encode_json(op)[:80]}")
        entry = op[2] if n == arity[1] else None
        ops.append((op[0], op[1], entry, value))
    return "ops", ops


def apply_ops(state: dict[str, Any], ops: list[tuple[str, str, str | None, Any]]) -> None:
    """Apply parsed changes to ``state`` in place (``ValueError`` when they do not fit it)."""
    for op, key, entry, value in ops:
        target = state
        if entry is not None:
            target = state.get(key)
            if not isinstance(target, dict):
                raise ValueError(f"a change to entry {entry!r} of {key!r}, which is not a dict")
            key = entry
        if op == "s":
            target[key] = value
        elif op == "d":
            target.pop(key, None)
        else:
            items = target.get(key)
            if not isinstance(items, list):
                raise ValueError(f"an append to {key!r}, which is not a list")
            items.extend(value)


def copy_state(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """A deep copy of stored (JSON) state."""
    return None if state is None else json.loads(encode_json(state))


@dataclass
class RunLog:
    """One run as a store holds it, row by row: what ``load``, ``history`` and ``fork`` read.

    ``counts[i]`` is the transcript's length after event ``i`` and ``deltas[i]`` the state delta
    committed with it (None for both on rows written before per-step states existed);
    ``legacy`` is such a store's one stored snapshot: ``(event index, JSON)``."""

    run_id: str
    meta: dict[str, Any]
    stop_reason: str | None
    events: list[TraceEvent]
    counts: list[int | None]
    deltas: list[str | None]
    messages: list[Message]
    legacy: tuple[int, str] | None = None
    created: float | None = None
    updated: float | None = None
    where: str = "checkpoint store"
    _cache: tuple[int, dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    _base_list: list[int | None] | None = field(default=None, repr=False, compare=False)

    def bad(self, what: str) -> CheckpointStoreError:
        return CheckpointStoreError(f"{self.where}: run {self.run_id!r}: {what}; the store was changed by something "
                                    "other than fsmchat or is damaged: restore it from a backup, or fork the run "
                                    "at an earlier step")

    def _bases(self) -> list[int | None]:
        """Per event: the index of the latest whole state at or before it (the legacy snapshot's
        index for a store written before per-step states), None while no state is stored."""
        if self._base_list is None:
            leg = self.legacy[0] if self.legacy is not None else None
            while leg and self.events[leg].dest is None:  # the final record changed nothing: the state
                leg -= 1                                  # is the one after the last transition
            out: list[int | None] = []
            cur: int | None = None
            changes = False  # the legacy snapshot is the start of an older store's run only
            for k, d in enumerate(self.deltas):
                if d is not None and d.startswith(_FULL):
                    cur = k
                elif d is not None and d != HELD:
                    changes = True
                if k == leg and cur is None and not changes:
                    cur = k
                out.append(cur)
            self._base_list = out
        return self._base_list

    def known(self, i: int) -> bool:
        """Whether the state after event ``i`` is stored: not at a held pure step, and not before a
        legacy store's one snapshot. Before a run's first commit of state it is known to be none."""
        if i < 0:
            return True
        if self.deltas[i] == HELD:
            return False
        if self._bases()[i] is not None:
            return True
        self._check_unbased(i)
        return self.legacy is None and self.counts[i] is not None

    def _check_unbased(self, i: int) -> None:
        """No state is stored up to event ``i``: then no changes may be either."""
        first = next((k for k in range(i + 1) if self.deltas[k] not in (None, HELD)), None)
        if first is not None:
            raise self.bad(f"the state changes of event {first} have no whole state before them to start from")

    def _state(self, i: int) -> dict[str, Any] | None:
        """The state after event ``i``, folded (private: callers get a copy)."""
        base = self._bases()[i] if i >= 0 else None
        if base is None:
            self._check_unbased(i)
            return None
        cached = self._cache
        if cached is not None and base <= cached[0] <= i:
            start, state = cached[0] + 1, cached[1]
        else:
            state, start = self._whole(base), base + 1
        for k in range(start, i + 1):
            d = self.deltas[k]
            if d is None or d == HELD:
                continue
            try:
                kind, body = parse_delta(d)
                if kind == "all":
                    state = body
                else:
                    apply_ops(state, body)
            except ValueError as exc:
                raise self.bad(f"the state delta of event {k} is {exc}") from None
        self._cache = (i, state)
        return state

    def _whole(self, k: int) -> dict[str, Any]:
        """The whole state stored at event ``k`` (its ``{"all": ...}`` delta, or the legacy snapshot)."""
        legacy = not is_full(self.deltas[k])
        text = self.legacy[1] if legacy else self.deltas[k]  # type: ignore[index]
        what = "the stored state" if legacy else f"the state of event {k}"
        try:
            data = json.loads(text)  # type: ignore[arg-type]
        except ValueError as exc:
            raise self.bad(f"{what} is not JSON ({exc})") from None
        if not legacy:
            data = data.get("all") if isinstance(data, dict) else None
        if not isinstance(data, dict):
            raise self.bad(f"{what} is not a JSON object")
        return data

    def state_after(self, i: int) -> dict[str, Any] | None:
        """A copy of the working state after event ``i`` (None when none is stored)."""
        return copy_state(self._state(i))

    def final_state(self) -> dict[str, Any] | None:
        """The latest committed working state (what a resume restores), private to the caller."""
        if self.events:
            return self._state(len(self.events) - 1)
        return None

    def path_indexes(self) -> list[int]:
        """The events that are steps of the run's path: every transition taken, and the last event
        (the final state's record, or where an unfinished run was cut). A step that an interruption
        cut and a resume ran again is listed once, as it was run again."""
        last = len(self.events) - 1
        return [i for i, e in enumerate(self.events) if e.dest is not None or i == last]


@dataclass(frozen=True)
class HistoryStep:
    """One step of a checkpointed run (``checkpoint.history(run_id)``).

    ``step`` is its number (``fork(run_id, at=step)``); ``state``, ``trigger``, ``dest``, ``t`` and
    ``payload`` are its trace event (``dest`` None: the run ended, or was cut, here);
    ``message_count`` is the transcript's length after it and ``messages`` that transcript;
    ``calls`` and ``usage`` are the model calls and token usage so far (None when not recorded);
    ``stored`` says whether the working state after it is stored on its own (False for a pure step
    committed with the next one, and for steps of runs stored by an older fsmchat) and ``snapshot``
    is that state (a copy; None when not stored)."""

    step: int
    state: str
    trigger: str | None
    dest: str | None
    t: float
    payload: Any
    message_count: int | None
    calls: int | None
    usage: dict[str, Any] | None
    stored: bool
    _log: RunLog = field(repr=False, compare=False)
    _index: int = field(repr=False, compare=False)

    @property
    def messages(self) -> list[Message]:
        """The transcript after this step (all of it when the store did not record the count)."""
        n = self.message_count
        return list(self._log.messages if n is None else self._log.messages[:n])

    @property
    def snapshot(self) -> dict[str, Any] | None:
        """The working state after this step (a copy), None when it is not stored."""
        return self._log.state_after(self._index) if self.stored else None

    def line(self) -> str:
        """One line for ``fsmchat history``."""
        went = f"--{self.trigger}--> {self.dest}" if self.dest is not None else f"[{self.trigger or 'end'}]"
        msgs = "?" if self.message_count is None else str(self.message_count)
        usage = self.usage or {}
        tokens = f", {usage['total_tokens']} tokens" if usage.get("total_tokens") else ""
        calls = f", {self.calls} calls" if self.calls else ""
        held = "" if self.stored else " (state not stored on its own)"
        return f"{self.step:>4}  {self.state} {went}  ({msgs} messages{calls}{tokens}, t={self.t:.3f}s){held}"


def history_of(log: RunLog) -> list[HistoryStep]:
    """Every step of ``log``'s run, in order, with the messages and usage so far."""
    out = []
    calls, usage = None, None
    for n, i in enumerate(log.path_indexes()):
        e = log.events[i]
        stored = log.known(i) and log.deltas[i] != HELD
        if stored:
            stats = (log._state(i) or {}).get("stats")
            if isinstance(stats, dict):
                calls = stats.get("calls") if isinstance(stats.get("calls"), int) else None
                usage = dict(stats["usage"]) if isinstance(stats.get("usage"), dict) else None
        out.append(HistoryStep(n, e.state, e.trigger, e.dest, e.t, e.payload, log.counts[i], calls, usage,
                               stored, log, i))
    return out
