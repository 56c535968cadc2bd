"""Layer 1: the kinds of a run's events (``RunResult.events``) as declared models.

A run records what happened beside its messages and trace as JSON objects whose ``"event"`` key
names their kind (``{"event": "tool_error", "agent": ..., "tool": ..., "call_id": ..., "error": ...}``).
They are stored as that JSON (checkpoints, the state log, ``RunResult.to_dict()``), so runs recorded
before these models load unchanged. ``parse_event`` reads one into its model, one of the union
``RunEvent`` that code can match on (``match ev: case ToolError(tool=t): ...``); a kind this version
does not declare, or an object that does not fit its kind's model, is an ``OtherEvent`` holding the
object as it is (reading never fails). Each model's ``to_dict()`` gives the JSON back.
``event_table()`` writes the table of docs/streaming.md ("Run events") from these models.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue as JsonValue, TypeAdapter, ValidationError


JsonObject = dict[str, JsonValue]
"""A JSON object (one event, one stored row); ``JsonValue`` is pydantic's recursive JSON value."""


class EventModel(BaseModel):
    """The common base of the run's event models: frozen, and keeping keys it does not declare.

    Attributes:
        event: The kind (the JSON's ``"event"`` key); each model's fields follow it.

    Examples:
        >>> from fsmchat.events import parse_event
        >>> parse_event({"event": "stop_workflow", "step": "draft", "by": "a newer version"}).to_dict()
        {'event': 'stop_workflow', 'step': 'draft', 'by': 'a newer version'}
    """

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True, use_attribute_docstrings=True)

    event: str
    """The kind (the JSON's ``"event"`` key)."""

    def to_dict(self) -> JsonObject:
        """The event as the JSON a run stores (the keys it was read with, ``event`` first).

        Returns:
            The JSON object.
        """
        body: JsonObject = self.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude={"event"})
        return {"event": self.event, **body}


class BidTools(EventModel):
    """A GroupChat bidder called tools while bidding (``patterns/group_chat.py``)."""

    event: Literal["bid_tools"] = "bid_tools"
    turn: int
    """The round."""
    agent: str
    """The bidder."""
    tool_calls: list[JsonObject]
    """The calls, as the transcript's ``tool_calls`` entries."""


class Budget(EventModel):
    """The run stopped at a limit of its budget (``patterns/base.py``)."""

    event: Literal["budget"] = "budget"
    limit: str | None
    """Which limit was reached (``max_calls``, ``max_cost_usd``, ...)."""


class Compacted(EventModel):
    """Older messages were summarised into one (``speakers/compaction.py``)."""

    event: Literal["compacted"] = "compacted"
    state: str | None = None
    """The compaction state."""
    by: str | None = None
    """The agent that wrote the summary."""
    covers: list[int] | None = None
    """The first and last message summarised (1-based, inclusive)."""
    upto: int
    """The messages before this index are covered by the summary."""
    summary: str | None = None
    """The summary's text."""


class Deadline(EventModel):
    """A flow step ran past the run's deadline (``flow/compile.py``)."""

    event: Literal["deadline"] = "deadline"
    step: str
    """The step."""
    detail: str
    """The ``DeadlineExceeded`` message."""


class Edited(EventModel):
    """A person edited the run at an approval: a flow's variables, or a GroupChat turn's reply."""

    event: Literal["edited"] = "edited"
    state: str | None = None
    """The flow state asked (a flow's edit)."""
    vars: list[str] | None = None
    """The names of the variables set (a flow's edit)."""
    turn: int | None = None
    """The turn (a GroupChat's edit)."""
    agent: str | None = None
    """The speaker whose reply was edited (a GroupChat's edit)."""


class Handoff(EventModel):
    """An agent handed the conversation to another (``speakers/handoff.py``)."""

    event: Literal["handoff"] = "handoff"
    source: str = Field(alias="from")
    """Who handed off (the JSON key ``from``)."""
    to: str
    """Who takes over."""
    message: str | None = None
    """What the target should know."""
    call_id: str
    """The handoff tool call's id."""
    ignored_calls: list[str] | None = None
    """Other tool calls of the same reply, not run."""
    turn: int | None = None
    """The turn the handoff was made in."""


class InvalidBid(EventModel):
    """A GroupChat bid that could not be read (``patterns/group_chat.py``)."""

    event: Literal["invalid_bid"] = "invalid_bid"
    turn: int
    """The round."""
    agent: str
    """The bidder."""
    reason: str
    """What was wrong with it."""


