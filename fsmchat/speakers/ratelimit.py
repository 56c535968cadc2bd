"""Shared rate limits: requests and tokens per minute for a model or an endpoint, held by every
agent and chat of the process (and so of a local ``run_batch``), which wait for room instead of
drawing 429s from the provider."""
from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from typing import Awaitable, Callable, Mapping, Protocol, Sequence

from ..errors import ConfigError, ConfigTypeError


async def wait_for_room(reserve: Callable[[float], Awaitable[tuple[object, float]]],
                        sleep: Callable[[float], Awaitable[object]], tokens: float,
                        within: float | None) -> tuple[object, float] | None:
    """Ask ``reserve`` for room for a request of ``tokens`` until it gives an entry, sleeping the
    wait it names between asks: (the entry, the seconds waited), or None once the next wait would
    pass ``within`` seconds (after sleeping what was left of them)."""
    waited = 0.0
    while True:
        entry, wait = await reserve(tokens)
        if entry is not None:
            return entry, waited
        if within is not None and waited + wait > within:
            await sleep(max(0.0, within - waited))
            return None
        waited += wait
        await sleep(wait)


class RateLimit:
    """At most ``rpm`` requests and ``tpm`` tokens in any ``window`` seconds (60: per minute).

    Set one for a model name or an ``api_base`` with ``fsmchat.rate_limit``; every request to it
    from any agent or chat of the process first waits until the window has room, and the wait is
    noted in the run's events (``{"event": "rate_limited", ...}``). Tokens count the request's
    estimate (a quarter of its characters, plus ``max_tokens``) until the answer's ``usage`` says
    how many it took.

    Args:
        rpm: Requests per window (None: no request limit).
        tpm: Tokens per window (None: no token limit).
        window: The window in seconds.
        clock: Seconds, monotonic (tests pass a controllable clock).
        sleep: How to wait ``seconds`` (tests pass one that moves their clock).

    Raises:
        ConfigError: A limit is not a whole number >= 1, or neither is given.

    Examples:
        >>> from fsmchat import RateLimit
        >>> RateLimit(rpm=500, tpm=200_000)
        RateLimit(rpm=500, tpm=200000, window=60.0)
        >>> RateLimit(rpm=0)
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: RateLimit: rpm=0 is invalid: a whole number of requests >= 1, or None
    """

    def __init__(self, rpm: int | None = None, tpm: int | None = None, *, window: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep):
        for name, value, what in (("rpm", rpm, "requests"), ("tpm", tpm, "tokens")):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigTypeError(f"RateLimit: {name}={value!r} is invalid: a whole number of {what} >= 1, or None")
            if value is not None and value < 1:
                raise ConfigError(f"RateLimit: {name}={value!r} is invalid: a whole number of {what} >= 1, or None")
        if rpm is None and tpm is None:
            raise ConfigError("RateLimit: give rpm (requests per window), tpm (tokens per window) or both")
        if not (isinstance(window, (int, float)) and math.isfinite(window) and window > 0):
            raise ConfigError(f"RateLimit: window={window!r} is invalid: seconds, a finite number > 0")
        self.rpm, self.tpm, self.window = rpm, tpm, float(window)
        self.clock, self.sleep = clock, sleep
        self._sent: deque[list[float]] = deque()  # [sent at, tokens] of the requests in the window
        self._tokens = 0.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RateLimit(rpm={self.rpm}, tpm={self.tpm}, window={self.window})"

    def _room(self, now: float, need: float) -> float:
        """Seconds until a request of ``need`` tokens fits (0: now); records it when it fits."""
        sent = self._sent
        while sent and sent[0][0] <= now - self.window:
            self._tokens -= sent.popleft()[1]
        wait = 0.0
        if self.rpm is not None and len(sent) >= self.rpm:
            wait = sent[len(sent) - self.rpm][0] + self.window - now
        if self.tpm is not None and sent and self._tokens + need > self.tpm:
            left = self._tokens
            for at, tokens in sent:  # the oldest requests leave the window first
                left -= tokens
                if left + need <= self.tpm:
                    break
            wait = max(wait, at + self.window - now)  # a request over tpm alone waits for an empty window
        if wait <= 0:
            sent.append([now, need])
            self._tokens += need
        return wait

    def reserve(self, tokens: float = 0.0) -> tuple[list[float] | None, float]:
        """Take room for a request of ``tokens`` now if it fits: ``(its entry, 0)``; else ``(None,
        seconds until it may fit)``, nothing taken (what a limit shared between processes asks its holder)."""
        with self._lock:
            wait = self._room(self.clock(), tokens)
            return (self._sent[-1], 0.0) if wait <= 0 else (None, wait)

    async def acquire(self, tokens: float = 0.0, within: float | None = None) -> tuple[object, float] | None:
        """Wait until a request of ``tokens`` fits; return its entry (for ``settle``) and the seconds
        waited. None when it would not fit ``within`` seconds (a run's deadline): then it waited those."""
        async def reserve(t: float) -> tuple[object, float]:
            return self.reserve(t)

        return await wait_for_room(reserve, self.sleep, tokens, within)

    def settle(self, entry: object, tokens: float) -> None:
        """The request of ``entry`` took ``tokens`` (its answer's usage), not its estimate."""
        with self._lock:
            if isinstance(entry, list) and any(e is entry for e in self._sent):
                self._tokens += tokens - entry[1]
                entry[1] = tokens


