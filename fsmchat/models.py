"""Layer 2: the data every other layer speaks (messages, transcripts, bids, trace events, results)."""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from collections.abc import Sequence
from itertools import islice
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterator, Union

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # the event models load when a run's events are read (typed_events), not with the models
    from .events import RunEvent

SEED_ROLE = "User"
"""The role of a run's first message, the task (no participant may take this name)."""


class Message(BaseModel):
    """One row of a shared conversation: who spoke, what they said, and facts about it.

    Messages are immutable: a transcript only ever appends them.

    Attributes:
        role: Who spoke: an agent's name, ``"User"`` for the task (message 1), ``"system"``.
        content: The text.
        metadata: Facts about the message, such as a GroupChat bid's ``score`` or a round's ``loop``.

    Examples:
        >>> from fsmchat import Message
        >>> m = Message(role="Critic", content="Too fast.", metadata={"score": 0.8})
        >>> m.row()
        {'role': 'Critic', 'content': 'Too fast.', 'metadata': {'score': 0.8}}
    """

    model_config = ConfigDict(frozen=True)
    role: str
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def tool_calls(self) -> list["ToolCallEntry"]:
        """The tool calls the speaker made before this reply (typed), in call order; ``[]`` for none.

        Examples:
            >>> from fsmchat import Message
            >>> m = Message(role="a", content="Sunny.", metadata={"tool_calls": [
            ...     {"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}, "status": "done",
            ...      "result": "sunny", "duration_s": 0.01}]})
            >>> m.tool_calls[0].name, m.tool_calls[0].result, m.tool_calls[0].ok
            ('weather', 'sunny', True)
        """
        return [ToolCallEntry.model_validate(e) for e in self.metadata.get("tool_calls") or ()]

    def row(self) -> dict[str, object]:
        """The message as plain data (what checkpoints, reports and ``output_type="dict"`` hold)."""
        return {"role": self.role, "content": self.content, "metadata": dict(self.metadata)}

    def __repr__(self) -> str:
        meta = f", metadata={shorten(repr(self.metadata), 60)}" if self.metadata else ""
        return f"Message(role={shorten(self.role, 40)!r}, content={shorten(self.content, 80)!r}{meta})"


class ToolCallEntry(BaseModel):
    """One tool call, attached to the reply it led to (``Message.tool_calls``).

    Attributes:
        id: The call's id (the assistant ``tool_calls`` id its ``tool`` result answers).
        name: The tool's name.
        arguments: The arguments it ran with (the model's raw text when they were not valid).
        status: ``done``, ``error`` (the error went back to the model as the result) or ``rejected``
            (a person refused it; the reason went back as the result).
        result: What the tool returned, as the model read it.
        error: What went wrong.
        duration_s: How long the call took, in seconds.

    Examples:
        >>> from fsmchat import ToolCallEntry
        >>> call = ToolCallEntry(id="c1", name="add", arguments={"a": 1, "b": 2}, result="3", duration_s=0.001)
        >>> call.ok, call.result
        (True, '3')
    """

    model_config = ConfigDict(frozen=True, extra="ignore")
    id: str
    name: str
    arguments: Any = None
    status: str = "done"
    result: str | None = None
    error: str | None = None
    duration_s: float | None = None

    @property
    def ok(self) -> bool:
        """The tool ran and returned a result."""
        return self.status == "done"


