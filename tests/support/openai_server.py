"""A tiny OpenAI chat-completions compatible HTTP server for tests (stdlib only).

It binds 127.0.0.1 on an ephemeral port, serves from a background thread, records every
request, and answers from a *script*. It is bounded: past ``max_requests`` it refuses (503,
recorded in ``errors``) and it shuts itself down after ``max_lifetime`` seconds.

    from support.openai_server import OpenAIServer, per_agent, respond, error, text

    with OpenAIServer(per_agent({"alice": [error(500, retry_after=0), respond(0.9, "hi")],
                                 "bob": [respond(0.0, "")]}, default=respond(0.0, ""))) as srv:
        agent = Agent("alice", model="openai/test-model", api_base=srv.url + "/v1", api_key="sk-test")
        ...
        assert len(srv.requests_for("alice")) == 2
        srv.assert_clean()

A script is one of:
  * a callable ``(request_json) -> Reply | dict`` (a dict is a 200 JSON body, sent as is);
  * a list/iterable of ``Reply`` served in order (a queue; ``push`` adds more);
  * ``per_agent({...})``: one queue (or callable) per agent, routed by ``agent_of(request)``,
    which is what concurrent multi-agent chats need (arrival order between agents is not fixed).

Reply builders, one per fault the fault-injection tests need: ``respond`` (a ``respond`` tool
call), ``tool_call`` (any tool name / raw arguments: wrong tool name, ``score="high"``, ``score=7``),
``malformed_tool_call`` (arguments that are not JSON), ``text`` / ``json_text`` (content instead
of a tool call), ``error`` (any status, optional ``Retry-After``), ``delayed`` / ``Reply.after``
(slower than a timeout), ``drop`` (close the socket without answering), ``empty_choices``,
``raw`` (a body that is not valid JSON at all). Every completion carries ``usage``.

Streaming (``"stream": true``): the reply is sent as server-sent events, one ``data:`` line per
chunk, flushed one by one, then ``data: [DONE]``. A completion reply is cut up (its content word
by word, each tool call's arguments in two halves); ``streamed(pieces, gate=..., hold_after=n)``
scripts the pieces and makes the server wait, after piece ``n``, until ``gate`` (a
``threading.Event``) is set by the client side, so a test can tell that the client saw the first
pieces before the server sent the rest (no clock involved); ``stall_after=n`` stops sending after
piece ``n`` and holds the connection open until the client goes away. The usage comes in a final
chunk when the request asks for it (``stream_options.include_usage``).
"""
from __future__ import annotations

import itertools
import json
import re
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Mapping

__all__ = ["OpenAIServer", "Reply", "Record", "per_agent", "agent_of", "respond", "tool_call", "streamed", "sse_chunks",
           "malformed_tool_call", "text", "json_text", "error", "delayed", "drop", "empty_choices",
           "raw", "completion", "DEFAULT_USAGE"]

DEFAULT_USAGE: dict[str, int] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
COMPLETION_PATHS = ("/v1/chat/completions", "/chat/completions")

_ids = itertools.count(1)


# --------------------------------------------------------------------------- replies
@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``body``: a dict (sent as JSON), str/bytes (sent raw) or None."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (or before dropping)
    drop: bool = False  # close the socket without answering
    reset: bool = False  # with drop: send a TCP RST instead of a clean FIN
    content_type: str = "application/json"
    pieces: tuple[str, ...] | None = None  # streamed: the content pieces (else cut from the body)
    gate: threading.Event | None = None  # streamed: after piece ``hold_after``, wait until it is set
    hold_after: int = 0
    stall_after: int | None = None  # streamed: send this many pieces, then nothing more

    def after(self, seconds: float) -> "Reply":
        """The same reply, sent ``seconds`` later."""
        return replace(self, delay=seconds)


def _usage(usage: Mapping[str, int] | None) -> dict[str, int]:
    return dict(DEFAULT_USAGE if usage is None else usage)


