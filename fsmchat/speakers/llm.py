"""The one path to every model: ``litellm.acompletion``, imported lazily, with fsmchat's own
timeout (``asyncio.wait_for``: litellm ignores ``timeout`` for custom providers) and fsmchat's
own bounded retries (litellm's hidden SDK retries are switched off)."""
from __future__ import annotations

import asyncio
import contextvars
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

OFFLINE_PROVIDER = "fsmchat-offline"
DEFAULT_TIMEOUT = 120.0
DEFAULT_RETRIES = 2

# Set before anything imports litellm: its import otherwise fetches a price list over the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
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
        lm.custom_provider_map.append({"provider": name, "custom_handler": handler})


def get_litellm() -> Any:
    """Import litellm on first use (never at ``import fsmchat``), offline cost map by default."""
    global _litellm
    if _litellm is None:
        with _lock:
            if _litellm is None:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import litellm as lm

                lm.suppress_debug_info = True
                from .offline import OfflineModel

                _providers.setdefault(OFFLINE_PROVIDER, OfflineModel())
                for name, handler in _providers.items():
                    _install(lm, name, handler)
                _litellm = lm
    return _litellm


def supports_tools(model: str | None) -> bool:
    resolved = resolve_model(model)
    if resolved.split("/", 1)[0] in _providers or resolved.startswith(OFFLINE_PROVIDER):
        return True
    try:
        return bool(get_litellm().supports_function_calling(resolved))
    except Exception:
        return False


_NO_RETRY = ("BadRequestError", "AuthenticationError", "ContextWindowExceededError", "NotFoundError",
             "PermissionDeniedError", "UnprocessableEntityError", "ContentPolicyViolationError",
             "UnsupportedParamsError", "InvalidRequestError")


def retryable(exc: BaseException) -> bool:
    """Transient faults (timeouts, 429, 5xx, dropped connections) are retried; request errors never."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    names = {c.__name__ for c in type(exc).__mro__}
    if names & set(_NO_RETRY):
        return False
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status == 408 or status == 429 or status >= 500
    return "APIConnectionError" in names or "Timeout" in names or "ServiceUnavailableError" in names


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


from ..errors import DeadlineExceeded  # noqa: E402  (re-exported: the run's deadline_s passed)


def find_fatal(exc: BaseException | None) -> BaseException | None:
    """An exception marked ``fsmchat_fatal`` anywhere in the chain (litellm wraps provider errors)."""
    todo, seen = [exc], set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if getattr(e, "fsmchat_fatal", False):
            return e
        todo.extend([e.__cause__, e.__context__, getattr(e, "original_exception", None)])
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
            try:  # litellm's price for known models (fsmchat's own providers cost nothing)
                cost = float(get_litellm().completion_cost(completion_response=response))
            except Exception:
                cost = None
        if not cost and self.price is not None:
            cost = (got.get("prompt_tokens", 0) * self.price[0] + got.get("completion_tokens", 0) * self.price[1]) / 1000
        self.cost_usd += cost or 0.0

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def to_state(self) -> dict[str, Any]:
        return {"calls": self.calls, "attempts": self.attempts, "usage": dict(self.usage), "cost_usd": self.cost_usd}

    def restore(self, state: dict[str, Any]) -> None:
        self.calls, self.attempts = state["calls"], state["attempts"]
        self.usage.update(state["usage"])
        self.cost_usd = state["cost_usd"]


async def acomplete(model: str | None, messages: list[dict[str, Any]], *, agent: str,
                    kwargs: dict[str, Any], timeout: float | None, num_retries: int,
                    stats: CallStats | None = None, backoff: float = 0.5, **request: Any) -> Any:
    """One logical model call: up to ``1 + num_retries`` attempts, each bounded by ``timeout``."""
    from ..errors import ModelCallError

    lm = get_litellm()
    params = dict(kwargs)
    params.update(request)
    params["max_retries"] = 0  # litellm/openai SDK retries off: retries happen here only
    params.pop("num_retries", None)
    meta = dict(params.pop("metadata", None) or {})
    meta.setdefault("fsmchat_agent", agent)
    if timeout is not None:
        params.setdefault("timeout", timeout)
    if stats is not None:
        stats.calls += 1
    attempt = 0
    while True:
        attempt += 1
        limit = timeout
        left = stats.remaining() if stats is not None else None
        if left is not None:
            if left <= 0:
                raise ModelCallError(agent, DeadlineExceeded("the run's deadline_s has passed"), attempt - 1)
            limit = left if limit is None else min(limit, left)
        if stats is not None:
            stats.attempts += 1
        try:
            send = INTERCEPTOR.get()
            coro = (send(lm.acompletion, agent, resolve_model(model), messages, meta, params) if send is not None
                    else lm.acompletion(model=resolve_model(model), messages=messages, metadata=meta, **params))
            response = await (asyncio.wait_for(coro, limit) if limit is not None else coro)
            if stats is not None:
                stats.add_usage(response)
            return response
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            fatal = find_fatal(exc)
            if fatal is not None:  # a broken test double or harness: fail loudly, never retry
                raise fatal from exc
            if attempt > num_retries or not retryable(exc):
                raise ModelCallError(agent, exc, attempt) from exc
            wait = retry_after(exc)
            if wait is None:
                wait = backoff * (2 ** (attempt - 1)) * (1 + random.random() * 0.25)
            left = stats.remaining() if stats is not None else None
            if left is not None and wait >= left:
                raise ModelCallError(agent, exc, attempt) from exc  # no retry can finish in time
            await asyncio.sleep(min(wait, 60.0))
