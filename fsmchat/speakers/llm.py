"""The one place every model call goes through: ``litellm.acompletion`` (or, for an OpenAI-compatible
endpoint, ``wire``'s fast path), imported lazily, with fsmchat's own
timeout (``asyncio.wait_for``: litellm ignores ``timeout`` for custom providers) and fsmchat's
own bounded retries (litellm's hidden SDK retries are switched off).

litellm's per-call work that fsmchat does not use is switched off when litellm is first imported
(``lean``): the base64 scan and copy of every request for its logging payload, and pricing each
response twice (fsmchat reads the cost litellm computed during the call; fsmchat's own providers
say they are free, so litellm does not search its cost map for them). A user's litellm callbacks
still fire with the same payloads, except that a long base64 image in a logged request is no longer
shortened (set ``MAX_BASE64_LENGTH_FOR_LOGGING`` to keep litellm's default of 64 characters)."""
from __future__ import annotations

import asyncio
import contextvars
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import (BudgetExceeded, DeadlineExceeded, MissingCredentials, ModelCallError, fatal_error,
                      request_error_kind)
from ..statelog import Frozen
from . import log_secrets, ratelimit, wire

OFFLINE_PROVIDER = "fsmchat-offline"
DEFAULT_TIMEOUT = 120.0
DEFAULT_RETRIES = 2

# Set before anything imports litellm: its import otherwise fetches a price list over the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
BASE64_LOG_ENV = "MAX_BASE64_LENGTH_FOR_LOGGING"  # a user's own setting of it wins over ``lean``
_lock = threading.Lock()
_litellm: Any = None
_providers: dict[str, Any] = {}


# A hook around every model request (used by fsmchat.testing.cassette to record and replay):
# ``send(acompletion, agent, model, messages, metadata, params) -> awaitable response``.
# A ContextVar, so one test's cassette never leaks into another's concurrent run.
INTERCEPTOR: contextvars.ContextVar[Any] = contextvars.ContextVar("fsmchat_interceptor", default=None)


def default_model() -> str:
    """``FSMCHAT_MODEL`` if set, else the built-in offline model."""
    return os.environ.get("FSMCHAT_MODEL") or "offline"


def resolve_model(model: str | None) -> str:
    """The litellm model string for a user's model name (``offline`` -> fsmchat's provider)."""
    m = model or default_model()
    if m == "offline" or m.startswith("offline/"):
        return f"{OFFLINE_PROVIDER}/{m.partition('/')[2] or 'default'}"
    return m


def register_provider(name: str, handler: Any) -> None:
    """Add a litellm custom provider, keeping whatever the user registered already."""
    with _lock:
        _providers[name] = handler
        if _litellm is not None:
            _install(_litellm, name, handler)


def _install(lm: Any, name: str, handler: Any) -> None:
    if not any(p.get("provider") == name for p in lm.custom_provider_map):
        own = name.startswith("fsmchat-")
        lm.custom_provider_map.append({"provider": name, "custom_handler": _free(lm, handler) if own else handler})


def priced_free(response: Any) -> Any:
    """Mark a response as costing nothing (``_hidden_params["response_cost"] = 0.0``): litellm then
    reports that cost instead of searching its cost map for the model on every call."""
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict):
        hidden.setdefault("response_cost", 0.0)
    return response


