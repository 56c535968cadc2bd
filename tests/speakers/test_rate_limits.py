"""Shared rate limits: every agent and chat of the process (and of a ``run_batch``) waits for room
under a model's or an endpoint's ``RateLimit`` instead of drawing 429s. Time is a controllable
clock the limiter reads and its waits move; the local server counts requests per window by it
and answers 429 when a window is over its limit, which must never happen."""
from __future__ import annotations

import asyncio

import pytest

from support.openai_server import OpenAIServer, error, respond, text

from fsmchat import Agent, GroupChat, ModelCallError, RateLimit, RoundRobinSwarm, rate_limit
from fsmchat.errors import ConfigError, ConfigTypeError


class Clock:
    """Seconds that pass only when someone waits: ``sleep(s)`` moves the clock ``s`` on, once every
    request the limiter let through has reached the server (so the server sees each request at the
    time it was let through; ``admitted`` and ``arrived`` count them)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []
        self.admitted = 0
        self.arrived = 0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        target = self.now + seconds
        for _ in range(100_000):  # bounded: the requests in flight reach the server in a few loop turns
            if self.arrived >= self.admitted:
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError(f"{self.admitted - self.arrived} admitted request(s) never reached the server")
        self.now = max(self.now, target)
        await asyncio.sleep(0)


class CountedLimit(RateLimit):
    """A ``RateLimit`` on a ``Clock`` that tells the clock of each request it lets through."""

    def __init__(self, clock: Clock, **kw):
        super().__init__(clock=clock, sleep=clock.sleep, **kw)
        self.counted = clock

    async def acquire(self, tokens: float = 0.0, within: float | None = None):
        got = await super().acquire(tokens, within)
        self.counted.admitted += got is not None
        return got


class CountingServer:
    """A script that notes the clock at each request and answers 429 past ``rpm`` in a window."""

    def __init__(self, clock: Clock, rpm: int, reply, window: float = 60.0):
        self.clock, self.rpm, self.reply, self.window = clock, rpm, reply, window
        self.at: list[float] = []
        self.refused = 0

    def __call__(self, request):
        now = self.clock()
        self.clock.arrived += 1
        if sum(1 for t in self.at if t > now - self.window) >= self.rpm:
            self.refused += 1
            return error(429, "rate limit reached", retry_after=1)
        self.at.append(now)
        return self.reply(request) if callable(self.reply) else self.reply

    def most_in_a_window(self) -> int:
        return max(sum(1 for u in self.at if t <= u < t + self.window) for t in self.at)


@pytest.fixture
def limits():
    targets = []

    def put(target, limit):
        targets.append(target)
        rate_limit(target, limit)
    yield put
    for t in targets:
        rate_limit(t, None)


def agent(base, name, **kw):
    return Agent(name, system_prompt=f"You are {name}, a terse planner.", model="openai/test-model", api_base=base,
                 api_key="sk-test", tool_mode="native", num_retries=0, timeout=5, **kw)


def test_a_batch_shares_one_limit_and_waits_instead_of_drawing_429s(limits):
    clock = Clock()
    script = CountingServer(clock, rpm=3, reply=text("Noted."))
    with OpenAIServer(script, max_requests=50) as srv:
        limits(srv.api_base, CountedLimit(clock, rpm=3))
        swarm = RoundRobinSwarm(agents=[agent(srv.api_base, "alice"), agent(srv.api_base, "bob")], max_loops=1)
        outputs = swarm.run_batch(["one", "two", "three", "four"], max_concurrency=4)  # raises on a 429
        srv.assert_clean()
    assert len(outputs) == 4 and script.refused == 0
    assert len(script.at) == 8  # 4 chats x 2 agents, none refused
    assert script.most_in_a_window() == 3
    assert sorted(script.at) == [0.0, 0.0, 0.0, 60.0, 60.0, 60.0, 120.0, 120.0]  # three a minute, then room again
    assert len(clock.waits) >= 2 and clock.now == 120.0


def test_without_the_limit_the_same_batch_draws_429s():
    clock = Clock()
    script = CountingServer(clock, rpm=3, reply=text("Noted."))
    with OpenAIServer(script, max_requests=50) as srv:
        swarm = RoundRobinSwarm(agents=[agent(srv.api_base, "alice"), agent(srv.api_base, "bob")], max_loops=1)
        with pytest.raises(ModelCallError, match="RateLimitError"):
            swarm.run_batch(["one", "two", "three", "four"], max_concurrency=4)
    assert script.refused >= 1 and script.most_in_a_window() == 3 and clock.now == 0.0


def test_a_limit_by_model_name_covers_group_chats_through_litellm_too(limits):
    clock = Clock()
    script = CountingServer(clock, rpm=2, reply=respond(0.0, ""))
    with OpenAIServer(script, max_requests=50) as srv:
        limits("openai/test-model", CountedLimit(clock, rpm=2))
        chat = GroupChat(agents=[agent(srv.api_base, n, transport="litellm") for n in ("alice", "bob", "carol")],
                         max_loops=3, threshold=0.5)
        result = chat.execute("Plan a picnic.")
    assert result.error is None and script.refused == 0
    assert script.at == [0.0, 0.0, 60.0]
    assert [e["event"] for e in result.events] == ["rate_limited"]
    assert result.events[0]["waited_s"] == 60.0


def test_tokens_per_window_count_the_answer_usage():
    clock = Clock()
    limit = RateLimit(tpm=40, clock=clock, sleep=clock.sleep)

    async def go():
        first, waited = await limit.acquire(100)  # an estimate over tpm: alone in the window
        assert waited == 0.0
        limit.settle(first, 15)  # the answer said 15
        _, waited = await limit.acquire(20)  # 15 + 20 <= 40: no wait
        assert waited == 0.0 and clock.now == 0.0
        _, waited = await limit.acquire(20)  # 35 + 20 > 40: until the first leaves the window
        return waited
    assert asyncio.run(go()) == 60.0
    assert clock.waits == [60.0]


def test_requests_per_window_slide():
    clock = Clock()
    limit = RateLimit(rpm=2, window=10, clock=clock, sleep=clock.sleep)

    async def go():
        seen = []
        for step in (0.0, 4.0, 0.0, 0.0):
            clock.now += step
            await limit.acquire()
            seen.append(clock.now)
        return seen
    assert asyncio.run(go()) == [0.0, 4.0, 10.0, 14.0]


def test_bad_limits_are_refused():
    with pytest.raises(ConfigError, match=r"RateLimit: rpm=0 is invalid: a whole number of requests >= 1"):
        RateLimit(rpm=0)
    with pytest.raises(ConfigTypeError, match=r"RateLimit: tpm=1.5 is invalid"):
        RateLimit(tpm=1.5)
    with pytest.raises(ConfigError, match="give rpm"):
        RateLimit()
    with pytest.raises(ConfigError, match="window=0 is invalid"):
        RateLimit(rpm=1, window=0)
    with pytest.raises(ConfigTypeError, match="a RateLimit"):
        rate_limit("gpt-4o-mini", {"rpm": 3})


def test_a_wait_stops_at_the_deadline():
    clock = Clock()
    limit = RateLimit(rpm=1, clock=clock, sleep=clock.sleep)

    async def go():
        assert await limit.acquire(within=5.0) is not None  # room now
        return await limit.acquire(within=5.0)  # the next room is 60 s away: not within 5
    assert asyncio.run(go()) is None
    assert clock.now == 5.0
