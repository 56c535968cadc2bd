"""``fsmchat serve``: an HTTP API that starts, streams, answers, resumes, cancels and forks runs of
the patterns the operator registered, over one checkpoint store (an SQLite file, or PostgreSQL by a
``postgresql://`` URI; Starlette + uvicorn, the ``fsmchat[ui]`` extra), with the run viewer's pages
on the same server.

The operator registers patterns as Python targets (``--target NAME=MODULE:ATTR``) or as configs
(``--config NAME=FILE.json``, ``to_config()``'s JSON, rebuilt with ``from_config`` under the trust
rules: only fsmchat's modules and the ``--allow`` prefixes are imported, unless ``--trusted``). A
request names a registered pattern; it never carries code or a config.

Runs execute as tasks of the server's event loop, every step committed to the store, so a run the
server was running when it stopped or died is continued by the next server on the same store: by
``POST /api/runs/{id}/resume``, never by itself. The run's lease decides when: a run whose server
process died on this machine is resumable at once; one whose server is on another machine, or alive
but hung, once its lease expired (the store's ``lease_ttl``); before that the resume gets 409. A run
waiting for a person is answered by whichever server is up.

Routes (``GET /openapi.json`` describes them, bodies included)::

    POST /api/runs                  {pattern, task, run_id?, limits?} -> 202 {run_id}
    GET  /api/runs                  the runs of the store (the viewer's data)
    GET  /api/runs/{id}             one run (the viewer's data)
    GET  /api/runs/{id}/events      server-sent events: trace, message, ..., end
    POST /api/runs/{id}/answer      {"type": "approve"|"edit"|"reject"|"say", ...} -> 202
    POST /api/runs/{id}/resume      {pattern?} -> 202
    POST /api/runs/{id}/cancel      -> 202
    POST /api/runs/{id}/fork        {at, edit?, fork_id?} -> 201 {run_id}

The viewer's Host check and anti-framing headers guard every response; with a token (required for
any address but loopback) every request must carry ``Authorization: Bearer TOKEN``, else 401.

Every request is bounded before it is accepted: a body over ``max_body_bytes`` (default 1 MiB) is 413,
refused by its Content-Length before any of it is read, or (a chunked body) once more than the limit has
arrived; any text in a body (the task, an answer's text, ...) over ``max_text_chars`` (default 100,000
characters) is 422 naming the field. A task the pattern would refuse (``Pattern.check_task``: longer than
its ``max_message_chars``, the request's ``limits`` merged in, or empty) is 422 with the pattern's error,
before any run is created. A resume of a finished run, or of a run executing in this server,
is 409 saying why.
"""
from __future__ import annotations

import asyncio
import copy
import hmac
import ipaddress
import json
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import (TYPE_CHECKING, Annotated, Any, AsyncIterator, Awaitable, Callable, Iterable, Literal, Mapping,
                    TypedDict, TypeVar, Union)

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, ValidatorFunctionWrapHandler, field_validator

from ..checks import JsonObject, check_run_id
from ..config.convert import config_digest, from_config
from ..errors import ConfigTypeError, FsmchatError
from ..limits import Limits
from ..common.masking import redact, redact_data
from ..models import BidDelta, Message, RunResult, StreamRetry, TokenDelta, TraceEvent
from ..patterns.base import Pattern
from ..speakers.human import Approve, Edit, Input, InputNotAllowed, NotWaiting, Reject, Say, check_input, waiting_for
from ..store.checkpoint import CheckpointMismatch, LeaseLost, RunInProgress, Saved, new_run_id
from ..store.timetravel import fork
from .server import (DEFAULT_HOST, MISSING_EXTRA, HostCheck, Running, app as viewer_app, guarded, in_thread, listen,
                     url_of)
from .store import is_dsn, open_checkpointer, store_label

if TYPE_CHECKING:
    import socket

    import uvicorn
    from pydantic_core import ErrorDetails
    from starlette.applications import Starlette
    from starlette.types import ASGIApp, Receive, Scope, Send

_M = TypeVar("_M")

TOKEN_ENV = "FSMCHAT_SERVE_TOKEN"
DEFAULT_SERVE_PORT = 8766
DEFAULT_MAX_BODY_BYTES = 1024 * 1024  # the largest request body (bytes of JSON) a request may send: 413 past it
DEFAULT_MAX_TEXT_CHARS = 100_000  # the longest text (a task, an answer's text, ...) in a request body: 422 past it