def completion(message: Mapping[str, Any] | None, finish_reason: str = "stop", *,
               usage: Mapping[str, int] | None = None, choices: list[Any] | None = None) -> dict[str, Any]:
    """A ``chat.completion`` body (``model`` is filled in from the request when served)."""
    if choices is None:
        choices = [{"index": 0, "message": dict(message or {}), "finish_reason": finish_reason,
                    "logprobs": None}]
    return {"id": f"chatcmpl-test-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
            "choices": choices, "usage": _usage(usage), "system_fingerprint": "fp_test"}


def tool_call(name: str, arguments: Any, *, usage: Mapping[str, int] | None = None,
              content: str | None = None) -> Reply:
    """An assistant message calling tool ``name``; ``arguments`` is a dict (JSON-encoded) or a raw string."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    msg = {"role": "assistant", "content": content,
           "tool_calls": [{"id": f"call_{next(_ids)}", "type": "function",
                           "function": {"name": name, "arguments": args}}]}
    return Reply(body=completion(msg, "tool_calls", usage=usage))


def respond(score: Any, message: Any = "", *, usage: Mapping[str, int] | None = None) -> Reply:
    """A ``respond`` tool call with ``{"score": score, "message": message}`` (any JSON values)."""
    return tool_call("respond", {"score": score, "message": message}, usage=usage)


def malformed_tool_call(arguments: str = '{"score": 0.9, "message": "unterminated', *,
                        name: str = "respond", usage: Mapping[str, int] | None = None) -> Reply:
    """A tool call whose arguments string is not valid JSON."""
    return tool_call(name, arguments, usage=usage)


def text(content: str, *, usage: Mapping[str, int] | None = None) -> Reply:
    """Plain assistant content (no tool call)."""
    return Reply(body=completion({"role": "assistant", "content": content}, "stop", usage=usage))


def json_text(obj: Any, *, usage: Mapping[str, int] | None = None) -> Reply:
    """Assistant content that is ``obj`` JSON-encoded (what a json-mode bid looks like)."""
    return text(json.dumps(obj), usage=usage)


def streamed(pieces: Iterable[str], *, gate: threading.Event | None = None, hold_after: int = 1,
             stall_after: int | None = None, usage: Mapping[str, int] | None = None) -> Reply:
    """A reply to a streaming request, sent as these content pieces (see the module docstring)."""
    pieces = tuple(pieces)
    return Reply(body=completion({"role": "assistant", "content": "".join(pieces)}, "stop", usage=usage),
                 pieces=pieces, gate=gate, hold_after=hold_after, stall_after=stall_after)


def sse_chunks(body: Mapping[str, Any], pieces: tuple[str, ...] | None, include_usage: bool) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a completion ``body``, in the order they are sent."""
    base = {"id": body.get("id"), "object": "chat.completion.chunk", "created": body.get("created"),
            "model": body.get("model"), "system_fingerprint": "fp_test"}
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    if pieces is None:
        pieces = tuple(re.findall(r"\S+\s*|\s+", message.get("content") or ""))
    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    out += [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    for i, call in enumerate(message.get("tool_calls") or ()):
        args = call["function"]["arguments"]
        half = len(args) // 2
        out.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": call["id"], "type": "function",
             "function": {"name": call["function"]["name"], "arguments": args[:half]}}]}, "finish_reason": None}]})
        out.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "function": {"arguments": args[half:]}}]}, "finish_reason": None}]})
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}]})
    if include_usage:
        out.append({**base, "choices": [], "usage": body.get("usage")})
    return out


def empty_choices(*, usage: Mapping[str, int] | None = None) -> Reply:
    """A 200 completion with ``choices: []``."""
    return Reply(body=completion(None, usage=usage, choices=[]))


def error(status: int, message: str | None = None, *, type: str | None = None, code: str | None = None,
          retry_after: float | None = None, headers: Mapping[str, str] | None = None) -> Reply:
    """An OpenAI-style error response with HTTP ``status`` (and ``Retry-After`` if given)."""
    h = dict(headers or {})
    if retry_after is not None:
        h["Retry-After"] = str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
    kind = type or ("invalid_request_error" if 400 <= status < 500 else "server_error")
    body = {"error": {"message": message or f"scripted HTTP {status}", "type": kind, "param": None,
                      "code": code}}
    return Reply(status=status, body=body, headers=h)