class MessageTruncated(EventModel):
    """A message was cut to the transcript's ``max_chars`` (``models.Transcript.admit``)."""

    event: Literal["message_truncated"] = "message_truncated"
    role: str
    """Who wrote it."""
    chars: int
    """Its length before the cut."""
    kept: int
    """The characters kept."""


class OfflineNoToolCall(EventModel):
    """The offline model answered an agent with tools without calling one (``speakers/tool_loop.py``)."""

    event: Literal["offline_no_tool_call"] = "offline_no_tool_call"
    agent: str
    """The agent."""
    tools: list[str]
    """Its tools' names."""
    request: str
    """The request's first words."""


class PartialReply(EventModel):
    """A reply stopped mid-stream; what arrived is kept (``speakers/llm.py``)."""

    event: Literal["partial_reply"] = "partial_reply"
    agent: str
    """Who was writing."""
    step: str | None
    """The state it was written in."""
    attempt: int
    """The model call's attempt."""
    chars: int
    """The characters that arrived."""
    reason: str
    """What stopped it."""
    text: str | None = None
    """The text that arrived (in the result of the process that ran the call)."""


class PromptTokens(EventModel):
    """The size of a request under the agent's context policy (``speakers/context.py``)."""

    event: Literal["prompt_tokens"] = "prompt_tokens"
    agent: str
    """The agent."""
    tokens: int
    """The request's input tokens."""
    limit: int | None = None
    """The model's input limit."""
    policy: str | None = None
    """The context policy's name."""
    refused: bool | None = None
    """True when the request was over the limit and not sent."""


class RateLimited(EventModel):
    """A model call waited for a rate limit (``speakers/ratelimit.py``)."""

    event: Literal["rate_limited"] = "rate_limited"
    agent: str | None
    """The caller."""
    limit: str | None
    """The limit's target (model or provider)."""
    waited_s: float
    """Seconds waited."""


class Rejected(EventModel):
    """A person rejected at an approval: a flow state or step, or a GroupChat turn."""

    event: Literal["rejected"] = "rejected"
    state: str | None = None
    """The state asked (a pattern's or a flow's interrupt)."""
    step: str | None = None
    """The flow step asked (a ``human`` step)."""
    turn: int | None = None
    """The GroupChat turn."""
    agent: str | None = None
    """The GroupChat speaker."""
    reason: str | None = None
    """The person's reason."""


class Retry(EventModel):
    """A flow step failed and is run again (``flow/compile.py``)."""

    event: Literal["retry"] = "retry"
    step: str
    """The step."""
    attempt: int
    """The attempt that failed."""
    error: str
    """The error (its repr)."""


class RouteNoMatch(EventModel):
    """A ``route`` block matched none of its keys (``flow/blocks/route.py``)."""

    event: Literal["route_no_match"] = "route_no_match"
    route: str
    """The route's name."""
    keys: list[str]
    """Its keys."""
    default: bool
    """Whether it has default steps."""
    value: str | None = None
    """The value routed on (cut to 200 characters), with ``on``."""
    on: str | None = None
    """The variable routed on."""
    previous_output: str | None = None
    """The previous output routed on (cut to 200 characters), without ``on``."""
    note: str
    """What ran instead."""


class Selected(EventModel):
    """A selector picked the next speaker (``patterns/selector.py``)."""

    event: Literal["selected"] = "selected"
    turn: int
    """The turn."""
    speaker: str
    """The speaker picked."""
    by: str
    """Who picked (``selector``, ``fallback``, ...)."""
    candidates: list[str]
    """The allowed speakers."""


class SelectorFallback(EventModel):
    """The selector's attempts all failed; the first candidate speaks (``patterns/selector.py``)."""

    event: Literal["selector_fallback"] = "selector_fallback"
    turn: int
    """The turn."""
    speaker: str
    """The speaker taken."""
    attempts: int
    """The attempts made."""


class SelectorRetry(EventModel):
    """The selector's answer named no allowed speaker and is asked again (``patterns/selector.py``)."""

    event: Literal["selector_retry"] = "selector_retry"
    turn: int
    """The turn."""
    attempt: int
    """The attempt that failed."""
    reason: str
    """What was wrong with it."""


class StepFailed(EventModel):
    """A flow step failed and the flow went on (``on_error="continue"``, ``flow/compile.py``)."""

    event: Literal["step_failed"] = "step_failed"
    step: str
    """The step."""
    error: str
    """The error (its repr)."""
    policy: str
    """The step's error policy."""