class ServeError(FsmchatError, ValueError):
    """``fsmchat serve`` cannot start as configured (no patterns, no token on a public address, ...)."""


class RunExists(FsmchatError, ValueError):
    """The run id is taken, or the run is executing in this server (409); ``details`` go into the
    response's JSON next to its ``error`` (``run_id``, ``in_flight``, ...)."""

    def __init__(self, message: str, **details: object):
        super().__init__(message)
        self.details = details


class RunFinished(RunExists):
    """A resume of a run that has finished: there is nothing to continue (409, with its stop reason)."""


def check_size_limit(name: str, value: object, default: int) -> int:
    """A size limit of the server (``max_body_bytes``, ``max_text_chars``): an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ServeError(f"{name}={value!r} is invalid: a whole number >= 1 (the default is {default})")
    return value


# ---- request bodies ----
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartRun(_Body):
    """Start a run of a registered pattern."""

    pattern: str = Field(min_length=1, description="the name of a registered pattern")
    task: str = Field(min_length=1, description="the task the run starts from")
    run_id: str | None = Field(None, description="the run's id (default: a new one)")
    limits: Limits | None = Field(None, description="budgets for this run, merged over the pattern's")

    @field_validator("limits", mode="wrap")
    @classmethod
    def _limits(cls, value: object, handler: ValidatorFunctionWrapHandler) -> Limits | None:
        try:
            limits: Limits | None = handler(value)
            return limits
        except ConfigTypeError as exc:  # Limits refuses a wrong type itself: the body's error, at "limits"
            raise ValueError(str(exc)) from None


class ApproveAnswer(_Body):
    """Go on as proposed."""

    type: Literal["approve"]


class EditAnswer(_Body):
    """Go on with the proposal changed: ``text`` replaces the message, ``vars`` sets flow variables."""

    type: Literal["edit"]
    text: str | None = None
    vars: dict[str, Any] | None = None


class RejectAnswer(_Body):
    """Refuse the proposal."""

    type: Literal["reject"]
    reason: str = ""


class SayAnswer(_Body):
    """The person's own message."""

    type: Literal["say"]
    text: str = Field(min_length=1)


Answer = Annotated[Union[ApproveAnswer, EditAnswer, RejectAnswer, SayAnswer], Field(discriminator="type")]
ANSWER = TypeAdapter(Answer)


class ResumeRun(_Body):
    """Continue an unfinished run (one a stopped server was running, or a cancelled one)."""

    pattern: str | None = Field(None, description="the registered pattern (default: the one that started it)")


class ForkRun(_Body):
    """Start a new run from step ``at`` of a run, optionally edited (``fsmchat.store.timetravel.fork``)."""

    at: int = Field(ge=0, description="the step to fork after (the run's history numbers them)")
    edit: dict[str, Any] | None = Field(None, description="replace, drop, variables, limits")
    fork_id: str | None = Field(None, description="the new run's id (default: a new one)")


def _answer(body: ApproveAnswer | EditAnswer | RejectAnswer | SayAnswer) -> Input:
    if isinstance(body, ApproveAnswer):
        return Approve()
    if isinstance(body, EditAnswer):
        return Edit(text=body.text, vars=body.vars)
    if isinstance(body, RejectAnswer):
        return Reject(body.reason)
    return Say(body.text)


