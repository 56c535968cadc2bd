"""The store protocol: what a checkpoint store is given and what it must give back.

A store keeps runs, each a row of metadata, a list of event rows and a list of messages. It never
looks inside the working state: the writer (``fsmchat.store.writer``) runs the state differ and hands the
store each commit ready to append (``Commit``: the event rows, each with its transcript length and
state delta, and the messages posted since the last commit). So a store is four methods, ``start``,
``append``, ``finish`` and ``log``, plus ``load`` and ``history`` (``ReadsLog`` gives both).

What a store can do beyond that it declares in ``capabilities`` (never guessed from its methods):

- ``leases``: runs have an owner at a time, with fencing tokens (``acquire``, ``renew``,
  ``release``, ``lease_ttl``); every write takes the writer's ``Fence`` and is refused, with
  nothing written, once another owner has taken the run over (``LeaseLost``);
- ``history``: the store lists its runs and takes whole runs at once (``runs``, ``list_runs``,
  ``put``): what ``fork``, ``fsmchat runs`` and the viewer use;
- ``lanes``: branch runs (``<run id>/<step>:<branch>``) are listed by their run (``lanes``);
- ``evals``: the store keeps evaluations beside its runs (``put_eval``, ``list_evals``,
  ``load_eval``): one ``EvalRecord`` per ``fsmchat.evals.Eval`` run, each case naming the run it
  scored, what ``fsmchat eval --db`` writes and the viewer's evaluation pages read.

``check_store`` checks an object against the protocol and the capabilities it declares.
"""
from __future__ import annotations

import math
import os
import socket
import time
import uuid
from abc import ABC, abstractmethod
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Protocol, Sequence, cast

from ..errors import FsmchatError, bad_value
from ..checks import JsonObject
from ..models import Message, StopReason, TraceEvent
from .statelog import AppendLog, HistoryStep, RunLog, history_of

LEASE_TTL = 30.0
"""Seconds a run's lease lasts without renewal (commits and model requests renew it), unless the
store says otherwise (``SqliteCheckpointer(path, lease_ttl=...)``, ``MemoryCheckpointer(lease_ttl=...)``).
A lease whose owner process on this host has died is taken over at once; one from another host,
or from a live process that stopped renewing it (paused, hung), after it expires."""


class RunInProgress(FsmchatError, RuntimeError):
    """Another execute/resume owns this run right now (its lease is live); nothing was changed."""

    def __init__(self, run_id: str, owner: str, expires_in: float):
        self.run_id, self.owner = run_id, owner
        super().__init__(f"run {run_id!r} is in progress elsewhere (lease held by {owner}, {expires_in:.0f} s left "
                         "unless renewed); wait for it to finish, or resume it once that process has ended")


class LeaseLost(FsmchatError, RuntimeError):
    """This execute/resume no longer owns its run: its lease expired and another owner took the run
    over (or it was given back). The write or model request that found out was refused and nothing
    was written; the run stands as its current owner left it."""

    fsmchat_fatal = True  # never a step's failure to retry or skip: the run must stop at once

    def __init__(self, run_id: str, token: int, holder: str | None, holder_token: int | None):
        self.run_id, self.token, self.holder, self.holder_token = run_id, token, holder, holder_token
        now = (f"the lease expired and was taken over by {holder} (fencing token {holder_token})" if holder else
               f"the lease expired, was taken over and given back since (fencing token {holder_token})"
               if holder_token is not None and holder_token != token else "this owner gave the lease back")
        super().__init__(f"run {run_id!r}: this execute/resume no longer owns the run (its fencing token {token}; "
                         f"{now}), so it writes nothing more and sends no model request; resume the run to see or "
                         "continue it as its current owner left it")


@dataclass(frozen=True)
class Fence:
    """The lease a write is made under: the run whose lease it is (a branch lane writes under its
    run's), its owner and the fencing token ``acquire`` gave that owner. Tokens only grow: each new
    owner of a run gets a larger one, so a store refuses the write of an owner it has since replaced."""

    run_id: str
    owner: str
    token: int


