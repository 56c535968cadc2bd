"""Layer 1: the data every other layer speaks (messages, transcripts, bids, trace events, results)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field


class Message(BaseModel):
    """One row of a shared conversation: who spoke, what, and metadata (e.g. the bid score)."""

    model_config = ConfigDict(frozen=True)
    role: str
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content, "metadata": dict(self.metadata)}


MAX_MESSAGE_CHARS = 200_000  # the most one message adds to a transcript (``Limits.max_message_chars``)
_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many were replaced. A lone
    surrogate is valid in JSON and in a Python str but cannot be encoded as UTF-8, so SQLite, HTTP
    bodies and logs would fail on it later; fsmchat repairs it where text enters."""
    if text.isascii():
        return text, 0
    return _SURROGATE.subn("\ufffd", text)


class Transcript:
    """Append-only conversation; listeners hear every post as it happens.

    Every post is made safe to store: lone surrogates become U+FFFD (event ``text_repaired``) and
    content over ``max_chars`` is cut to that length (event ``message_truncated``); the events go to
    ``events`` (the run context's list)."""

    __slots__ = ("_rows", "_listeners", "events", "max_chars")

    def __init__(self, rows: list[Message] | None = None, events: list[dict[str, Any]] | None = None,
                 max_chars: int = MAX_MESSAGE_CHARS):
        self._rows: list[Message] = list(rows or [])
        self._listeners: list[Any] = []
        self.events: list[dict[str, Any]] = events if events is not None else []
        self.max_chars = max_chars

    def post(self, role: str, content: str, **metadata: Any) -> Message:
        if isinstance(content, str) and (not content.isascii() or len(content) > self.max_chars):
            content = self.admit(role, content)
        msg = Message(role=role, content=content, metadata=metadata)
        self._rows.append(msg)
        for listener in self._listeners:
            listener(msg)
        return msg

    def admit(self, role: str, content: str) -> str:
        """``content`` as it may enter the transcript (repaired, capped), noting what changed."""
        content, n = safe_text(content)
        if n:
            self.events.append({"event": "text_repaired", "role": role, "replaced": n})
        if len(content) > self.max_chars:
            self.events.append({"event": "message_truncated", "role": role, "chars": len(content),
                                "kept": self.max_chars})
            content = content[:self.max_chars]
        return content

    def since(self, i: int) -> list[Message]:
        """Rows from index ``i`` on (what a checkpoint has not stored yet)."""
        return self._rows[i:] if i < len(self._rows) else []

    def restore(self, rows: list[Message]) -> None:
        """Refill from a checkpoint, without telling listeners (those rows were heard before)."""
        self._rows.extend(rows)

    def listen(self, listener: Any) -> None:
        self._listeners.append(listener)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Message]:
        return iter(self._rows)

    def __getitem__(self, i: int) -> Message:
        return self._rows[i]

    @property
    def messages(self) -> list[Message]:
        return list(self._rows)

    def __repr__(self) -> str:
        return f"Transcript({len(self._rows)} messages)"


class Bid(BaseModel):
    """A participant's wish to speak: ``score`` in 0..1 and the reply it would give."""

    score: float = Field(ge=0.0, le=1.0)
    message: str = ""

    def __init__(self, score: float = 0.0, message: str = "", **kw: Any):
        super().__init__(score=score, message=message, **kw)


@dataclass(slots=True)
class TraceEvent:
    """One step of a run: the state left, the transition label fired, where it went, when, payload.

    A plain slotted dataclass rather than a pydantic model: one is made per engine step, and the
    engine's budget is a few microseconds per step.
    """

    step: int
    state: str
    trigger: str | None
    dest: str | None
    t: float
    payload: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "state": self.state, "trigger": self.trigger,
                "dest": self.dest, "t": self.t, "payload": self.payload}


StopReason = Literal["max_loops", "lull", "until", "rounds", "closed", "ttl", "budget",
                     "error", "cancelled", "max_steps", "done"]


_BRANCH = re.compile(r"^(.*\|\d+(?:\[\d+\])?)\.")


def split_branch(state: str) -> tuple[str, str]:
    """``("par|1[0]", "discussion.turn")`` for ``"par|1[0].discussion.turn"``: the branch run a traced
    state belongs to (``""`` for the top-level run) and its name inside that branch's graph."""
    if "|" not in state:
        return "", state
    m = _BRANCH.match(state)
    return (m.group(1), state[m.end():]) if m else ("", state)


@dataclass
class RunResult:
    """What one run of a graph produced: the path, the trace, why it stopped, and its context.

    Patterns also fill ``transcript``, ``calls`` (model calls), ``usage`` (token counts) and
    ``output`` (formatted per the pattern's ``output_type``).
    """

    path: list[str]
    trace: list[TraceEvent]
    stop_reason: str
    context: Any
    error: BaseException | None = None
    transcript: list[Message] = field(default_factory=list)
    calls: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    output: Any = None
    events: list[dict[str, Any]] = field(default_factory=list)
    run_id: str | None = None

    @property
    def paths(self) -> dict[str, list[str]]:
        """The path of every run in the trace: ``""`` is the top-level run (``path``), each branch
        run of a fork state is keyed by its id (``"par|1"``, ``"each|1[0]"``, nested
        ``"par|1.inner|2"``) and lists its qualified states in order."""
        out: dict[str, list[str]] = {"": list(self.path)}
        for ev in self.trace:
            branch, _ = split_branch(ev.state)
            if branch:
                out.setdefault(branch, []).append(ev.state)
        return out

    @property
    def ok(self) -> bool:
        return self.error is None and self.stop_reason != "cancelled"

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able data (``fsmchat run --json``): values JSON cannot hold (a trace
        payload object, an error) become their text; the context is represented by its cost."""
        stats = getattr(self.context, "stats", None)
        error = None if self.error is None else {"type": type(self.error).__name__, "message": str(self.error)}
        return json.loads(json.dumps({
            "run_id": self.run_id, "ok": self.ok, "stop_reason": self.stop_reason, "error": error,
            "output": self.output, "calls": self.calls, "usage": dict(self.usage),
            "cost_usd": getattr(stats, "cost_usd", None), "path": list(self.path),
            "transcript": [m.row() for m in self.transcript], "events": list(self.events),
            "trace": [e.to_dict() for e in self.trace]}, default=str))


# ---- output types (SEMANTICS.md "Output types"), one implementation for every pattern ----
OUTPUT_TYPES = ("str-all-except-first", "str", "string", "all", "list", "dict", "final", "last", "json")


def check_output_type(output_type: str) -> str:
    if output_type not in OUTPUT_TYPES:
        raise ValueError(f"output_type={output_type!r} is not supported; choose from {list(OUTPUT_TYPES)}")
    return output_type


def format_output(rows: list[Message], output_type: str) -> Any:
    """Format a transcript as the reference libraries do for ``output_type``."""
    check_output_type(output_type)
    if output_type == "str-all-except-first":
        return "\n".join(m.content for m in rows[1:])
    if output_type in ("str", "string", "all"):
        return "\n\n".join(f"{m.role}: {m.content}" for m in rows)
    if output_type == "list":
        return [{"role": m.role, "content": m.content} for m in rows]
    if output_type == "dict":
        return [m.row() for m in rows]
    if output_type in ("final", "last"):
        return rows[-1].content if rows else ""
    return json.dumps([m.row() for m in rows])
