"""The fast path: a model call to an OpenAI-compatible endpoint straight over HTTP (aiohttp).

An agent whose model is ``openai/<name>`` or ``hosted_vllm/<name>`` with an ``api_base`` (vLLM,
llama.cpp, SGLang, LM Studio, Ollama's ``/v1``) talks to its server directly: the request body is
the model name, the messages and the OpenAI options as given, posted to ``{api_base}/chat/completions``.
Everything else goes through litellm, and so do these endpoints when the agent says
``transport="litellm"``, when litellm callbacks are registered (they expect to see every call) or
its debug logging is on, and for options litellm would translate (the reason is noted as a
``transport_fallback`` event of the run).

A streamed request (``stream=True``) takes the fast path too: ``astream`` posts it and reads the
server-sent events itself, yielding each ``data:`` line's chunk as it arrives (``[DONE]`` ends it);
the caller assembles them (``fsmchat.speakers.llm.Streamed``) as it does litellm's chunks.

What fsmchat sees does not depend on the path: a failed request raises the exception litellm
would raise for it (same class, same message, same ``Retry-After``; built by litellm's own error
mapping, on the error path only), and a reply is a ``WireResponse`` with the attributes fsmchat
reads from litellm's ``ModelResponse`` (``choices[0].message.content``/``.tool_calls``, ``usage``,
``model``), priced from litellm's local cost map, looked up once per model.

One ``aiohttp.ClientSession`` serves each event loop and is reused; it is closed when the loop
shuts down (``asyncio.run`` closes it) or by ``aclose()``. aiohttp is imported on the first fast call.
"""
from __future__ import annotations

import asyncio
import atexit
import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, AsyncGenerator, AsyncIterator, Protocol, runtime_checkable

from ..checks import get_opt_str, misfit
from ..errors import ConfigError, FsmchatError
from . import modelmap

if TYPE_CHECKING:  # imported on the first fast call
    import aiohttp

TRANSPORTS = ("auto", "fast", "litellm")
PROVIDERS = ("openai", "hosted_vllm")
KEY_ENV = {"openai": "OPENAI_API_KEY", "hosted_vllm": "HOSTED_VLLM_API_KEY"}
# OpenAI chat-completions options sent in the body exactly as given.
SENT = frozenset("""temperature top_p n stop max_tokens max_completion_tokens presence_penalty frequency_penalty
logit_bias logprobs top_logprobs seed user response_format tools tool_choice parallel_tool_calls stream
stream_options""".split())
# Options that say how to reach the server, never sent in the body.
TRANSPORT_OPTIONS = frozenset(("api_base", "base_url", "api_key", "timeout", "max_retries", "metadata",
                               "extra_headers", "headers", "extra_body"))
_LITELLM_LOG = logging.getLogger("LiteLLM")
CALLBACK_LISTS = ("callbacks", "success_callback", "failure_callback", "_async_success_callback",
                  "_async_failure_callback", "input_callback", "_async_input_callback", "service_callback")


# ---- which path a request takes ---------------------------------------------------------------
def eligible(model: str, options: Mapping[str, object]) -> bool:
    """Whether ``model`` names an OpenAI-compatible endpoint the fast path can reach (a provider
    prefix of ``PROVIDERS`` and an ``api_base``)."""
    provider, _, name = model.partition("/")
    return provider in PROVIDERS and bool(name) and bool(options.get("api_base") or options.get("base_url"))


def static_blocker(model: str, options: Mapping[str, object]) -> str | None:
    """Why a request with these agent options can never take the fast path, or None."""
    if not eligible(model, options):
        return (f"model {model!r} is not an OpenAI-compatible endpoint: the fast path serves "
                f"{' or '.join(p + '/<name>' for p in PROVIDERS)} with an api_base")
    extra = sorted(k for k, v in options.items() if k not in SENT and k not in TRANSPORT_OPTIONS and v is not None)
    if extra:
        return f"option(s) {', '.join(map(repr, extra))} are litellm's to translate"
    provider = model.partition("/")[0]
    if provider == "openai" and not (options.get("api_key") or os.environ.get(KEY_ENV[provider])):
        return "no api_key (litellm reports the missing key)"
    return None