def delayed(seconds: float, reply: Reply | None = None) -> Reply:
    """``reply`` (default: a silent ``respond(0, "")``) sent after ``seconds``."""
    return (reply if reply is not None else respond(0.0, "")).after(seconds)


def drop(*, delay: float = 0.0, reset: bool = False) -> Reply:
    """Close the connection without answering (after ``delay``; ``reset=True`` sends RST)."""
    return Reply(drop=True, reset=reset, delay=delay)


def raw(body: str | bytes, status: int = 200, content_type: str = "application/json") -> Reply:
    """A raw body, e.g. a 200 whose body is not valid JSON."""
    return Reply(status=status, body=body, content_type=content_type)


# --------------------------------------------------------------------------- scripts
_AGENT_RE = re.compile(r"\bYou are ([^\s,.:;]+)")


def agent_of(request: Mapping[str, Any]) -> str | None:
    """Which agent sent ``request``: the name in ``"You are NAME ..."`` of the last user message
    (fsmchat's bid instruction), else of the system prompt; ``metadata.fsmchat_agent`` if sent."""
    meta = request.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("fsmchat_agent"), str):
        return meta["fsmchat_agent"]
    msgs = [m for m in request.get("messages") or [] if isinstance(m, Mapping)]
    users = [m for m in msgs if m.get("role") == "user"]
    systems = [m for m in msgs if m.get("role") == "system"]
    for m in (users[-1:] + systems[:1]):
        content = m.get("content")
        if isinstance(content, list):  # multimodal parts
            content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        found = _AGENT_RE.search(content or "")
        if found:
            return found.group(1)
    return None


class _Queue:
    """A list of replies served in order; ``default`` (if any) once exhausted."""

    def __init__(self, replies: Iterable[Reply | Mapping[str, Any]] = (), default: Reply | None = None):
        self._q: deque[Any] = deque(replies)
        self._default = default
        self._lock = threading.Lock()

    def push(self, *replies: Reply | Mapping[str, Any]) -> None:
        with self._lock:
            self._q.extend(replies)

    def __len__(self) -> int:
        return len(self._q)

    def __call__(self, request: Mapping[str, Any]) -> Any:
        with self._lock:
            if self._q:
                return self._q.popleft()
        if self._default is not None:
            return self._default
        raise LookupError("script exhausted: no scripted reply left for this request")


class per_agent:  # noqa: N801 - reads like a function in scripts
    """Route each request to the agent's own script (a list of replies or a callable).

    ``key`` names the agent of a request (default ``agent_of``). Agents without a script, and
    exhausted queues, get ``default`` if given, else the request is answered 500 and recorded
    in the server's ``errors``."""

    def __init__(self, scripts: Mapping[str, Iterable[Reply] | Callable[[dict], Any]], *,
                 default: Reply | None = None, key: Callable[[Mapping[str, Any]], str | None] = agent_of):
        self.key = key
        self.default = default
        self.scripts: dict[str, Callable[[Mapping[str, Any]], Any]] = {
            name: (s if callable(s) else _Queue(s, default)) for name, s in scripts.items()}

    def push(self, agent: str, *replies: Reply) -> None:
        q = self.scripts.setdefault(agent, _Queue((), self.default))
        if not isinstance(q, _Queue):
            raise TypeError(f"agent {agent!r} is scripted by a callable, not a queue")
        q.push(*replies)

    def __call__(self, request: Mapping[str, Any]) -> Any:
        name = self.key(request)
        script = self.scripts.get(name) if name is not None else None
        if script is None:
            if self.default is not None:
                return self.default
            raise LookupError(f"no script for agent {name!r}")
        return script(request)


def _as_script(script: Any, default: Reply | None) -> Callable[[Mapping[str, Any]], Any]:
    if script is None:
        return _Queue((), default)
    if callable(script):
        return script
    return _Queue(script, default)