def check_lease_ttl(value: object, owner: str) -> float:
    """``lease_ttl`` as seconds: a positive, finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise bad_value(owner, "lease_ttl", value, f"seconds a run's lease lasts without renewal, a positive "
                        f"number (default {LEASE_TTL:g})", type_error=isinstance(value, bool) or not isinstance(value, (int, float)))
    return float(value)


def lease_owner() -> str:
    """A unique owner id for one execute/resume: host, process id and a random token."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_alive(owner: str) -> bool:
    """False only when ``owner`` is a process on this host that no longer exists."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lease_refusal(run_id: str, held: tuple[str, float] | None, owner: str, now: float) -> RunInProgress | None:
    """Why ``owner`` may not take ``run_id`` now (None: it may): another live, unexpired owner holds it."""
    if held is None:
        return None
    holder, expires = held
    if not holder or holder == owner or expires <= now or not owner_alive(holder):
        return None
    return RunInProgress(run_id, holder, expires - now)


def already_used(run_id: str) -> str:
    return (f"run id {run_id!r} is already checkpointed; resume it with pattern.resume({run_id!r}, checkpoint) "
            "or start a new run under another id")


@dataclass
class Saved:
    """What a store holds for one run."""

    run_id: str
    meta: JsonObject
    events: list[TraceEvent]
    messages: list[Message]
    state: JsonObject | None
    stop_reason: str | None = None

    @property
    def finished(self) -> bool:
        """Ended for good: a resume rebuilds it. A failed, cancelled or waiting (``interrupted``) run
        is not finished: a resume continues it."""
        return self.stop_reason is not None and StopReason.run_status(self.stop_reason) == "finished"

    @property
    def resume_at(self) -> str | None:
        """The state to enter next: the destination of the last committed transition."""
        for ev in reversed(self.events):
            if ev.dest is not None:
                return ev.dest
        return None


def saved_of(log: RunLog) -> Saved:
    """What ``load`` returns: the run's events and messages, and its latest state (a fresh copy)."""
    return Saved(log.run_id, log.meta, log.events, log.messages, log.final_state(), log.stop_reason)


@dataclass(frozen=True)
class RunInfo:
    """One line of a store's run list (``list_runs()``, ``fsmchat runs``): a run (not a branch lane)."""

    run_id: str
    pattern: str | None
    name: str | None
    task: str | None
    stop_reason: str | None  # None: not ended (running, or cut by a crash)
    messages: int
    steps: int
    created: float
    updated: float
    forked_from: JsonObject | None = None
    leased: bool = False  # a live process holds the run's lease

    @property
    def status(self) -> str:
        """``finished``, ``waiting`` (interrupted for a person), ``failed`` (error), ``cancelled``,
        ``running`` (not ended, its lease is live) or ``unfinished`` (cut by a crash: resumable)."""
        return StopReason.run_status(self.stop_reason, self.leased)

    def to_dict(self) -> JsonObject:
        return {"run_id": self.run_id, "pattern": self.pattern, "name": self.name, "task": self.task,
                "status": self.status, "stop_reason": self.stop_reason, "messages": self.messages,
                "steps": self.steps, "created": self.created, "updated": self.updated,
                "forked_from": self.forked_from}


def run_info(run_id: str, meta: JsonObject, stop_reason: str | None, messages: int, steps: int,
             created: float, updated: float, lease: tuple[str, float] | None = None) -> RunInfo:
    def text(k: str) -> str | None:  # untrusted meta
        v = meta.get(k)
        return v if isinstance(v, str) else None

    origin = meta.get("forked_from")
    leased = lease is not None and lease_refusal(run_id, lease, "", time.time()) is not None
    return RunInfo(run_id, text("pattern"), text("name"), text("task"), stop_reason, messages, steps, created, updated,
                   origin if isinstance(origin, dict) else None, leased)


class Row(NamedTuple):
    """One event row of a commit: the event, the transcript's length after it and the state delta
    committed with it (``fsmchat.store.statelog``: None when the state did not change or the step carries
    none, ``HELD`` for a step committed with the next one); ``payload``: the event's payload as JSON
    when the writer encoded it already (``statelog.encode_value``'s text; None: the store encodes it).
    A named tuple, as ``Commit``: one is made per event a commit appends."""

    event: TraceEvent
    messages: int
    delta: str | None
    payload: str | None = None


class Commit(NamedTuple):
    """What one commit appends to a run, in one transaction: its event ``rows`` (held steps first,
    the committed step last), the first of them numbered ``seq`` (how many event rows the run
    holds before the commit), and the ``messages`` posted since the last commit, the first of them
    numbered ``first`` (the transcript's length before the commit). The run's one writer (its
    lease fences out any other) numbers both, so a store need not look the numbers up. ``metadata``:
    the messages' metadata as JSON when the writer encoded it already, one text per message (None:
    the store encodes it)."""

    rows: tuple[Row, ...]
    messages: tuple[Message, ...]
    first: int
    seq: int
    metadata: tuple[str, ...] | None = None

    @property
    def state_delta(self) -> str | None:
        """The delta of the committed step (the last row)."""
        return self.rows[-1].delta


