"""The one place every model call goes through: ``litellm.acompletion`` (or, for an OpenAI-compatible
endpoint, ``wire``'s fast path), imported lazily, with fsmchat's own
timeout (``asyncio.timeout``: litellm ignores ``timeout`` for custom providers) and fsmchat's
own bounded retries (litellm's hidden SDK retries are switched off).

This module sends the requests: the attempts and the waits between them, the streaming, the run's
counts (``CallStats``) and what a failure means to a person (``failure_reason``). Where a model
name leads (fsmchat's own in-process providers, litellm's custom providers, litellm itself,
imported on first use and made ``lean``) and the checks before a run's first request
(``unknown_models``, ``missing_credentials``) live in ``fsmchat.speakers.providers``; the names
other modules reach through this one stay importable from here (``from fsmchat.speakers.llm
import get_litellm``)."""
from __future__ import annotations

import asyncio
import contextvars
import random
import re
import socket
import time
from collections.abc import AsyncIterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol, TypeVar, Union

from ..engine import STEP
from ..errors import BudgetExceeded, DeadlineExceeded, FsmchatError, LimitReached, ModelCallError, fatal_error
from ..common.masking import exception_chain, redact, secret_values
from ..models import BidDelta, StreamRetry, TokenDelta
from ..store.statelog import Frozen
from . import modelmap, ratelimit, wire
from .chunks import MessageField
from .classify import plain_message, request_error_kind
# ``as``: the names other modules, tests and docs reach through this one (the same objects)
from .providers import (API_BASE_ENV as API_BASE_ENV, BASE64_LOG_ENV as BASE64_LOG_ENV,
                        GC_FREEZE_ENV as GC_FREEZE_ENV, NO_KEY as NO_KEY, OFFLINE_PROVIDER as OFFLINE_PROVIDER,
                        UnknownModel as UnknownModel, client_demands_key as client_demands_key,
                        get_litellm as get_litellm, keep_out_of_collections as keep_out_of_collections,
                        lean as lean, loading as loading, missing_credentials as missing_credentials,
                        own_handler, own_provider as own_provider, register_own as register_own,
                        register_provider as register_provider, registered, resolve_model as resolve_model,
                        unknown_models)

T = TypeVar("T")
DEFAULT_TIMEOUT = 120.0
DEFAULT_RETRIES = 2
DEFAULT_MAX_RETRY_WAIT = 60.0  # seconds: a provider asking for a longer wait (Retry-After) is not retried


# A hook around every model request (used by fsmchat.testing.cassette to record and replay):
# ``send(acompletion, agent, model, messages, metadata, params) -> awaitable response``.
# A ContextVar, so one test's cassette never leaks into another's concurrent run.
INTERCEPTOR: contextvars.ContextVar[Callable[..., Awaitable[object]] | None] = \
    contextvars.ContextVar("fsmchat_interceptor", default=None)


REQUESTS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("fsmchat_requests", default=None)
"""A counter of the model requests sent (every attempt) while it is set: ``[n]``, added to in place
(a batch's worker counts each task's requests with it; the request itself goes as it would)."""


TokenSink = Callable[[Union[TokenDelta, BidDelta, StreamRetry]], None]
"""What a run's token sink is given: each ``TokenDelta``, ``BidDelta`` and ``StreamRetry``."""
TOKENS: contextvars.ContextVar[TokenSink | None] = contextvars.ContextVar("fsmchat_tokens", default=None)
"""The run's token sink (``execute(on_token=fn)``, ``stream(task, tokens=True)``): given each
``TokenDelta`` of a reply as it arrives (each ``BidDelta`` of a GroupChat bid's message) and a
``StreamRetry`` when a shown stream is asked again. A ContextVar, so a pattern run inside a flow step streams to the same sink."""


class OwnModel(Protocol):
    """An in-process provider (``own_handler``: the offline model, a scripted model): a request's
    whole answer, or its stream of chunk data."""

    def acompletion(self, model: str, messages: list[dict[str, object]], params: dict[str, object],
                    meta: dict[str, object]) -> Awaitable[object]: ...

    def astream(self, model: str, messages: list[dict[str, object]], params: dict[str, object],
                meta: dict[str, object]) -> AsyncIterable[object]: ...


_tool_modes: dict[str, str] = {}  # resolved model -> "native" | "json" (litellm's knowledge, or a refusal)


def tool_mode_for(model: str | None) -> str:
    """How bids go to ``model``: ``"native"`` (a forced tool call) for every model, names litellm does
    not know included (OpenAI-compatible servers, self-hosted models); ``"json"`` when litellm knows
    the model lacks function calling or the provider refused tools earlier in this process."""
    resolved = resolve_model(model)
    mode = _tool_modes.get(resolved)
    if mode is None:
        mode = "native"
        if not registered(resolved.split("/", 1)[0]) and own_handler(resolved) is None:
            info = modelmap.info_of(resolved) or {}  # litellm's map, read without importing litellm
            if info.get("supports_function_calling") is False:  # unknown: forced tool calls, as the page says
                mode = "json"
        _tool_modes[resolved] = mode
    return mode