def live_blocker(lm: ModuleType | None) -> str | None:
    """Why no request may take the fast path right now (litellm's callbacks or debug log expect to
    see every call; either may be switched on at any time), or None. ``lm`` None: litellm as this
    process has it (not imported: nobody registered a callback)."""
    if lm is None:
        lm = sys.modules.get("litellm")
        if lm is None:
            return None
    if any(getattr(lm, name, None) for name in CALLBACK_LISTS):
        return "litellm callbacks are registered"
    if lm.set_verbose or _LITELLM_LOG.isEnabledFor(logging.DEBUG):
        return "litellm debug logging is on (its request log)"
    return None


def blocker(lm: ModuleType | None, model: str, options: Mapping[str, object]) -> str | None:
    """Why this request goes through litellm rather than the fast path, or None (it can go fast)."""
    return static_blocker(model, options) or live_blocker(lm)


def check_transport(owner: str, transport: object, model: str, options: Mapping[str, object]) -> None:
    """Refuse a ``transport`` value, or ``"fast"`` for an agent the fast path cannot serve (before any call)."""
    if transport not in TRANSPORTS:
        raise ConfigError(f"{owner}: transport={transport!r} is invalid: one of 'auto' (the fast path for "
                          "OpenAI-compatible endpoints, else litellm), 'fast' (the fast path or an error), 'litellm'")
    if transport == "fast":
        reason = static_blocker(model, options)
        if reason is not None:
            raise ConfigError(f"{owner}: transport='fast' is invalid for this agent: {reason}; "
                              "use transport='auto' or 'litellm'")


class FastPathUnavailable(ConfigError):
    """``transport="fast"`` was asked for a request the fast path cannot send; nothing was sent."""

    fsmchat_fatal = True  # no retry can fix it: the run ends with this error


class _Record:
    """Named fields (``fields``) compared and shown by them, as a dataclass is, without the code a
    dataclass generates while ``import fsmchat`` runs; ``hidden`` fields stay out of the repr."""

    __slots__ = ()
    fields: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, k) == getattr(other, k) for k in self.fields)

    __hash__ = None  # type: ignore[assignment]  # compared by value and mutable, as a dataclass with eq

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.fields if k not in self.hidden)
        return f"{type(self).__name__}({shown})"


def _as_plain(value: object) -> object:
    """A record as plain dicts and lists, all the way down (what ``dataclasses.asdict`` gives)."""
    if isinstance(value, _Record):
        return {k: _as_plain(getattr(value, k)) for k in value.fields}
    if isinstance(value, (list, tuple)):
        return type(value)(_as_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _as_plain(v) for k, v in value.items()}
    return value


class Route(_Record):
    """Where the fast path sends the requests of one agent, worked out once from its model and its
    options (``Route.of``): ``blocked`` says why they can never go fast (None: they can); for those
    that can, the URL, the headers, the model name the body carries and litellm's price per token.
    A run keeps each agent's route (``CallStats.route``) while its requests' options stay the same.
    ``options`` and ``headers`` (keys) are left out of its repr."""

    __slots__ = ("model", "options", "eligible", "blocked", "url", "headers", "name", "price")
    fields = __slots__
    hidden = ("options", "headers")

    def __init__(self, model: str, options: dict[str, object], eligible: bool, blocked: str | None, url: str = "",
                 headers: dict[str, str] | None = None, name: str = "", price: tuple[float, float] | None = None):
        self.model, self.options, self.eligible, self.blocked = model, options, eligible, blocked
        self.url, self.headers, self.name, self.price = url, {} if headers is None else headers, name, price

    @classmethod
    def of(cls, lm: ModuleType | None, model: str, options: Mapping[str, object]) -> "Route":
        """The route of requests to ``model`` with ``options`` (the agent's, or a request's own)."""
        blocked = static_blocker(model, options)
        if blocked is not None:
            return cls(model, dict(options), eligible(model, options), blocked)
        provider, _, name = model.partition("/")
        headers = {"Content-Type": "application/json"}
        key = options.get("api_key") or os.environ.get(KEY_ENV[provider])
        if key:
            headers["Authorization"] = f"Bearer {key}"
        for option in ("headers", "extra_headers"):
            more = options.get(option)
            if more:
                if not isinstance(more, Mapping):
                    raise TypeError(f"{option} must be a mapping of header names to values")
                headers.update(more)
        url = str(options.get("api_base") or options.get("base_url")).rstrip("/") + "/chat/completions"
        return cls(model, dict(options), True, None, url, headers, name, price_of(lm, model))


