"""Time travel: fork a checkpointed run at any step into a new run, optionally edited.

``fork(run_id, at=k, checkpoint=cp, edit=...)`` writes a new run whose events, messages and
working state are the original's as they were after step ``k`` (``checkpoint.history(run_id)``
numbers the steps), with the branch lanes of the parallel steps up to ``k`` copied under the new
id, and returns the new id; ``pattern.resume(new_id, cp)`` (or ``fsmchat.resume``) then continues
it like any run. The original run is not touched. A ``ForkEdit`` can replace or drop messages,
change flow variables, or change the run's limits (stored with the fork and applied when it is
resumed). Every argument is checked before anything is written (``ForkError``).
"""
from __future__ import annotations

import shlex
import time
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence, cast

from ..checks import JsonObject, JsonValue, run_id_problem
from ..errors import ConfigError, FsmchatError
from ..limits import Limits
from ..models import SEED_ROLE, Message, TraceEvent
from .checkpoint import NotSerializable, encode
from .protocol import HistoryStore, LaneStore
from .statelog import HELD, RunLog, copy_state, full_delta, is_full
from .writer import state_deltas


class ForkError(FsmchatError, ValueError):
    """A fork was refused: an unknown run, a step out of range, an edit that does not fit the run.

    The message says what is allowed. Nothing was written.

    Examples:
        >>> from fsmchat import ForkError, MemoryCheckpointer, fork
        >>> try:
        ...     fork("nope", at=0, checkpoint=MemoryCheckpointer())
        ... except ForkError as exc:
        ...     print(exc)
        fork('nope', at=0): no run 'nope' in MemoryCheckpointer; this store has no runs
    """


@dataclass(frozen=True)
class ForkEdit:
    """What a fork changes at its step; ``fork`` also takes it as a dict with the same keys.

    Message indexes count the transcript after the step from 0 (the task); negative ones count
    from the end.

    Attributes:
        replace: ``{index: new text}`` (role and metadata kept, ``"edited": True`` added) or
            ``{index: Message(...)}``.
        drop: Indexes of messages to leave out.
        variables: ``{name: value}`` for a flow's existing variables (JSON-able values).
        limits: ``Limits`` fields to change (``{"max_model_calls": 40}``), merged over the run's and
            applied when the fork is resumed.

    Examples:
        >>> from fsmchat import ForkEdit
        >>> ForkEdit(replace={1: "Optimist: the tests are green."}, drop=[2]).summary()
        {'replaced': [1], 'dropped': [2]}
    """

    replace: Mapping[int, str | Message] = field(default_factory=dict)
    drop: Sequence[int] = ()
    variables: Mapping[str, object] = field(default_factory=dict)
    limits: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, edit: "ForkEdit | Mapping[str, Any] | None") -> "ForkEdit":
        """Return ``edit`` as a ``ForkEdit`` (None: no change; a dict: its keys as fields).

        Args:
            edit: A ``ForkEdit``, a dict with its field names as keys, or None.

        Raises:
            ForkError: A dict with other keys, or something else.
        """
        if edit is None:
            return cls()
        if isinstance(edit, cls):
            return edit
        allowed = [f.name for f in fields(cls)]
        if not isinstance(edit, Mapping) or not all(k in allowed for k in edit):
            raise ForkError(f"fork: edit={_short(edit)} is invalid: a ForkEdit or a dict with keys {allowed}, e.g. "
                            "edit={'replace': {3: 'new text'}, 'drop': [4], 'variables': {'topic': 'x'}, "
                            "'limits': {'max_model_calls': 40}}")
        return cls(**edit)

    def summary(self) -> dict[str, Any]:
        """What the fork's meta records about the edit."""
        out: dict[str, Any] = {}
        if self.replace:
            out["replaced"] = sorted(self.replace)
        if self.drop:
            out["dropped"] = sorted(self.drop)
        if self.variables:
            out["variables"] = sorted(self.variables)
        if self.limits:
            out["limits"] = dict(self.limits)
        return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class ForkableCheckpointer(HistoryStore, LaneStore, Protocol):
    """A store that can fork its runs: one with the ``history`` and ``lanes`` capabilities
    (``SqliteCheckpointer``, ``MemoryCheckpointer``, ``PostgresCheckpointer``)."""