def refuse_tools(model: str | None) -> None:
    """Remember that ``model``'s provider refused tools / tool_choice: bid in JSON mode from now on."""
    _tool_modes[resolve_model(model)] = "json"


def refused_tools(exc: BaseException) -> bool:
    """A request error saying the provider does not accept tools or tool_choice."""
    if request_error_kind(exc) not in ("bad_request", "unsupported_params"):
        return False
    text = str(exc).lower()
    return any(w in text for w in ("tool_choice", "tools", "tool call", "function call", "function_call",
                                   "tool use", "tool_use"))


class NoReplyText(FsmchatError, ValueError):
    """A reply (HTTP 200) that a turn cannot post: its message has no text. Retried like a
    transient fault; after the retries the call fails with a ``ModelCallError`` carrying it."""


def retryable(exc: BaseException) -> bool:
    """Transient faults (timeouts, 429, 5xx, dropped connections, a reply with no text) are
    retried; request errors never (authentication, permission, not found, bad request, context
    window, unsupported parameters, and a missing key, which litellm reports as a 500 for OpenAI)."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError, NoReplyText)):
        return True
    if request_error_kind(exc) is not None:
        return False
    names = {c.__name__ for c in type(exc).__mro__}
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status == 408 or status == 429 or status >= 500
    return "APIConnectionError" in names or "Timeout" in names or "ServiceUnavailableError" in names


_TIMEOUTS = {"Timeout", "APITimeoutError", "TimeoutException", "ReadTimeout", "WriteTimeout", "PoolTimeout",
             "ServerTimeoutError"}
_CONNECTION = {"APIConnectionError", "ConnectError", "ClientConnectorError", "ClientOSError", "ServerDisconnectedError",
               "RemoteProtocolError", "ConnectTimeout"}
_SSL_NOISE = re.compile(r"\s*ssl:(?:<[^>]*>|\S+)\s*")


def failure_reason(exc: BaseException, *, timeout: float | None = None, limit: float | None = None,
                   endpoint: object = None) -> str | None:
    """What a failed request means to a person, when the provider's text does not say it: for a
    connection error the URL that could not be reached and why; for a timeout the limit that passed
    and who set it. None for anything else (the error's type and plain message then say it).

    Args:
        exc: The last attempt's exception.
        timeout: The agent's ``timeout``.
        limit: The limit the attempt ran under (the timeout, or less when the run's deadline was nearer).
        endpoint: The agent's ``api_base``, if any.

    Examples:
        >>> from fsmchat.speakers.llm import failure_reason
        >>> print(failure_reason(TimeoutError(), timeout=30.0, limit=30.0))
        TimeoutError: no answer within 30 s, the agent's timeout (Agent(timeout=30)); raise it for a slow model
        or server
        >>> print(failure_reason(ConnectionRefusedError(111, "Connection refused"), endpoint="http://127.0.0.1:9/v1"))
        connection error: cannot reach http://127.0.0.1:9/v1 (connection refused: nothing listens there); check that the
        server is running and that the agent's api_base is right
    """
    chain = exception_chain(exc)
    if any(isinstance(e, LimitReached) for e in chain):
        return None  # a run limit's own message says which limit passed
    names = [{c.__name__ for c in type(e).__mro__} for e in chain]
    if any("TimeoutError" in n or n & _TIMEOUTS for n in names) and not any("ConnectTimeout" in n for n in names):
        if limit is None:
            limit = timeout
        if limit is None:
            return "TimeoutError: the provider's client timed out (the agent has no timeout of its own)"
        if timeout is not None and limit < timeout:
            return (f"TimeoutError: no answer within {limit:.3g} s, the time the run's deadline_s left; raise "
                    "deadline_s (with_limits) or lower the work per run")
        whose = "the default timeout of every Agent" if timeout == DEFAULT_TIMEOUT else "the agent's timeout"
        return (f"TimeoutError: no answer within {limit:g} s, {whose} (Agent(timeout={limit:g})); raise it for a "
                "slow model or server")
    # litellm's own APIConnectionError is its name for any fault it cannot map (a custom provider's
    # RuntimeError, say): only the exceptions of the HTTP stack beneath it tell a connection error
    connection = any((n & _CONNECTION or "ConnectionError" in n or "gaierror" in n)
                     and not type(e).__module__.startswith("litellm") for e, n in zip(chain, names))
    if not connection:
        inner = next((e for e in reversed(chain) if not type(e).__module__.startswith(("litellm", "asyncio"))), None)
        if inner is not None and type(exc).__name__ == "APIConnectionError":
            return f"{type(inner).__name__}: {plain_message(redact(str(inner))) or '(no message)'}"
        return None
    url = next((str(u) for e in reversed(chain) if not type(e).__module__.startswith("litellm")  # litellm's are mocks
                and (u := getattr(getattr(e, "request", None), "url", None))), None) or endpoint
    deepest = chain[-1]
    if isinstance(deepest, ConnectionRefusedError):
        why = "connection refused: nothing listens there"
    elif isinstance(deepest, socket.gaierror):
        why = f"the host name does not resolve: {deepest.strerror}"
    elif isinstance(deepest, OSError) and deepest.strerror:
        why = deepest.strerror
    else:
        why = _SSL_NOISE.sub(" ", plain_message(str(deepest))).strip() or type(deepest).__name__
    where = f"cannot reach {url}" if url else "cannot reach the provider"
    advice = ("check that the server is running and that the agent's api_base is right" if endpoint else
              "check the network connection (and api_base, if the model is served elsewhere)")
    return redact(f"connection error: {where} ({why}); {advice}")




def retry_after(exc: BaseException) -> float | None:
    """Seconds from a Retry-After header on the error's response, if any."""
    for holder in (getattr(exc, "response", None), exc):
        headers = getattr(holder, "headers", None) or getattr(holder, "litellm_response_headers", None)
        if headers:
            value = headers.get("retry-after") or headers.get("Retry-After")
            try:
                return max(0.0, float(value)) if value is not None else None
            except (TypeError, ValueError):
                return None
    return None


def response_cost(response: object) -> float | None:
    """litellm's price for ``response`` in USD, or None if it has none. litellm prices every
    response during the call (``_hidden_params["response_cost"]``, the figure its callbacks get);
    that figure is used as is. A response litellm did not return (a cassette replay) is priced here."""
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict) and "response_cost" in hidden:
        value = hidden["response_cost"]
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    try:
        return float(get_litellm().completion_cost(completion_response=response))
    except Exception:
        return None


@dataclass
class CallStats:
    """Counts for one run: logical model calls, HTTP-level attempts, tokens.

    A branch run of a fork (``parallel``) counts on a lane of the run's stats (``lane()``): each
    call is counted on the lane and on every enclosing one up to the run's, so the run's counts
    stay whole while a lane's checkpoint stores only what that branch (and its own branches)
    spent; a resume adds each lane's stored counts back to the run once. Limits, the deadline and
    a refused request are always the run's."""

    calls: int = 0
    attempts: int = 0
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0,
                                                           "total_tokens": 0})
    cost_usd: float = 0.0
    deadline: float | None = None  # time.monotonic() by which the run must end
    price: tuple[float, float] | None = None  # user price per 1k (prompt, completion) tokens
    limit_hit: str | None = None
    max_requests: int | None = None  # max_model_calls: no request past it is ever sent
    roster: Sequence[object] | None = None  # agents whose credentials the run's first request checks
    refused: BaseException | None = None  # the run's UnknownModel or MissingCredentials, once found
    over_cap: bool = False  # a request (or bid round) was refused: it would have crossed max_requests
    parent: "CallStats | None" = field(default=None, repr=False, compare=False)  # the enclosing stats of a lane
    # called before each request; raising sends nothing (a checkpointed run's lease check)
    before_request: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    tool_calls: int = 0  # tool calls run (fsmchat.speakers.tools)
    max_tool_calls: int | None = None  # Limits.max_tool_calls: no tool call runs past it
    tool_over_cap: bool = False  # a reply's tool calls were refused: they would have crossed max_tool_calls
    # the run's events (fallbacks, waits)
    events: list[dict[str, object]] | None = field(default=None, repr=False, compare=False)
    noted: set[tuple[str, str, str]] = field(default_factory=set, repr=False, compare=False)  # fallbacks noted
    # the text of each partial_reply event, beside it (checkpoints store the events without it)
    partials: list[tuple[dict[str, object], str]] = field(default_factory=list, repr=False, compare=False)
    # to_state: (key, dict)
    _state: tuple[tuple[object, ...] | None, Frozen | None] = field(default=(None, None), repr=False, compare=False)
    # each agent's fast-path route to each model (the run's stats hold them): wire.Route
    routes: dict[tuple[str, str], "wire.Route"] = field(default_factory=dict, repr=False, compare=False)

    @property
    def run(self) -> "CallStats":
        """The run's stats (``self`` unless this is a branch lane): its limits and whole counts."""
        stats = self
        while stats.parent is not None:
            stats = stats.parent
        return stats

    def lane(self) -> "CallStats":
        """Stats for a branch run: counts its own calls and passes each on to ``self``."""
        return CallStats(deadline=self.deadline, price=self.price, max_requests=self.max_requests, parent=self,
                         events=self.events)

    def _chain(self) -> "list[CallStats]":
        chain: list[CallStats] = []
        stats: CallStats | None = self
        while stats is not None:
            chain.append(stats)
            stats = stats.parent
        return chain

    def route(self, lm: ModuleType | None, agent: str, model: str, options: Mapping[str, object]) -> "wire.Route":
        """Where ``agent``'s requests to ``model`` with ``options`` go (``wire.Route``): worked out on
        its first request of the run and kept while its requests' options stay the same."""
        routes = self.run.routes
        found = routes.get((agent, model))
        if found is None or found.options != options:
            found = routes[(agent, model)] = wire.Route.of(lm, model, options)
        return found

    def count_tools(self, n: int = 1) -> None:
        """``n`` tool calls run, on every level (``max_tool_calls`` is read on the run's stats)."""
        for stats in self._chain():
            stats.tool_calls += n

    def refuse_tools_over_cap(self) -> None:
        """A reply's tool calls would cross ``max_tool_calls``: this level and the run stop on it."""
        for stats in (self, self.run):
            stats.tool_over_cap, stats.limit_hit = True, "max_tool_calls"

    def count(self, new_call: bool) -> None:
        """One request sent (``new_call``: the first attempt of a logical call), on every level."""
        for stats in self._chain():
            stats.attempts += 1
            stats.calls += new_call

    def preflight(self) -> None:
        """Before each request: every agent's credentials, checked once before the first (raises
        ``MissingCredentials`` on this and every later request of the run; nothing is sent), then
        the run's ``before_request`` (a checkpointed run's lease)."""
        run = self.run
        if run.roster is not None:
            roster, run.roster = run.roster, None
            run.refused = unknown_models(roster) or missing_credentials(roster)
        if run.refused is not None:
            raise run.refused.with_traceback(None)  # the same error each time, with this raise's frames only
        if run.before_request is not None:
            run.before_request()

    def fits(self, n: int) -> bool:
        """Whether ``n`` more requests stay within ``max_model_calls``."""
        run = self.run
        return run.max_requests is None or run.attempts + n <= run.max_requests

    def refuse_over_cap(self, what: str) -> BudgetExceeded:
        """``BudgetExceeded`` for ``what`` (not sent), remembered so the ``over_budget`` guard holds."""
        run = self.run
        run.over_cap, run.limit_hit = True, "max_model_calls"
        return BudgetExceeded(f"max_model_calls={run.max_requests} reached after {run.attempts} request(s): "
                              f"{what} was not sent")

    def add_usage(self, response: object) -> None:
        u = getattr(response, "usage", None)
        got = {}
        for k in self.usage:
            v = getattr(u, k, None) if u is not None else None
            if isinstance(v, int):
                got[k] = v
        cost = None
        provider = str(getattr(response, "model", "") or "")
        if not provider.startswith(("fsmchat-", "offline")) and provider not in ("", "scripted"):
            cost = response_cost(response)  # litellm's price for known models (fsmchat's own providers cost nothing)
        if not cost and self.price is not None:
            cost = (got.get("prompt_tokens", 0) * self.price[0] + got.get("completion_tokens", 0) * self.price[1]) / 1000
        for stats in self._chain():
            for k, v in got.items():
                stats.usage[k] += v
            stats.cost_usd += cost or 0.0

    def remaining(self) -> float | None:
        deadline = self.run.deadline
        return None if deadline is None else deadline - time.monotonic()

    def to_state(self) -> Frozen:
        """What a checkpoint stores: the same read-only dict (a ``Frozen``) until a count changes,
        so a commit after a step that called no model skips it. A lane stores its own counts."""
        key = (self.calls, self.attempts, self.cost_usd, self.over_cap, self.tool_calls, self.tool_over_cap,
               *self.usage.values())
        last, state = self._state
        if key != last or state is None:
            tools = {"tool_calls": self.tool_calls, "tool_over_cap": self.tool_over_cap} if self.tool_calls or \
                self.tool_over_cap else {}
            state = Frozen(calls=self.calls, attempts=self.attempts, usage=dict(self.usage), cost_usd=self.cost_usd,
                           over_cap=self.over_cap, **tools)
            self._state = (key, state)
        return state

    def restore(self, state: Mapping[str, object]) -> None:
        """Set the counts to a checkpoint's; on a lane, the difference is passed on to every
        enclosing level too (restoring a lane's own state again changes nothing). A stored count
        of the wrong type is a ``TypeError``."""
        calls, attempts, cost, stored = state["calls"], state["attempts"], state["cost_usd"], state["usage"]
        tools = state.get("tool_calls", 0)
        if not (isinstance(calls, int) and isinstance(attempts, int) and isinstance(tools, int)
                and isinstance(cost, (int, float)) and isinstance(stored, dict)):
            raise TypeError("a checkpoint's stats hold something else than counts (calls, attempts, tool_calls, "
                            "cost_usd, usage)")
        calls, attempts, cost = calls - self.calls, attempts - self.attempts, cost - self.cost_usd
        usage = {k: v - self.usage.get(k, 0) for k, v in stored.items()}
        for stats in self._chain():
            stats.calls += calls
            stats.attempts += attempts
            for k, v in usage.items():
                stats.usage[k] = stats.usage.get(k, 0) + v
            stats.cost_usd += cost
        self.over_cap = bool(state.get("over_cap", False))
        if self.over_cap:
            self.run.over_cap = True
        self.count_tools(tools - self.tool_calls)
        self.tool_over_cap = bool(state.get("tool_over_cap", False))
        if self.tool_over_cap:
            self.run.tool_over_cap = True