class StopWorkflow(EventModel):
    """A flow step stopped the flow (``flow/compile.py``)."""

    event: Literal["stop_workflow"] = "stop_workflow"
    step: str
    """The step."""


class StreamRetried(EventModel):
    """A shown stream broke and the call was asked again (``speakers/llm.py``; ``models.StreamRetry``)."""

    event: Literal["stream_retry"] = "stream_retry"
    agent: str
    """Who was writing."""
    step: str | None
    """The state it was written in."""
    attempt: int
    """The attempt that broke."""
    shown: int
    """The characters of it that had been shown."""
    reason: str
    """What broke it."""


class TemplateErrorEvent(EventModel):
    """A template could not be filled (``flow/context.py``)."""

    event: Literal["template_error"] = "template_error"
    where: str
    """What the template belongs to."""
    template: str
    """The placeholder."""
    reason: str
    """Why it could not be filled."""


class TextRepaired(EventModel):
    """Lone surrogates in a text were replaced (``models.Transcript.admit``, ``patterns/runner.py``)."""

    event: Literal["text_repaired"] = "text_repaired"
    role: str
    """Who wrote it (``task`` for the task)."""
    replaced: int
    """The characters replaced."""


class ToolDecision(EventModel):
    """A person decided on a tool call awaiting approval (``speakers/tool_loop.py``)."""

    event: Literal["tool_decision"] = "tool_decision"
    agent: str
    """The agent whose call it is."""
    tool: str
    """The tool."""
    call_id: str
    """The call's id."""
    decision: str
    """The answer's kind (``approve``, ``edit``, ``reject``)."""


class ToolErrorEvent(EventModel):
    """A tool call failed (``speakers/tool_loop.py``)."""

    event: Literal["tool_error"] = "tool_error"
    agent: str
    """The agent."""
    tool: str
    """The tool."""
    call_id: str
    """The call's id."""
    error: str | None
    """The error."""


class ToolModeFallback(EventModel):
    """A model refused forced tool calls; the agent bids in JSON instead (``speakers/agent.py``)."""

    event: Literal["tool_mode_fallback"] = "tool_mode_fallback"
    agent: str
    """The agent."""
    model: str | None
    """The model."""
    reason: str
    """The provider's message (cut to 300 characters)."""
    turn: int | None = None
    """The round."""


class ToolResultTruncated(EventModel):
    """A tool's result was cut to the tool's ``max_result_chars`` (``speakers/tool_loop.py``)."""

    event: Literal["tool_result_truncated"] = "tool_result_truncated"
    agent: str
    """The agent."""
    tool: str
    """The tool."""
    call_id: str
    """The call's id."""
    chars: int
    """The result's length before the cut."""
    kept: int | None
    """The characters kept."""


class TransportFallback(EventModel):
    """A call left the fast path for litellm (``speakers/wire.py``)."""

    event: Literal["transport_fallback"] = "transport_fallback"
    agent: str | None
    """The caller."""
    model: str
    """The model."""
    reason: str
    """Why."""


class OtherEvent(EventModel):
    """An event of a kind this version does not declare, or one that does not fit its kind's model.

    Its keys are kept as they are (``model_extra``), so it is stored back unchanged.

    Examples:
        >>> from fsmchat.events import OtherEvent, parse_event
        >>> ev = parse_event({"event": "note", "said": "hi"})
        >>> isinstance(ev, OtherEvent), ev.to_dict()
        (True, {'event': 'note', 'said': 'hi'})
    """


DeclaredEvent = Union[BidTools, Budget, Compacted, Deadline, Edited, Handoff, InvalidBid, MessageTruncated,
                      OfflineNoToolCall, PartialReply, PromptTokens, RateLimited, Rejected, Retry, RouteNoMatch,
                      Selected, SelectorFallback, SelectorRetry, StepFailed, StopWorkflow, StreamRetried,
                      TemplateErrorEvent, TextRepaired, ToolDecision, ToolErrorEvent, ToolModeFallback,
                      ToolResultTruncated, TransportFallback]
"""A declared kind's event (the union, discriminated by ``event``)."""

RunEvent = Union[DeclaredEvent, OtherEvent]
"""One of a run's events: a declared kind's model, or ``OtherEvent`` (match on the classes).

Examples:
    >>> from fsmchat import parse_events
    >>> from fsmchat.events import OtherEvent
    >>> [type(e).__name__ for e in parse_events([{"event": "not_a_kind_yet", "n": 1}])]
    ['OtherEvent']
"""