def fork(run_id: str, at: int, checkpoint: ForkableCheckpointer, edit: ForkEdit | Mapping[str, Any] | None = None, *,
         fork_id: str | None = None) -> str:
    """Write a new run that starts where ``run_id`` was after step ``at``, with ``edit`` applied.

    The new run has the original's events, messages and working state as they were after that
    step (and the branch lanes of parallel steps up to it); ``meta["forked_from"]`` records
    ``{"run_id", "step"}``. Resume it like any run (``pattern.resume(new_id, checkpoint)``). The
    original is not touched. A step whose working state was committed with the next one (a step
    carried by a ``commit="turn"`` run, ``stored=False`` in the history) forks from the step before
    it: the resume runs the carried steps again.

    Args:
        run_id: The checkpointed run to fork.
        at: The step to fork after (``checkpoint.history(run_id)`` numbers them).
        checkpoint: The store holding the run (``SqliteCheckpointer`` or ``MemoryCheckpointer``);
            the fork is written there.
        edit: What to change: a ``ForkEdit`` or a dict with its keys.
        fork_id: The new run's id (default: a new one).

    Returns:
        The new run's id.

    Raises:
        ForkError: Anything that does not fit, before anything is written.

    Examples:
        >>> from fsmchat import MemoryCheckpointer, RoundRobinSwarm, fork
        >>> def a(turn):
        ...     return f"A{len(turn.transcript)}"
        >>> def b(turn):
        ...     return f"B{len(turn.transcript)}"
        >>> chat, store = RoundRobinSwarm(agents=[a, b], max_loops=2), MemoryCheckpointer()
        >>> _ = chat.execute("Go?", checkpoint=store, run_id="orig")
        >>> new_id = fork("orig", at=1, checkpoint=store, edit={"replace": {1: "A, edited"}}, fork_id="edited")
        >>> [m.content for m in chat.resume(new_id, store).transcript]
        ['Go?', 'A, edited', 'B2', 'A3', 'B4']
        >>> store.load("edited").meta["forked_from"]
        {'run_id': 'orig', 'step': 1}
    """
    what = f"fork({run_id!r}, at={at!r})"
    for method in ("log", "put", "lanes"):
        if not callable(getattr(checkpoint, method, None)):
            raise ForkError(f"{what}: checkpoint={type(checkpoint).__name__} cannot fork runs (it has no {method}()); "
                            "use a SqliteCheckpointer or MemoryCheckpointer")
    problem = None if fork_id is None else run_id_problem(fork_id)
    if problem is not None:
        raise ForkError(f"{what}: fork_id={_short(fork_id)} is invalid: {problem} (or None for a new id)")
    log = _log_of(checkpoint, run_id, what)
    steps = log.path_indexes()
    last = next((n for n in range(len(steps) - 1, -1, -1) if log.events[steps[n]].dest is not None), None)
    if isinstance(at, bool) or not isinstance(at, int) or last is None or not 0 <= at <= last:
        allowed = (f"a step number from 0 to {last}{_command_hint(checkpoint, 'history', run_id)}" if last is not None
                   else "nothing: the run has no completed step to fork from")
        ended = "" if last is None or last + 1 >= len(steps) else \
            f"; step {last + 1} is where it ended ({log.stop_reason or log.events[steps[-1]].trigger})"
        raise ForkError(f"{what}: at={_short(at)} is invalid: {allowed}{ended}")
    ed = ForkEdit.of(edit)
    j = next((n for n in range(at, -1, -1) if log.deltas[steps[n]] != HELD), -1)  # held steps run again
    pos = steps[j] if j >= 0 else -1
    if not log.known(pos):
        stored = [n for n in range(last + 1) if log.known(steps[n]) and log.deltas[steps[n]] != HELD]
        raise ForkError(f"{what}: the working state after step {at} is not stored: run {run_id!r} was checkpointed "
                        "by an older fsmchat, which kept only the latest state; it can be forked at step "
                        f"{' or '.join(map(str, stored)) or '(none)'}")
    count = log.counts[pos] if pos >= 0 else 0
    count = len(log.messages) if count is None else count
    messages, dropped = _edit_messages(log.messages[:count], ed, what, log.meta.get("task"))
    state = _edit_state(copy_state(log.state_after(pos)), ed, log, what)
    meta = _fork_meta(log, at, ed, what)
    new_id = fork_id or uuid.uuid4().hex
    logs = [_forked_run(log, new_id, meta, steps[:j + 1], state, messages, dropped)]
    logs += [_copied_lane(checkpoint, lane, run_id, new_id, what) for lane in checkpoint.lanes(run_id)
             if _lane_step(lane, run_id) <= j]
    try:
        checkpoint.put(logs)
    except ValueError as exc:  # the id is taken
        raise ForkError(f"{what}: {exc}") from None
    return new_id