# ---- the registered patterns ----
@dataclass
class Registered:
    """A pattern the operator registered: ``make()`` builds a fresh one per run; ``ref`` is stored as
    its factory, so a run is resumed by the pattern that started it."""

    name: str
    make: Callable[[], Pattern]
    ref: str

    @classmethod
    def of(cls, name: str, obj: Any, ref: str | None = None) -> "Registered":
        """``obj``, a pattern (each run gets a deep copy: runs never share state) or a zero-argument
        factory of one, registered as ``name``; ``ref`` defaults to the pattern's factory, else the
        factory's ``module:qualname``."""
        if isinstance(obj, Pattern):
            return cls(name, lambda: copy.deepcopy(obj), ref or obj.factory or f"serve:{name}")
        if callable(obj):
            return cls(name, obj, ref or f"{obj.__module__}:{obj.__qualname__}")
        raise ServeError(f"pattern {name!r} is a {type(obj).__name__}; register a pattern "
                         "(GroupChat, AgentFlow, ...) or a zero-argument factory of one")

    @classmethod
    def config(cls, name: str, cfg: object, *, allow: Iterable[str] = (), trusted: bool = False) -> "Registered":
        """A pattern or flow from a config (``to_config()``'s output: a model, a dict or its JSON),
        rebuilt for each run by ``from_config`` under the trust rules (``allow``: module prefixes its
        references may import; ``trusted``: any). It is built once here, so a refused reference or
        a bad config fails before anything is served; its ref names the config by its digest."""
        allow = tuple(allow)
        from_config(cfg, allow=allow, trusted=trusted)
        return cls(name, lambda: from_config(cfg, allow=allow, trusted=trusted),
                   f"serve-config:{name}@{config_digest(cfg)[:16]}")

    def build(self) -> Pattern:
        pattern = self.make()
        if not isinstance(pattern, Pattern):
            raise ServeError(f"pattern {self.name!r} built a {type(pattern).__name__}, not a pattern")
        if pattern.factory is None:
            pattern.factory = self.ref
        return pattern


def registry(patterns: Mapping[str, object]) -> dict[str, Registered]:
    """``{name: pattern or zero-argument factory}`` as ``Registered`` (a factory's ref is its
    ``module:qualname``)."""
    if not patterns:
        raise ServeError("no patterns registered; name at least one with --target NAME=TARGET or "
                         "--config NAME=FILE.json")
    out: dict[str, Registered] = {}
    for name, obj in patterns.items():
        out[name] = obj if isinstance(obj, Registered) else Registered.of(name, obj)
    return out


# ---- runs executing in this server ----
SseKind = Literal["trace", "message", "token", "bid", "stream_retry", "end"]
"""The server-sent events of ``GET /api/runs/{id}/events``: a step (``TraceEvent.to_dict()``), a posted
``Message``, a ``TokenDelta``, a ``BidDelta``, a ``StreamRetry`` (their fields), and last the run's end."""
SseItem = tuple[SseKind, Mapping[str, object]]
IN_FLIGHT = {"start": "its start", "resume": "a resume of it", "answer": "an answer to it"}


@dataclass
class Live:
    """One execution (a start or a resume) of a run in this server: what it has emitted so far,
    and its end once it stopped. Readers wait on ``changed``, replaced at every emission."""

    what: str = "start"  # what this execution is: "start", "resume" or "answer"
    items: list[SseItem] = field(default_factory=list)
    end: JsonObject | None = None
    task: "asyncio.Task[None] | None" = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def emit(self, kind: SseKind, data: Mapping[str, object]) -> None:
        self.items.append((kind, redact_data(data)))
        self.wake()

    def wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


def _end_of(result: RunResult) -> JsonObject:
    end: JsonObject = {"run_id": result.run_id, "stop_reason": result.stop_reason,
                           "waiting": bool(result.pending is not None)}
    if result.pending is not None:
        end["allowed"] = list(result.pending.allowed)
    if result.error is not None:
        end["error"] = redact(f"{type(result.error).__name__}: {result.error}")
    return end


class _Hooks(TypedDict):
    """What a run of the server streams to its ``Live``: ``aexecute``'s observers and callbacks."""

    observers: list[Callable[[TraceEvent], None]]
    on_message: list[Callable[[Message], None]]
    on_token: list[Callable[[TokenDelta | BidDelta | StreamRetry], None]]