class Notes(Protocol):
    """What ``choose`` reads and notes in a run's stats (``fsmchat.speakers.llm.CallStats``)."""

    @property
    def events(self) -> list[dict[str, object]] | None: ...

    @property
    def noted(self) -> set[tuple[str, str, str]]: ...


def choose(lm: ModuleType | None, route: Route, transport: str, stats: Notes | None, agent: str) -> bool:
    """True if this call takes the fast path (``route``: where its requests go). ``transport="auto"``
    falls back to litellm for an endpoint the fast path could serve but this request it cannot,
    noting why once per run, agent and reason in the run's events (``stats``: its ``CallStats``, or
    None); ``"fast"`` raises ``FastPathUnavailable`` instead."""
    if transport == "litellm" or (transport == "auto" and not route.eligible):
        return False
    reason = route.blocked or live_blocker(lm)
    if reason is None:
        return True
    if transport == "fast":
        raise FastPathUnavailable(f"agent {agent!r}: transport='fast' cannot send this request: {reason}")
    model = route.model
    if stats is not None and stats.events is not None and (agent, model, reason) not in stats.noted:
        stats.noted.add((agent, model, reason))
        stats.events.append({"event": "transport_fallback", "agent": agent, "model": model, "reason": reason})
    return False


# ---- the response fsmchat reads -----------------------------------------------------------------
class Function(_Record):
    __slots__ = fields = ("name", "arguments")

    def __init__(self, name: str, arguments: str):
        self.name, self.arguments = name, arguments


class ToolCall(_Record):
    __slots__ = fields = ("id", "function", "type")

    def __init__(self, id: str, function: Function, type: str = "function"):
        self.id, self.function, self.type = id, function, type


class WireMessage(_Record):
    __slots__ = fields = ("content", "role", "tool_calls", "function_call")

    def __init__(self, content: str | None, role: str = "assistant", tool_calls: list[ToolCall] | None = None,
                 function_call: None = None):
        self.content, self.role, self.tool_calls, self.function_call = content, role, tool_calls, function_call


class Choice(_Record):
    __slots__ = fields = ("index", "message", "finish_reason")

    def __init__(self, index: int, message: WireMessage, finish_reason: str | None):
        self.index, self.message, self.finish_reason = index, message, finish_reason


class Usage(_Record):
    __slots__ = fields = ("prompt_tokens", "completion_tokens", "total_tokens")

    def __init__(self, prompt_tokens: int = 0, completion_tokens: int = 0, total_tokens: int = 0):
        self.prompt_tokens, self.completion_tokens, self.total_tokens = prompt_tokens, completion_tokens, total_tokens


class WireResponse(_Record):
    """A chat completion as fsmchat reads it (the attribute shape of litellm's ``ModelResponse``)."""

    __slots__ = ("id", "model", "choices", "usage", "created", "_hidden_params", "__dict__")
    fields = __slots__[:-1]

    def __init__(self, id: str, model: str, choices: list[Choice], usage: Usage | None, created: int = 0,
                 _hidden_params: dict[str, object] | None = None):
        self.id, self.model, self.choices, self.usage, self.created = id, model, choices, usage, created
        self._hidden_params = {} if _hidden_params is None else _hidden_params


def with_cost(response: WireResponse, cost: float | None) -> WireResponse:
    """``response`` priced at ``cost`` USD (what ``llm.response_cost`` reads); returns it."""
    response._hidden_params["response_cost"] = cost
    return response


@runtime_checkable
class Dumps(Protocol):
    """A litellm ``ModelResponse`` as ``body_of`` reads it (a pydantic model)."""

    def model_dump(self, *, mode: str = ...) -> Mapping[str, object]: ...