class RetryRefused(ModelCallError):
    """A transient failure that was not retried because the wait before the next attempt does not
    fit: the provider's ``Retry-After`` is longer than the agent's ``max_retry_wait_s``, or the
    wait would outlast the run's deadline. ``reason`` says which; ``cause`` is the provider's error.

    Examples:
        >>> from fsmchat.speakers.llm import RetryRefused
        >>> err = RetryRefused("critic", RuntimeError("rate limited"), 1, "gpt-4o-mini",
        ...                    reason="the provider asked to wait 3600 s (Retry-After), over max_retry_wait_s=60")
        >>> print(err)
        model call for agent 'critic' (model 'gpt-4o-mini') failed after 1 attempt(s): RuntimeError: rate limited (not retried: the provider asked to wait 3600 s (Retry-After), over max_retry_wait_s=60)
    """

    def __init__(self, agent: str, cause: BaseException, attempts: int, model: str | None = None,
                 secrets: tuple[object, ...] = (), *, reason: str):
        super().__init__(agent, cause, attempts, model, secrets)
        self.refusal = reason  # why no retry was made (``reason`` also says what failed)
        self.reason = f"{self.reason} (not retried: {reason})"
        self.args = (f"{self.args[0]} (not retried: {reason})",)


async def retry_sleep(seconds: float) -> None:
    """The wait between two attempts (``asyncio.sleep``; tests replace it to count the waits)."""
    await asyncio.sleep(seconds)


