"""Layer 10, speakers: the responses of fsmchat's own model providers (the offline model, the
scripted models of ``fsmchat.testing``), answered in process: a whole reply as the fast path's
``WireResponse`` (``completion``), and streamed as the chunks an OpenAI-compatible server sends
(``stream_chunks``), which ``fsmchat.speakers.llm.Streamed`` reads as it reads the fast path's.
"""
from __future__ import annotations

import re
from typing import Any

from .wire import WireResponse, parse, with_cost

OWN_MODEL = "offline"


def completion(message: dict[str, Any], finish: str, usage: dict[str, int] | None,
               model: str = OWN_MODEL) -> WireResponse:
    """A whole reply of one of fsmchat's own providers: ``message`` (an OpenAI assistant message),
    its finish reason and usage; it costs nothing.

    Examples:
        >>> from fsmchat.speakers.chunks import completion
        >>> r = completion({"role": "assistant", "content": "Hi."}, "stop", {"prompt_tokens": 3, "completion_tokens": 1})
        >>> r.choices[0].message.content, r.usage.total_tokens, r._hidden_params["response_cost"]
        ('Hi.', 4, 0.0)
    """
    if usage is not None and not usage.get("total_tokens"):
        usage = {**usage, "total_tokens": int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)}
    return with_cost(parse({"model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                            "usage": usage}, model, None), 0.0)


def stream_pieces(text: str) -> list[str]:
    """How the offline and scripted models stream a text: word by word, each word with the spaces after it.

    Examples:
        >>> from fsmchat.speakers.chunks import stream_pieces
        >>> stream_pieces("Ship it, then  watch.")
        ['Ship ', 'it, ', 'then  ', 'watch.']
    """
    return re.findall(r"\S+\s*|\s+", text)


def stream_chunks(whole: Any) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects an OpenAI-compatible server would stream for the whole
    response ``whole``: its text piece by piece (``stream_pieces``), each tool call's arguments in
    two pieces, then the finish, then the usage (as with ``stream_options.include_usage``)."""
    message, finish = whole.choices[0].message, whole.choices[0].finish_reason
    base = {"id": whole.id, "object": "chat.completion.chunk", "model": whole.model}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    chunks = [chunk({"role": "assistant", "content": piece}) for piece in stream_pieces(message.content or "")]
    for i, call in enumerate(message.tool_calls or ()):
        args = call.function.arguments or ""
        half = len(args) // 2
        chunks.append(chunk({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                             "function": {"name": call.function.name, "arguments": args[:half]}}]}))
        chunks.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": args[half:]}}]}))
    chunks.append(chunk({}, finish or "stop"))
    u = whole.usage
    if u is not None:
        chunks.append({**base, "choices": [], "usage": {"prompt_tokens": u.prompt_tokens,
                                                        "completion_tokens": u.completion_tokens,
                                                        "total_tokens": u.total_tokens}})
    return chunks


def litellm_chunks(whole: Any) -> list[dict[str, Any]]:
    """The chunks litellm's custom-provider streaming reads (``GenericStreamingChunk``) for the
    whole response ``whole``: for an in-process provider called through litellm (callbacks)."""
    message, finish = whole.choices[0].message, whole.choices[0].finish_reason
    u = whole.usage
    usage = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
             "total_tokens": u.total_tokens} if u is not None else None
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
