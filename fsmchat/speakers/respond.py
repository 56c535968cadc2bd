"""The forced ``respond(score, message)`` tool of the bid-based group chat, and bid parsing."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Mapping, TypedDict

from ..store.protocol import register_codec

class FunctionSpec(TypedDict):
    """A function a request offers: its name, what it does, its parameters' JSON schema."""

    name: str
    description: str
    parameters: dict[str, object]


class ToolSpec(TypedDict):
    """A tool a request offers, as the wire spells it (``{"type": "function", "function": {...}}``)."""

    type: str
    function: FunctionSpec


class FunctionName(TypedDict):
    name: str


class ToolChoice(TypedDict):
    """A request's ``tool_choice`` that forces one function."""

    type: str
    function: FunctionName


RESPOND_TOOL: ToolSpec = {
    "type": "function",
    "function": {
        "name": "respond",
        "description": (
            "Decide whether to reply in the groupchat. Set score 0..1 for how much you want to speak. "
            "If you don't want to speak, set message to empty string."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "score": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "description": "How much you want to respond (0 = silent, 1 = strongly want to).",
                },
                "message": {
                    "type": "string",
                    "description": "Your reply to the group, or empty string if you don't want to speak.",
                },
            },
            "required": ["score", "message"],
        },
    },
}
"""The forced ``respond(score, message)`` tool an ``Agent`` bids with in a ``GroupChat``.

The reference's tool, word for word: a score from 0 to 1 for how much the agent wants to speak,
and the message it would post (empty to stay silent). ``Agent.equipped()`` adds it to an agent's
tools; models without native tool calling get its parameters as a JSON schema instead.

Examples:
    >>> from fsmchat import RESPOND_TOOL
    >>> RESPOND_TOOL["function"]["name"], RESPOND_TOOL["function"]["parameters"]["required"]
    ('respond', ['score', 'message'])
"""

RESPOND_TOOL_CHOICE: ToolChoice = {"type": "function", "function": {"name": "respond"}}


def respond_response_format() -> dict[str, object]:
    """``response_format`` for models without native tool calling: the tool's parameters as schema."""
    return {"type": "json_schema",
            "json_schema": {"name": "respond", "schema": RESPOND_TOOL["function"]["parameters"]}}


@dataclass(frozen=True, slots=True)
class BidOutcome:
    """A parsed bid: what the speaker selection uses, and whether the model bid properly.

    An invalid bid is still a bid (score 0, silent) with the reason recorded, so one malformed
    answer never breaks the chat.

    Attributes:
        score: How much the participant wants to speak, clamped to 0..1.
        message: The reply it would post.
        valid: Whether the model called ``respond`` with proper arguments.
        reason: Why the bid is invalid (empty when valid).
        error: The call error behind a silent bid (a transient one, after retries), else None.
        note: An event to record with the run (e.g. the switch to JSON mode), else None.

    Examples:
        >>> from fsmchat.speakers import BidOutcome
        >>> BidOutcome(0.7, "I can answer that.")
        BidOutcome(score=0.7, message='I can answer that.', valid=True, reason='', error=None, note=None)
    """

    score: float
    message: str
    valid: bool = True
    reason: str = ""
    error: BaseException | None = None  # the call error behind a silent bid (transient, after retries)
    note: Mapping[str, object] | None = None  # an event to record (e.g. the switch to JSON mode)


# a checkpoint keeps a bid as {"__bid__": [score, message, valid, reason]} (its error and note are not kept)
register_codec("__bid__", BidOutcome, lambda b: [b.score, b.message, b.valid, b.reason], lambda d: BidOutcome(*d))


def silent(reason: str) -> BidOutcome:
    return BidOutcome(0.0, "", False, reason)


def bid_from_arguments(args: object) -> BidOutcome:
    """Score via float (failure -> 0.0) clamped to [0, 1]; message via str(), stripped."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, TypeError) as exc:
            return silent(f"respond arguments are not JSON: {exc}")
    if not isinstance(args, dict):
        return silent(f"respond arguments are a {type(args).__name__}, not an object")
    reasons = []
    raw = args.get("score", 0.0)
    try:
        score = float(raw)
        if math.isnan(score):
            raise ValueError("NaN")
    except (TypeError, ValueError):
        score = 0.0
        reasons.append(f"score {raw!r} is not a number")
    if score < 0.0 or score > 1.0:
        reasons.append(f"score {raw!r} is outside 0..1 (clamped)")
        score = min(1.0, max(0.0, score))
    msg = args.get("message", "")
    message = ("" if msg is None else str(msg)).strip()
    return BidOutcome(score, message, not reasons, "; ".join(reasons))


def parse_bid(response: object, mode: str = "native") -> BidOutcome:
    """Read a bid from a litellm response: the first ``respond`` tool call, or JSON content.

    Anything else is a silent bid with the reason recorded, never an exception: a score that is
    not a number becomes 0, one outside 0..1 is clamped, and the bid is marked invalid.

    Args:
        response: A litellm (OpenAI-shaped) chat completion response.
        mode: ``"native"`` reads the ``respond`` tool call; ``"json"`` reads the message content
            as the tool's arguments (models without tool calling).

    Returns:
        The parsed bid.

    Examples:
        >>> from types import SimpleNamespace as NS
        >>> from fsmchat.speakers import parse_bid
        >>> call = NS(function=NS(name="respond", arguments='{"score": 1.5, "message": "Me!"}'))
        >>> parse_bid(NS(choices=[NS(message=NS(tool_calls=[call], content=None))]))
        BidOutcome(score=1.0, message='Me!', valid=False, reason='score 1.5 is outside 0..1 (clamped)', error=None, note=None)
        >>> parse_bid(NS(choices=[NS(message=NS(tool_calls=None, content='{"score": 0.2, "message": ""}'))]), "json")
        BidOutcome(score=0.2, message='', valid=True, reason='', error=None, note=None)
    """
    try:
        choices = getattr(response, "choices", None) or []
        if not choices:
            return silent("response has no choices")
        message = choices[0].message
        if mode == "json":
            content = (getattr(message, "content", None) or "").strip()
            if not content:
                if getattr(message, "tool_calls", None):
                    return silent("json mode: no JSON content, the model made a tool call instead "
                                  "(set the agent's tool_mode='native')")
                return silent("json mode: empty content")
            return bid_from_arguments(content)
        calls = getattr(message, "tool_calls", None) or []
        if not calls:
            if not (getattr(message, "content", None) or "").strip():
                return silent("the reply has no text and no respond call")
            return silent("no tool call (plain text instead of respond)")
        for call in calls:
            fn = getattr(call, "function", None)
            if fn is not None and getattr(fn, "name", None) == "respond":
                return bid_from_arguments(getattr(fn, "arguments", None))
        names = [getattr(getattr(c, "function", None), "name", None) for c in calls]
        return silent(f"tool call(s) {names} are not respond")
    except Exception as exc:  # a malformed provider object must never break the chat
        return silent(f"unreadable response: {type(exc).__name__}: {exc}")