# --------------------------------------------------------------------------- server
@dataclass
class Record:
    """One request as received, and what was done with it."""

    index: int
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text if it did not parse
    at: float  # seconds since the server started
    status: int | None = None  # HTTP status answered; None if dropped / not answered
    note: str = ""


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    owner: "OpenAIServer"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr access logs
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.server.owner._handle(self, "GET")

    def do_POST(self) -> None:  # noqa: N802
        self.server.owner._handle(self, "POST")


class OpenAIServer:
    """An OpenAI-compatible chat-completions server on ``127.0.0.1:<ephemeral>`` for tests.

    ``url`` is ``http://127.0.0.1:PORT`` (use ``url + "/v1"`` as ``api_base``). ``requests`` holds
    the parsed JSON body of every completion request in arrival order; ``records`` every request
    with path, headers and the status answered; ``errors`` what went wrong server-side (script
    exhausted or raising, refused past ``max_requests``, unknown path, unparsable body).
    """

    def __init__(self, script: Any = None, *, default: Reply | None = None, max_requests: int = 200,
                 max_lifetime: float = 60.0, host: str = "127.0.0.1"):
        self.max_requests = max_requests
        self.max_lifetime = max_lifetime
        self.host = host
        self.requests: list[Any] = []
        self.records: list[Record] = []
        self.errors: list[str] = []
        self.refused = 0
        self.expired = False
        self._default = default
        self._script = _as_script(script, default)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None
        self._t0 = 0.0
        self._count = 0
        self._port = 0

    # ---- lifecycle ----
    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("server not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_base(self) -> str:
        return self.url + "/v1"

    def start(self) -> "OpenAIServer":
        if self._httpd is not None:
            return self
        if self._stopping.is_set():
            raise RuntimeError("a stopped OpenAIServer cannot be restarted; make a new one")
        self._httpd = _HTTPServer((self.host, 0), _Handler)
        self._httpd.owner = self
        self._port = self._httpd.server_address[1]
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"openai-test-server-{self.port}", daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.max_lifetime, self._expire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def _expire(self) -> None:
        self.expired = True
        self.errors.append(f"max_lifetime {self.max_lifetime}s reached: server shut down")
        self.stop()

    def stop(self) -> None:
        """Stop serving (idempotent); pending delayed replies are abandoned (connection dropped)."""
        self._stopping.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
        with self._lock:
            httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "OpenAIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- scripting & inspection ----
    def set_script(self, script: Any, default: Reply | None = None) -> None:
        self._script = _as_script(script, default if default is not None else self._default)

    def push(self, *replies: Reply) -> None:
        """Append replies to a queue script (``per_agent``: use its own ``push``)."""
        if not hasattr(self._script, "push") or isinstance(self._script, per_agent):
            raise TypeError("the current script is not a plain queue")
        self._script.push(*replies)  # type: ignore[attr-defined]

    def requests_for(self, agent: str, key: Callable[[Mapping[str, Any]], str | None] = agent_of) -> list[Any]:
        return [r for r in self.requests if isinstance(r, Mapping) and key(r) == agent]

    def assert_clean(self) -> None:
        """Raise AssertionError if anything went wrong server-side."""
        assert not self.errors, f"test server errors: {self.errors}"

    # ---- serving ----
    def _handle(self, h: _Handler, method: str) -> None:
        path = h.path.split("?", 1)[0]
        length = int(h.headers.get("Content-Length") or 0)
        data = h.rfile.read(length) if length > 0 else b""
        try:
            body: Any = json.loads(data) if data else None
            parsed = True
        except ValueError:
            body, parsed = data.decode("utf-8", "replace"), False
        with self._lock:
            self._count += 1
            rec = Record(self._count, method, path, {k.lower(): v for k, v in h.headers.items()}, body,
                         time.monotonic() - self._t0)
            self.records.append(rec)
            over = self._count > self.max_requests
            if over:
                self.refused += 1
        if over:
            self._fail(rec, f"request {rec.index} refused: max_requests={self.max_requests} exceeded")
            return self._send(h, rec, error(503, "test server: max_requests exceeded"))
        if method == "GET" and path in ("/v1/models", "/models"):
            return self._send(h, rec, Reply(body={"object": "list", "data": [
                {"id": "test-model", "object": "model", "created": 0, "owned_by": "test"}]}))
        if method != "POST" or path not in COMPLETION_PATHS:
            self._fail(rec, f"{method} {path}: not served")
            return self._send(h, rec, error(404, f"{method} {path} not found"))
        if not parsed or not isinstance(body, dict):
            self._fail(rec, f"request {rec.index}: body is not a JSON object")
            return self._send(h, rec, error(400, "request body is not a JSON object"))
        with self._lock:
            self.requests.append(body)
        try:
            reply = self._script(body)
        except Exception as exc:  # a broken / exhausted script must be visible, not hang the client
            self._fail(rec, f"request {rec.index}: script failed: {type(exc).__name__}: {exc}")
            return self._send(h, rec, error(500, f"test server script failed: {exc}"))
        if isinstance(reply, Mapping):
            reply = Reply(body=dict(reply))
        if not isinstance(reply, Reply):
            self._fail(rec, f"request {rec.index}: script returned {type(reply).__name__}, not a Reply")
            return self._send(h, rec, error(500, "test server script returned a non-Reply"))
        if reply.body is not None and isinstance(reply.body, dict) and "choices" in reply.body:
            reply = replace(reply, body={**reply.body, "model": reply.body.get("model") or body.get("model")})
            if body.get("stream") and reply.status == 200:
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return self._send_events(h, rec, reply, sse_chunks(reply.body, reply.pieces, usage))
        self._send(h, rec, reply)

    def _send_events(self, h: _Handler, rec: Record, reply: Reply, chunks: list[dict[str, Any]]) -> None:
        """Send ``chunks`` as server-sent events, one flushed ``data:`` line each (the first chunk
        only opens the message; piece ``n`` is chunk ``n``)."""
        h.close_connection = True
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Cache-Control", "no-cache")
            h.send_header("Connection", "close")
            h.end_headers()
            for n, chunk in enumerate(chunks):
                if reply.stall_after is not None and n > reply.stall_after:
                    rec.note = "stalled"
                    self._stopping.wait(self.max_lifetime)  # until the server stops; the client cuts it first
                    return
                h.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                h.wfile.flush()
                if reply.gate is not None and n == reply.hold_after:
                    if not reply.gate.wait(self.max_lifetime):  # a bound against hanging, not a measure
                        self._fail(rec, f"request {rec.index}: the client did not see piece {n} before the rest")
                    rec.note = "gate passed"
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
            rec.status = 200
        except OSError as exc:  # the client went away (a timeout cut the stream)
            rec.note = rec.note or f"client went away: {type(exc).__name__}"

    def _fail(self, rec: Record, message: str) -> None:
        rec.note = message
        with self._lock:
            self.errors.append(message)

    def _send(self, h: _Handler, rec: Record, reply: Reply) -> None:
        if reply.delay > 0 and self._stopping.wait(reply.delay):
            reply = drop()  # the server stopped while the reply was pending
            rec.note = rec.note or "server stopped during delay"
        h.close_connection = True
        try:
            if reply.drop:
                self._drop(h, reply.reset)
                rec.note = rec.note or "dropped"
                return
            if isinstance(reply.body, (dict, list)):
                payload = json.dumps(reply.body).encode()
            elif isinstance(reply.body, str):
                payload = reply.body.encode()
            else:
                payload = reply.body or b""
            h.send_response(reply.status)
            h.send_header("Content-Type", reply.content_type)
            h.send_header("Content-Length", str(len(payload)))
            h.send_header("Connection", "close")
            for k, v in reply.headers.items():
                h.send_header(k, v)
            h.end_headers()
            rec.status = reply.status  # before the body: the client may finish its run as soon as it reads it
            h.wfile.write(payload)
            h.wfile.flush()
        except OSError as exc:  # the client gave up (timeout) before we answered
            rec.note = rec.note or f"client went away: {type(exc).__name__}"

    @staticmethod
    def _drop(h: _Handler, reset: bool) -> None:
        conn = h.connection
        try:
            if reset:  # SO_LINGER 0: close() sends RST
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            conn.close()
        except OSError:
            pass