def body_of(response: object) -> dict[str, object]:
    """A response as the JSON body of a chat completion (a cassette keeps it): a ``WireResponse``'s
    fields, or a litellm ``ModelResponse``'s own dump; anything else is a ``TypeError``."""
    if isinstance(response, WireResponse):
        return {k: _as_plain(getattr(response, k)) for k in response.fields if k != "_hidden_params"}
    if not isinstance(response, Dumps):
        raise TypeError(f"a {type(response).__name__} is no chat completion response (a WireResponse or a litellm "
                        "ModelResponse)")
    return dict(response.model_dump(mode="json"))


def _int(value: object, where: str) -> int:
    """A count of a body as ``int(value or 0)`` reads it (a number or a numeric string)."""
    if not value:
        return 0
    if isinstance(value, (int, float, str)):
        return int(value)
    raise misfit(where, "a number", value)


def _dict(value: object, where: str) -> dict[str, object]:
    """A part of a body that must be an object (missing or null: an empty one)."""
    if not value:
        return {}
    if isinstance(value, dict):
        return value
    raise misfit(where, "an object", value)


def _message(m: dict[str, object]) -> WireMessage:
    calls = m.get("tool_calls")
    tool_calls = None
    if calls:
        if not isinstance(calls, list):
            raise misfit("message.tool_calls", "an array", calls)
        tool_calls = []
        for c in calls:
            call = _dict(c, "message.tool_calls[]")
            fn = _dict(call.get("function"), "message.tool_calls[].function")
            args = fn.get("arguments") or ""  # an object (some servers send one) as litellm sends it: its JSON
            tool_calls.append(ToolCall(str(call.get("id") or ""), Function(
                str(fn.get("name") or ""), args if isinstance(args, str) else json.dumps(args)),
                str(call.get("type") or "function")))
    return WireMessage(get_opt_str(m, "content", "message"), str(m.get("role") or "assistant"), tool_calls)


def parse(data: Mapping[str, object], model: str, cost: tuple[float, float] | None) -> WireResponse:
    """The response object for a completion body ``data``, priced with ``cost`` per token. A part of
    the wrong type is a ``TypeError`` naming where it is."""
    u = data.get("usage")
    usage = Usage(_int(u.get("prompt_tokens"), "usage.prompt_tokens"),
                  _int(u.get("completion_tokens"), "usage.completion_tokens"),
                  _int(u.get("total_tokens"), "usage.total_tokens")) if isinstance(u, dict) else None
    listed = data.get("choices") or []
    if not isinstance(listed, list):
        raise misfit("choices", "an array", listed)
    choices = []
    for c in listed:
        choice = _dict(c, "choices[]")
        choices.append(Choice(_int(choice.get("index"), "choices[].index"),
                              _message(_dict(choice.get("message"), "choices[].message")),
                              get_opt_str(choice, "finish_reason", "choices[]")))
    price = None
    if cost is not None and usage is not None:
        price = usage.prompt_tokens * cost[0] + usage.completion_tokens * cost[1]
    return WireResponse(str(data.get("id") or ""), str(data.get("model") or model), choices, usage,
                        _int(data.get("created"), "created"), {"response_cost": price})


_prices: dict[str, tuple[float, float] | None] = {}


def price_of(lm: ModuleType | None, model: str) -> tuple[float, float] | None:
    """(input, output) USD per token from litellm's local cost map (``modelmap``: litellm need not
    be imported; ``lm``, when given, is read instead), looked up once per model."""
    if model not in _prices:
        if lm is not None:
            name = model.partition("/")[2]
            info = lm.model_cost.get(model) or lm.model_cost.get(name) or {}
        else:
            info = modelmap.info_of(model) or {}
        pin, pout = info.get("input_cost_per_token"), info.get("output_cost_per_token")
        _prices[model] = (float(pin), float(pout)) if isinstance(pin, (int, float)) and \
            isinstance(pout, (int, float)) else None
    return _prices[model]


# ---- errors, as litellm raises them ------------------------------------------------------------
LITELLM_MISSING = ("litellm is not installed in this environment, and this call needs it (a provider the fast path "
                   "does not serve, transport='litellm', litellm callbacks, or the error of a failed request, which "
                   "is litellm's). Install it with pip install -e . (in this repository: make install); make demo "
                   "installs only what an offline run imports.")