class Runs:
    """The server's state: the store, the registered patterns and the runs executing now."""

    def __init__(self, db: str | Path, patterns: Mapping[str, object]):
        self.patterns = registry(patterns)
        if not is_dsn(db):
            Path(db).parent.mkdir(parents=True, exist_ok=True)
        self.checkpoint = open_checkpointer(db)
        self.live: dict[str, Live] = {}

    def pattern(self, name: str) -> Registered:
        if name not in self.patterns:
            raise LookupError(f"no pattern named {name!r}; registered: {', '.join(sorted(self.patterns))}")
        return self.patterns[name]

    def running(self, run_id: str) -> bool:
        live = self.live.get(run_id)
        return live is not None and live.end is None

    def launch(self, run_id: str, what: str, go: Callable[[Live], Awaitable[RunResult]]) -> None:
        live = Live(what)

        async def body() -> None:
            try:
                live.end = _end_of(await go(live))
            except asyncio.CancelledError:
                live.end = {"run_id": run_id, "stop_reason": "cancelled", "waiting": False}
                raise
            except Exception as exc:  # the run could not go on: its stream says why
                live.end = {"run_id": run_id, "stop_reason": "error", "waiting": False,
                            "error": redact(f"{type(exc).__name__}: {exc}")}
            finally:
                live.wake()

        self.live[run_id] = live
        live.task = asyncio.get_running_loop().create_task(body(), name=f"fsmchat-run-{run_id}")

    @staticmethod
    def hooks(live: Live) -> _Hooks:
        return {"observers": [lambda ev: live.emit("trace", ev.to_dict())],
                "on_message": [lambda m: live.emit("message", m.model_dump(mode="json"))],
                "on_token": [lambda t: live.emit("token" if isinstance(t, TokenDelta) else "bid" if isinstance(t, BidDelta)
                                                 else "stream_retry", asdict(t))]}

    def start(self, body: StartRun) -> str:
        reg = self.pattern(body.pattern)
        check_run_id(body.run_id, "POST /api/runs")
        pattern = reg.build()
        if body.limits is not None:
            current = pattern.limits.model_dump(exclude_defaults=True) if pattern.limits is not None else {}
            pattern.with_limits(**{**current, **body.limits.model_dump(exclude_defaults=True)})
        pattern.check_task(body.task)  # a task the run would refuse is 422 now, not a 202 whose run then fails
        run_id = body.run_id or new_run_id()
        if run_id in self.checkpoint.runs() or run_id in self.live:
            raise RunExists(f"run {run_id!r} already exists in this store; resume, answer or fork it, or pick "
                            "another run_id", run_id=run_id)
        self.launch(run_id, "start", lambda live: pattern.aexecute(body.task, checkpoint=self.checkpoint,
                                                                   run_id=run_id, **self.hooks(live)))
        return run_id

    def _saved(self, run_id: str) -> Saved:
        if self.running(run_id):
            what = self.live[run_id].what
            raise RunExists(f"run {run_id!r} is running in this server ({IN_FLIGHT[what]} is in flight); wait for "
                            f"its end event (GET /api/runs/{run_id}/events) or cancel it",
                            run_id=run_id, in_flight=what)
        try:
            return self.checkpoint.load(run_id)
        except KeyError:
            raise LookupError(f"no run {run_id!r} in this store") from None

    def _free(self, run_id: str) -> None:
        """Refuse (409) a run another live process holds: its lease has not expired."""
        if any(info.run_id == run_id and info.leased for info in self.checkpoint.list_runs()):
            raise RunExists(f"run {run_id!r} is held by another live process (its lease has not expired); "
                            f"resume it once that process has stopped or its lease has run out", run_id=run_id)

    def _pattern_for(self, run_id: str, saved: Saved, name: str | None) -> Pattern:
        if name is not None:
            return self.pattern(name).build()
        factory = saved.meta.get("factory")
        for reg in self.patterns.values():
            if reg.ref == factory:
                return reg.build()
        raise LookupError(f"run {run_id!r} was started by {factory!r}, which is not registered here; name the "
                          f"pattern in the body ({{\"pattern\": NAME}}); registered: {', '.join(sorted(self.patterns))}")

    def answer(self, run_id: str, answer: Input) -> None:
        saved = self._saved(run_id)
        pending = waiting_for(saved)
        if pending is None:
            raise NotWaiting(f"run {run_id!r} is not waiting for a person (stop reason {saved.stop_reason!r})")
        check_input(pending, answer)
        self._free(run_id)
        pattern = self._pattern_for(run_id, saved, None)
        self.launch(run_id, "answer",
                    lambda live: pattern.aresume(run_id, self.checkpoint, input=answer, **self.hooks(live)))

    def resume(self, run_id: str, name: str | None) -> None:
        saved = self._saved(run_id)
        if saved.finished:
            raise RunFinished(f"run {run_id!r} has finished (stop reason {saved.stop_reason!r}): a resume has "
                              f"nothing to continue; fork it (POST /api/runs/{run_id}/fork) to go on from one of "
                              "its steps", run_id=run_id, stop_reason=saved.stop_reason)
        if waiting_for(saved) is not None:
            raise NotWaiting(f"run {run_id!r} waits for a person: answer it (POST /api/runs/{run_id}/answer)")
        self._free(run_id)
        pattern = self._pattern_for(run_id, saved, name)
        self.launch(run_id, "resume", lambda live: pattern.aresume(run_id, self.checkpoint, **self.hooks(live)))

    def cancel(self, run_id: str) -> None:
        live = self.live.get(run_id)
        if live is None or live.end is not None or live.task is None:
            raise NotWaiting(f"run {run_id!r} is not running in this server (nothing to cancel)")
        live.task.cancel()

    def fork(self, run_id: str, body: ForkRun) -> str:
        self._saved(run_id)
        check_run_id(body.fork_id, "POST /api/runs/{id}/fork")
        return fork(run_id, body.at, self.checkpoint, body.edit, fork_id=body.fork_id)

    def stored_stream(self, run_id: str) -> tuple[list[SseItem], JsonObject]:
        """A run not executing here: its committed events and messages, and its end."""
        saved = self._saved(run_id)
        items: list[SseItem] = [("trace", e.to_dict()) for e in saved.events]
        items += [("message", m.model_dump(mode="json")) for m in saved.messages]
        pending = waiting_for(saved)
        end: JsonObject = {"run_id": run_id, "stop_reason": saved.stop_reason, "waiting": pending is not None}
        if pending is not None:
            end["allowed"] = list(pending.allowed)
        return [(k, redact_data(v)) for k, v in items], end

    async def close(self) -> None:
        """Stop the runs executing here (each keeps what it committed: the next server resumes it)."""
        tasks = [live.task for live in self.live.values() if live.task is not None and not live.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.checkpoint.close()


# ---- HTTP ----
def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(host: str, token: str | None) -> str | None:
    """The token to require: ``token``, else none on a loopback address; refused on any other."""
    if token is not None and not token.strip():
        raise ServeError(f"the token is empty; give a non-empty --token or {TOKEN_ENV}")
    if token is None and not _is_loopback(host):
        raise ServeError(f"listening on {host} (not loopback) needs an access token for its requests; start it "
                         f"with --token or with {TOKEN_ENV} set (nothing was started)")
    return token


class TokenCheck:
    """ASGI middleware: with a token, a request without ``Authorization: Bearer TOKEN`` gets 401."""

    def __init__(self, inner: ASGIApp, token: str | None):
        self.inner, self.token = inner, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.token is None:
            return await self.inner(scope, receive, send)
        given = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"authorization"), "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token.encode()):
            return await self.inner(scope, receive, send)
        body = json.dumps({"error": "this server needs a bearer token: send Authorization: Bearer TOKEN "
                                    "(the token it was started with)"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="fsmchat serve"')]})
        await send({"type": "http.response.body", "body": body})


ROUTES: list[tuple[str, str, str, type[BaseModel] | None, int]] = [
    ("post", "/api/runs", "start a run of a registered pattern", StartRun, 202),
    ("get", "/api/runs", "the runs of the store", None, 200),
    ("get", "/api/runs/{run_id}", "one run: its steps, transcript, graph", None, 200),
    ("get", "/api/runs/{run_id}/events", "server-sent events: trace and message events, then end", None, 200),
    ("post", "/api/runs/{run_id}/answer", "answer a run waiting for a person", None, 202),
    ("post", "/api/runs/{run_id}/resume", "continue an unfinished run", ResumeRun, 202),
    ("post", "/api/runs/{run_id}/cancel", "cancel a run executing in this server", None, 202),
    ("post", "/api/runs/{run_id}/fork", "a new run from step `at` of this one", ForkRun, 201),
]


def openapi(patterns: Iterable[str]) -> JsonObject:
    """The OpenAPI 3.1 document of the API, its bodies written from the pydantic models."""
    ref = "#/components/schemas/{model}"
    schemas: JsonObject = {}
    for model in (StartRun, ResumeRun, ForkRun):
        schema = model.model_json_schema(ref_template=ref)
        schemas.update(schema.pop("$defs", {}))
        if model is StartRun:
            schema["properties"]["pattern"]["enum"] = sorted(patterns)
        schemas[model.__name__] = schema
    answer = ANSWER.json_schema(ref_template=ref)
    schemas.update(answer.pop("$defs", {}))
    schemas["Answer"] = answer
    error: JsonObject = {"description": "what was wrong and what is allowed", "content": {"application/json": {"schema": {
        "type": "object", "properties": {"error": {"type": "string"}, "errors": {"type": "array"},
                                         "limit": {"type": "integer"}}}}}}
    paths: dict[str, JsonObject] = {}
    for method, path, summary, body, status in ROUTES:
        responses: JsonObject = {str(status): {"description": "ok"}, "401": {"description": "no or wrong bearer token"},
                                 "404": error, "409": error, "422": error}
        op: JsonObject = {"summary": summary, "responses": responses}
        name = body.__name__ if body is not None else ("Answer" if path.endswith("/answer") else None)
        if name:
            responses["413"] = error
            op["requestBody"] = {"required": name != "ResumeRun", "content": {"application/json": {
                "schema": {"$ref": ref.format(model=name)}}}}
        if "{run_id}" in path:
            op["parameters"] = [{"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}]
        if path.endswith("/events"):
            responses["200"] = {"description": "event: trace | message | end, data: JSON",
                                      "content": {"text/event-stream": {"schema": {"type": "string"}}}}
        paths.setdefault(path, {})[method] = op
    return {"openapi": "3.1.0", "info": {"title": "fsmchat serve", "version": "1"}, "paths": {**paths},
            "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"bearer": []}]}


class _BadBody(FsmchatError):
    def __init__(self, message: str, errors: list[dict[str, object]]):
        super().__init__(message)
        self.message, self.errors = message, errors


class _TooLarge(FsmchatError):
    """A request body over ``max_body_bytes`` (413): ``size`` is its Content-Length, None when it came
    chunked (it was read only up to just past the limit)."""

    def __init__(self, size: int | None, limit: int):
        told = f"is {size} bytes (its Content-Length)" if size is not None else "came chunked and passed"
        super().__init__(f"the request body {told}, over the {limit} bytes this server accepts (max_body_bytes); "
                         f"send a smaller body, or start the server with a larger max_body_bytes (fsmchat serve --max-body-bytes N)")
        self.size, self.limit = size, limit


def _too_long(data: object, limit: int) -> list[dict[str, object]]:
    """Every text of a JSON body longer than ``limit`` characters, as ``{field, problem, size, limit}``
    (``field`` is its path, as pydantic's errors name fields: ``task``, ``edit.replace.0``)."""
    out: list[dict[str, object]] = []
    todo: deque[tuple[str, object]] = deque([("", data)])
    while todo:  # breadth first, without recursion: a deeply nested body cannot overflow the stack
        at, value = todo.popleft()
        if isinstance(value, str) and len(value) > limit:
            out.append({"field": at or "(body)", "size": len(value), "limit": limit,
                        "problem": f"{len(value)} characters, over the {limit} a text of a request may have "
                                   f"(max_text_chars); shorten it, or start the server with a larger max_text_chars (fsmchat serve --max-text-chars N)"})
        elif isinstance(value, dict):
            todo.extend((f"{at}.{k}" if at else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((f"{at}.{i}" if at else str(i), v) for i, v in enumerate(value))
    return out


def _problem(error: ErrorDetails) -> dict[str, object]:
    """One pydantic error as ``{field, problem, allowed?}``."""
    out: dict[str, object] = {"field": ".".join(str(p) for p in error["loc"]) or "(body)", "problem": error["msg"]}
    ctx = error.get("ctx") or {}
    expected = ctx.get("expected_tags") or ctx.get("expected")
    if isinstance(expected, str):
        out["allowed"] = [t.strip().strip("'") for t in expected.replace(" or ", ", ").split(",") if t.strip()]
    return out


def _sse(kind: SseKind, data: Mapping[str, object]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, default=str)}\n\n".encode()


def app(db: str | Path, patterns: Mapping[str, object], *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> Starlette:
    """The ASGI app of ``fsmchat serve`` over the store at ``db`` and ``patterns`` (``{name: pattern
    or zero-argument factory}``); ``guarded`` and ``TokenCheck`` go in front of it (``server_app``).
    A request body over ``max_body_bytes`` is 413; a text in it over ``max_text_chars``, 422."""
    max_body_bytes = check_size_limit("max_body_bytes", max_body_bytes, DEFAULT_MAX_BODY_BYTES)
    max_text_chars = check_size_limit("max_text_chars", max_text_chars, DEFAULT_MAX_TEXT_CHARS)
    try:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response, StreamingResponse
        from starlette.routing import Route
    except ImportError as exc:
        raise ImportError(MISSING_EXTRA) from exc

    runs = Runs(db, patterns)
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
    schema = openapi(runs.patterns)

    def fail(status: int, message: str, **more: object) -> Response:
        return JSONResponse({"error": redact(message), **more}, status, headers)

    async def read_body(request: Request) -> bytes:
        """The body, refused (413) past ``max_body_bytes``: by its Content-Length before any of it is read,
        else (a chunked body) as soon as more than the limit has arrived."""
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > max_body_bytes:
            raise _TooLarge(int(declared), max_body_bytes)
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > max_body_bytes:
                raise _TooLarge(None, max_body_bytes)
        return bytes(raw)

    async def body_of(request: Request, model: type[_M] | TypeAdapter[_M], optional: bool = False) -> _M:
        raw = await read_body(request)
        if not raw.strip() and optional:
            raw = b"{}"
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise _BadBody(f"the body is not JSON ({exc}); send a JSON object", []) from None
        too_long = _too_long(data, max_text_chars)
        if too_long:
            raise _BadBody("the body is not valid: " + "; ".join(f"{e['field']}: {e['problem']}" for e in too_long),
                           too_long)
        adapter = model if isinstance(model, TypeAdapter) else TypeAdapter(model)
        try:
            return adapter.validate_python(data)
        except ValidationError as exc:
            errors = [_problem(e) for e in exc.errors()]
            raise _BadBody("the body is not valid: " + "; ".join(f"{e['field']}: {e['problem']}" for e in errors),
                           errors) from None

    def handled(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request)
            except _BadBody as exc:
                return fail(422, exc.message, errors=exc.errors)
            except _TooLarge as exc:  # the rest of the body is never read: the connection closes after this
                return JSONResponse({"error": str(exc), "size": exc.size, "limit": exc.limit,
                                     "setting": "max_body_bytes"}, 413, {**headers, "Connection": "close"})
            except (InputNotAllowed, FsmchatError, ValueError) as exc:
                if isinstance(exc, RunExists):
                    return fail(409, str(exc), **exc.details)
                if isinstance(exc, (RunInProgress, LeaseLost, NotWaiting, CheckpointMismatch)):
                    return fail(409, str(exc))
                return fail(422, str(exc))
            except LookupError as exc:
                return fail(404, str(exc.args[0]) if exc.args else str(exc))
        return endpoint

    @handled
    async def start(request: Request) -> Response:
        body = await body_of(request, StartRun)
        run_id = runs.start(body)
        return JSONResponse({"run_id": run_id, "events": f"/api/runs/{run_id}/events"}, 202, headers)

    @handled
    async def answer(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        runs.answer(run_id, _answer(await body_of(request, ANSWER)))
        return JSONResponse({"run_id": run_id, "events": f"/api/runs/{run_id}/events"}, 202, headers)

    @handled
    async def resume(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        runs.resume(run_id, (await body_of(request, ResumeRun, optional=True)).pattern)
        return JSONResponse({"run_id": run_id, "events": f"/api/runs/{run_id}/events"}, 202, headers)

    @handled
    async def cancel(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        runs.cancel(run_id)
        return JSONResponse({"run_id": run_id, "cancelling": True}, 202, headers)

    @handled
    async def fork_run(request: Request) -> Response:
        new_id = runs.fork(request.path_params["run_id"], await body_of(request, ForkRun))
        return JSONResponse({"run_id": new_id, "resume": f"/api/runs/{new_id}/resume"}, 201, headers)

    @handled
    async def events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        live = runs.live.get(run_id)
        if live is None:
            items, end = runs.stored_stream(run_id)

            async def stored() -> AsyncIterator[bytes]:
                for kind, data in items:
                    yield _sse(kind, data)
                yield _sse("end", end)
            return StreamingResponse(stored(), media_type="text/event-stream", headers=headers)

        async def follow() -> AsyncIterator[bytes]:
            seen = 0
            while True:
                while seen < len(live.items):
                    yield _sse(*live.items[seen])
                    seen += 1
                if live.end is not None:
                    yield _sse("end", live.end)
                    return
                await live.changed.wait()
        return StreamingResponse(follow(), media_type="text/event-stream", headers=headers)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(schema, 200, headers)

    @asynccontextmanager
    async def lifespan(_app: object) -> AsyncIterator[None]:
        yield
        await runs.close()

    viewer = viewer_app(db)  # its pages, GET /api/runs and GET /api/runs/{id} read the store
    routes = [Route("/openapi.json", openapi_json), Route("/api/runs", start, methods=["POST"]),
              Route("/api/runs/{run_id}/events", events), Route("/api/runs/{run_id}/answer", answer, methods=["POST"]),
              Route("/api/runs/{run_id}/resume", resume, methods=["POST"]),
              Route("/api/runs/{run_id}/cancel", cancel, methods=["POST"]),
              Route("/api/runs/{run_id}/fork", fork_run, methods=["POST"]), *viewer.routes]
    return Starlette(routes=routes, lifespan=lifespan)


def server_app(db: str | Path, patterns: Mapping[str, object], host: str, port: int, token: str | None,
               allow_hosts: Iterable[str] = (), **limits: int) -> HostCheck:
    """``app`` behind the viewer's Host check and the token check (``limits``: ``app``'s
    ``max_body_bytes``, ``max_text_chars``)."""
    return guarded(TokenCheck(app(db, patterns, **limits), token), host, port, allow_hosts)


def _server(db: str | Path, patterns: Mapping[str, object], sock: socket.socket, token: str | None,
            allow: Iterable[str], **limits: int) -> uvicorn.Server:
    try:
        import uvicorn
    except ImportError as exc:
        raise ImportError(MISSING_EXTRA) from exc
    host, port = sock.getsockname()[:2]
    try:
        served = server_app(db, patterns, host, port, token, allow, **limits)
    except Exception:
        sock.close()
        raise
    return uvicorn.Server(uvicorn.Config(served, log_level="warning", access_log=False, lifespan="on",
                                         timeout_graceful_shutdown=5))


def start(db: str | Path, patterns: Mapping[str, object], host: str = DEFAULT_HOST, port: int = 0,
          token: str | None = None, allow_hosts: Iterable[str] = (), *,
          max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> Running:
    """Serve from a background thread (``port=0``: a free port); returns once it accepts requests.
    ``stop()`` cancels the runs executing in it (each resumable from the store) and ends it. A request
    body over ``max_body_bytes`` is 413; a text in it over ``max_text_chars``, 422."""
    token = check_token(host, token)
    sock = listen(host, port)
    server = _server(db, patterns, sock, token, allow_hosts, max_body_bytes=max_body_bytes,
                     max_text_chars=max_text_chars)
    return in_thread(server, sock, "fsmchat-serve",
                     f"fsmchat serve stopped while starting on {host}:{port} (see the error above)")


def serve(db: str | Path, patterns: Mapping[str, object], host: str = DEFAULT_HOST, port: int = DEFAULT_SERVE_PORT,
          token: str | None = None, allow_hosts: Iterable[str] = (), *,
          max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> None:
    """Serve in the foreground until interrupted (``fsmchat serve``); the limits are ``start``'s."""
    token = check_token(host, token)
    sock = listen(host, port)
    server = _server(db, patterns, sock, token, allow_hosts, max_body_bytes=max_body_bytes,
                     max_text_chars=max_text_chars)
    sock.listen(2048)  # connections queue from now on: a client that read the banner is never refused
    print(f"fsmchat serve: {', '.join(sorted(registry(patterns)))} over {store_label(db)} at {url_of(sock)}/ "
          f"({'token required' if token else 'no token: loopback only'}; Ctrl-C stops it)", flush=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        print("fsmchat serve: stopped", flush=True)
