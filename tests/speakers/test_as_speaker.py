"""What a roster entry becomes: an agent stays itself, an object with name, reply and bid is a speaker as
it is (the ``Speaker`` protocol), a callable is wrapped, and what is neither is refused; and the names
and URLs an ``Agent`` refuses."""
import pytest

from fsmchat import Agent
from fsmchat.speakers import CallableSpeaker, as_speaker
from fsmchat.speakers.agent_options import is_http_url, name_problem
from fsmchat.speakers.speaker import Speaker


class Own:
    name = "own"

    async def reply(self, turn):
        return "mine"

    async def bid(self, turn):
        return None


def critic(turn):
    return "No."


def half(turn):  # a callable with a reply but no bid: no speaker of its own
    return "Half."


half.reply = critic


def test_agents_and_speakers_of_your_own_stay_themselves_and_callables_are_wrapped():
    agent, own = Agent("Critic"), Own()
    assert as_speaker(agent) is agent and as_speaker(own) is own
    for fn in (critic, half, lambda turn: "Hi."):
        wrapped = as_speaker(fn)
        assert type(wrapped) is CallableSpeaker and wrapped.fn is fn
    assert [isinstance(x, Speaker) for x in (agent, own, critic, half)] == [True, True, False, False]
    with pytest.raises(TypeError, match="a participant must be an fsmchat Agent or a callable"):
        as_speaker(3)


@pytest.mark.parametrize("value, ok", [
    ("http://127.0.0.1:8000/v1", True), ("https://api.example.com/v1", True), ("ftp://x.org", False),
    ("http://exa mple.com", False), ("http://example.com/\u2003v1", False), ("http://", False), (3, False)])
def test_an_endpoint_is_an_http_url_with_a_host_and_no_whitespace(value, ok):
    assert is_http_url(value) is ok


@pytest.mark.parametrize("name, problem", [
    ("Critic", None), ("Ça va", None), ("a b", None),
    ("a\tb", "it holds '\\t' (U+0009"), ("x\x7f", "it holds '\\x7f' (U+007F"), ("zero\u200bwidth", "U+200B"),
    ("a/b", "it holds '/'")])
def test_a_name_is_one_line_of_visible_text(name, problem):
    got = name_problem(name)
    assert (got is None) if problem is None else (problem in got)