def _seconds(x: float) -> str:
    return f"{x:g} s" if x >= 1 else f"{x:.3g} s"


class Streamed:
    """One attempt's stream, read into the response fsmchat reads (a ``wire.WireResponse``): text
    deltas are joined (and handed to ``show`` as they come), tool-call deltas are assembled into
    the tool calls by their index, the usage is the chunk's that carries it (the last one, with
    ``stream_options={"include_usage": True}``). ``text`` is what arrived so far, kept when the
    stream breaks.

    A bid's stream (``bid``: its tool mode, ``"native"`` or ``"json"``) hands ``show`` its
    ``message`` instead, decoded as it arrives (``chunks.MessageField``): from the arguments of
    the first ``respond`` call, or from the text of a JSON-mode reply; ``text`` is then what was
    shown of the message. The response is assembled whole all the same."""

    def __init__(self, show: Callable[[str], None] | None, bid: str | None = None):
        self.show = show
        self.parts: list[str] = []
        self.shown = self.parts  # what ``text`` joins: the text, or a bid's message
        self.heard: Callable[[int, dict[str, str]], None] | None = None  # each tool-call delta's call
        if bid is not None and show is not None:
            self._field, self._bid_show, self.shown = MessageField(), show, []
            self._index: int | None = None  # the respond call's index
            self._fed = 0  # how much of its arguments the field has read
            if bid == "json":
                self.show = self._message
            else:
                self.heard = self._respond

    @property
    def text(self) -> str:
        return "".join(self.shown)

    def _message(self, piece: str) -> None:
        """The next piece of a bid's JSON: the message text it completes is shown."""
        text = self._field.feed(piece)
        if text:
            self.shown.append(text)
            self._bid_show(text)

    def _respond(self, index: int, call: dict[str, str]) -> None:
        """A tool-call delta of a bid: the first ``respond`` call's new arguments are read."""
        if self._index is None:
            if call["name"] != "respond":
                return
            self._index = index
        if index == self._index and not self._field.done:
            args = call["arguments"]
            new, self._fed = args[self._fed:], len(args)
            if new:
                self._message(new)

    async def read(self, chunks: AsyncIterable[object], price: tuple[float, float] | None) -> "wire.WireResponse":
        """Read ``chunks`` (each a chunk's JSON data, as the server sent it: untrusted, so every
        part is taken only when it has the expected type) into the response."""
        calls: dict[int, dict[str, str]] = {}
        usage: wire.Usage | None = None
        finish: str | None = None
        model = rid = ""
        parts, show, heard = self.parts, self.show, self.heard
        async for chunk in chunks:
            if type(chunk) is not dict:
                continue
            if not model or not rid:
                model, rid = model or str(chunk.get("model") or ""), rid or str(chunk.get("id") or "")
            u = chunk.get("usage")
            if type(u) is dict and u.get("total_tokens"):
                usage = wire.Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0),
                                   int(u.get("total_tokens") or 0))
            choices = chunk.get("choices")
            for choice in choices if type(choices) is list else ():
                if type(choice) is not dict:
                    continue
                delta = choice.get("delta")
                if type(delta) is dict:
                    text = delta.get("content")
                    if text and type(text) is str:
                        parts.append(text)
                        if show is not None:
                            show(text)
                    deltas = delta.get("tool_calls")
                    for i, call in enumerate(deltas if type(deltas) is list else ()):
                        if type(call) is dict:
                            at = self._assemble(calls, i, call)
                            if heard is not None:
                                heard(at, calls[at])
                finish = choice.get("finish_reason") or finish
        tool_calls = [wire.ToolCall(c["id"], wire.Function(c["name"], c["arguments"])) for _, c in sorted(calls.items())]
        message = wire.WireMessage("".join(parts) if parts or not tool_calls else None,
                                   tool_calls=tool_calls or None)
        cost = None
        if price is not None and usage is not None:
            cost = usage.prompt_tokens * price[0] + usage.completion_tokens * price[1]
        return wire.WireResponse(rid, model, [wire.Choice(0, message, finish)], usage,
                                 _hidden_params={"response_cost": cost})

    @staticmethod
    def _assemble(calls: dict[int, dict[str, str]], i: int, call: dict[str, object]) -> int:
        """Add one tool-call delta to the call of its index (the ``i``-th of its chunk without one);
        that index."""
        index = call.get("index")
        at = index if type(index) is int else i
        slot = calls.setdefault(at, {"id": "", "name": "", "arguments": ""})
        got = call.get("function")
        fn: dict[str, object] = got if type(got) is dict else {}
        slot["id"] = slot["id"] or str(call.get("id") or "")
        slot["name"] = slot["name"] or str(fn.get("name") or "")
        slot["arguments"] += str(fn.get("arguments") or "")
        return at