def _command_hint(checkpoint: object, command: str, *args: str) -> str:
    """`` (`fsmchat COMMAND ARGS --db PATH` lists them)``, runnable as printed, for a store in a file;
    nothing for one the command line cannot open (a MemoryCheckpointer)."""
    path = getattr(checkpoint, "path", None)
    if not isinstance(path, (str, Path)):
        return ""
    return f" (`{shlex.join(['fsmchat', command, *args, '--db', str(path)])}` lists them)"


def _log_of(checkpoint: ForkableCheckpointer, run_id: object, what: str) -> RunLog:
    if not isinstance(run_id, str) or not run_id:
        raise ForkError(f"{what}: run_id={_short(run_id)} is invalid: the id of a checkpointed run")
    try:
        log = checkpoint.log(run_id)
    except KeyError:
        listed = getattr(checkpoint, "list_runs", None)
        known = [r.run_id for r in listed()] if callable(listed) else []
        hint = f"runs in this store (newest first): {', '.join(known[:5])}" + (" ..." if len(known) > 5 else "") \
            if known else "this store has no runs"
        raise ForkError(f"{what}: no run {run_id!r} in {getattr(checkpoint, 'path', type(checkpoint).__name__)}; "
                        f"{hint}{_command_hint(checkpoint, 'runs')}") from None
    if "parent" in log.meta:
        raise ForkError(f"{what}: {run_id!r} is a branch lane of run {log.meta['parent']!r}; fork that run (its "
                        "lanes are copied with it)")
    return log


def _index(i: object, n: int, what: str, field_name: str) -> int:
    if isinstance(i, bool) or not isinstance(i, int) or not -n <= i < n:
        allowed = f"a message index from 0 to {n - 1} (or -{n} to -1 from the end)" if n else \
            "nothing: the transcript is empty at that step"
        raise ForkError(f"{what}: {field_name} index {_short(i)} is invalid: {allowed}; the transcript after the "
                        f"step has {n} message(s)")
    return i % n


def _edit_messages(rows: list[Message], ed: ForkEdit, what: str, task: object = None) -> tuple[list[Message], list[int]]:
    """The messages with ``ed`` applied. A pattern's first message is its task (the seed every
    speaker answers, and what a resume rebuilds the run from): it may be replaced, never dropped."""
    n = len(rows)
    if not isinstance(ed.replace, Mapping) or isinstance(ed.drop, (str, bytes)) or \
            not isinstance(ed.drop, Sequence):
        raise ForkError(f"{what}: edit replace={_short(ed.replace)} / drop={_short(ed.drop)} is invalid: replace is "
                        "{index: text or Message}, drop a list of indexes")
    replace = {}
    for i, new in ed.replace.items():
        k = _index(i, n, what, "replace")
        if isinstance(new, Message):
            replace[k] = new
        elif isinstance(new, str):
            replace[k] = Message(role=rows[k].role, content=new, metadata={**rows[k].metadata, "edited": True})
        else:
            raise ForkError(f"{what}: replace[{i}]={_short(new)} is invalid: the new text (a str) or a Message")
    drop = sorted({_index(i, n, what, "drop") for i in ed.drop})
    seed = rows[0].role == SEED_ROLE and (rows[0].content == task or rows[0].metadata.get("edited")) if rows else False
    if drop and drop[0] == 0 and seed:
        allowed = f"the indexes that may be dropped are 1 to {n - 1}" if n > 1 else "no message may be dropped"
        raise ForkError(f"{what}: drop index 0 is invalid: message 0 is the run's task, which the run starts from "
                        f"(replace it to change the task: edit={{'replace': {{0: 'new task'}}}}); {allowed}")
    both = sorted(set(drop) & set(replace))
    if both:
        raise ForkError(f"{what}: message {both[0]} is both replaced and dropped; do one of the two")
    out = [replace.get(k, m) for k, m in enumerate(rows) if k not in drop]
    return out, drop


