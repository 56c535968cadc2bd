"""A secret a tool raises with (or returns) is masked where it enters the run: the tool's result and
error in memory (what goes back to the model), and every row a store keeps (events, messages,
states) in memory, SQLite (its file and WAL) and PostgreSQL."""
import json
from pathlib import Path

import pytest

from fsmchat import RoundRobinSwarm, Tool
from fsmchat.testing import ScriptedModel, ToolCall
from support.stores import STORES

KEY = "sk-live-7Hq2Zx9PpL4mW8rT"  # the agent's credential, registered when the agent is made
BARE = "q9v7TzW2mK4xR8pL5nB3"  # no shape at all: masked only because it is the run's known key


def leaky(city: str) -> str:
    """Look up the weather.

    Args:
        city: Where.
    """
    raise RuntimeError(f"upstream refused {city}: bad key {BARE} (also {KEY})")


def chatty(city: str) -> str:
    """Echo the config.

    Args:
        city: Where.
    """
    return f"weather in {city}: sunny; debug api_key={BARE} token {KEY}"


def everything(cp, run_id):
    """Every text a store holds for a run, as it would be read back by anyone with the store."""
    if type(cp).__name__ == "SqliteCheckpointer":
        path = Path(cp.path)  # the database file and its WAL
        return "".join(p.read_bytes().decode("latin-1") for p in path.parent.glob(path.name + "*"))
    if type(cp).__name__ == "PostgresCheckpointer":
        import psycopg

        with psycopg.connect(cp.dsn) as conn:
            return "".join(str(row) for t in ("runs", "events", "messages") for row in
                           conn.execute(f"SELECT * FROM {t}").fetchall())  # noqa: S608 (fixed names)
    saved = cp.load(run_id)
    return json.dumps([[m.model_dump(mode="json") for m in saved.messages], [e.to_dict() for e in saved.events],
                       saved.state], default=str)


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("tool", [leaky, chatty], ids=["raises", "returns"])
def test_a_tool_secret_is_masked_in_memory_at_the_model_and_in_every_row(open_store, store, tool, monkeypatch):
    monkeypatch.setenv("WEATHER_API_KEY", BARE)  # a credential-named variable: its value is a known secret
    m = ScriptedModel({"a": [ToolCall(tool.__name__, {"city": "Oslo"}, id="c1"), "Done."], "b": ["ok"]})
    rr = RoundRobinSwarm(agents=[m.agent("a", api_key=KEY, tools=[Tool(tool)]), m.agent("b")], max_loops=1)
    cp = open_store()
    r = rr.execute("weather?", checkpoint=cp, run_id="leak")
    assert r.ok and [x.role for x in r.transcript] == ["User", "a", "b"]
    call = r.transcript[1].tool_calls[0]
    shown = (call.error or "") + (call.result or "")
    assert "***" in shown and "Oslo" in shown  # masked, not dropped
    sent = m.requests_of("a")[1].messages[-1]["content"]  # the tool result the model read next
    assert "***" in sent and "Oslo" in sent
    for text in (shown, sent, json.dumps(r.events, default=str), everything(cp, "leak")):
        assert KEY not in text and BARE not in text


@pytest.mark.parametrize("store", STORES)
def test_a_secret_a_model_writes_is_masked_in_every_row_the_writer_stores(open_store, store):
    # not a tool's text: a reply that echoes the key, and a bid's payload. The writer masks what
    # it stores; the run in memory keeps what the model said (the caller's own process)
    m = ScriptedModel({"a": [f"my key is {KEY}, do not share"], "b": [f"Authorization: Bearer {BARE}"]})
    rr = RoundRobinSwarm(agents=[m.agent("a", api_key=KEY), m.agent("b")], max_loops=1)
    cp = open_store()
    r = rr.execute("hi", checkpoint=cp, run_id="echo")
    assert r.ok and KEY in r.transcript[1].content
    stored = everything(cp, "echo")
    assert KEY not in stored and BARE not in stored
    assert "my key is ***, do not share" in stored and "Authorization: ***" in stored
    saved = cp.load("echo")  # the masked rows still load as a run
    assert [x.content for x in saved.messages] == ["hi", "my key is ***, do not share", "Authorization: ***"]


WIDE = "clé-sécrète-9Qx7Lm2"  # a known secret JSON escapes (non-ASCII): found in the data, not in its escaped JSON


@pytest.mark.parametrize("store", STORES)
def test_a_secret_that_json_escapes_is_masked_in_an_event_payload(open_store, store, monkeypatch):
    # the writer checks a commit on the JSON it writes; a payload whose JSON escapes a character
    # is judged on its data instead. Here only a payload holds the secret: the bid of c, below
    # the threshold (never posted), is in each select event's payload
    from fsmchat import Bid, GroupChat

    monkeypatch.setenv("SERVICE_TOKEN", WIDE)

    def speaker(name, score):
        def fn(turn):
            text = f"{name} said {WIDE}" if name == "c" else f"{name} said hello"  # c: found by its value only
            return Bid(score, text) if getattr(turn, "kind", None) == "bid" else text
        fn.__name__ = name
        return fn

    chat = GroupChat(agents=[speaker("a", 0.9), speaker("b", 0.8), speaker("c", 0.0)], max_loops=3, threshold=0.1)
    cp = open_store()
    r = chat.execute("go", checkpoint=cp, run_id="wide")
    assert r.ok
    saved = cp.load("wide")
    payloads = json.dumps([e.payload for e in saved.events], ensure_ascii=False, separators=(",", ":"))
    assert '"messages":{"a":"a said hello","b":"b said hello","c":"c said ***"}' in payloads and WIDE not in payloads
    assert [m.content for m in saved.messages] == ["go", "a said hello", "b said hello"] == [
        m.content for m in r.transcript]