def import_litellm_part(name: str) -> Any:
    """``importlib.import_module(name)`` for a part of litellm, or ``ImportError(LITELLM_MISSING)``
    when litellm is not installed (the demo's environment)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("litellm", "httpx"):
            raise
        raise ImportError(LITELLM_MISSING) from None


def litellm_error(lm: ModuleType | None, model: str, status: int, message: str, headers: dict[str, str] | None = None,
                  body: object = None) -> BaseException:
    """The exception litellm raises for this failure of an OpenAI-compatible endpoint (its own mapping)."""
    try:
        exception_type = import_litellm_part("litellm.litellm_core_utils.exception_mapping_utils").exception_type
        OpenAIError = import_litellm_part("litellm.llms.openai.common_utils").OpenAIError
    except ImportError as exc:  # what failed comes first, then why it is not litellm's exception
        return ImportError(f"the request failed ({message}); {exc}")
    import httpx  # litellm's own dependency

    provider, _, name = model.partition("/")
    request = httpx.Request("POST", "https://api.openai.com/v1")
    response = httpx.Response(status, headers=headers or {}, request=request)
    original: BaseException = OpenAIError(status, message, request=request, response=response, headers=headers, body=body)
    try:
        exception_type(model=name, original_exception=original, custom_llm_provider=provider)
    except Exception as mapped:  # litellm raises the exception it maps to
        return mapped
    return original  # litellm found no mapping: its own error as it is


def _status_error(lm: ModuleType | None, model: str, status: int, text: str, headers: dict[str, str]) -> BaseException:
    """An HTTP error answer, worded as the OpenAI SDK words it before litellm maps it."""
    message = f"Error code: {status}"
    body: object = None
    try:
        parsed = json.loads(text)
    except ValueError:
        body = text or None
    else:
        body = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        said = body.get("message") if isinstance(body, dict) else None
        if isinstance(said, str) and said:
            message += f" - {said}"
    return litellm_error(lm, model, status, message, headers, body)


# ---- sessions: one per event loop ---------------------------------------------------------------
_lock = threading.Lock()
_NO_LIMIT: aiohttp.ClientTimeout | None = None  # aiohttp.ClientTimeout(total=None), made with the first session
# id(loop) -> (loop, session, closer)
_sessions: dict[int, tuple[asyncio.AbstractEventLoop, aiohttp.ClientSession, AsyncGenerator[None, None]]] = {}


async def _close_with_loop(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    """An async generator left suspended: the loop's ``shutdown_asyncgens`` (``asyncio.run`` calls
    it) finalises it, which closes the loop's session."""
    try:
        yield
    finally:
        await session.close()


def _drop_dead(every: bool = False) -> None:
    """Forget the sessions of closed loops (``every``: of all loops, at exit). A loop closed without
    shutting down its async generators (``asyncio.run`` does) cannot close its session any more:
    it is detached, and its connections are left to the garbage collector."""
    for key, (loop, made, _closer) in list(_sessions.items()):
        if every or loop.is_closed():
            del _sessions[key]
            if not made.closed:
                made.detach()


atexit.register(_drop_dead, True)


async def session() -> aiohttp.ClientSession:
    """The running loop's ``aiohttp.ClientSession`` (made on first use)."""
    loop = asyncio.get_running_loop()
    entry = _sessions.get(id(loop))
    if entry is not None and entry[0] is loop and not entry[1].closed:
        return entry[1]
    import aiohttp

    global _NO_LIMIT
    with _lock:
        _NO_LIMIT = aiohttp.ClientTimeout(total=None)
        _drop_dead()
        made = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), skip_auto_headers=("User-Agent",))
        closer = _close_with_loop(made)
        _sessions[id(loop)] = (loop, made, closer)
    await closer.__anext__()
    return made


def open_sessions() -> int:
    """How many loops' sessions are open."""
    return sum(1 for _loop, made, _closer in _sessions.values() if not made.closed)


