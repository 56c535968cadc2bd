"""Layer 10: handoffs, an agent giving the floor to another as a ``transfer_to_<name>`` tool call.

``Agent(handoffs=[billing, Human("customer"), Handoff("tech", description=..., input_filter=fn)])``
offers one ``transfer_to_<name>`` tool per target in the speaking block (OpenAI's Swarm and
Agents SDK spelling; ``langgraph-swarm``'s ``create_handoff_tool`` makes the same tool). A call of
one ends the speaker's turn: nothing else runs and the model is not asked again; the speaking
block records the handoff (``ToolLoop.handoffs``) and the pattern makes the target active
(``fsmchat.patterns.handoffs``). The tool takes an optional ``message``: what the speaker tells the
receiver (posted as its reply when it wrote no text).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from ..models import Message

TRANSFER_PREFIX = "transfer_to_"
MAX_TOOL_NAME = 64  # OpenAI's limit on a function's name


def tool_name_for(target: str) -> str:
    """``transfer_to_<target>``, with the characters a function name may not hold as ``_``.

    Examples:
        >>> from fsmchat.speakers.handoff import tool_name_for
        >>> tool_name_for("billing"), tool_name_for("Tech Support")
        ('transfer_to_billing', 'transfer_to_Tech_Support')
    """
    return (TRANSFER_PREFIX + re.sub(r"[^A-Za-z0-9_-]", "_", target))[:MAX_TOOL_NAME]


@dataclass(frozen=True)
class Handoff:
    """One handoff an agent may make: to ``target`` (an agent's or a person's name).

    Args:
        target: Who receives the floor: a name, or a speaker (its ``name`` is taken).
        description: What the tool tells the model (default: "Hand the conversation to <target>.").
        input_filter: ``fn(messages) -> messages``: what the receiver sees of the conversation while
            it is active (default: everything); a plain function, so it can travel in a config.

    Attributes:
        target: The receiver's name.
        description: What the tool tells the model.
        input_filter: What the receiver sees (None: everything).

    Examples:
        >>> from fsmchat import Handoff
        >>> h = Handoff("billing", description="Charges, invoices and refunds.")
        >>> h.tool_name, h.spec()["function"]["description"]
        ('transfer_to_billing', 'Charges, invoices and refunds.')
    """

    target: str
    description: str = ""
    input_filter: Callable[[list[Message]], Sequence[Message]] | None = None

    def __post_init__(self) -> None:
        target = getattr(self.target, "name", self.target)
        if not isinstance(target, str) or not target.strip():
            raise ValueError(f"a handoff's target is an agent, a Human or a name (str), got {self.target!r}")
        object.__setattr__(self, "target", target)
        if not isinstance(self.description, str):
            raise ValueError(f"Handoff({target!r}): description must be a str, got {type(self.description).__name__}")
        if self.input_filter is not None and not callable(self.input_filter):
            raise ValueError(f"Handoff({target!r}): input_filter must be a callable (messages) -> messages, got "
                             f"{type(self.input_filter).__name__}")

    @property
    def tool_name(self) -> str:
        """The tool the model calls: ``transfer_to_<target>``."""
        return tool_name_for(self.target)

    def spec(self) -> dict[str, object]:
        """The tool as the wire offers it (an optional ``message`` for the receiver)."""
        return {"type": "function", "function": {
            "name": self.tool_name,
            "description": self.description or f"Hand the conversation to {self.target}.",
            "parameters": {"type": "object", "properties": {"message": {
                "type": "string", "description": f"What {self.target} should know (optional)."}},
                "required": []}}}

    def view(self, messages: list[Message]) -> list[Message]:
        """What the receiver sees of ``messages`` (``input_filter``'s list, checked)."""
        if self.input_filter is None:
            return messages
        out = list(self.input_filter(list(messages)))
        if not all(isinstance(m, Message) for m in out):
            raise TypeError(f"Handoff({self.target!r}): input_filter must return Message objects, got "
                            f"{sorted({type(m).__name__ for m in out})}")
        return out


def as_handoffs(value: Any, owner: str) -> list[Handoff]:
    """``Agent(handoffs=...)`` as a list of ``Handoff``: each item a ``Handoff``, a speaker or a name;
    an agent handing to itself, or to one target twice, is refused."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        value = [value]
    out = [v if isinstance(v, Handoff) else Handoff(v) for v in value]
    names = [h.target for h in out]
    if owner in names:
        raise ValueError(f"handoffs: agent {owner!r} hands off to itself; list the other speakers it may hand to")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"handoffs: {twice[0]!r} is listed twice")
    tools = [h.tool_name for h in out]
    clash = sorted({t for t in tools if tools.count(t) > 1})
    if clash:
        raise ValueError(f"handoffs: two targets make the same tool name {clash[0]!r}; rename one of them")
    return out


def handoffs_of(speaker: object) -> list[Handoff]:
    """The handoffs ``speaker`` may make (none for a speaker without ``handoffs``)."""
    return list(getattr(speaker, "handoffs", None) or ())


@dataclass(frozen=True)
class HandoffCall:
    """A handoff the model made: to whom, with what message, as which call."""

    source: str
    target: str
    message: str
    call_id: str
    ignored: tuple[str, ...] = ()  # other tool calls of the same reply, not run

    def event(self) -> dict[str, object]:
        """The run's ``handoff`` event."""
        out: dict[str, object] = {"event": "handoff", "from": self.source, "to": self.target, "message": self.message,
                               "call_id": self.call_id}
        if self.ignored:
            out["ignored_calls"] = list(self.ignored)
        return out


class Named(Protocol):
    """A speaker, as a handoff reads it: its name."""

    @property
    def name(self) -> str: ...


def find_handoff(speaker: Named, calls: Sequence[tuple[str, str, object]]) -> HandoffCall | None:
    """The first handoff among a reply's tool calls ``(id, name, arguments)``, if any."""
    by_tool = {h.tool_name: h for h in handoffs_of(speaker)}
    for cid, name, raw in calls:
        h = by_tool.get(name)
        if h is None:
            continue
        args = raw
        if isinstance(raw, str):
            try:
                args = json.loads(raw or "{}")
            except ValueError:
                args = {}
        message = args.get("message") if isinstance(args, dict) else None
        others = tuple(n for c, n, _ in calls if c != cid)
        return HandoffCall(speaker.name, h.target, message if isinstance(message, str) else "", cid, others)
    return None
