"""Fixtures the speakers' tests share."""
import pytest

from support.openai_server import OpenAIServer, text

from fsmchat import Agent, RoundRobinSwarm


@pytest.fixture(scope="module")
def warm():
    """One streamed reply on each path first, with a generous timeout: the first streamed call imports
    litellm's and aiohttp's streaming code (seconds on a loaded machine), which a test whose
    timeout or deadline cuts a stall must not spend inside that limit."""
    for transport in ("litellm", "fast"):
        with OpenAIServer([text("Warm.")], max_lifetime=120) as srv:
            result = RoundRobinSwarm(agents=[Agent("warm", model="openai/test-model", api_base=srv.api_base,
                                                   api_key="sk-test", timeout=120, transport=transport,
                                                   stream=True)], max_loops=1).execute("Warm up.")
            assert result.ok, result.error
