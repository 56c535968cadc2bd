"""What a checkpoint stores per step, and how a run's history is read back from it.

Each committed trace event carries the transcript length after it and a **state delta**: what
changed in the run's working state (``ctx.snapshot()``) since the previous commit, so a commit
writes what changed and never the whole state again. A delta is JSON text:

- ``{"all": {...}}``: the whole state (a run's first commit, and the first after a resume);
- ``[op, ...]``: changes at a path of keys and list indexes, each ``["s", path, value]`` (set),
  ``["a", path, [items]]`` (items appended to a list), ``["x", path, text]`` (text added to the
  end of a string) or ``["d", path]`` (removed). A dict (or a list of a few items) whose JSON is
  over ``SPLIT_CHARS`` is diffed part by part, so a private memory per agent or a discussion's
  lines grow by appends instead of being written again;
- ``HELD`` (``"-"``): not stored at this step (a step carried into the next commit: a resume
  or a fork runs it again from the state before it);
- no delta (NULL): the state did not change.

A commit costs what the step changed, not the size of the state: the parts of a snapshot that
only grow are ``AppendLog``s (a run's step records and events, a discussion's lines, private
memories), written from where the last commit stopped; an immutable value (or a ``Frozen`` dict)
that is the very object written last is skipped without being encoded.

``StateDiff`` turns successive snapshots into deltas; ``RunLog`` is a run as a store holds it and
folds the deltas back into the state after any event; ``history_of`` lists a run's steps as
``HistoryStep`` records (``checkpoint.history(run_id)``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, SupportsIndex, TypeVar, Union

from ..errors import CheckpointStoreError, FsmchatError
from ..checks import JsonObject, JsonValue
from ..models import Message, TraceEvent

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is Python 3.11+

HELD = "-"
SPLIT_CHARS = 512  # a dict, or a list of at most SPLIT_ITEMS items, with longer JSON is diffed part by part
SPLIT_ITEMS = 16
EXTEND_CHARS = 64  # a longer string that grows at its end is written as the text added
_FULL = '{"all":'  # how a whole-state delta's JSON starts (``full_delta``)

_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # None without CPython's _json accelerator


class OneShotEncoder(json.JSONEncoder):
    """A ``json.JSONEncoder`` (without ``indent``) whose ``encode`` reuses one C encoder, made with
    it: ``JSONEncoder.encode`` makes a new one on every call, which costs more than encoding a small
    value. Circular data is not looked for on the way (``check_circular`` is left to ``encode``'s
    fallback): it runs out of recursion, and the value is then encoded the usual way, which raises
    ``ValueError`` naming it. Without the C accelerator it is ``JSONEncoder`` as it is.

    Examples:
        >>> from fsmchat.store.statelog import OneShotEncoder
        >>> enc = OneShotEncoder(default=repr, separators=(",", ":"))
        >>> enc.encode({"turn": 2, "recent": ["a"], "at": 0.5}), enc.encode("b")
        ('{"turn":2,"recent":["a"],"at":0.5}', '"b"')
    """

    def __init__(self, *, skipkeys: bool = False, ensure_ascii: bool = True, check_circular: bool = True,
                 allow_nan: bool = True, sort_keys: bool = False, indent: int | str | None = None,
                 separators: tuple[str, str] | None = None, default: Callable[[object], object] | None = None) -> None:
        super().__init__(skipkeys=skipkeys, ensure_ascii=ensure_ascii, check_circular=check_circular,
                         allow_nan=allow_nan, sort_keys=sort_keys, indent=indent, separators=separators,
                         default=default)
        self._once = None if _C_ENCODER is None or self.indent is not None else _C_ENCODER(
            None, self.default, json.encoder.encode_basestring_ascii if self.ensure_ascii else
            json.encoder.encode_basestring, None, self.key_separator, self.item_separator, self.sort_keys,
            self.skipkeys, self.allow_nan)

    def encode(self, o: object) -> str:
        if self._once is None:
            return super().encode(o)
        try:
            return "".join(self._once(o, 0))
        except RecursionError:  # circular (or too deep): the usual encoder says which
            return super().encode(o)


_ENCODER = OneShotEncoder(default=repr, separators=(",", ":"))


def encode_json(obj: object) -> str:
    """Compact JSON of checkpoint data (anything not JSON-able is written as its ``repr``): what
    ``json.dumps(obj, default=repr, separators=(",", ":"))`` writes, by one encoder made once."""
    return _ENCODER.encode(obj)


encode_value = encode_json  # the JSON of one value a store writes (a payload, a message's metadata)

_DATA_ENCODER = OneShotEncoder(separators=(",", ":"))  # _ENCODER without its repr fallback


def encode_data(obj: object) -> str:
    """``encode_json`` of plain JSON data (the same text), and ``TypeError`` for anything else
    (a value ``encode_json`` would write as its ``repr``): a store's writer encodes a commit's
    payloads once with it, for the masking check and the rows alike.

    Examples:
        >>> from fsmchat.store.statelog import encode_data
        >>> encode_data({"winner": "b", "scores": [0.9, 0.8]})
        '{"winner":"b","scores":[0.9,0.8]}'
        >>> encode_data({"at": object()})
        Traceback (most recent call last):
        ...
        TypeError: Object of type object is not JSON serializable
    """
    return _DATA_ENCODER.encode(obj)


_T = TypeVar("_T")
Path = list[Union[str, int]]
"""Where a change of a state delta is: the keys and list indexes to it."""


class AppendLog(list[_T]):
    """A list that grows at its end only (a run's step records, events, a discussion's lines, an
    agent's private memory): a checkpoint writes the items added since its last commit (an ``a``
    change), never the list again, so a commit costs what the step added. Replacing, removing or
    reordering items is allowed and counted (``rewrites``): the next commit then writes the list
    whole. Items are JSON data, not changed once added (a change inside an item is not seen)."""

    __slots__ = ("rewrites",)

    def __init__(self, items: Iterable[_T] = ()) -> None:
        super().__init__(items)
        self.rewrites = 0

    def _rewritten(self) -> None:
        self.rewrites = getattr(self, "rewrites", 0) + 1

    def __setitem__(self, i: Any, v: Any) -> None:  # list's two overloads (an index, a slice), forwarded
        self._rewritten()
        super().__setitem__(i, v)

    def __delitem__(self, i: SupportsIndex | slice) -> None:
        self._rewritten()
        super().__delitem__(i)

    def __imul__(self, n: SupportsIndex) -> Self:  # (x *= 0, then appends: not a longer list of the same items)
        self._rewritten()
        return super().__imul__(n)

    def insert(self, i: SupportsIndex, v: _T) -> None:
        self._rewritten()
        super().insert(i, v)

    def pop(self, i: SupportsIndex = -1) -> _T:
        self._rewritten()
        return super().pop(i)

    def remove(self, v: _T) -> None:
        self._rewritten()
        super().remove(v)

    def clear(self) -> None:
        self._rewritten()
        super().clear()

    def sort(self, *a: Any, **kw: Any) -> None:  # list's two overloads (with a key, without), forwarded
        self._rewritten()
        super().sort(*a, **kw)

    def reverse(self) -> None:
        self._rewritten()
        super().reverse()


class Frozen(dict[str, object]):
    """A dict that its maker never changes once built (it builds a new one instead, e.g.
    ``CallStats.to_state``): a checkpoint skips it, unencoded, when it is the very dict written
    last. Whoever gets one must not change it."""

    __slots__ = ()


_FROZEN = frozenset({str, int, float, bool, type(None), Frozen})  # the same object is the same JSON


class _Leaf(NamedTuple):
    """A value as last written, whole: its JSON, and what a change is found against (a string's
    text, a list's length)."""

    text: str
    string: str | None
    items: int


_Tracked = Union[_Leaf, "_Log", "_Obj", "_Arr"]
"""What a writer remembers of a value it wrote (``_tracked``)."""


class _Obj(dict[str, _Tracked]):
    """A large dict as last written: key -> what was written for its value (diffed key by key);
    ``src``: key -> the value object last written (an immutable one is not encoded again);
    ``paths``: key -> the path to it (a list of keys), made the first time it is needed."""

    __slots__ = ("src", "paths")

    def __init__(self, value: Mapping[str, object]) -> None:
        super().__init__((k, _track(v)) for k, v in value.items())
        self.src = dict(value)
        self.paths: dict[str, Path] = {}

    def key_path(self, path: Path, key: str) -> Path:
        """The path of ``key`` in this dict, which is at ``path``. A dict diffed part by part had
        str keys only; a key the snapshot gained may be another kind (its type says str, the
        snapshot's dict may not)."""
        got = self.paths.get(key)
        if got is None:
            if type(key) is not str:
                raise _NotStrKey
            got = self.paths[key] = [*path, key]
        return got


class _Arr(list[_Tracked]):
    """A large list of a few items as last written: what was written for each item."""

    __slots__ = ()


class _Log:
    """An ``AppendLog`` as last written: the list itself, and how many of its items at which rewrite."""

    __slots__ = ("items", "n", "rewrites")

    def __init__(self, items: AppendLog[object]) -> None:
        self.items, self.rewrites, self.n = items, items.rewrites, len(items)


def _track(value: object) -> _Tracked:
    """What a writer remembers of ``value`` (``_tracked``), encoding it here."""
    return _Log(value) if type(value) is AppendLog else _tracked(value, encode_json(value))


def _tracked(value: object, text: str) -> _Tracked:
    """What a writer remembers of ``value`` (written as ``text``): the ``_Leaf``, or for an
    ``AppendLog`` the list, or for a large dict (or a large list of a few items) its parts, so the
    next change is found part by part."""
    if type(value) is AppendLog:
        return _Log(value)
    if len(text) > SPLIT_CHARS:
        if type(value) is dict and all(type(k) is str for k in value):
            return _Obj(value)
        if (type(value) is list or type(value) is tuple) and 0 < len(value) <= SPLIT_ITEMS:
            return _Arr(_track(v) for v in value)
    return _Leaf(text, value if type(value) is str else None,
                 len(value) if type(value) is list or type(value) is tuple else -1)


def _op(kind: str, path: Path, text: str | None = None) -> str:
    """One change of a delta as JSON: ``[kind, path]`` and, when given, the value written as ``text``."""
    end = "]" if text is None else f",{text}]"
    return f'["{kind}",{encode_json(path)}{end}'


def _change(path: Path, old: _Tracked | None, value: object, text: str) -> str:
    """The change (as JSON) that turns ``old`` (what was last written at ``path``) into ``value``
    (whose JSON is ``text``, used as it is): items appended to a list, text added to a long
    string, else the new value."""
    if type(old) is _Leaf:
        if old.items > 0 and (type(value) is list or type(value) is tuple) and len(value) > old.items \
                and text.startswith(old.text[:-1]) and text[len(old.text) - 1] == ",":
            return _op("a", path, encode_json(list(value[old.items:])))
        if old.string is not None and len(old.string) > EXTEND_CHARS and type(value) is str \
                and len(value) > len(old.string) and value.startswith(old.string):
            return _op("x", path, encode_json(value[len(old.string):]))
    return _op("s", path, text)


class _NotStrKey(FsmchatError):
    """A snapshot gained a key that is not a str (``StateDiff.delta`` then writes the whole state)."""


def _written(tracked: _Tracked | None) -> str | None:
    """The JSON last written for ``tracked``, when it is known without the parts' texts (a whole
    value, an append log not rewritten since); None (something else: a change) otherwise."""
    if type(tracked) is _Leaf:
        return str(tracked.text)
    if type(tracked) is _Log and tracked.items.rewrites == tracked.rewrites:
        return encode_json(tracked.items[:tracked.n])
    return None


def full_delta(state: Mapping[str, object]) -> str:
    """The delta that is the whole ``state``."""
    return encode_json({"all": state})


class StateDiff:
    """One run's writer side: remembers what it last wrote (as JSON text, split into parts for
    large dicts and lists) and gives the delta of the next snapshot. JSON is compared as text, so
    ``1``, ``1.0`` and ``true`` stay distinct and what is folded back equals what was snapshotted.
    A delta is the JSON list of its changes, each written once as it is found (a changed value's
    text, made to compare it, is the text written).

    A commit's work follows what changed, not the state's size: an ``AppendLog`` still the same
    list is written from where the last commit stopped (its earlier items are not looked at), and
    an immutable value (str, number, bool, None) that is the very object last written is skipped
    without encoding it."""

    __slots__ = ("prev",)

    def __init__(self) -> None:
        self.prev: _Obj | None = None  # the state last written

    def delta(self, state: Mapping[str, object]) -> str | None:
        """The delta from the last snapshot to ``state`` (None: unchanged); the whole state first."""
        prev = self.prev
        if prev is None:
            return self.full(state)
        ops: list[str] = []
        try:
            self._dict([], state, prev, ops)
        except _NotStrKey:  # JSON would rename such a key: every commit writes the whole state
            return self.full(state)
        return f"[{','.join(ops)}]" if ops else None

    def _dict(self, path: Path, value: Mapping[str, object], old: _Obj, ops: list[str]) -> None:
        """Diff a dict key by key (``path``: the keys to it)."""
        for k, v in value.items():
            if type(v) in _FROZEN and old.src.get(k, _Obj) is v:  # (_Obj: never a value)
                continue  # the very (immutable) object last written here
            old[k] = self._diff(old.key_path(path, k), v, old.get(k), ops)
            old.src[k] = v
        for k in [k for k in old if k not in value]:  # removed keys
            ops.append(_op("d", old.key_path(path, k)))
            del old[k]
            old.src.pop(k, None)
            old.paths.pop(k, None)

    def _diff(self, path: Path, value: object, old: _Tracked | None, ops: list[str]) -> _Tracked:
        if type(value) is AppendLog:
            return self._log(path, value, old, ops)
        if type(old) is _Obj and type(value) is dict and all(type(k) is str for k in value):
            self._dict(path, value, old, ops)
            return old
        if type(old) is _Arr and (type(value) is list or type(value) is tuple) and len(value) >= len(old):
            n = len(old)
            for i in range(n):
                old[i] = self._diff([*path, i], value[i], old[i], ops)
            if len(value) > n:
                ops.append(_op("a", path, encode_json(list(value[n:]))))
                old.extend(_track(v) for v in value[n:])
            # a list that outgrew a few items is tracked whole again: appends are found on it as a whole
            return old if len(old) <= SPLIT_ITEMS else _track(value)
        text = encode_json(value)
        if text != _written(old):
            ops.append(_change(path, old, value, text))
        return _tracked(value, text)

    def _log(self, path: Path, value: AppendLog[object], old: _Tracked | None, ops: list[str]) -> _Tracked:
        """An ``AppendLog``: the items added since the last commit, when it is the same list and
        was only appended to; else the whole list (a new list, or one rewritten)."""
        if type(old) is _Log and old.items is value and old.rewrites == value.rewrites and len(value) >= old.n:
            if len(value) > old.n:
                ops.append(_op("a", path, encode_json(value[old.n:])))
                old.n = len(value)
            return old
        ops.append(_op("s", path, encode_json(list(value))))
        return _Log(value)

    def full(self, state: Mapping[str, object]) -> str:
        """The whole state as a delta; later deltas are taken against it."""
        # JSON would rename keys that are not str: then every commit writes the whole state
        self.prev = _Obj(state) if all(type(k) is str for k in state) else None
        return full_delta(state)

    def text(self) -> str | None:
        """The whole state last written, as JSON (None: nothing written yet)."""
        return None if self.prev is None else encode_json(self.prev.src)


# ---- reading deltas back ----
def is_full(delta: str | None) -> bool:
    return delta is not None and delta.startswith(_FULL)


_OPS = ("s", "a", "d", "x")


Op = tuple[str, Path, JsonValue]
"""One change of a state delta, read back: its kind (``s``, ``a``, ``x``, ``d``), path and value."""


def parse_delta(text: str) -> tuple[str, JsonObject | list[Op]]:
    """``("all", state)`` or ``("ops", [(op, path, value)])``; ``ValueError`` naming what is wrong
    for anything else (a checkpoint is untrusted input: data only, never code)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if isinstance(data, dict):
        if list(data) == ["all"] and isinstance(data["all"], dict):
            return "all", data["all"]
        raise ValueError('an object other than {"all": {...}}')
    if not isinstance(data, list):
        raise ValueError(f"a JSON {type(data).__name__}, not a list of changes")
    ops: list[Op] = []
    for op in data:
        ok = isinstance(op, list) and len(op) == (2 if op and op[0] == "d" else 3) and op[0] in _OPS and \
            isinstance(op[1], list) and op[1] and all(isinstance(p, str) or type(p) is int for p in op[1])
        if not ok:
            raise ValueError(f"a malformed change {encode_json(op)[:80]}")
        value = op[2] if len(op) == 3 else None
        if op[0] == "a" and not isinstance(value, list) or op[0] == "x" and not isinstance(value, str):
            raise ValueError(f"a change of the wrong kind {encode_json(op)[:80]}")
        ops.append((op[0], op[1], value))
    return "ops", ops


def apply_ops(state: JsonObject, ops: list[Op]) -> None:
    """Apply parsed changes to ``state`` in place (``ValueError`` when they do not fit it)."""
    for op, path, value in ops:
        target: JsonValue = state
        for p in path[:-1]:
            target = _at(target, p, path)
        last = path[-1]
        if op == "d":
            if not isinstance(target, dict):
                raise ValueError(f"a removal from {encode_json(path)}, which is not in a dict")
            if isinstance(last, str):  # (a JSON object has no other keys)
                target.pop(last, None)
            continue
        if op != "s":
            current = _at(target, last, path)
            if op == "a" and isinstance(current, list) and isinstance(value, list):
                current.extend(value)
                continue
            if op == "x" and isinstance(current, str) and isinstance(value, str):
                value = current + value
            else:  # (parse_delta made an append's value a list, an extension's a string)
                raise ValueError(f"an {'append to' if op == 'a' else 'extension of'} {encode_json(path)}, which is "
                                 f"a {type(current).__name__}")
        if isinstance(target, dict) and isinstance(last, str):
            target[last] = value
        elif isinstance(target, list) and type(last) is int and 0 <= last < len(target):
            target[last] = value
        else:
            raise ValueError(f"a change at {encode_json(path)}, which is not there")


def _at(container: JsonValue, key: str | int, path: Path) -> JsonValue:
    """``container[key]`` along ``path``, or ``ValueError`` when the path does not fit the state."""
    if isinstance(container, dict) and isinstance(key, str) and key in container:
        return container[key]
    if isinstance(container, list) and type(key) is int and 0 <= key < len(container):
        return container[key]
    raise ValueError(f"a change at {encode_json(path)}, which is not there")


def copy_state(state: Mapping[str, object] | None) -> JsonObject | None:
    """A deep copy of stored (JSON) state."""
    if state is None:
        return None
    copy: JsonObject = json.loads(encode_json(state))  # the JSON of a dict, just written: a dict
    return copy


@dataclass
class RunLog:
    """One run as a store holds it, row by row: what ``load``, ``history`` and ``fork`` read.

    ``counts[i]`` is the transcript's length after event ``i`` and ``deltas[i]`` the state delta
    committed with it (None for both on rows written before per-step states existed);
    ``legacy`` is such a store's one stored snapshot: ``(event index, JSON)``."""

    run_id: str
    meta: JsonObject
    stop_reason: str | None
    events: list[TraceEvent]
    counts: list[int | None]
    deltas: list[str | None]
    messages: list[Message]
    legacy: tuple[int, str] | None = None
    created: float | None = None
    updated: float | None = None
    where: str = "checkpoint store"
    _cache: tuple[int, JsonObject] | None = field(default=None, repr=False, compare=False)
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
        """Whether the state after event ``i`` is stored: not at a held step, and not before a
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

    def _state(self, i: int) -> JsonObject | None:
        """The state after event ``i``, folded (private: callers get a copy)."""
        base = self._bases()[i] if i >= 0 else None
        if base is None:
            self._check_unbased(i)
            return None
        cached = self._cache
        if cached is not None and base <= cached[0] <= i:
            start, state = cached[0] + 1, cached[1]
        else:
            state, start = self.whole_state(base), base + 1
        for k in range(start, i + 1):
            d = self.deltas[k]
            if d is None or d == HELD:
                continue
            try:
                body = parse_delta(d)[1]
                if isinstance(body, dict):  # ("all", the whole state)
                    state = body
                else:
                    apply_ops(state, body)
            except ValueError as exc:
                raise self.bad(f"the state delta of event {k} is {exc}") from None
        self._cache = (i, state)
        return state

    def whole_state(self, k: int) -> JsonObject:
        """The whole state stored at event ``k`` (its ``{"all": ...}`` delta, or the legacy snapshot)."""
        legacy = not is_full(self.deltas[k])
        text = self.legacy[1] if legacy and self.legacy is not None else self.deltas[k]
        what = "the stored state" if legacy else f"the state of event {k}"
        try:
            data = json.loads(text or "")
        except (ValueError, RecursionError) as exc:
            raise self.bad(f"{what} is not JSON ({exc})") from None
        if not legacy:
            data = data.get("all") if isinstance(data, dict) else None
        if not isinstance(data, dict):
            raise self.bad(f"{what} is not a JSON object")
        return data

    def state_after(self, i: int) -> JsonObject | None:
        """A copy of the working state after event ``i`` (None when none is stored)."""
        return copy_state(self._state(i))

    def final_state(self) -> JsonObject | None:
        """The latest committed working state (what a resume restores); the caller owns it."""
        if not self.events:
            return None
        state = self._state(len(self.events) - 1)
        self._cache = None  # handed over: never folded further here
        return state

    def path_indexes(self) -> list[int]:
        """The events that are steps of the run's path: every transition taken, and the last event
        (the final state's record, or where an unfinished run was cut). A step that an interruption
        cut and a resume ran again is listed once, as it was run again."""
        last = len(self.events) - 1
        return [i for i, e in enumerate(self.events) if e.dest is not None or i == last]


@dataclass(frozen=True)
class HistoryStep:
    """One step of a checkpointed run (``checkpoint.history(run_id)``).

    ``messages`` is the transcript after the step and ``snapshot`` the working state after it (a
    copy; None when not stored).

    Attributes:
        step: Its number (what ``fork(run_id, at=step)`` takes).
        state: The state the step ran.
        trigger: The label of the transition it took (None on the final state's step).
        dest: The state entered next; None: the run ended, or was cut, here.
        t: Seconds since the run started.
        payload: What the state's action returned.
        message_count: The transcript's length after it (None when the store did not record it).
        calls: The model calls so far (None when not recorded).
        usage: The token usage so far (None when not recorded).
        stored: Whether the working state after it is stored on its own (False for a held step
            committed with the next one, and for steps of runs stored by an older fsmchat).

    Examples:
        >>> from fsmchat import MemoryCheckpointer, RoundRobinSwarm
        >>> def analyst(turn):
        ...     return "Data first."
        >>> store = MemoryCheckpointer()
        >>> _ = RoundRobinSwarm(agents=[analyst]).execute("Plan the launch.", checkpoint=store, run_id="r1")
        >>> [(h.step, h.state, h.dest, h.message_count) for h in store.history("r1")]
        [(0, 'seed', 'analyst', 1), (1, 'analyst', 'stop', 2), (2, 'stop', None, 2)]
        >>> store.history("r1")[1].messages[-1].content
        'Data first.'
    """

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
                got_calls, got_usage = stats.get("calls"), stats.get("usage")
                calls = got_calls if isinstance(got_calls, int) else None
                usage = dict(got_usage) if isinstance(got_usage, dict) else None
        out.append(HistoryStep(n, e.state, e.trigger, e.dest, e.t, e.payload, log.counts[i], calls, usage,
                               stored, log, i))
    return out
