"""Errors a person can act on: one line per cause, the endpoint URL of a connection error, the limit
and who set it for a timeout, no library prefixes, one traceback, the agents that share a cause
named together. Each text is pinned as a user reads it."""
import socket
import traceback

import pytest
from support.openai_server import OpenAIServer, delayed, error, per_agent, text

from fsmchat import Agent, GroupChat, RoundRobinSwarm
from fsmchat.errors import MissingCredentials, ModelCallError
from fsmchat.speakers.classify import grouped_failures, plain_message
from fsmchat.speakers import llm
from fsmchat.speakers.llm import failure_reason

MODEL = "openai/test-model"
HEAD = "model call for agent 'alice' (model 'openai/test-model') failed after 1 attempt(s): "


@pytest.fixture
def refused_base():
    """An address that refuses connections: a port bound by this test and not listening."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        sock.close()


def agent(name, api_base, **kw):
    return Agent(name, model=MODEL, api_base=api_base, api_key="sk-test-0000", num_retries=0, **kw)


def one_traceback(exc):
    tb = "".join(traceback.format_exception(exc))
    return tb.count("Traceback (most recent call last)"), "During handling" in tb or "direct cause" in tb


def test_a_connection_error_names_the_url_and_what_to_check(refused_base):
    result = RoundRobinSwarm(agents=[agent("alice", refused_base)], max_loops=1).execute("Hello?")
    assert str(result.error) == (
        HEAD + f"connection error: cannot reach {refused_base}/chat/completions (connection refused: nothing listens "
        "there); check that the server is running and that the agent's api_base is right")
    assert one_traceback(result.error) == (1, False)
    assert type(result.error.cause).__name__ == "InternalServerError"  # litellm's exception is kept, as .cause


def test_a_timeout_says_the_limit_and_who_set_it():
    with OpenAIServer([], default=delayed(60, text("late"))) as srv:  # answers after the test ends
        result = RoundRobinSwarm(agents=[agent("alice", srv.url + "/v1", timeout=0.25)], max_loops=1).execute("Hi")
    assert str(result.error) == HEAD + ("TimeoutError: no answer within 0.25 s, the agent's timeout "
                                        "(Agent(timeout=0.25)); raise it for a slow model or server")
    assert one_traceback(result.error) == (1, False)


def test_timeout_texts_for_the_default_and_for_a_near_deadline():
    assert failure_reason(TimeoutError(), timeout=llm.DEFAULT_TIMEOUT, limit=llm.DEFAULT_TIMEOUT) == (
        "TimeoutError: no answer within 120 s, the default timeout of every Agent (Agent(timeout=120)); raise it for "
        "a slow model or server")
    assert failure_reason(TimeoutError(), timeout=30.0, limit=2.5) == (
        "TimeoutError: no answer within 2.5 s, the time the run's deadline_s left; raise deadline_s (with_limits) or "
        "lower the work per run")


def test_a_run_limit_keeps_its_own_words():
    from fsmchat.errors import DeadlineExceeded

    assert failure_reason(DeadlineExceeded("the run's deadline_s has passed"), timeout=30.0) is None
    exc = ModelCallError("alice", DeadlineExceeded("the run's deadline_s has passed"), 1, MODEL)
    assert str(exc) == HEAD + "DeadlineExceeded: the run's deadline_s has passed"


def test_a_provider_refusal_has_no_library_prefixes():
    with OpenAIServer([], default=error(401, "Incorrect API key provided")) as srv:
        result = RoundRobinSwarm(agents=[agent("alice", srv.url + "/v1")], max_loops=1).execute("Hi")
    assert str(result.error) == HEAD + ("AuthenticationError: Incorrect API key provided [authentication, not "
                                        "retried: the provider refused the credentials; check the API key]")
    assert "litellm." not in str(result.error) and "OpenAIException" not in str(result.error)
    assert one_traceback(result.error) == (1, False)


def test_a_raising_run_prints_one_traceback(refused_base):
    with pytest.raises(ModelCallError) as raised:
        RoundRobinSwarm(agents=[agent("alice", refused_base)], max_loops=1).run("Hi")
    assert one_traceback(raised.value) == (1, False)


def test_agents_that_share_a_cause_are_named_together(refused_base):
    chat = GroupChat(agents=[agent(n, refused_base) for n in ("alice", "bob", "carol")])
    result = chat.execute("Ship it?")
    assert str(result.error) == (
        "GroupChat turn 1: every agent's bid call failed, so no bid was heard (this is not a lull): agents 'alice', "
        "'bob', 'carol' (model 'openai/test-model'), 1 attempt(s) each: connection error: cannot reach "
        f"{refused_base}/chat/completions (connection refused: nothing listens there); check that the server is "
        "running and that the agent's api_base is right")


def test_each_cause_gets_its_own_line(refused_base):
    with OpenAIServer(per_agent({}, default=error(500, "upstream overloaded", retry_after=0))) as srv:
        chat = GroupChat(agents=[agent("alice", refused_base), agent("bob", srv.url + "/v1"),
                                 agent("carol", srv.url + "/v1")])
        result = chat.execute("Ship it?")
    assert str(result.error).splitlines() == [
        "GroupChat turn 1: every agent's bid call failed, so no bid was heard (this is not a lull):",
        f"  agent 'alice' (model 'openai/test-model'), 1 attempt(s): connection error: cannot reach {refused_base}"
        "/chat/completions (connection refused: nothing listens there); check that the server is running and that "
        "the agent's api_base is right",
        "  agents 'bob', 'carol' (model 'openai/test-model'), 1 attempt(s) each: InternalServerError: upstream "
        "overloaded"]


def test_missing_credentials_name_the_agents_once_with_one_pass_of_frames(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chat = GroupChat(agents=[Agent(n, model="gpt-4o-mini") for n in ("alice", "bob", "carol")])
    with pytest.raises(MissingCredentials) as raised:
        chat.run("Ship it?")
    assert str(raised.value) == (
        "missing credentials: agents 'alice', 'bob', 'carol' (model 'gpt-4o-mini') need OPENAI_API_KEY. Set "
        "OPENAI_API_KEY in the environment, or pass api_key= (or api_base= for a local server) to the agent. No "
        "request was sent.")
    frames = traceback.extract_tb(raised.value.__traceback__)
    assert [f.name for f in frames].count("preflight") == 1  # the same error raised per bid, its frames shown once


def test_a_custom_provider_fault_is_named_by_its_own_type():
    """litellm calls any fault it cannot map an APIConnectionError; the text names the real one."""
    import litellm

    class Broken(litellm.CustomLLM):
        async def acompletion(self, *args, **kwargs):
            raise RuntimeError("the model file is missing")

    llm.register_provider("broken-provider", Broken())
    result = RoundRobinSwarm(agents=[Agent("alice", model="broken-provider/m", num_retries=0)],
                             max_loops=1).execute("Hi")
    assert str(result.error) == ("model call for agent 'alice' (model 'broken-provider/m') failed after 1 attempt(s): "
                                 "RuntimeError: the model file is missing")


@pytest.mark.parametrize("raw,plain", [
    ("litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect API key", "Incorrect API key"),
    ("litellm.BadRequestError: OpenAIException - Error code: 400 - bad\nrequest", "Error code: 400 - bad request"),
    ("litellm.Timeout: Connection timed out after 5.0 seconds.", "Connection timed out after 5.0 seconds."),
    ("upstream overloaded", "upstream overloaded"),
])
def test_plain_message(raw, plain):
    assert plain_message(raw) == plain


def test_grouping_keeps_distinct_causes_apart():
    a = ModelCallError("a", ConnectionError("refused"), 2, "m")
    b = ModelCallError("b", ConnectionError("refused"), 2, "m")
    c = ModelCallError("c", ValueError("bad reply"), 1, "n")
    assert grouped_failures([("a", a), ("c", c), ("b", b)]) == [
        "agents 'a', 'b' (model 'm'), 2 attempt(s) each: ConnectionError: refused",
        "agent 'c' (model 'n'), 1 attempt(s): ValueError: bad reply"]


def test_missing_credentials_group_by_the_variables_needed():
    exc = MissingCredentials([("a", "gpt-4o", ["OPENAI_API_KEY"]), ("b", "claude-3", ["ANTHROPIC_API_KEY"]),
                              ("c", "gpt-4o-mini", ["OPENAI_API_KEY"])])
    assert str(exc) == (
        "missing credentials: agents 'a', 'c' (models 'gpt-4o', 'gpt-4o-mini') need OPENAI_API_KEY; agent 'b' "
        "(model 'claude-3') needs ANTHROPIC_API_KEY. Set ANTHROPIC_API_KEY, OPENAI_API_KEY in the environment, or "
        "pass api_key= (or api_base= for a local server) to the agent. No request was sent.")
