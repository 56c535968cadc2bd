"""Layer 10, speakers: the responses of fsmchat's own model providers (the offline model, the
scripted models of ``fsmchat.testing``), answered in process: a whole reply as the fast path's
``WireResponse`` (``completion``), and streamed as the chunks an OpenAI-compatible server sends
(``stream_chunks``), which ``fsmchat.speakers.llm.Streamed`` reads as it reads the fast path's.

And the one piece of partial JSON the reading side decodes: a GroupChat bid's ``message`` while
its ``respond`` call's arguments (or its JSON reply) arrive in pieces (``MessageField``), so a
streamed bid can be shown before the round closes.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from .wire import WireResponse, parse, with_cost

OWN_MODEL = "offline"

_WS = " \t\n\r"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_SPECIAL = re.compile(r'["\\]')  # where a string's plain run ends: its closing quote or an escape
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
# where the reader is in the object: before it, after "{", after ",", in a key, before ":", before a
# value, in the message, skipping another key's value (a string, an object or array, a number or
# literal), after a value
_START, _OPEN, _KEY, _KEYSTR, _COLON, _VALUE, _MESSAGE, _SKIPSTR, _SKIPNEST, _SKIPSCALAR, _AFTER = range(11)


class MessageField:
    r"""One string field of a JSON object (``message``), decoded while the object's text arrives
    in pieces: ``feed(piece)`` returns the field's text that piece completes.

    The object is read as JSON is: keys in any order, other keys' values skipped whatever they
    hold (numbers, strings, nested objects), the string's escapes decoded (``\n``, ``\"``,
    ``\u00e9``, a surrogate pair into one character) even when an escape is cut between two
    pieces; a high surrogate is held until the next piece says whether its low half follows. Only
    the field at the top level counts, and only its first occurrence. Text that is not such an
    object (a missing comma, a bad escape, a field that is not a string) ends the reading: ``done``
    is then True and nothing more is returned. What was returned is a preview only: the whole
    text, parsed, is what counts (``fsmchat.speakers.respond.parse_bid``).

    Args:
        key: The field to read.

    Examples:
        >>> from fsmchat.speakers.chunks import MessageField
        >>> field = MessageField()
        >>> [field.feed(p) for p in ['{"score": 0.9, "mes', 'sage": "Caf', '\\u00', 'e9 \\', 'ud83d\\ude00!"}']]
        ['', 'Caf', '', 'é ', '😀!']
        >>> field.done
        True
    """

    def __init__(self, key: str = "message") -> None:
        self.key = key
        self.done = False  # the field was read whole, or the text is not an object holding it
        self._state = _START
        self._name: list[str] = []  # the key being read
        self._esc = ""  # an escape begun and not yet complete: "\\", "\\u", "\\u00e"
        self._high = ""  # a high surrogate waiting for its low half
        self._depth = 0  # an object or array being skipped: how deep
        self._quoted = False  # ... inside a string of it
        self._escaped = False  # ... just after a backslash in that string

    def feed(self, piece: str) -> str:
        """Read the next piece of the object's text; the field's text it completes ('' if none)."""
        out: list[str] = []
        i, n = 0, len(piece)
        while i < n and not self.done:
            i = self._step(piece, i, n, out)
        return "".join(out)

    def _step(self, piece: str, i: int, n: int, out: list[str]) -> int:
        """Read from ``piece[i]`` in the current state; where the next step starts."""
        state = self._state
        if state == _MESSAGE or state == _KEYSTR:
            i, closed = self._string(piece, i, n, out if state == _MESSAGE else self._name)
            if closed:
                if state == _MESSAGE:
                    self.done = True
                else:
                    self._state = _COLON
            return i
        if state == _SKIPSTR or state == _SKIPNEST:
            return self._skip(piece, i, n)
        c = piece[i]
        if state == _SKIPSCALAR:
            if c in _WS or c == "," or c == "}":
                self._state = _AFTER
                return i
            return i + 1
        if c in _WS:
            return i + 1
        if state == _START:
            self._go(c == "{", _OPEN)
        elif state == _OPEN or state == _KEY:
            if c == '"':
                self._state, self._name = _KEYSTR, []
            else:
                self.done = True  # "}" (an object without the field) or not JSON
        elif state == _COLON:
            self._go(c == ":", _VALUE)
        elif state == _VALUE:
            if "".join(self._name) == self.key:
                self._go(c == '"', _MESSAGE)  # a field that is not a string shows nothing
            elif c == '"':
                self._state = _SKIPSTR
            elif c == "{" or c == "[":
                self._state, self._depth, self._quoted = _SKIPNEST, 1, False
            else:
                self._state = _SKIPSCALAR
        elif state == _AFTER:
            self._go(c == ",", _KEY)
        return i + 1

    def _go(self, ok: bool, state: int) -> None:
        if ok:
            self._state = state
        else:
            self.done = True

    def _string(self, piece: str, i: int, n: int, into: list[str]) -> tuple[int, bool]:
        """Decode a string's text from ``piece[i]`` into ``into``: where reading stopped, and whether
        the string closed there."""
        while i < n:
            esc = self._esc
            if esc:
                if esc == "\\":
                    c = piece[i]
                    i += 1
                    if c == "u":
                        self._esc = "\\u"
                        continue
                    self._esc = ""
                    plain = _ESCAPES.get(c)
                    if plain is None:  # not a JSON escape
                        self.done = True
                        return i, False
                    self._put(plain, into)
                    continue
                take = min(6 - len(esc), n - i)
                esc += piece[i:i + take]
                i += take
                if len(esc) < 6:
                    self._esc = esc
                    return i, False
                self._esc = ""
                if not _HEX4.fullmatch(esc, 2):
                    self.done = True
                    return i, False
                self._code(int(esc[2:], 16), into)
                continue
            found = _SPECIAL.search(piece, i)
            j = found.start() if found is not None else n
            if j > i:
                self._put(piece[i:j], into)
            if found is None:
                return n, False
            if piece[j] == '"':
                if self._high:
                    into.append(self._high)
                    self._high = ""
                return j + 1, True
            self._esc = "\\"
            i = j + 1
        return i, False

    def _put(self, text: str, into: list[str]) -> None:
        if self._high:  # a high surrogate alone: kept as JSON keeps it
            into.append(self._high)
            self._high = ""
        into.append(text)

    def _code(self, code: int, into: list[str]) -> None:
        """A ``\\uXXXX`` escape's code unit: a surrogate pair is joined into its character."""
        if self._high:
            if 0xDC00 <= code <= 0xDFFF:
                into.append(chr(0x10000 + ((ord(self._high) - 0xD800) << 10) + (code - 0xDC00)))
                self._high = ""
                return
            into.append(self._high)
            self._high = ""
        if 0xD800 <= code <= 0xDBFF:
            self._high = chr(code)
        else:
            into.append(chr(code))

    def _skip(self, piece: str, i: int, n: int) -> int:
        """Pass over another key's string, object or array value from ``piece[i]``."""
        nested = self._state == _SKIPNEST
        quoted = self._quoted or not nested
        while i < n:
            c = piece[i]
            i += 1
            if quoted:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    if not nested:
                        self._state = _AFTER
                        return i
                    quoted = False
            elif c == '"':
                quoted = True
            elif c == "{" or c == "[":
                self._depth += 1
            elif c == "}" or c == "]":
                self._depth -= 1
                if self._depth == 0:
                    self._state = _AFTER
                    return i
        self._quoted = quoted and nested
        return i