def _free(lm: Any, handler: Any) -> Any:
    """``handler`` (one of fsmchat's own custom providers) with every response marked free."""

    class Free(lm.CustomLLM):  # type: ignore[misc]  # litellm is read as Any ([tool.mypy])
        def completion(self, *args: Any, **kwargs: Any) -> Any:
            return priced_free(handler.completion(*args, **kwargs))

        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            return priced_free(await handler.acompletion(*args, **kwargs))

        def streaming(self, *args: Any, **kwargs: Any) -> Any:
            return handler.streaming(*args, **kwargs)

        def astreaming(self, *args: Any, **kwargs: Any) -> Any:
            return handler.astreaming(*args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(handler, name)

    return Free()


def lean(lm: Any) -> None:
    """Switch off litellm's per-call work that fsmchat does not use (idempotent). Today that is
    the base64 scan: litellm walks and copies every request's messages to shorten base64 images in
    the payload it logs (18% of a call at 1,000 messages), unless ``MAX_BASE64_LENGTH_FOR_LOGGING``
    is 0; fsmchat sets it to 0 unless the user set the variable. It is read from a module global of
    ``litellm.litellm_core_utils.logging_utils`` at call time; tests/test_litellm_cost.py pins that."""
    if BASE64_LOG_ENV not in os.environ:
        from litellm.litellm_core_utils import logging_utils

        logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING = 0


def get_litellm() -> Any:
    """Import litellm on first use (never at ``import fsmchat``), offline cost map by default."""
    global _litellm
    if _litellm is None:
        with _lock:
            if _litellm is None:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import litellm as lm

                lm.suppress_debug_info = True
                lean(lm)
                log_secrets.install()  # mask secrets in litellm's, the OpenAI SDK's, httpx's and fsmchat's log records
                from .offline import OfflineModel

                _providers.setdefault(OFFLINE_PROVIDER, OfflineModel())
                for name, handler in _providers.items():
                    _install(lm, name, handler)
                _litellm = lm
    return _litellm


_tool_modes: dict[str, str] = {}  # resolved model -> "native" | "json" (litellm's knowledge, or a refusal)


def tool_mode_for(model: str | None) -> str:
    """How bids go to ``model``: ``"native"`` (a forced tool call) for every model, names litellm does
    not know included (OpenAI-compatible servers, self-hosted models); ``"json"`` when litellm knows
    the model lacks function calling or the provider refused tools earlier in this process."""
    resolved = resolve_model(model)
    mode = _tool_modes.get(resolved)
    if mode is None:
        mode = "native"
        if resolved.split("/", 1)[0] not in _providers and not resolved.startswith(OFFLINE_PROVIDER):
            try:
                info = get_litellm().get_model_info(resolved)
            except Exception:  # a model litellm does not know: forced tool calls, as the page says
                info = {}
            if info.get("supports_function_calling") is False:
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


def retryable(exc: BaseException) -> bool:
    """Transient faults (timeouts, 429, 5xx, dropped connections) are retried; request errors never
    (authentication, permission, not found, bad request, context window, unsupported parameters,
    and a missing key, which litellm reports as a 500 for OpenAI)."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    if request_error_kind(exc) is not None:
        return False
    names = {c.__name__ for c in type(exc).__mro__}
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status == 408 or status == 429 or status >= 500
    return "APIConnectionError" in names or "Timeout" in names or "ServiceUnavailableError" in names


_CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
_OWN_ENDPOINT = ("api_key", "api_base", "base_url", "azure_ad_token", "aws_profile_name", "aws_access_key_id",
                 "aws_role_name", "aws_web_identity_token", "vertex_credentials", "vertex_project")


def missing_credentials(agents: Any) -> Any:
    """``MissingCredentials`` naming every model-backed agent whose provider needs a key that is
    neither in the environment nor passed to the agent (``litellm.validate_environment``), or None.
    fsmchat's own providers and agents with ``api_key``/``api_base`` (a local server) are skipped;
    litellm is imported only when some agent needs asking. ``FSMCHAT_CHECK_KEYS=0`` turns it off."""
    if os.environ.get("FSMCHAT_CHECK_KEYS", "1") == "0":
        return None
    missing = []
    seen: set[int] = set()
    for a in agents:
        kwargs = getattr(a, "litellm_kwargs", None)
        if kwargs is None or id(a) in seen or not hasattr(a, "model"):
            continue  # a callable speaker, a step: no provider
        seen.add(id(a))
        if any(kwargs.get(k) for k in _OWN_ENDPOINT):
            continue
        model = resolve_model(a.model)
        if model.split("/", 1)[0] in _providers or model.startswith("fsmchat-"):
            continue
        try:
            env = get_litellm().validate_environment(model=model)
        except Exception:
            continue
        keys = [k for k in env.get("missing_keys") or [] if any(w in k.upper() for w in _CREDENTIAL_WORDS)]
        if not env.get("keys_in_environment") and keys:
            missing.append((a.name, a.model or model, keys))
    return MissingCredentials(missing) if missing else None


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


def response_cost(response: Any) -> float | None:
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
    """Counts for one run: logical model calls, HTTP-level attempts, tokens."""

    calls: int = 0
    attempts: int = 0
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0,
                                                           "total_tokens": 0})
    cost_usd: float = 0.0
    deadline: float | None = None  # time.monotonic() by which the run must end
    price: tuple[float, float] | None = None  # user price per 1k (prompt, completion) tokens
    limit_hit: str | None = None
    max_requests: int | None = None  # max_model_calls: no request past it is ever sent
    roster: list[Any] | None = None  # agents whose credentials the run's first request checks
    refused: BaseException | None = None  # the run's MissingCredentials, once found
    over_cap: bool = False  # a request (or bid round) was refused: it would have crossed max_requests
    events: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)  # the run's (fallbacks, waits)
    noted: set[tuple[str, str, str]] = field(default_factory=set, repr=False, compare=False)  # fallbacks noted
    _state: tuple[Any, Frozen | None] = field(default=(None, None), repr=False, compare=False)  # to_state: (key, dict)

    def preflight(self) -> None:
        """Before the run's first request: every agent's credentials, checked once (raises
        ``MissingCredentials`` on this and every later request of the run; nothing is sent)."""
        if self.roster is not None:
            roster, self.roster = self.roster, None
            self.refused = missing_credentials(roster)
        if self.refused is not None:
            raise self.refused

    def fits(self, n: int) -> bool:
        """Whether ``n`` more requests stay within ``max_model_calls``."""
        return self.max_requests is None or self.attempts + n <= self.max_requests

    def refuse_over_cap(self, what: str) -> BudgetExceeded:
        """``BudgetExceeded`` for ``what`` (not sent), remembered so the ``over_budget`` guard holds."""
        self.over_cap, self.limit_hit = True, "max_model_calls"
        return BudgetExceeded(f"max_model_calls={self.max_requests} reached after {self.attempts} request(s): "
                              f"{what} was not sent")

    def add_usage(self, response: Any) -> None:
        u = getattr(response, "usage", None)
        got = {}
        for k in self.usage:
            v = getattr(u, k, None) if u is not None else None
            if isinstance(v, int):
                self.usage[k] += v
                got[k] = v
        cost = None
        provider = str(getattr(response, "model", "") or "")
        if not provider.startswith(("fsmchat-", "offline")) and provider not in ("", "scripted"):
            cost = response_cost(response)  # litellm's price for known models (fsmchat's own providers cost nothing)
        if not cost and self.price is not None:
            cost = (got.get("prompt_tokens", 0) * self.price[0] + got.get("completion_tokens", 0) * self.price[1]) / 1000
        self.cost_usd += cost or 0.0

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def to_state(self) -> dict[str, Any]:
        """What a checkpoint stores: the same read-only dict (a ``Frozen``) until a count changes,
        so a commit after a step that called no model skips it."""
        key = (self.calls, self.attempts, self.cost_usd, self.over_cap, *self.usage.values())
        last, state = self._state
        if key != last or state is None:
            state = Frozen(calls=self.calls, attempts=self.attempts, usage=dict(self.usage), cost_usd=self.cost_usd,
                           over_cap=self.over_cap)
            self._state = (key, state)
        return state

    def restore(self, state: dict[str, Any]) -> None:
        self.calls, self.attempts = state["calls"], state["attempts"]
        self.usage.update(state["usage"])
        self.cost_usd = state["cost_usd"]
        self.over_cap = state.get("over_cap", False)


async def acomplete(model: str | None, messages: list[dict[str, Any]], *, agent: str,
                    kwargs: dict[str, Any], timeout: float | None, num_retries: int,
                    stats: CallStats | None = None, backoff: float = 0.5, transport: str = "auto",
                    **request: Any) -> Any:
    """One logical model call: up to ``1 + num_retries`` attempts, each bounded by ``timeout``.

    Before the run's first request the roster's credentials are checked (``CallStats.preflight``);
    an attempt that would pass ``max_model_calls`` is never sent (``BudgetExceeded``); a request
    error no retry can fix is raised at once as a fatal ``ModelCallError``. ``transport`` picks
    how the request travels (``wire.choose``: the fast path or litellm)."""
    if stats is not None:
        stats.preflight()
    lm = get_litellm()
    params = dict(kwargs)
    params.update(request)
    params["max_retries"] = 0  # litellm/openai SDK retries off: retries happen here only
    params.pop("num_retries", None)
    meta = dict(params.pop("metadata", None) or {})
    meta.setdefault("fsmchat_agent", agent)
    if timeout is not None:
        params.setdefault("timeout", timeout)
    resolved = resolve_model(model)
    secrets = (kwargs.get("api_key"),)
    fast = wire.choose(lm, resolved, params, transport, stats, agent)

    def failed(exc: BaseException, attempts: int) -> ModelCallError:
        return ModelCallError(agent, exc, attempts, model or resolved, secrets)

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
            stats.attempts += 1
            if attempt == 1:
                stats.calls += 1
        try:
            send = INTERCEPTOR.get()
            coro = (send(lm.acompletion, agent, resolved, messages, meta, params) if send is not None
                    else wire.acompletion(lm, resolved, messages, params) if fast
                    else lm.acompletion(model=resolved, messages=messages, metadata=meta, **params))
            response = await (asyncio.wait_for(coro, limit) if limit is not None else coro)
            if stats is not None:
                stats.add_usage(response)
            ratelimit.settled(ticket, response)
            return response
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            fatal = fatal_error(exc)
            if fatal is not None:  # a broken test double or harness: fail loudly, never retry
                if stats is not None:
                    stats.refused = fatal  # and every later request of the run fails the same way
                raise fatal from exc
            if isinstance(exc, asyncio.TimeoutError) and stats is not None and (rest := stats.remaining()) is not None \
                    and rest <= 0:  # cut by the run's deadline, not by the agent's timeout
                raise failed(DeadlineExceeded("the run's deadline_s passed during the request"), attempt) from exc
            if attempt > num_retries or not retryable(exc):
                err = failed(exc, attempt)
                if err.fatal and stats is not None and not ("tools" in params and refused_tools(exc)):
                    stats.refused = err  # no retry can fix it: the run sends nothing more
                raise err from exc
            wait = retry_after(exc)
            if wait is None:
                wait = backoff * (2 ** (attempt - 1)) * (1 + random.random() * 0.25)
            left = stats.remaining() if stats is not None else None
            if left is not None and wait >= left:
                raise failed(exc, attempt) from exc  # no retry can finish in time
            await asyncio.sleep(min(wait, 60.0))
