"""How long fsmchat waits before a retry, over real HTTP (a local OpenAI-compatible server): the
provider's ``Retry-After`` up to the agent's ``max_retry_wait_s`` (60 s by default); a longer one,
or one that would outlast the run's deadline, ends the retries at once with the reason. The waits
go through ``llm.retry_sleep``, replaced here by a recorder: nothing waits, the tests count."""
import pytest
from support.openai_server import OpenAIServer, error, per_agent, text

from fsmchat import Agent, RoundRobinSwarm, from_config
from fsmchat.errors import ConfigError
from fsmchat.speakers import llm
from fsmchat.speakers.llm import RetryRefused


@pytest.fixture
def server():
    srv = OpenAIServer(max_requests=20, max_lifetime=60).start()
    yield srv
    srv.stop()


@pytest.fixture
def waits(monkeypatch):
    seen = []

    async def record(seconds):
        seen.append(seconds)

    monkeypatch.setattr(llm, "retry_sleep", record)
    return seen


def alice(srv, **kw):
    return Agent("alice", model="openai/test-model", api_base=srv.url + "/v1", api_key="sk-test", timeout=10,
                 num_retries=2, **kw)


def test_a_retry_after_over_the_default_cap_is_not_waited_for(server, waits):
    server.set_script(per_agent({"alice": [error(429, retry_after=3600), text("never asked")]}))
    r = RoundRobinSwarm(agents=[alice(server)], max_loops=1).execute("go")
    assert r.stop_reason == "error" and isinstance(r.error, RetryRefused)
    assert r.error.attempts == 1 and r.error.cause is not None
    assert "not retried: the provider asked to wait 3600 s (Retry-After), over the agent's max_retry_wait_s=60" \
        in str(r.error)
    assert waits == [] and len(server.requests_for("alice")) == 1
    assert [m.content for m in r.transcript] == ["go"]  # nothing posted, no "" either


def test_a_retry_after_within_the_cap_is_waited_for_then_retried(server, waits):
    server.set_script(per_agent({"alice": [error(429, retry_after=30), text("second try")]}))
    r = RoundRobinSwarm(agents=[alice(server)], max_loops=1).execute("go")
    assert r.ok and [m.content for m in r.transcript] == ["go", "second try"]
    assert waits == [30.0] and len(server.requests_for("alice")) == 2


def test_the_cap_is_the_agents_max_retry_wait_s(server, waits):
    server.set_script(per_agent({"alice": [error(503, retry_after=30), text("never asked")]}))
    r = RoundRobinSwarm(agents=[alice(server, max_retry_wait_s=10)], max_loops=1).execute("go")
    assert isinstance(r.error, RetryRefused) and "over the agent's max_retry_wait_s=10" in r.error.reason
    assert waits == [] and len(server.requests_for("alice")) == 1


def test_a_retry_after_past_the_deadline_ends_the_retries_at_once(server, waits):
    server.set_script(per_agent({"alice": [error(429, retry_after=50), text("never asked")]}))
    chat = RoundRobinSwarm(agents=[alice(server)], max_loops=1).with_limits(deadline_s=30)
    r = chat.execute("go")
    assert isinstance(r.error, RetryRefused) and r.error.attempts == 1
    assert "the next attempt would start in 50 s (Retry-After), after the run's deadline" in r.error.reason
    assert waits == [] and len(server.requests_for("alice")) == 1


def test_backoff_without_retry_after_is_capped_too(server, waits):
    server.set_script(per_agent({"alice": [error(500), error(500), text("third try")]}))
    r = RoundRobinSwarm(agents=[alice(server, max_retry_wait_s=0.25)], max_loops=1).execute("go")
    assert r.ok and r.transcript[-1].content == "third try"
    assert waits == [0.25, 0.25]  # backoff 0.5 s then 1 s (plus jitter), each cut to the cap


@pytest.mark.parametrize("bad", [-1, float("inf"), "10", True])
def test_max_retry_wait_s_is_checked(bad):
    with pytest.raises(ConfigError, match="max_retry_wait_s"):
        Agent("a", max_retry_wait_s=bad)


def test_max_retry_wait_s_survives_the_config_form():
    chat = RoundRobinSwarm(agents=[Agent("a", max_retry_wait_s=5), Agent("b")])
    assert [a.max_retry_wait_s for a in from_config(chat.to_config()).agents] == [5.0, 60.0]