def completion(message: Mapping[str, object], finish: str, usage: dict[str, int] | None,
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


def object_or_empty(value: object) -> dict[str, object]:
    """``value`` when it is a JSON object, else an empty one: a request's part as fsmchat's own
    providers read it (what they cannot read counts as absent)."""
    return value if isinstance(value, dict) else {}


def list_or_empty(value: object) -> list[object]:
    """``value`` when it is a JSON array, else an empty one (as ``object_or_empty``)."""
    return value if isinstance(value, list) else []


def offered_tools(params: Mapping[str, object]) -> list[dict[str, object]]:
    """The tools a request's options offer (``params["tools"]``), each a JSON object."""
    return [object_or_empty(t) for t in list_or_empty(params.get("tools"))]


def stream_pieces(text: str) -> list[str]:
    """How the offline and scripted models stream a text: word by word, each word with the spaces after it.

    Examples:
        >>> from fsmchat.speakers.chunks import stream_pieces
        >>> stream_pieces("Ship it, then  watch.")
        ['Ship ', 'it, ', 'then  ', 'watch.']
    """
    return re.findall(r"\S+\s*|\s+", text)


def stream_chunks(whole: Any) -> list[dict[str, object]]:
    """The ``chat.completion.chunk`` objects an OpenAI-compatible server would stream for the whole
    response ``whole``: its text piece by piece (``stream_pieces``), each tool call's arguments in
    two pieces (a ``respond`` call's, a bid, piece by piece too: its message is written as a reply
    is), then the finish, then the usage (as with ``stream_options.include_usage``).

    Examples:
        >>> from fsmchat.speakers.chunks import completion, stream_chunks
        >>> call = {"id": "c1", "type": "function", "function": {"name": "respond",
        ...                                                      "arguments": '{"score": 0.9, "message": "Me first."}'}}
        >>> whole = completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", None)
        >>> [c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for c in stream_chunks(whole)[:-1]]
        ['{"score": ', '0.9, ', '"message": ', '"Me ', 'first."}']
    """
    message, finish = whole.choices[0].message, whole.choices[0].finish_reason
    base: dict[str, object] = {"id": whole.id, "object": "chat.completion.chunk", "model": whole.model}

    def chunk(delta: dict[str, object], finish_reason: str | None = None) -> dict[str, object]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    chunks = [chunk({"role": "assistant", "content": piece}) for piece in stream_pieces(message.content or "")]
    for i, call in enumerate(message.tool_calls or ()):
        args = call.function.arguments or ""
        half = len(args) // 2
        first, *rest = (stream_pieces(args) or [""]) if call.function.name == "respond" else [args[:half], args[half:]]
        chunks.append(chunk({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                             "function": {"name": call.function.name, "arguments": first}}]}))
        chunks += [chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}) for piece in rest]
    chunks.append(chunk({}, finish or "stop"))
    u = whole.usage
    if u is not None:
        chunks.append({**base, "choices": [], "usage": {"prompt_tokens": u.prompt_tokens,
                                                        "completion_tokens": u.completion_tokens,
                                                        "total_tokens": u.total_tokens}})
    return chunks


def litellm_chunks(whole: Any) -> list[dict[str, object]]:
    """The chunks litellm's custom-provider streaming reads (``GenericStreamingChunk``) for the
    whole response ``whole``: for an in-process provider called through litellm (callbacks)."""
    message, finish = whole.choices[0].message, whole.choices[0].finish_reason
    u = whole.usage
    usage = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
             "total_tokens": u.total_tokens} if u is not None else None
    chunks: list[dict[str, object]] = [{"text": piece, "tool_use": None, "is_finished": False, "finish_reason": "",
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
