"""What `fsmchat run` says when the offline model answers a turn that had tools without calling
any: a dim note under the message naming the first words of the request and the tools offered, so
a new user knows why no tool ran. A turn whose request matches a tool runs it and has no note; a
real model choosing not to call a tool is normal and has none either. The expected lines are
written out here, not computed by fsmchat."""
from __future__ import annotations

import io
import os
import sys

import pytest

from fsmchat import Agent, GroupChat, RoundRobinSwarm
from fsmchat.cli import main
from fsmchat.cli.live import LiveRun
from fsmchat.testing import ScriptedModel

BROKER = '''\
from fsmchat import Agent, GroupChat, RoundRobinSwarm


def stock_price(ticker: str) -> str:
    """The latest price of a stock.

    Args:
        ticker: The stock's ticker symbol.
    """
    return "42 USD"


def build():
    return RoundRobinSwarm(agents=[Agent("Broker", model="offline", tools=[stock_price], system_prompt="You help.")],
                           max_loops=1)
'''

HAIKU = "Write a haiku about the quiet autumn sea at night"
NOTE = '  (offline: no tool matched "Write a haiku about the quiet autumn sea..."; tools: stock_price)'


def stock_price(ticker: str) -> str:
    """The latest price of a stock.

    Args:
        ticker: The stock's ticker symbol.
    """
    return "42 USD"


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "broker.py").write_text(BROKER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path), os.getcwd())])
    monkeypatch.delitem(sys.modules, "broker", raising=False)
    monkeypatch.delenv("FSMCHAT_MODEL", raising=False)
    return tmp_path


def run_lines(capsys, task: str) -> list[str]:
    assert main(["run", "broker.py", "--task", task]) == 0
    return capsys.readouterr().out.splitlines()


def test_an_offline_turn_with_tools_that_called_none_says_why_under_its_message(project, capsys):
    lines = run_lines(capsys, HAIKU)
    assert lines[0] == f"User: {HAIKU}"
    assert lines[1].startswith("Broker: ") and lines[2] == NOTE
    assert lines[3] == "" and lines[4].startswith("-- stopped: max_loops after 2 messages, 1 model calls")


def test_a_request_that_matches_a_tool_runs_it_and_has_no_note(project, capsys):
    lines = run_lines(capsys, "What is the stock price of ACME?")
    assert lines[1].startswith("Broker: ") and lines[2].startswith("  tool stock_price(ticker=")
    assert not any("(offline: no tool matched" in ln for ln in lines)


def printed(pattern, task: str, **kw) -> tuple[str, list[dict]]:
    out = io.StringIO()
    view = LiveRun(status=False, out=out, **kw)
    hooks = {"on_token": [view.on_token]} if view.tokens else {}
    with view:
        result = pattern.execute(task, observers=[view.on_event], on_message=[view.on_message],
                                 on_start=[view.on_start], **hooks)
    return out.getvalue(), result.events


def broker(name: str = "Broker", system_prompt: str = "You help.") -> Agent:
    return Agent(name, model="offline", tools=[stock_price], system_prompt=system_prompt)


def test_the_note_comes_from_the_runs_event_and_follows_a_streamed_reply_too():
    out, events = printed(RoundRobinSwarm(agents=[broker()], max_loops=1), HAIKU, tokens=True)
    lines = out.splitlines()
    assert lines[1].startswith("Broker: ") and lines[2:] == [NOTE]  # the reply streamed on its line, then the note
    assert events == [{"event": "offline_no_tool_call", "agent": "Broker", "tools": ["stock_price"],
                       "request": "Write a haiku about the quiet autumn sea..."}]


def test_each_note_is_under_its_own_speakers_message():
    plain = Agent("Poet", model="offline", system_prompt="You write poems.")  # no tools: no note
    out, _ = printed(RoundRobinSwarm(agents=[plain, broker()], max_loops=1), "Write a haiku")
    lines = out.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["User", "Poet", "Broker", "  (offline"]
    assert lines[3] == '  (offline: no tool matched "Write a haiku"; tools: stock_price)'


def test_a_real_model_that_calls_no_tool_has_no_note():
    model = ScriptedModel({"Broker": ["A haiku, no tools needed."]})
    agent = model.agent("Broker", tools=[stock_price])
    out, events = printed(RoundRobinSwarm(agents=[agent], max_loops=1), HAIKU)
    assert out == f"User: {HAIKU}\nBroker: A haiku, no tools needed.\n"
    assert not any(e.get("event") == "offline_no_tool_call" for e in events)


def test_a_groupchat_bidder_with_tools_that_won_without_a_call_gets_the_note_and_a_losing_bid_none():
    poet = Agent("Poet", model="offline", system_prompt="You write poems.")
    chat = GroupChat(agents=[broker(system_prompt="You help with poems."), poet], max_loops=4)
    out, events = printed(chat, "Write a haiku about the quiet autumn sea")
    lines = out.splitlines()
    note = '  (offline: no tool matched "Write a haiku about the quiet autumn sea"; tools: stock_price)'
    posted = [i for i, ln in enumerate(lines) if ln.startswith(("Broker: ", "Poet: "))]
    assert posted and any(lines[i].startswith("Broker: ") for i in posted)
    for i in posted:  # under each of the Broker's messages, and under no other line
        assert (lines[i + 1:i + 2] == [note]) == lines[i].startswith("Broker: ")
    assert lines.count(note) == sum(lines[i].startswith("Broker: ") for i in posted)
    bids = sum(ln.startswith("bids, turn ") for ln in lines)
    assert [e["agent"] for e in events if e["event"] == "offline_no_tool_call"] == ["Broker"] * bids  # one a bid