def shorten(text: str, n: int) -> str:
    """``text`` cut to at most ``n`` characters, the cut marked with an ellipsis and how many it dropped."""
    if len(text) <= n:
        return text
    keep = n
    while True:
        note = f"… (+{len(text) - keep} chars)"
        if keep + len(note) <= n:
            return text[:keep] + note
        keep = n - len(note)
        if keep < 1:
            return text[:n - 1] + "…"


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
    """An append-only conversation whose listeners hear every post as it happens.

    Every post is made safe to store: lone surrogates become U+FFFD (event ``text_repaired``) and
    content over ``max_chars`` is cut to that length (event ``message_truncated``); the events go
    to ``events`` (the run context's list). Rows are never changed or removed, so a reader can keep
    a ``view()`` instead of a copy.

    Args:
        rows: Messages to start with.
        events: The list that notes repaired or cut texts (a new one when None).
        max_chars: The most characters one message keeps.

    Examples:
        >>> from fsmchat import Transcript
        >>> t = Transcript(max_chars=5)
        >>> t.listen(lambda m: print("heard", m.role))
        >>> t.post("Critic", "Too fast, by far.").content
        heard Critic
        'Too f'
        >>> len(t), t.events
        (1, [{'event': 'message_truncated', 'role': 'Critic', 'chars': 17, 'kept': 5}])
    """

    __slots__ = ("_rows", "_listeners", "events", "max_chars", "memo")

    def __init__(self, rows: list[Message] | None = None, events: list[dict[str, Any]] | None = None,
                 max_chars: int = MAX_MESSAGE_CHARS):
        self._rows: list[Message] = list(rows or [])
        self._listeners: list[Any] = []
        self.events: list[dict[str, Any]] = events if events is not None else []
        self.max_chars = max_chars
        self.memo: dict[object, object] = {}  # what readers derive from the rows, kept for later reads (views share it)

    def post(self, role: str, content: str, **metadata: object) -> Message:
        """Append a message (repaired and capped as ``admit`` says) and tell every listener.

        Args:
            role: Who speaks.
            content: What they say.
            **metadata: Facts kept with the message (``Message.metadata``).

        Returns:
            The message as stored.
        """
        if isinstance(content, str) and (not content.isascii() or len(content) > self.max_chars):
            content = self.admit(role, content)
        msg = Message(role=role, content=content, metadata=metadata)
        self._rows.append(msg)
        for listener in self._listeners:
            listener(msg)
        return msg

    def admit(self, role: str, content: str) -> str:
        """Return ``content`` as it may enter the transcript (repaired, capped), noting what changed.

        Args:
            role: Who the text is from (named in the event that notes a change).
            content: The text.

        Returns:
            The text with lone surrogates replaced and cut to ``max_chars``.
        """
        content, n = safe_text(content)
        if n:
            self.events.append({"event": "text_repaired", "role": role, "replaced": n})
        if len(content) > self.max_chars:
            self.events.append({"event": "message_truncated", "role": role, "chars": len(content),
                                "kept": self.max_chars})
            content = content[:self.max_chars]
        return content

    def since(self, i: int) -> list[Message]:
        """Return the rows from index ``i`` on (what a checkpoint has not stored yet).

        Args:
            i: The first index wanted.
        """
        return self._rows[i:] if i < len(self._rows) else []

    def restore(self, rows: list[Message]) -> None:
        """Refill from a checkpoint, without telling listeners (those rows were heard before).

        Args:
            rows: The stored messages, in order.
        """
        self._rows.extend(rows)

    def listen(self, listener: object) -> None:
        """Call ``listener(message)`` on every later post.

        Args:
            listener: A callable taking the posted ``Message``.
        """
        self._listeners.append(listener)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Message]:
        return iter(self._rows)

    def __getitem__(self, i: int) -> Message:
        return self._rows[i]

    @property
    def messages(self) -> list[Message]:
        """A copy of the rows (O(n)); ``view()`` is the O(1) read-only alternative."""
        return list(self._rows)

    def view(self) -> "TranscriptView":
        """Return the rows posted so far, read-only, without copying them.

        Later posts are not in the view; the rows are append-only, so a view is as stable as a copy.
        """
        return TranscriptView(self._rows, len(self._rows), self.memo)

    def __repr__(self) -> str:
        return f"Transcript({len(self._rows)} messages)"