def _shown(sink: TokenSink, piece: type[TokenDelta] | type[BidDelta], agent: str, step: str | None,
           attempt: int) -> Callable[[str], None]:
    """What hands an attempt's text to the run's sink: as ``piece``s of ``agent``'s ``attempt``."""
    def show(text: str) -> None:
        sink(piece(agent, step, text, attempt))
    return show


async def _as_data(chunks: AsyncIterable[object]) -> AsyncIterator[object]:
    """litellm's stream chunks (pydantic objects) as the JSON data the other paths give."""
    async for chunk in chunks:
        yield chunk.model_dump() if hasattr(chunk, "model_dump") else chunk


def _reason(exc: BaseException) -> str:
    return redact(f"{type(exc).__name__}: {plain_message(str(exc)) or '(no message)'}")


async def within(coro: Awaitable[T], limit: float | None) -> T:
    """Await ``coro`` for at most ``limit`` seconds (None: no limit): ``asyncio.timeout`` from Python
    3.11 (the request runs in the caller's task), ``asyncio.wait_for`` before (a task of its own)."""
    if limit is None:
        return await coro
    timeout = getattr(asyncio, "timeout", None)
    if timeout is None:
        return await asyncio.wait_for(coro, limit)
    async with timeout(limit):
        return await coro