DECLARED: tuple[type[EventModel], ...] = get_args(DeclaredEvent)
"""Every declared event model, one per kind."""

_DECLARED_ADAPTER: TypeAdapter[DeclaredEvent] = TypeAdapter(Annotated[DeclaredEvent, Field(discriminator="event")])
_KINDS = {m.model_fields["event"].default: m for m in DECLARED}


def parse_event(data: Mapping[str, object]) -> RunEvent:
    """One stored event (a JSON object with an ``"event"`` key) as its model.

    Args:
        data: The event as stored.

    Returns:
        The declared kind's model, or an ``OtherEvent`` for an undeclared kind or a misfit.

    Examples:
        >>> from fsmchat.events import ToolErrorEvent, parse_event
        >>> match parse_event({"event": "tool_error", "agent": "a", "tool": "add", "call_id": "c1", "error": "boom"}):
        ...     case ToolErrorEvent(tool=tool, error=error):
        ...         print(tool, error)
        add boom
    """
    if data.get("event") in _KINDS:
        try:
            return _DECLARED_ADAPTER.validate_python(dict(data))
        except ValidationError:
            pass
    return OtherEvent.model_validate({"event": str(data.get("event")), **{k: v for k, v in data.items() if k != "event"}})


def parse_events(events: Iterable[Mapping[str, object]]) -> list[RunEvent]:
    """A run's events (``RunResult.events``) as their models, in order.

    Args:
        events: The events as stored.

    Returns:
        One model per event.

    Examples:
        >>> from fsmchat.events import parse_events
        >>> [type(e).__name__ for e in parse_events([{"event": "stop_workflow", "step": "s"}, {"event": "x"}])]
        ['StopWorkflow', 'OtherEvent']
    """
    return [parse_event(e) for e in events]


def _type_name(annotation: object) -> str:
    """A field's type as the table shows it (``int``, ``str or None``, ``list[dict[str, JsonValue]]``)."""
    name = annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")
    return name.replace(" | ", " or ")  # a pipe would split the table's cell


def event_table() -> str:
    """The Markdown table of every declared event kind, written from the models (docs/streaming.md).

    A field marked ``?`` may be absent (its kind is recorded in more than one shape, or by older runs).

    Returns:
        The table, one row per kind: the ``event`` key, the model, its fields and when it is recorded.

    Examples:
        >>> from fsmchat.events import event_table
        >>> event_table().splitlines()[0]
        '| `event` | model | fields | recorded when |'
    """
    rows = ["| `event` | model | fields | recorded when |", "| --- | --- | --- | --- |"]
    for model in sorted(DECLARED, key=lambda m: str(m.model_fields["event"].default)):
        fields = ", ".join(f"`{f.alias or name}{'' if f.is_required() else '?'}: {_type_name(f.annotation)}`"
                           for name, f in model.model_fields.items() if name != "event")
        doc = (model.__doc__ or "").strip().splitlines()[0].replace("``", "`").replace("|", "\\|")
        rows.append(f"| `{model.model_fields['event'].default}` | `{model.__name__}` | {fields} | {doc} |")
    return "\n".join(rows) + "\n"


TABLE_START, TABLE_END = "<!-- events table: start -->\n", "<!-- events table: end -->"


def with_table(page: str) -> str:
    """A page with the text between its events table markers replaced by ``event_table()``.

    Args:
        page: The page's Markdown, holding the markers ``TABLE_START`` and ``TABLE_END``.

    Returns:
        The page with today's table.

    Raises:
        ValueError: The page has no markers.

    Examples:
        >>> from fsmchat.events import TABLE_END, TABLE_START, event_table, with_table
        >>> with_table(f"# Events\\n{TABLE_START}stale{TABLE_END}\\n") == f"# Events\\n{TABLE_START}{event_table()}{TABLE_END}\\n"
        True
    """
    start, end = page.find(TABLE_START), page.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no events table markers ({TABLE_START.strip()} ... {TABLE_END})")
    return page[:start + len(TABLE_START)] + event_table() + page[end:]


if __name__ == "__main__":  # python -m fsmchat.events docs/streaming.md: rewrite the page's table
    import sys
    from pathlib import Path

    for name in sys.argv[1:]:
        Path(name).write_text(with_table(Path(name).read_text()))
