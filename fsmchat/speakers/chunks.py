"""Layer 10, speakers: how fsmchat's own model providers (the offline model, the scripted models
of ``fsmchat.testing``) stream a whole reply: the chunks litellm's custom-provider streaming reads.
"""
from __future__ import annotations

import re
from typing import Any


def stream_pieces(text: str) -> list[str]:
    """How the offline and scripted models stream a text: word by word, each word with the spaces after it.

    Examples:
        >>> from fsmchat.speakers.chunks import stream_pieces
        >>> stream_pieces("Ship it, then  watch.")
        ['Ship ', 'it, ', 'then  ', 'watch.']
    """
    return re.findall(r"\S+\s*|\s+", text)


def stream_chunks(whole: Any) -> list[dict[str, Any]]:
    """The chunks litellm's custom-provider streaming reads for the whole response ``whole``: its
    text piece by piece (``stream_pieces``), each tool call's arguments in two pieces, then the
    finish with the usage."""
    message, finish = whole.choices[0].message, whole.choices[0].finish_reason
    u = whole.usage
    usage = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
             "total_tokens": u.total_tokens}
    chunks: list[dict[str, Any]] = [{"text": piece, "tool_use": None, "is_finished": False, "finish_reason": "",
                                     "usage": None, "index": 0} for piece in stream_pieces(message.content or "")]
    for i, call in enumerate(message.tool_calls or ()):
        args = call.function.arguments or ""
        half = len(args) // 2
        for n, part in enumerate((args[:half], args[half:])):
            chunks.append({"text": "", "is_finished": False, "finish_reason": "", "usage": None, "index": 0,
                           "tool_use": {"index": i, "id": call.id if n == 0 else None, "type": "function",
                                        "function": {"name": call.function.name if n == 0 else None,
                                                     "arguments": part}}})
    chunks.append({"text": "", "tool_use": None, "is_finished": True, "finish_reason": finish or "stop",
                   "usage": usage, "index": 0})
    return chunks