async def acomplete(model: str | None, messages: list[dict[str, object]], *, agent: str,
                    kwargs: Mapping[str, object], timeout: float | None, num_retries: int,
                    stats: CallStats | None = None, backoff: float = 0.5,
                    max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
                    check: Callable[[object], None] | None = None, transport: str = "auto", tokens: bool = False,
                    bid: str | None = None, **request: object) -> Any:
    """One logical model call: up to ``1 + num_retries`` attempts, each bounded by ``timeout``.

    Before the run's first request the roster's credentials are checked (``CallStats.preflight``);
    an attempt that would pass ``max_model_calls`` is never sent (``BudgetExceeded``); a request
    error no retry can fix is raised at once as a fatal ``ModelCallError``. Between attempts it
    waits the provider's ``Retry-After`` (else an exponential backoff, at most ``max_retry_wait``);
    a ``Retry-After`` over ``max_retry_wait``, or a wait past the run's deadline, ends the retries
    at once (``RetryRefused``, with the reason). ``check(response)`` may refuse a response by
    raising ``NoReplyText``: it is retried like a transient fault. ``transport`` picks
    how the request travels (``wire.choose``: the fast path or litellm).

    **Streaming.** The call streams (litellm's ``stream=True``, usage in the final chunk where the
    provider sends it) when the agent says ``stream=True`` or when ``tokens`` (the call writes a
    reply) and the run has a token sink (``TOKENS``); the sink gets a ``TokenDelta`` per text
    delta. A bid (``bid``: its tool mode, ``"native"`` or ``"json"``) streams too when the run has
    a sink, which gets a ``BidDelta`` per piece of the bid's ``message`` as it is decoded from the
    ``respond`` call's arguments (or the JSON reply's text). The response is assembled whole
    (``Streamed``) and is what the caller gets, as without streaming. ``timeout`` and the deadline
    bound the whole stream, so a stream that stalls is cut. A stream that breaks after text arrived
    (a bid: after some of its message was shown) and is retried is noted (a ``stream_retry`` event
    and a ``StreamRetry`` to the sink); one that ends the call (an error, a cancellation) leaves
    what arrived in a ``partial_reply`` event, never in the transcript."""
    if stats is not None:
        stats.preflight()
    params = dict(kwargs)
    params.update(request)
    params["max_retries"] = 0  # litellm/openai SDK retries off: retries happen here only
    params.pop("num_retries", None)
    given = params.pop("metadata", None) or {}
    if not isinstance(given, Mapping):
        raise TypeError(f"'{type(given).__name__}' object is not a mapping")
    meta: dict[str, object] = dict(given)
    meta.setdefault("fsmchat_agent", agent)
    if timeout is not None:
        params.setdefault("timeout", timeout)
    resolved = resolve_model(model)
    sink = TOKENS.get() if tokens or bid is not None else None
    streaming = (bool(params.get("stream")) or sink is not None) and INTERCEPTOR.get() is None
    if streaming:
        params["stream"] = True
        more = params.get("stream_options") or {}
        if not isinstance(more, Mapping):
            raise TypeError(f"'{type(more).__name__}' object is not a mapping")
        params["stream_options"] = {"include_usage": True, **more}
    else:  # a cassette records and replays whole responses
        params.pop("stream", None)
        params.pop("stream_options", None)
    own: OwnModel | None = own_handler(resolved)  # the offline or a scripted model: answered in this process
    route: wire.Route | None = None
    fast = False
    lm: ModuleType | None = None
    if own is not None and (transport == "litellm" or wire.live_blocker(None) is not None):
        own = None  # asked for, or litellm callbacks or its debug log expect every call: through litellm (an adapter)
    if own is None:
        route = stats.route(None, agent, resolved, params) if stats is not None else \
            wire.Route.of(None, resolved, params)
        fast = wire.choose(None, route, transport, stats, agent)
        lm = None if fast else get_litellm()  # the fast path imports litellm only to word an error
    step = STEP.get()

    def failed(exc: BaseException, attempts: int, limit: float | None = None) -> ModelCallError:
        """The error a person reads; every credential and header value the agent sent is masked in it
        and in ``exc``'s chain (an agent copied without validation registers them here)."""
        endpoint = kwargs.get("api_base") or kwargs.get("base_url")
        secrets = tuple(secret_values(kwargs))
        reason = failure_reason(exc, timeout=timeout, limit=limit, endpoint=endpoint) or \
            f"{type(exc).__name__}: {plain_message(redact(str(exc), *secrets)) or '(no message)'}"
        return ModelCallError(agent, exc, attempts, model or resolved, secrets, reason,
                              kind=request_error_kind(exc))

    attempt = 0
    while True:
        attempt += 1
        ticket = await ratelimit.admit(model, resolved, params, messages, stats, agent)
        limit = timeout
        left = stats.remaining() if stats is not None else None
        if left is not None:
            if left <= 0:
                raise failed(DeadlineExceeded("the run's deadline_s has passed"), attempt - 1)
            limit = left if limit is None else min(limit, left)
        if stats is not None:
            if not stats.fits(1):
                raise stats.refuse_over_cap(f"agent {agent!r}'s request (attempt {attempt})")
            stats.count(attempt == 1)
        sent = REQUESTS.get()
        if sent is not None:
            sent[0] += 1
        stream: Streamed | None = None
        coro: Awaitable[object]
        try:
            send = INTERCEPTOR.get()
            if streaming:
                show = None if sink is None else _shown(sink, TokenDelta if bid is None else BidDelta, agent, step,
                                                        attempt)  # a reply's text, or a bid's message
                stream = Streamed(show, bid)
                coro = _stream(lm, stream, resolved, messages, meta, params, route if fast else None, own)
            else:
                coro = (send(own_acompletion(own) if own is not None else (lm or get_litellm()).acompletion, agent,
                             resolved, messages, meta, params) if send is not None
                        else own.acompletion(resolved, wire.sent_messages(messages), params, meta) if own is not None
                        else wire.acompletion(lm, route, messages, params) if fast and route is not None
                        else (lm or get_litellm()).acompletion(model=resolved, messages=messages, metadata=meta,
                                                                **params))
            response = await within(coro, limit)
            if stats is not None:
                stats.add_usage(response)
            ratelimit.settled(ticket, response)
            if check is not None:
                check(response)
            return response
        except asyncio.CancelledError as exc:
            if stream is not None and stream.text:
                _partial(stats, agent, step, attempt, stream.text, "the run was cancelled")
            raise exc from None
        except Exception as exc:
            try:
                wait = _retry_wait(exc, attempt, failed, stats=stats, limit=limit, params=params, agent=agent,
                                   model=model or resolved, kwargs=kwargs, num_retries=num_retries,
                                   backoff=backoff, max_retry_wait=max_retry_wait)
            except BaseException:
                if stream is not None and stream.text:  # the call ends here: what arrived is kept in the events
                    _partial(stats, agent, step, attempt, stream.text, _reason(exc))
                raise
            if stream is not None and stream.text:  # text was shown: the next attempt starts over, visibly
                note = StreamRetry(agent, step, attempt, len(stream.text), _reason(exc))
                if stats is not None and stats.events is not None:
                    stats.events.append({"event": "stream_retry", "agent": agent, "step": step,
                                         "attempt": attempt, "shown": note.shown, "reason": note.reason})
                if sink is not None:
                    sink(note)
            await retry_sleep(wait)