async def aclose() -> None:
    """Close the running loop's session (the next fast call opens a new one)."""
    entry = _sessions.pop(id(asyncio.get_running_loop()), None)
    if entry is not None:
        await entry[2].aclose()


# ---- the call -------------------------------------------------------------------------------------
class _Request(_Record):
    __slots__ = fields = ("url",)

    def __init__(self, url: str):
        self.url = url


class Unreachable(FsmchatError, ConnectionError):
    """The endpoint could not be reached (the cause is aiohttp's error): ``request.url`` names the
    URL, as the HTTP client's errors do on litellm's path, so the error a person reads is the same."""

    def __init__(self, url: str, cause: BaseException):
        super().__init__(str(cause))
        self.request = _Request(url)
        self.__cause__ = cause


_JSON = json.JSONDecoder()  # a body is UTF-8 JSON: decoded as such, without json.loads' encoding detection


def sent_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as litellm sends them: a message's key whose value is None (an assistant tool
    call's ``"content": None``, a ``"name": None``) is left out; nested values are sent as given."""
    return [m if None not in m.values() else {k: v for k, v in m.items() if v is not None} for m in messages]


def _body(route: Route, messages: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    """The body of a chat-completions request: the model name, the messages, the OpenAI options."""
    body: dict[str, Any] = {"model": route.name, "messages": sent_messages(messages)}
    for k, v in options.items():
        if k in SENT and v is not None:
            body[k] = v
    body.update(options.get("extra_body") or {})
    return body


async def acompletion(lm: ModuleType | None, route: Route, messages: list[dict[str, object]],
                      options: dict[str, object]) -> WireResponse:
    """One request along ``route``, raising litellm's exception for a failure."""
    import aiohttp

    model, body = route.model, _body(route, messages, options)
    http = await session()
    try:  # the caller bounds the request by its timeout (acomplete's wait_for), as on litellm's path
        async with http.post(route.url, data=json.dumps(body), headers=route.headers, timeout=_NO_LIMIT) as resp:
            payload = await resp.read()
            status, headers = resp.status, resp.headers
    except aiohttp.ClientError as exc:
        raise litellm_error(lm, model, 500, "Connection error.") from Unreachable(route.url, exc)
    if status >= 400:
        raise _status_error(lm, model, status, payload.decode("utf-8", "replace").strip(), dict(headers))
    try:
        data = _JSON.decode(payload.decode("utf-8-sig"))
    except ValueError as exc:
        raise litellm_error(lm, model, 500, str(exc)) from exc
    if not isinstance(data, dict):
        raise litellm_error(lm, model, 500, f"Empty or invalid response from LLM endpoint. Received: {data!r}. "
                                            "Check the reverse proxy or model server configuration.")
    return parse(data, route.name, route.price)


async def astream(lm: ModuleType | None, route: Route, messages: list[dict[str, object]],
                  options: dict[str, object]) -> AsyncIterator[object]:
    """One streamed request along ``route``: each server-sent event's chunk (the JSON of a ``data:``
    line) as it arrives, until ``data: [DONE]`` or the end of the body; a failure raises litellm's exception."""
    import aiohttp

    model, body = route.model, _body(route, messages, options)
    http = await session()
    try:
        async with http.post(route.url, data=json.dumps(body), headers=route.headers, timeout=_NO_LIMIT) as resp:
            if resp.status >= 400:
                payload = await resp.read()
                raise _status_error(lm, model, resp.status, payload.decode("utf-8", "replace").strip(),
                                    dict(resp.headers))
            async for line in resp.content:  # one line at a time, as the server flushes them
                if not line.startswith(b"data:"):
                    continue  # blank separators, comments, event names
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                try:
                    chunk = _JSON.decode(data.decode("utf-8"))
                except ValueError as exc:
                    raise litellm_error(lm, model, 500, f"a streamed chunk is not JSON: {exc}") from exc
                if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):
                    said = chunk["error"].get("message") or "the server reported an error mid-stream"
                    raise litellm_error(lm, model, 500, str(said), body=chunk["error"])
                yield chunk
    except aiohttp.ClientError as exc:
        raise litellm_error(lm, model, 500, "Connection error.") from Unreachable(route.url, exc)