def _edit_state(state: JsonObject | None, ed: ForkEdit, log: RunLog, what: str) -> JsonObject | None:
    if not ed.variables:
        return state
    if not isinstance(ed.variables, Mapping):
        raise ForkError(f"{what}: variables={_short(ed.variables)} is invalid: a dict of variable name -> value")
    variables = (state or {}).get("variables")
    if not isinstance(variables, dict):
        kind = log.meta.get("pattern", "this")
        raise ForkError(f"{what}: run {log.run_id!r} is a {kind} run, which has no flow variables at that step; "
                        "variables can be edited in AgentFlow runs only")
    for name, value in ed.variables.items():
        if name not in variables:
            raise ForkError(f"{what}: unknown variable {name!r}; the run's variables at that step are "
                            f"{sorted(variables) or '(none)'}")
        try:
            variables[name] = cast(JsonValue, encode(value))  # JSON data that encode just built
        except NotSerializable as exc:
            raise ForkError(f"{what}: variables[{name!r}]={_short(value)} is invalid: a JSON-able value (str, number, "
                            f"bool, None, list, dict); got a {exc}") from None
    return state


def _fork_meta(log: RunLog, at: int, ed: ForkEdit, what: str) -> JsonObject:
    meta = {k: v for k, v in log.meta.items() if k not in ("forked_from", "edit")}
    meta["forked_from"] = {"run_id": log.run_id, "step": at}
    if ed.limits:
        if not isinstance(ed.limits, Mapping):
            raise ForkError(f"{what}: limits={_short(ed.limits)} is invalid: a dict of Limits fields, e.g. "
                            "{'max_model_calls': 40}")
        fingerprint = meta.get("fingerprint") or {}
        base = meta.get("limits") or (fingerprint.get("limits") if isinstance(fingerprint, dict) else None) or {}
        if not isinstance(base, dict):
            raise log.bad("its stored limits are not a JSON object")
        try:
            limits = Limits(**{**base, **ed.limits})
        except ConfigError as exc:
            raise ForkError(f"{what}: edit limits: {exc}") from None
        meta["limits"] = limits.model_dump(mode="json")
    summary = ed.summary()
    if summary:
        meta["edit"] = summary
    return meta


def _forked_run(log: RunLog, new_id: str, meta: JsonObject, positions: list[int], state: JsonObject | None,
                messages: list[Message], dropped: list[int]) -> RunLog:
    """The new run's rows: the path events up to the fork step (renumbered), each with the state
    delta a fresh writer gives (the edited state on the last), and the edited transcript."""
    events: list[TraceEvent] = []
    counts: list[int | None] = []
    states: list[JsonObject | str | None] = []
    for n, i in enumerate(positions):
        e = log.events[i]
        events.append(TraceEvent(n, e.state, e.trigger, e.dest, e.t, e.payload))
        c = log.counts[i]
        counts.append(None if c is None else c - sum(1 for d in dropped if d < c))
        if n == len(positions) - 1:
            counts[-1] = len(messages)
            states.append(state)
        elif log.deltas[i] == HELD or not log.known(i):
            states.append(HELD if log.deltas[i] == HELD else None)
        else:
            states.append(log.state_after(i))
    deltas = state_deltas(states)
    now = time.time()
    return RunLog(new_id, meta, None, events, counts, deltas, messages, created=now, updated=now)


def _lane_step(lane: str, run_id: str) -> int:
    """The step of the parallel state whose branch ``lane`` (``<run>/<step>:<branch>``) is."""
    head = lane[len(run_id) + 1:].partition(":")[0]
    return int(head) if head.isdigit() else 1 << 62


def _copied_lane(checkpoint: ForkableCheckpointer, lane: str, run_id: str, new_id: str, what: str) -> RunLog:
    """A branch lane, row for row, under the fork's id (its parent renamed with it)."""
    log = checkpoint.log(lane)
    meta = dict(log.meta)
    parent = meta.get("parent")
    if isinstance(parent, str) and (parent == run_id or parent.startswith(run_id + "/")):
        meta["parent"] = new_id + parent[len(run_id):]
    deltas = list(log.deltas)
    if log.legacy is not None and not any(is_full(d) for d in deltas):  # an older store's lane: its one state
        deltas[log.legacy[0]] = full_delta(log.whole_state(log.legacy[0]))
    return RunLog(new_id + lane[len(run_id):], meta, log.stop_reason, log.events, log.counts, deltas, log.messages,
                  created=log.created, updated=log.updated)