def _retry_wait(exc: Exception, attempt: int, failed: Callable[..., ModelCallError], *, stats: CallStats | None,
                limit: float | None, params: Mapping[str, object], agent: str, model: str,
                kwargs: Mapping[str, object],
                num_retries: int, backoff: float, max_retry_wait: float) -> float:
    """The wait before the next attempt after ``exc``, or the error that ends the call (raised)."""
    fatal = fatal_error(exc)
    if fatal is not None:  # a broken test double or harness: fail loudly, never retry
        if stats is not None:
            stats.run.refused = fatal  # and every later request of the run fails the same way
        raise fatal from exc
    if isinstance(exc, asyncio.TimeoutError) and stats is not None and (rest := stats.remaining()) is not None \
            and rest <= 0:  # cut by the run's deadline, not by the agent's timeout
        raise failed(DeadlineExceeded("the run's deadline_s passed during the request"), attempt) from None
    if attempt > num_retries or not retryable(exc):
        err = failed(exc, attempt, limit)
        if err.fatal and stats is not None and not ("tools" in params and refused_tools(exc)):
            stats.run.refused = err  # no retry can fix it: the run sends nothing more
        raise err from None  # one traceback: the provider's exception is err.cause, masked
    asked = retry_after(exc)
    if asked is not None and asked > max_retry_wait:
        raise RetryRefused(agent, exc, attempt, model, tuple(secret_values(kwargs)), reason=(
            f"the provider asked to wait {_seconds(asked)} (Retry-After), over the agent's "
            f"max_retry_wait_s={max_retry_wait:g}")) from None
    wait = asked if asked is not None else \
        min(backoff * (2 ** (attempt - 1)) * (1 + random.random() * 0.25), max_retry_wait)
    left = stats.remaining() if stats is not None else None
    if left is not None and wait >= left:
        raise RetryRefused(agent, exc, attempt, model, tuple(secret_values(kwargs)), reason=(
            f"the next attempt would start in {_seconds(wait)}"
            f"{' (Retry-After)' if asked is not None else ''}, after the run's deadline "
            f"({_seconds(max(left, 0.0))} left)")) from None
    return wait