@dataclass(frozen=True)
class Capabilities:
    """What a store does beyond keeping runs (see the module's docstring)."""

    leases: bool = False
    history: bool = False
    lanes: bool = False
    evals: bool = False


@dataclass(frozen=True)
class EvalInfo:
    """One line of a store's evaluation list (``list_evals()``): an evaluation without its cases.

    Attributes:
        eval_id: The evaluation's id (unique in its store).
        name: Its dataset's name.
        created: When it was stored (seconds since the epoch).
        summary: What the list shows, JSON data (``fsmchat.evals`` writes the variants, their settings,
            the run and failure counts and each evaluator's mean per variant).

    Examples:
        >>> EvalInfo("triage-1a2b3c4d", "triage", 0.0, {"variants": {"terse": {}}}).name
        'triage'
    """

    eval_id: str
    name: str
    created: float
    summary: dict[str, object]


@dataclass(frozen=True)
class EvalRecord:
    """One evaluation as a store keeps it: its ``EvalInfo`` fields and its cases, JSON data.

    A store only keeps and returns it; ``fsmchat.evals`` writes it and the viewer reads it. Each case
    is one run of one case under one variant (one repeat): ``{"case", "variant", "repeat",
    "run_id", "output", "ok", "error", "scores", "assertions", "labels"}``, the last three
    evaluator name -> ``{"value", "reason"}``.

    Attributes:
        eval_id: The evaluation's id: a non-empty one-line string without ``/`` (it is part of the
            viewer's address ``/evals/<eval_id>``).
        name: Its dataset's name.
        created: When it ran (seconds since the epoch).
        summary: What the evaluation list shows (see ``EvalInfo``).
        cases: One dict per case, variant and repeat.

    Raises:
        ConfigTypeError: A field has the wrong type, or the id is empty, has ``/`` or a line break.

    Examples:
        >>> record = EvalRecord("triage-1a2b3c4d", "triage", 0.0, {}, [{"case": "c1", "variant": "terse"}])
        >>> record.info
        EvalInfo(eval_id='triage-1a2b3c4d', name='triage', created=0.0, summary={})
        >>> EvalRecord("a/b", "triage", 0.0, {}, [])
        Traceback (most recent call last):
            ...
        fsmchat.errors.ConfigTypeError: EvalRecord: eval_id='a/b' is invalid: a non-empty one-line string without '/'
    """

    eval_id: str
    name: str
    created: float
    summary: dict[str, object]
    cases: list[dict[str, object]]

    def __post_init__(self) -> None:
        if not isinstance(self.eval_id, str) or not self.eval_id.strip() or "/" in self.eval_id or \
                "\n" in self.eval_id or "\r" in self.eval_id:
            raise bad_value("EvalRecord", "eval_id", self.eval_id, "a non-empty one-line string without '/'",
                            type_error=True)
        wanted = (("name", str, "a str"), ("created", (int, float), "a number"), ("summary", dict, "a dict"),
                  ("cases", list, "a list of dicts"))
        for name, kind, what in wanted:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise bad_value("EvalRecord", name, value, what, type_error=True)
        if not all(isinstance(c, dict) for c in self.cases):
            raise bad_value("EvalRecord", "cases", self.cases, "a list of dicts", type_error=True)

    @property
    def info(self) -> EvalInfo:
        """The record without its cases, as ``list_evals`` lists it."""
        return EvalInfo(self.eval_id, self.name, self.created, self.summary)


class Store(Protocol):
    """A store of runs (see the module's docstring). ``fence`` is the writer's lease on a store
    with ``capabilities.leases`` (always None on one without). ``append`` also marks its run as
    not ended (its stop reason cleared, in the same transaction). ``finish`` gets ``state``, the
    whole working state as last written (JSON, or None), for a store that keeps it whole too. Both
    return None once the write is stored, or a ``Future`` done when it is (a store that writes on
    a thread of its own, e.g. ``SqliteCheckpointer(path, durability="fsync")``): the run's next
    step waits for it, off the event loop."""

    capabilities: Capabilities

    def start(self, run_id: str, meta: JsonObject, fence: Fence | None = None) -> None: ...

    def append(self, run_id: str, commit: Commit, fence: Fence | None = None) -> Future[None] | None: ...

    def finish(self, run_id: str, stop_reason: str, fence: Fence | None = None,
               state: str | None = None) -> Future[None] | None: ...

    def log(self, run_id: str) -> RunLog: ...

    def load(self, run_id: str) -> Saved: ...

    def history(self, run_id: str) -> list[HistoryStep]: ...


