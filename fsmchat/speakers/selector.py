"""Layer 10: a model picking the next speaker, as one forced tool call.

The selector is asked with a forced ``select_speaker(speaker)`` tool whose ``speaker`` argument is
a JSON-schema ``enum`` of the candidates allowed now (in the order the fallback rule reads them),
so a server that honours the schema cannot name an unknown or forbidden speaker. A reply that
still names no candidate is refused with its reason (``parse_pick``); the pattern asks again
(``SelectorGroupChat``'s ``max_selector_attempts``) and then falls back.
"""
from __future__ import annotations

import json
from typing import Sequence

from ..models import shorten
from .respond import ToolChoice

SELECT_TOOL = "select_speaker"

DEFAULT_SELECTOR_PROMPT = (
    "You are choosing who speaks next in a conversation between these participants:\n{roles}\n\n"
    "Read the conversation, then call select_speaker with the one participant from {participants} who should "
    "speak next. Only the participant's name.")
"""The selector's instruction (``selector_prompt``): ``{roles}`` (one line per candidate: its name
and what it does), ``{participants}`` (the candidates' names) and ``{history}`` (the conversation
as text, AutoGen's placeholder; without it the conversation goes as chat messages) are filled in."""


def select_spec(candidates: Sequence[str]) -> dict[str, object]:
    """The forced tool: ``speaker`` is one of ``candidates`` (a JSON-schema enum).

    Examples:
        >>> from fsmchat.speakers.selector import select_spec
        >>> select_spec(["planner", "coder"])["function"]["parameters"]["properties"]["speaker"]["enum"]
        ['planner', 'coder']
    """
    return {"type": "function", "function": {
        "name": SELECT_TOOL,
        "description": "Name the participant who speaks next.",
        "parameters": {"type": "object", "properties": {"speaker": {
            "type": "string", "enum": list(candidates), "description": "The next speaker's name."}},
            "required": ["speaker"]}}}


SELECT_CHOICE: ToolChoice = {"type": "function", "function": {"name": SELECT_TOOL}}


def parse_pick(message: object, candidates: Sequence[str]) -> tuple[str | None, str]:
    """The candidate a selector's reply names, or None and why not.

    A ``select_speaker`` call's ``speaker`` argument is read first; a reply in plain text that is
    exactly one candidate's name is taken too (a model that ignored the forced tool).

    Examples:
        >>> from types import SimpleNamespace as NS
        >>> from fsmchat.speakers.selector import parse_pick
        >>> call = NS(function=NS(name="select_speaker", arguments='{"speaker": "coder"}'))
        >>> parse_pick(NS(tool_calls=[call], content=None), ["planner", "coder"])
        ('coder', '')
        >>> parse_pick(NS(tool_calls=[], content="the reviewer"), ["planner", "coder"])
        (None, "no select_speaker call, and the text 'the reviewer' is no candidate's name")
    """
    for call in getattr(message, "tool_calls", None) or []:
        fn = getattr(call, "function", None)
        if getattr(fn, "name", None) != SELECT_TOOL:
            continue
        raw = getattr(fn, "arguments", None) or ""
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return None, f"select_speaker arguments are not JSON: {str(raw)[:80]!r}"
        name = args.get("speaker") if isinstance(args, dict) else None
        if name in candidates:
            return name, ""
        return None, f"select_speaker named {name!r}, which is not among the candidates {list(candidates)}"
    text = (getattr(message, "content", None) or "").strip().strip(".'\"` ")
    if text in candidates:
        return text, ""
    return None, f"no select_speaker call, and the text {shorten(text, 60)!r} is no candidate's name"


def selector_instruction(prompt: str, roles: Sequence[tuple[str, str]], history: str) -> str:
    """``prompt`` with its placeholders filled: ``{roles}``, ``{participants}``, ``{history}``."""
    lines = "\n".join(f"{name}: {about}" if about else name for name, about in roles)
    names = ", ".join(name for name, _ in roles)
    return (prompt.replace("{roles}", lines).replace("{participants}", f"[{names}]")
            .replace("{history}", history))


def retry_instruction(base: str, reason: str, candidates: Sequence[str]) -> str:
    """The instruction of a selector's next attempt: the same, plus what was wrong."""
    return (f"{base}\n\nYour previous answer was not valid ({reason}). Call select_speaker with exactly one of: "
            f"{', '.join(candidates)}.")