class TranscriptView(Sequence[Message]):
    """The first ``n`` rows of a transcript, read-only; made in O(1) per turn instead of a copy."""

    __slots__ = ("_rows", "_n", "memo")

    def __init__(self, rows: list[Message], n: int, memo: dict[object, object] | None = None):
        self._rows, self._n = rows, n
        self.memo = memo if memo is not None else {}  # its transcript's (rows are append-only: what holds for n holds)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self._rows[:self._n][i]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("transcript view index out of range")
        return self._rows[i]

    def __iter__(self) -> Iterator[Message]:
        return islice(self._rows, self._n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"TranscriptView({self._n} messages)"


class Bid(BaseModel):
    """A participant's wish to speak in a GroupChat: how much, and the reply it would give.

    A callable participant returns one on a bid turn (``turn.kind == "bid"``); an ``Agent`` makes
    one with the forced ``respond`` tool call.

    Args:
        score: How much the participant wants the floor, from 0 to 1.
        message: The reply it would post if it wins.
        **kw: Other fields, by keyword (pydantic's own).

    Raises:
        pydantic.ValidationError: ``score`` is outside 0..1.

    Examples:
        >>> from fsmchat import Bid
        >>> Bid(0.9, "Let me answer that.")
        Bid(score=0.9, message='Let me answer that.')
    """

    score: float = Field(ge=0.0, le=1.0)
    message: str = ""

    def __init__(self, score: float = 0.0, message: str = "", **kw: object):
        super().__init__(score=score, message=message, **kw)


@dataclass(slots=True)
class TraceEvent:
    """One step of a run: the state left, the transition taken, where it led, when, and its payload.

    A plain slotted dataclass rather than a pydantic model: one is made per engine step, and the
    engine's budget is a few microseconds per step. The last event of a run has ``dest=None``.

    Attributes:
        step: The step's index in the run (0 first).
        state: The state left (qualified in a branch run: ``par|1.review.turn``).
        trigger: The label of the transition taken (None on the final state's event).
        dest: The state entered (None on the final state's event).
        t: Seconds since the run started.
        payload: What the state's action returned.

    Examples:
        >>> from fsmchat import StateGraph, run
        >>> g = StateGraph("hello")
        >>> _ = g.state("greet", lambda ctx: "hi").final("done").edge("greet", "done")
        >>> [(e.state, e.trigger, e.dest, e.payload) for e in run(g, None).trace]
        [('greet', 'next', 'done', 'hi'), ('done', None, None, None)]
    """

    step: int
    state: str
    trigger: str | None
    dest: str | None
    t: float
    payload: Any = None

    def to_dict(self) -> dict[str, object]:
        """The event as plain data."""
        return {"step": self.step, "state": self.state, "trigger": self.trigger,
                "dest": self.dest, "t": self.t, "payload": self.payload}


@dataclass(frozen=True, slots=True)
class TokenDelta:
    """A piece of a reply as the model writes it.

    Given by ``pattern.stream(task, tokens=True)`` and to ``execute(task, on_token=fn)``. The
    finished reply is still posted whole as a ``Message``; the deltas come before it.

    Attributes:
        agent: Who is writing.
        step: The state the reply is written in (``"turn_2"``, ``"par|1.review"``), or None outside a run.
        text: The new text (append it to what came before).
        attempt: The model call's attempt (2 and up after a ``StreamRetry``).

    Examples:
        >>> from fsmchat import TokenDelta
        >>> TokenDelta("Critic", "turn_1", "Not ").text
        'Not '
    """

    agent: str
    step: str | None
    text: str
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class BidDelta:
    """A piece of a GroupChat bid's message as the model writes it, before the round closes.

    Given by ``pattern.stream(task, tokens=True)`` and to ``execute(task, on_token=fn)``, beside
    the replies' ``TokenDelta``s: the ``message`` argument of the bidder's ``respond`` call (or of
    its JSON reply, ``tool_mode="json"``), decoded as the call's arguments arrive. The round is
    decided by the whole bids as without streaming; a bid whose parsed message differs from what
    streamed (a malformed one) is decided by what was parsed. Only the winner's message is posted.

    Attributes:
        agent: Who is bidding.
        step: The state the bid is asked in (``"bid"``; ``"review.bid"`` in a flow), or None outside a run.
        text: The new text of the bid's message (append it to what came before).
        attempt: The model call's attempt (2 and up after a ``StreamRetry``).

    Examples:
        >>> from fsmchat import BidDelta
        >>> pieces = [BidDelta("Critic", "bid", "Not on "), BidDelta("Critic", "bid", "a Friday.")]
        >>> "".join(p.text for p in pieces)
        'Not on a Friday.'
    """

    agent: str
    step: str | None
    text: str
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class StreamRetry:
    """A reply's stream broke after some of it was shown and is asked again from the start.

    The text shown so far (``shown`` characters) is void; the next ``TokenDelta``s of ``agent``
    are the new attempt's. The run's events hold the same fact (``stream_retry``).

    Attributes:
        agent: Who was writing.
        step: The state it was written in.
        attempt: The attempt that broke (the next one is ``attempt + 1``).
        shown: How many characters of it had been shown.
        reason: What broke it (the error's type and message).

    Examples:
        >>> from fsmchat import StreamRetry
        >>> retry = StreamRetry("alice", "alice", 1, 10, "TimeoutError: (no message)")
        >>> f"{retry.agent}'s attempt {retry.attempt} broke after {retry.shown} characters"
        "alice's attempt 1 broke after 10 characters"
    """

    agent: str
    step: str | None
    attempt: int
    shown: int
    reason: str


class StopReason(str, Enum):
    """Why a run stopped: the one list of stop reasons.

    A member is its plain string everywhere a user sees it (``result.stop_reason == "lull"``, ``f"{reason}"``, ``repr``, JSON, a checkpoint
    store); graphs name their stop edges and final states with it. A graph of your own may stop
    for a reason of its own (the label of its last edge): that reason stays a plain ``str``.

    Examples:
        >>> from fsmchat import StopReason
        >>> StopReason.LULL == "lull", str(StopReason.LULL), f"{StopReason.BUDGET}"
        (True, 'lull', 'budget')
        >>> StopReason("deadline") is StopReason.DEADLINE
        True
    """

    MAX_LOOPS = "max_loops"  # the pattern's loop or message cap
    LULL = "lull"  # GroupChat: no bid cleared the threshold
    UNTIL = "until"  # a stop condition held
    ROUNDS = "rounds"  # the panel held all its rounds
    CLOSED = "closed"  # a network channel was closed (or reached max_texts)
    TTL = "ttl"  # a network channel expired
    BUDGET = "budget"  # a Limits budget (tokens, cost, model calls) was reached
    DEADLINE = "deadline"  # Limits.deadline_s passed
    ERROR = "error"  # an action failed; the exception is on result.error
    CANCELLED = "cancelled"  # the run's task was cancelled
    STOPPED = "stopped"  # a person rejected going on, or a flow step stopped the workflow
    INTERRUPTED = "interrupted"  # the run waits for a person (resume it with input=)
    MAX_STEPS = "max_steps"  # the engine's step cap (a safety net against a runaway graph)
    MAX_TURNS = "max_turns"  # SelectorGroupChat, Handoffs: the turn cap
    LIVELOCK = "livelock"  # the same cycle of speakers said the same texts again (``repeated_cycle``)
    ANSWERED = "answered"  # Handoffs: the active agent replied without handing off
    DONE = "done"  # a flow (or a branch of one) ran all its steps
    RUNNING = "running"  # not stopped yet: the result of a run still in progress

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)

    def __repr__(self) -> str:
        return repr(self.value)

    @classmethod
    def of(cls, reason: str) -> "StopReason | str":
        """The member named by ``reason`` (a plain string from a store or an edge label), or
        ``reason`` unchanged when it is a graph's own."""
        found = cls._value2member_map_.get(reason)
        return found if isinstance(found, cls) else reason

    @classmethod
    def run_status(cls, reason: str | None, live: bool = False) -> str:
        """What a run that stopped for ``reason`` is, as ``fsmchat runs``, ``list_runs`` and the
        viewer list it: ``failed`` (error), ``cancelled``, ``waiting`` (for a person) or
        ``finished``; with no reason (not ended), ``running`` if a live process holds it, else
        ``unfinished`` (its process died mid-run: resumable). Only a finished run is not continued
        by a resume."""
        if reason is None:
            return "running" if live else "unfinished"
        return _RUN_STATUS.get(reason, "finished")