class LeaseStore(Store, Protocol):
    """A store with ``capabilities.leases``."""

    lease_ttl: float

    def acquire(self, run_id: str, owner: str, ttl: float | None = None) -> int:
        """Take the run's lease for ``owner`` and return its fencing token (each new owner gets a
        larger one); ``RunInProgress`` if another live owner holds it."""

    def renew(self, fence: Fence, ttl: float | None = None) -> None:
        """Extend the lease ``fence`` holds; ``LeaseLost`` when it is no longer that owner's."""

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease back (only if ``owner`` still holds it); its fencing token is kept."""


class HistoryStore(Store, Protocol):
    """A store with ``capabilities.history``."""

    def runs(self) -> list[str]: ...

    def list_runs(self) -> list[RunInfo]: ...

    def put(self, logs: Sequence[RunLog]) -> None: ...


class LaneStore(Store, Protocol):
    """A store with ``capabilities.lanes``."""

    def lanes(self, run_id: str) -> list[str]: ...


class EvalStore(Store, Protocol):
    """A store with ``capabilities.evals``."""

    def put_eval(self, record: EvalRecord) -> None:
        """Keep ``record`` (``ValueError``, nothing written, when its ``eval_id`` is already kept)."""

    def list_evals(self) -> list[EvalInfo]:
        """Every kept evaluation, newest first (an older store without evaluations: none)."""

    def load_eval(self, eval_id: str) -> EvalRecord:
        """The evaluation ``eval_id`` with its cases (``KeyError`` when there is none)."""


class ReadsLog(ABC):
    """``load`` and ``history`` of a store, read from its ``log`` (which each store defines)."""

    @abstractmethod
    def log(self, run_id: str) -> RunLog:
        """Every stored row of the run, as a ``RunLog`` (``KeyError`` if unknown)."""

    def load(self, run_id: str) -> Saved:
        """The run as a ``Saved``: its events, messages, latest state and stop reason (``KeyError`` if unknown)."""
        return saved_of(self.log(run_id))

    def history(self, run_id: str) -> list[HistoryStep]:
        """Every step of the run, in order (``fsmchat.store.statelog.HistoryStep``): its state, transition,
        time, the messages and usage so far and the working state after it."""
        return history_of(self.log(run_id))


_METHODS = {None: ("start", "append", "finish", "log", "load", "history"), "leases": ("acquire", "renew", "release"),
            "history": ("runs", "list_runs", "put"), "lanes": ("lanes",),
            "evals": ("put_eval", "list_evals", "load_eval")}


def missing_methods(store: object) -> list[str]:
    """The methods ``store`` lacks for the protocol and the capabilities it declares."""
    caps = getattr(store, "capabilities", None)
    if not isinstance(caps, Capabilities):
        return ["capabilities"]
    wanted = [m for cap, names in _METHODS.items() if cap is None or getattr(caps, cap) for m in names]
    return [m for m in wanted if not callable(getattr(store, m, None))]


def check_store(store: object, owner: str, field: str = "checkpoint") -> Store | None:
    """``store`` is None or a store (``SqliteCheckpointer("runs.db")``, ...), never a path."""
    if store is None:
        return None
    missing = missing_methods(store)
    if not missing:
        return cast(Store, store)
    if isinstance(store, (str, bytes)) or hasattr(store, "__fspath__"):
        hint = (f"a store, e.g. checkpoint=SqliteCheckpointer({store!r}) (from fsmchat import "
                "SqliteCheckpointer)")
    elif callable(getattr(store, "commit", None)) and not callable(getattr(store, "append", None)):
        hint = ("a store of the protocol fsmchat.store.protocol.Store (start, append, finish, log, load, history and "
                "capabilities); this one has commit(run_id, event, messages, state), the older protocol: its "
                "append(run_id, commit, fence) gets the rows fsmchat's writer made, state deltas included")
    elif "capabilities" in missing:
        hint = "a store such as SqliteCheckpointer('runs.db') or MemoryCheckpointer()"
    else:
        hint = (f"a store (see fsmchat.store.protocol.Store): it lacks {', '.join(missing)} for the capabilities it "
                "declares")
    raise bad_value(owner, field, store, hint, type_error=True)


def leases_of(store: Store) -> LeaseStore | None:
    """``store`` as a lease store, when it declares leases."""
    return cast(LeaseStore, store) if store.capabilities.leases else None


def evals_of(store: Store) -> EvalStore | None:
    """``store`` as a store of evaluations, when it declares ``evals``."""
    return cast(EvalStore, store) if store.capabilities.evals else None


# ---- the working state's values as JSON data ----
class NotSerializable(FsmchatError, TypeError):
    pass


@dataclass(frozen=True)
class Codec:
    """How values of one type are kept in a checkpoint: ``{tag: to_data(value)}``, read back by
    ``from_data``."""

    tag: str
    type: type
    to_data: Callable[[Any], Any]
    from_data: Callable[[Any], Any]


_CODECS: dict[type, Codec] = {}
_BY_TAG: dict[str, Codec] = {}


def register_codec(tag: str, kind: type, to_data: Callable[[Any], Any], from_data: Callable[[Any], Any]) -> None:
    """Keep values of ``kind`` (and its subclasses) in checkpoints as ``{tag: to_data(value)}``
    (JSON data), and read them back with ``from_data``. Tags start with ``__`` and are unique."""
    if not tag.startswith("__") or tag in _BY_TAG and _BY_TAG[tag].type is not kind:
        raise ValueError(f"register_codec: tag {tag!r} must start with '__' and not be taken by another type "
                         f"({sorted(_BY_TAG)} are taken)")
    _CODECS[kind] = _BY_TAG[tag] = Codec(tag, kind, to_data, from_data)


_PLAIN = frozenset({str, int, float, bool, type(None)})
_KEPT = _PLAIN | {AppendLog}  # what ``encode`` keeps as it is (an AppendLog holds JSON data: a commit writes its new items)
_OPAQUE: set[type] = set()  # types ``encode`` refused (a config, a model client): skipped at once next time


def _codec(obj: object) -> Codec | None:
    codec = _CODECS.get(type(obj))
    if codec is None:
        codec = next((c for k, c in _CODECS.items() if isinstance(obj, k)), None)
    return codec


def encode(obj: object) -> object:
    """JSON-able form of working state: values of a registered type as ``{tag: data}``, tuples as
    lists, dicts with int keys as ``{"__dict__": [[key, value], ...]}``; anything else non-JSON
    raises ``NotSerializable`` (the caller skips it and the pattern rebuilds it from its config on
    resume)."""
    t = type(obj)
    if t in _KEPT:
        return obj
    if (t is list or t is tuple) and isinstance(obj, (list, tuple)):
        return [encode(x) for x in obj]
    if t is dict and isinstance(obj, dict) and all(type(k) is str for k in obj):
        return {k: encode(v) for k, v in obj.items()}
    codec = _codec(obj)
    if codec is not None:
        return {codec.tag: codec.to_data(obj)}
    if isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [encode(x) for x in obj]
    if isinstance(obj, dict):
        if not all(isinstance(k, (str, int)) for k in obj):
            raise NotSerializable(type(obj).__name__)
        return {"__dict__": [[k, encode(v)] for k, v in obj.items()]} if any(isinstance(k, int) for k in obj) \
            else {k: encode(v) for k, v in obj.items()}
    _OPAQUE.add(t)
    raise NotSerializable(type(obj).__name__)


def decode(obj: object) -> Any:  # what a restore reads back: the value types its own code expects
    """What ``encode`` made, back as the values it was made from."""
    if isinstance(obj, list):
        return [decode(x) for x in obj]
    if isinstance(obj, dict):
        if len(obj) == 1:
            [(key, data)] = obj.items()
            codec = _BY_TAG.get(key)
            if codec is not None:
                return codec.from_data(data)
            if key == "__dict__":
                return {k: decode(v) for k, v in data}
        return {k: decode(v) for k, v in obj.items()}
    return obj


def encode_fields(values: Mapping[str, object]) -> dict[str, object]:
    """Encode what can be encoded; leave out the rest (rebuilt by the pattern on resume)."""
    out: dict[str, object] = {}
    for k, v in values.items():
        if type(v) in _OPAQUE:
            continue
        try:
            out[k] = encode(v)
        except NotSerializable:
            continue
    return out