def own_acompletion(own: OwnModel) -> Callable[..., Awaitable[object]]:
    """An in-process provider's answer with ``litellm.acompletion``'s keywords (what a cassette calls)."""
    async def acompletion(model: str, messages: list[dict[str, object]], metadata: Mapping[str, object] | None = None,
                          **params: object) -> object:
        return await own.acompletion(model, wire.sent_messages(messages), params, dict(metadata or {}))
    return acompletion


async def _stream(lm: ModuleType | None, stream: Streamed, model: str, messages: list[dict[str, object]],
                  meta: dict[str, object], params: dict[str, object], route: "wire.Route | None",
                  own: OwnModel | None = None) -> "wire.WireResponse":
    """One streamed attempt: in process (``own``), over the fast path (``route``) or through litellm."""
    if own is not None:
        return await stream.read(own.astream(model, wire.sent_messages(messages), params, meta), (0.0, 0.0))  # free
    chunks = wire.astream(lm, route, messages, params) if route is not None else \
        _as_data(await (lm or get_litellm()).acompletion(model=model, messages=messages, metadata=meta, **params))
    return await stream.read(chunks, None if own_provider(model) else wire.price_of(lm, model))


def _partial(stats: CallStats | None, agent: str, step: str | None, attempt: int, text: str, reason: str) -> None:
    """A reply that stopped mid-stream: what arrived goes into the run's events (``partial_reply``)."""
    if stats is not None and stats.events is not None:
        event: dict[str, object] = {"event": "partial_reply", "agent": agent, "step": step, "attempt": attempt, "chars": len(text),
                 "reason": reason}
        stats.events.append(event)
        stats.run.partials.append((event, text))


def shown_events(events: list[dict[str, object]], stats: CallStats) -> list[dict[str, object]]:
    """A run's events as its result shows them: each ``partial_reply`` of this process with the
    text that arrived. The run's working state (what checkpoints store) holds the event without
    it, so no checkpoint ever holds a partial reply's text."""
    texts = {id(event): text for event, text in stats.run.partials}
    return [{**e, "text": texts[id(e)]} if id(e) in texts else e for e in events]