_limits: dict[str, RateLimit] = {}


def rate_limit(target: str, limit: RateLimit | None) -> None:
    """Share ``limit`` among every request of the process to ``target``.

    ``target`` is a model name as agents give it (``"openai/llama-3"``, ``"gpt-4o-mini"``) or an
    ``api_base``; a ``limit`` of None removes its limit.

    Args:
        target: The model name or ``api_base``.
        limit: The ``RateLimit``, or None.

    Raises:
        ConfigTypeError: ``target`` is not a non-empty string or ``limit`` not a ``RateLimit``.

    Examples:
        >>> from fsmchat import RateLimit, rate_limit
        >>> rate_limit("http://127.0.0.1:8000/v1", RateLimit(rpm=60))
        >>> rate_limit("http://127.0.0.1:8000/v1", None)
    """
    if not isinstance(target, str) or not target.strip():
        raise ConfigTypeError(f"rate_limit: target={target!r} is invalid: a model name or an api_base")
    if limit is not None and not isinstance(limit, RateLimit):
        raise ConfigTypeError(f"rate_limit: limit={limit!r} is invalid: a RateLimit(rpm=..., tpm=...) or None")
    if limit is None:
        _limits.pop(target, None)
    else:
        _limits[target] = limit


def limits() -> dict[str, RateLimit]:
    """The limits set in this process (``rate_limit``), by target: what a Ray batch shares with its workers."""
    return dict(_limits)


def limit_for(model: str | None, resolved: str, options: dict[str, object]) -> tuple[str, RateLimit] | None:
    """The limit a request to ``options``' ``api_base`` or to the model falls under, with its target."""
    if not _limits:
        return None
    for target in (options.get("api_base"), options.get("base_url"), model, resolved):
        if target and target in _limits:
            return target, _limits[target]
    return None


def estimate(messages: Sequence[Mapping[str, object]], options: Mapping[str, object]) -> float:
    """A request's tokens before its answer says: a quarter of its characters plus ``max_tokens``."""
    chars = sum(len(c) if isinstance(c := m.get("content"), str) else len(str(c)) for m in messages)
    most = options.get("max_tokens") or options.get("max_completion_tokens") or 0
    return chars / 4 + (most if isinstance(most, (int, float)) else 0)


class RunClock(Protocol):
    """A run's stats as a rate limit reads them (``CallStats``): the seconds left before its deadline."""

    def remaining(self) -> float | None:
        """Seconds until the run's deadline (None: it has none)."""


async def admit(model: str | None, resolved: str, options: dict[str, object], messages: Sequence[Mapping[str, object]],
                stats: RunClock | None, agent: str) -> tuple[RateLimit, object] | None:
    """Wait for room under the request's rate limit, if it has one, noting a wait in the run's
    events (``stats``: its ``CallStats``, or None); returns what ``settled`` needs once the answer's
    usage is known. A wait past the run's deadline stops at the deadline (the caller then ends the
    call with ``DeadlineExceeded``)."""
    found = limit_for(model, resolved, options)
    if found is None:
        return None
    target, limit = found
    within = stats.remaining() if stats is not None else None
    got = await limit.acquire(estimate(messages, options) if limit.tpm is not None else 0.0, within)
    waited = got[1] if got is not None else within
    events = getattr(stats, "events", None)
    if waited and isinstance(events, list):
        events.append({"event": "rate_limited", "agent": agent, "limit": target, "waited_s": round(waited, 3)})
    return (limit, got[0]) if got is not None else None


def settled(ticket: tuple[RateLimit, object] | None, response: object) -> None:
    """Charge the request's real token count (``usage.total_tokens``) to its limit."""
    if ticket is not None and ticket[0].tpm is not None:
        total = getattr(getattr(response, "usage", None), "total_tokens", None)
        if isinstance(total, int):
            ticket[0].settle(ticket[1], total)