_RUN_STATUS: dict[str, str] = {StopReason.ERROR: "failed", StopReason.CANCELLED: "cancelled",
                               StopReason.INTERRUPTED: "waiting"}


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

    ``repr`` is one short line, ``print`` a summary (path, first messages), and a notebook shows a
    report with the graph and this run overlaid.

    Attributes:
        path: The states the run went through, in order, the final one included.
        trace: One ``TraceEvent`` per step, branch runs' steps included.
        stop_reason: Why the run ended (``max_loops``, ``lull``, ``error``, ``interrupted``, ...).
        context: The run's context object, as the actions left it.
        error: The exception that ended the run (``stop_reason="error"``), else None.
        transcript: The messages of the run (patterns).
        calls: Model calls made.
        usage: Token counts (``prompt_tokens``, ``completion_tokens``, ``total_tokens``).
        output: The transcript formatted per the pattern's ``output_type``.
        events: Notable facts of the run (invalid bids, repaired texts, limits hit, ...).
        run_id: The checkpointed run's id, else None.
        graph: The ``StateGraph`` that ran (for drawing the run over it).
        pending: What a waiting run asks a person (``Pending``), when ``stop_reason="interrupted"``.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> def critic(turn):
        ...     return "Not yet."
        >>> result = RoundRobinSwarm(agents=[critic], max_loops=2).execute("Ship it?")
        >>> result.stop_reason, result.path, [m.role for m in result.transcript]
        ('max_loops', ['seed', 'critic', 'critic', 'stop'], ['User', 'critic', 'critic'])
        >>> result
        RunResult(stop_reason='max_loops', ok=True, steps=4, messages=3, calls=0, output='Not yet.')
    """

    path: list[str]
    trace: list[TraceEvent]
    stop_reason: StopReason | str
    context: Any
    error: BaseException | None = None
    transcript: list[Message] = field(default_factory=list)
    calls: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    output: Any = None
    events: list[dict[str, Any]] = field(default_factory=list)
    run_id: str | None = None
    graph: Any = field(default=None, repr=False, compare=False)  # the StateGraph that ran (for drawing)
    pending: Any = None  # what a waiting run asks (``fsmchat.speakers.human.Pending``), when interrupted

    def __post_init__(self) -> None:
        self.stop_reason = StopReason.of(self.stop_reason)

    def typed_events(self) -> list[RunEvent]:
        """The run's events as their models (``fsmchat.events``): match on them by kind.

        ``events`` stays the stored JSON; this reads it (an undeclared kind is an ``OtherEvent``).

        Returns:
            One model per event, in order.

        Examples:
            >>> from fsmchat import RunResult
            >>> from fsmchat.events import StopWorkflow
            >>> result = RunResult(path=[], trace=[], stop_reason="done", context=None,
            ...                    events=[{"event": "stop_workflow", "step": "draft"}])
            >>> [e.step for e in result.typed_events() if isinstance(e, StopWorkflow)]
            ['draft']
        """
        from .events import parse_events  # 28 models and their union's adapter: ~45 ms, paid by a reader only

        return parse_events(self.events)

    @property
    def waiting(self) -> bool:
        """The run stopped at an interrupt and waits for a person (resume it with ``input=``)."""
        return self.stop_reason == StopReason.INTERRUPTED

    @property
    def paths(self) -> dict[str, list[str]]:
        """The path of every run in the trace: ``""`` is the top-level run (``path``), each branch
        run of a fork state is keyed by its id (``"par|1"``, ``"each|1[0]"``, nested
        ``"par|1.inner|2"``) and lists its qualified states in order (a fork entered again, such as
        a ``parallel`` in a loop, appends each visit's run to the same id)."""
        out: dict[str, list[str]] = {"": list(self.path)}
        for ev in self.trace:
            branch, _ = split_branch(ev.state)
            if branch:
                out.setdefault(branch, []).append(ev.state)
        return out

    @property
    def ok(self) -> bool:
        """The run ended without an error and was not cancelled (a waiting run is ok)."""
        return self.error is None and self.stop_reason != StopReason.CANCELLED

    @property
    def cost_usd(self) -> float | None:
        """What the run's model calls cost (litellm's prices, or ``price_per_1k_tokens``); None when
        the run kept no call statistics."""
        stats = getattr(self.context, "stats", None)
        return getattr(stats, "cost_usd", None)

    # ---- display: short in a repr, a summary in print(), a report in a notebook ----
    def _error_text(self, n: int) -> str:
        return shorten(f"{type(self.error).__name__}: {self.error}", n) if self.error is not None else ""

    def __repr__(self) -> str:
        parts = [f"stop_reason={self.stop_reason!r}", f"ok={self.ok}", f"steps={len(self.path)}",
                 f"messages={len(self.transcript)}", f"calls={self.calls}"]
        if self.usage.get("total_tokens"):
            parts.append(f"tokens={self.usage['total_tokens']}")
        if self.run_id:
            parts.append(f"run_id={shorten(self.run_id, 40)!r}")
        if self.pending is not None:
            parts.append(f"waits_at={shorten(str(getattr(self.pending, 'state', '')), 40)!r}")
        if self.error is not None:
            parts.append(f"error={self._error_text(80)!r}")
        elif self.output is not None:
            parts.append(f"output={shorten(repr(self.output), 80)}")
        return f"RunResult({', '.join(parts)})"

    MAX_SHOWN = 20  # transcript rows print() shows (then "... N more")

    def __str__(self) -> str:
        cost = self.cost_usd
        head = (f"RunResult: stopped by {self.stop_reason!r} ({'ok' if self.ok else 'not ok'}), {len(self.path)} "
                f"steps, {self.calls} model calls, {self.usage.get('total_tokens', 0)} tokens"
                + (f", ${cost:.4f}" if cost else ""))
        lines = [head]
        if self.error is not None:
            lines.append(f"error: {self._error_text(300)}")
        if self.pending is not None:
            lines.append("waits for a person: " + shorten(str(self.pending), 300))
        path = self.path if len(self.path) <= 12 else [*self.path[:8], f"... {len(self.path) - 11} more", *self.path[-3:]]
        lines.append("path: " + " -> ".join(path))
        lines.append(f"transcript ({len(self.transcript)} messages):")
        for m in self.transcript[:self.MAX_SHOWN]:
            lines.append("  " + shorten(f"{m.role}: {m.content}".replace("\n", " "), 120))
        if len(self.transcript) > self.MAX_SHOWN:
            lines.append(f"  ... {len(self.transcript) - self.MAX_SHOWN} more")
        return "\n".join(lines)

    MAX_HTML_ROWS = 200  # transcript rows a notebook shows
    MAX_HTML_CHARS = 4000  # characters of one message a notebook shows

    def _repr_html_(self) -> str:
        """A notebook report: the stop reason, calls, tokens, cost, the transcript as a table and
        the graph with this run overlaid. All transcript text is model output, so it is escaped."""
        esc = html.escape
        cost = self.cost_usd
        facts = [("stop reason", self.stop_reason), ("ok", str(self.ok)), ("steps", str(len(self.path))),
                 ("model calls", str(self.calls)),
                 ("tokens", " / ".join(f"{self.usage.get(k, 0)} {k.split('_')[0]}" for k in
                                      ("prompt_tokens", "completion_tokens", "total_tokens"))),
                 ("cost", f"${cost:.6f}" if cost is not None else "n/a")]
        if self.run_id:
            facts.append(("run id", self.run_id))
        if self.error is not None:
            facts.append(("error", self._error_text(2000)))
        if self.pending is not None:
            facts.append(("waits for a person", shorten(str(self.pending), 2000)))
        cell = 'style="text-align:left;vertical-align:top;white-space:pre-wrap"'
        out = ['<div class="fsmchat-run">', "<table>"]
        out += [f"<tr><th {cell}>{esc(k)}</th><td {cell}>{esc(v)}</td></tr>" for k, v in facts]
        out.append("</table>")
        rows = self.transcript[:self.MAX_HTML_ROWS]
        out.append(f"<details open><summary>transcript ({len(self.transcript)} messages)</summary>")
        out.append(f'<table class="fsmchat-transcript"><thead><tr><th {cell}>#</th><th {cell}>role</th>'
                   f"<th {cell}>content</th></tr></thead><tbody>")
        for i, m in enumerate(rows, 1):
            text = m.content if len(m.content) <= self.MAX_HTML_CHARS else \
                m.content[:self.MAX_HTML_CHARS] + f"… ({len(m.content) - self.MAX_HTML_CHARS} more characters)"
            out.append(f"<tr><td {cell}>{i}</td><td {cell}>{esc(m.role)}</td><td {cell}>{esc(text)}</td></tr>")
        out.append("</tbody></table>")
        if len(self.transcript) > len(rows):
            out.append(f"<p>... {len(self.transcript) - len(rows)} more messages</p>")
        out.append("</details>")
        if self.graph is not None:
            out.append(f"<details open><summary>graph {esc(str(self.graph.name))} with this run</summary>")
            out.append(self.graph.to_html(trace=self))
            out.append("</details>")
        out.append("</div>")
        return "\n".join(out)

    def to_dict(self) -> dict[str, object]:
        """Return the result as JSON-able data (what ``fsmchat run --json`` prints).

        Values JSON cannot hold (a trace payload object, an error) become their text; the context is
        represented by its cost.
        """
        stats = getattr(self.context, "stats", None)
        error = None if self.error is None else {"type": type(self.error).__name__, "message": str(self.error)}
        data: dict[str, object] = json.loads(json.dumps({
            "run_id": self.run_id, "ok": self.ok, "stop_reason": self.stop_reason, "error": error,
            "output": self.output, "calls": self.calls, "usage": dict(self.usage),
            "cost_usd": getattr(stats, "cost_usd", None), "path": list(self.path),
            "transcript": [m.row() for m in self.transcript], "events": list(self.events),
            "trace": [e.to_dict() for e in self.trace],
            "pending": self.pending.model_dump() if hasattr(self.pending, "model_dump") else self.pending},
            default=str))
        return data


StreamItem = Union[TraceEvent, Message, TokenDelta, BidDelta, StreamRetry, RunResult]
"""One item of ``pattern.stream(task)``, matched on by its class.

A step's ``TraceEvent``, a posted ``Message``, with ``tokens=True`` a ``TokenDelta`` / ``BidDelta``
/ ``StreamRetry``, and last the ``RunResult``.

Examples:
    >>> from fsmchat import Message, RoundRobinSwarm, RunResult, TraceEvent
    >>> def poet(turn):
    ...     return "A line."
    >>> kinds = []
    >>> for item in RoundRobinSwarm(agents=[poet], max_loops=1).stream("Write."):
    ...     match item:
    ...         case Message(role=role):
    ...             kinds.append(f"message from {role}")
    ...         case RunResult(stop_reason=reason):
    ...             kinds.append(f"result: {reason.value}")
    >>> kinds
    ['message from User', 'message from poet', 'result: max_loops']
"""


# ---- output types (docs/semantics.md "Output types"), one implementation for every pattern ----
OUTPUT_TYPES = ("str-all-except-first", "str", "string", "all", "list", "dict", "final", "last", "json")


def check_output_type(output_type: str) -> str:
    if output_type not in OUTPUT_TYPES:
        raise ValueError(f"output_type={output_type!r} is not supported; choose from {list(OUTPUT_TYPES)}")
    return output_type


def format_output(rows: list[Message], output_type: str) -> object:
    """Format a transcript as swarms, PraisonAI and AG2 do for ``output_type``.

    Args:
        rows: The messages, the task first.
        output_type: ``final``/``last`` (the last message's text), ``str``/``string``/``all``
            (``"role: text"`` blocks), ``str-all-except-first``, ``list``, ``dict`` or ``json``.

    Returns:
        The output in that form.

    Raises:
        ValueError: ``output_type`` is not one of those.

    Examples:
        >>> from fsmchat import Message, format_output
        >>> rows = [Message(role="User", content="Ship it?"), Message(role="Critic", content="Not yet.")]
        >>> format_output(rows, "final")
        'Not yet.'
        >>> print(format_output(rows, "str"))
        User: Ship it?
        <BLANKLINE>
        Critic: Not yet.
    """
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
