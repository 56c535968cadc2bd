"""A model name no provider answers to ("gpt4o") is refused before the run's first request, in
fsmchat's words: what a model name looks like and the closest names litellm knows."""
from fsmchat import Agent, RoundRobinSwarm
from fsmchat.speakers.llm import UnknownModel


def test_a_model_name_without_a_provider_is_refused_naming_the_closest_known_names():
    r = RoundRobinSwarm(agents=[Agent("writer", model="gpt4o"), Agent("critic", model="claude-sonet-4"),
                                Agent("editor")], max_loops=1).execute("hi")
    assert not r.ok and r.stop_reason == "error" and isinstance(r.error, UnknownModel)
    assert r.calls == 0 and [m.role for m in r.transcript] == ["User"]  # nothing was sent
    assert [(a, m) for a, m, _ in r.error.unknown] == [("writer", "gpt4o")]  # claude-sonet-4 routes to anthropic
    assert str(r.error).startswith(
        "agent 'writer': model='gpt4o' names no provider: a model name is 'provider/model' ('openai/gpt-4o-mini', "
        "'anthropic/claude-sonnet-4-5', 'ollama/llama3', or 'openai/<name>' with an api_base for an "
        "OpenAI-compatible server) or a name litellm knows; the closest known: 'gpt-4o', 'gpt-4'")
    assert "LLM Provider NOT provided" not in str(r.error)
