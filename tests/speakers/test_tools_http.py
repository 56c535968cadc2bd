"""Tool calls over real HTTP: fsmchat -> litellm -> openai SDK -> a local OpenAI-compatible server
(tests/support/openai_server.py) on 127.0.0.1. The exact request sequence: the tools offered, the assistant
``tool_calls`` sent back, one ``tool`` message per call with the matching id, in call order."""
from __future__ import annotations

import pytest

from support.openai_server import OpenAIServer, Reply, completion, per_agent, text

from fsmchat import Agent, RoundRobinSwarm


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    return {"Oslo": "rain", "Rome": "sun"}[city]


def two_calls() -> Reply:
    calls = [{"id": "call_oslo", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
             {"id": "call_rome", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]
    return Reply(body=completion({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"))


@pytest.fixture
def server():
    with OpenAIServer(max_requests=10, max_lifetime=30) as srv:
        yield srv
        srv.assert_clean()


def test_the_wire_carries_tool_calls_and_results_with_matching_ids(server):
    server.set_script(per_agent({"alice": [two_calls(), text("Rain in Oslo, sun in Rome.")]}))
    alice = Agent("alice", system_prompt="You are alice, a forecaster.", model="openai/test-model",
                  api_base=server.url + "/v1", api_key="sk-test", num_retries=0, timeout=5, tools=[weather])
    r = RoundRobinSwarm(agents=[alice]).execute("Weather in Oslo and Rome?")
    assert r.ok, r.error
    assert r.transcript[-1].content == "Rain in Oslo, sun in Rome."
    first, second = server.requests
    spec = {"type": "function", "function": {"name": "weather", "description": "The weather in a city.",
                                             "parameters": {"type": "object", "additionalProperties": False,
                                                            "properties": {"city": {"type": "string",
                                                                                    "description": "The city's name."}},
                                                            "required": ["city"]}}}
    assert first["tools"] == [spec] and first["tool_choice"] == "auto"
    assert [m["role"] for m in first["messages"]] == ["system", "user", "user"]
    assert second["tools"] == [spec] and second["tool_choice"] == "auto"
    assert second["messages"][:3] == first["messages"]
    assistant, tool_oslo, tool_rome = second["messages"][3:]
    assert assistant["role"] == "assistant" and assistant.get("content") in (None, "")
    assert assistant["tool_calls"] == [
        {"id": "call_oslo", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
        {"id": "call_rome", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]
    assert tool_oslo == {"role": "tool", "tool_call_id": "call_oslo", "content": "rain"}
    assert tool_rome == {"role": "tool", "tool_call_id": "call_rome", "content": "sun"}
    assert [(e.id, e.result) for e in r.transcript[-1].tool_calls] == [("call_oslo", "rain"), ("call_rome", "sun")]
