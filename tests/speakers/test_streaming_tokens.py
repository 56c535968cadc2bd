"""Replies stream as they are written: ``stream(task, tokens=True)``, ``execute(on_token=...)``, the
offline model word by word, and litellm's streaming against a local OpenAI-compatible server that
sends server-sent events chunk by chunk. Nothing here decides by the clock: the server waits on a
gate the client side opens when it has the first delta; a stall is cut by the agent's timeout or
the run's deadline, and only the outcome (events, errors) is checked."""
from __future__ import annotations

import asyncio
import threading

import pytest

from support.openai_server import OpenAIServer, streamed, text, tool_call

from fsmchat import (Agent, AgentFlow, GroupChat, MemoryCheckpointer, Message, RoundRobinSwarm, RunResult, StreamRetry,
                     TokenDelta, TraceEvent)
from fsmchat.errors import ConfigTypeError
from fsmchat.speakers import llm
from fsmchat.speakers.offline import stream_pieces

TASK = "Cats or dogs?"


def pair():
    return RoundRobinSwarm(agents=[Agent("A", system_prompt="You argue for cats."),
                                   Agent("B", system_prompt="You argue for dogs.")], max_loops=1)


def local(api_base, **kw):
    opts = dict(model="openai/test-model", api_base=api_base, api_key="sk-test", num_retries=0, timeout=30)
    opts.update(kw)
    return Agent(opts.pop("name", "alice"), system_prompt="You plan picnics.", **opts)


@pytest.fixture
def no_waits(monkeypatch):
    async def instant(seconds):
        return None
    monkeypatch.setattr(llm, "retry_sleep", instant)


# ---- every reply streams, before its message --------------------------------------------------------
def test_stream_with_tokens_yields_each_replys_deltas_before_its_message():
    items = list(pair().stream(TASK, tokens=True))
    assert isinstance(items[-1], RunResult) and items[-1].ok
    posted = [i for i, x in enumerate(items) if isinstance(x, Message) and x.role != "User"]
    assert [items[i].role for i in posted] == ["A", "B"]
    for i in posted:
        msg, before = items[i], []
        j = i - 1
        while isinstance(items[j], TokenDelta):
            before.insert(0, items[j])
            j -= 1
        assert {(d.agent, d.step, d.attempt) for d in before} == {(msg.role, msg.role, 1)}
        assert "".join(d.text for d in before) == msg.content  # the message is the whole reply
        assert len(before) == len(msg.content.split())  # word by word
    first = [x.text for x in items if isinstance(x, TokenDelta)][:4]
    assert first == ["Since ", "I ", "argue ", "for "]


def test_without_tokens_the_stream_holds_no_deltas():
    assert not [x for x in pair().stream(TASK) if isinstance(x, TokenDelta)]


def test_astream_with_tokens_gives_the_same_items():
    async def collect():
        return [x for x in [y async for y in pair().astream(TASK, tokens=True)] if isinstance(x, TokenDelta)]
    got = asyncio.run(collect())
    assert got == [x for x in pair().stream(TASK, tokens=True) if isinstance(x, TokenDelta)]


def test_execute_on_token_and_the_checkpoint_holds_whole_messages_only():
    seen: list = []
    store = MemoryCheckpointer()
    result = pair().execute(TASK, on_token=seen.append, checkpoint=store, run_id="r")
    assert result.ok and all(isinstance(x, TokenDelta) for x in seen)
    saved = [m.content for m in store.load("r").messages]
    assert saved == [m.content for m in result.transcript]
    assert "".join(d.text for d in seen if d.agent == "A") == saved[1]
    assert not [e for e in result.events if e["event"] in ("partial_reply", "stream_retry")]


def test_on_token_must_be_callable():
    with pytest.raises(ConfigTypeError, match="on_token"):
        pair().execute(TASK, on_token=[3])
    with pytest.raises(ConfigTypeError, match="tokens"):
        pair().stream(TASK, tokens="yes")


def test_a_flow_step_streams_with_its_state_as_step():
    writer = Agent("Writer", system_prompt="You write short notes.")
    flow = AgentFlow(steps=[writer])
    seen: list = []
    result = flow.execute("Write a note about cats.", on_token=seen.append)
    assert result.ok and seen and {d.agent for d in seen} == {"Writer"}
    assert seen[0].step in result.path
    assert "".join(d.text for d in seen) == result.transcript[-1].content


def test_a_group_chat_streams_no_tokens_its_bids_are_decided_whole():
    chat = GroupChat(agents=[Agent("A", system_prompt="You argue for cats."),
                             Agent("B", system_prompt="You argue for dogs.")], max_loops=2)
    items = list(chat.stream(TASK, tokens=True))
    assert items[-1].ok and len(items[-1].transcript) > 1
    assert not [x for x in items if isinstance(x, TokenDelta)]


def test_tools_keep_working_while_replies_stream():
    calls: list = []

    def weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny"

    agent = Agent("A", system_prompt="You plan picnics.", tools=[weather])
    seen: list = []
    result = RoundRobinSwarm(agents=[agent], max_loops=1).execute("Picnic in Paris: what is the weather?",
                                                                  on_token=seen.append)
    assert result.ok and calls  # the tool ran: its call was assembled from deltas
    reply = result.transcript[-1]
    assert reply.tool_calls and reply.tool_calls[0].name == "weather"
    assert "".join(d.text for d in seen) == reply.content  # only the final reply's text streamed


def test_agent_stream_true_works_and_gives_the_same_reply():
    plain = RoundRobinSwarm(agents=[Agent("A", system_prompt="You argue for cats.")], max_loops=1).execute(TASK)
    streaming = RoundRobinSwarm(agents=[Agent("A", system_prompt="You argue for cats.", stream=True)],
                                max_loops=1).execute(TASK)
    assert streaming.ok, streaming.error
    assert [m.content for m in streaming.transcript] == [m.content for m in plain.transcript]
    assert streaming.usage == plain.usage


def test_the_offline_model_streams_word_by_word():
    assert stream_pieces("Ship it, then  watch.") == ["Ship ", "it, ", "then  ", "watch."]


# ---- the real path: litellm's streaming against a server sending SSE ------------------------------
@pytest.mark.parametrize("transport", ["fast", "litellm"])
def test_first_token_reaches_the_caller_before_the_server_sends_the_rest(transport):
    gate = threading.Event()
    pieces = ["Bring ", "sandwiches ", "and ", "lemonade."]
    usage = {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}
    seen: list = []

    def on_token(d):
        seen.append(d)
        gate.set()  # the server sends pieces 2..4 only once this ran

    with OpenAIServer([streamed(pieces, gate=gate, hold_after=1, usage=usage)], max_lifetime=30) as srv:
        result = RoundRobinSwarm(agents=[local(srv.api_base, transport=transport)], max_loops=1).execute(
            TASK, on_token=on_token)
        srv.assert_clean()
        assert srv.records[-1].note == "gate passed"
        assert srv.requests[0]["stream"] is True and srv.requests[0]["stream_options"] == {"include_usage": True}
    assert result.ok, result.error
    assert [d.text for d in seen] == pieces  # in order
    assert result.transcript[-1].content == "Bring sandwiches and lemonade."
    assert result.usage == usage  # from the final chunk
    assert result.events == []


def test_tool_call_deltas_are_assembled_over_sse():
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    with OpenAIServer([tool_call("weather", {"city": "Paris"}), text("Sunny: bring hats.")], max_lifetime=30) as srv:
        agent = local(srv.api_base, tools=[weather])
        result = RoundRobinSwarm(agents=[agent], max_loops=1).execute(TASK, on_token=lambda d: None)
        srv.assert_clean()
        assert srv.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": srv.requests[1]["messages"][-2][
            "tool_calls"][0]["id"], "content": "sunny in Paris"}
    assert result.ok, result.error
    reply = result.transcript[-1]
    assert reply.content == "Sunny: bring hats."
    assert [(c.name, c.arguments, c.result) for c in reply.tool_calls] == [("weather", {"city": "Paris"},
                                                                              "sunny in Paris")]


def test_a_stall_is_cut_by_the_timeout_and_the_partial_text_stays_in_the_events(warm):
    with OpenAIServer([streamed(["Bring ", "sand", "wiches."], stall_after=2)], max_lifetime=30) as srv:
        result = RoundRobinSwarm(agents=[local(srv.api_base, timeout=1)], max_loops=1).execute(
            TASK, on_token=lambda d: None)
    assert not result.ok and type(result.error).__name__ == "ModelCallError"
    assert "TimeoutError" in str(result.error)
    assert [m.role for m in result.transcript] == ["User"]  # never the partial text
    partial = [e for e in result.events if e["event"] == "partial_reply"]
    assert partial == [{"event": "partial_reply", "agent": "alice", "step": "alice", "attempt": 1, "chars": 10,
                        "text": "Bring sand", "reason": "TimeoutError: (no message)"}]


def test_a_stall_is_cut_by_the_runs_deadline(warm):
    with OpenAIServer([streamed(["Bring ", "sand", "wiches."], stall_after=2)], max_lifetime=30) as srv:
        pattern = RoundRobinSwarm(agents=[local(srv.api_base)], max_loops=1).with_limits(deadline_s=1)
        result = pattern.execute(TASK, on_token=lambda d: None)
    assert str(result.stop_reason) == "deadline"
    assert [m.role for m in result.transcript] == ["User"]
    assert [e["text"] for e in result.events if e["event"] == "partial_reply"] == ["Bring sand"]


def test_a_retried_stream_is_visible_as_such(no_waits, warm):
    seen: list = []
    with OpenAIServer([streamed(["Bring ", "sand", "wiches."], stall_after=2), streamed(["Bring ", "fruit."])],
                      max_lifetime=30) as srv:
        result = RoundRobinSwarm(agents=[local(srv.api_base, timeout=1, num_retries=1)], max_loops=1).execute(
            TASK, on_token=seen.append)
    assert result.ok, result.error
    assert [type(x).__name__ for x in seen] == ["TokenDelta", "TokenDelta", "StreamRetry", "TokenDelta",
                                                "TokenDelta"]
    retry = seen[2]
    assert retry == StreamRetry("alice", "alice", 1, len("Bring sand"), "TimeoutError: (no message)")
    assert [(d.text, d.attempt) for d in seen if isinstance(d, TokenDelta)] == [
        ("Bring ", 1), ("sand", 1), ("Bring ", 2), ("fruit.", 2)]
    assert result.transcript[-1].content == "Bring fruit."
    assert [e for e in result.events if e["event"] == "stream_retry"] == [
        {"event": "stream_retry", "agent": "alice", "step": "alice", "attempt": 1, "shown": 10,
         "reason": "TimeoutError: (no message)"}]


def test_a_checkpoint_never_holds_a_partial_reply_s_text(warm, tmp_path):
    """A flow step whose stream is cut after "Bring sand" fails under ``on_error="continue"``, and the
    flow goes on to a step that is committed: the result shows the partial text, the SQLite file (and
    its WAL) holds the event without it (its length only), and so does the stored run."""
    from fsmchat import Task
    from fsmchat.store.checkpoint import SqliteCheckpointer
    db = tmp_path / "runs.db"
    with OpenAIServer([streamed(["Bring ", "sand", "wiches."], stall_after=2), streamed(["Bring ", "fruit."])],
                      max_lifetime=30) as srv:
        flow = AgentFlow(steps=[Task(agent=local(srv.api_base, timeout=1), on_error="continue"),
                                local(srv.api_base, name="bob")])
        result = flow.execute(TASK, on_token=lambda d: None, checkpoint=SqliteCheckpointer(db), run_id="R")
    assert [e["text"] for e in result.events if e["event"] == "partial_reply"] == ["Bring sand"]
    assert result.transcript[-1].content == "Bring fruit."
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("runs.db"))
    assert b"Bring fruit." in stored and b"Bring sand" not in stored


def test_a_cancelled_run_keeps_the_partial_reply_in_its_events():
    gate = threading.Event()

    async def main():
        task = None
        with OpenAIServer([streamed(["Bring ", "sand", "wiches."], stall_after=2)], max_lifetime=30) as srv:
            seen = asyncio.Event()

            def on_token(d):
                if d.text == "sand":
                    seen.set()
            pattern = RoundRobinSwarm(agents=[local(srv.api_base)], max_loops=1)
            task = asyncio.ensure_future(pattern.aexecute(TASK, on_token=on_token))
            await seen.wait()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError as exc:
                gate.set()
                return exc.fsmchat_result
    result = asyncio.run(main())
    assert gate.is_set() and str(result.stop_reason) == "cancelled"
    assert [m.role for m in result.transcript] == ["User"]
    assert [(e["text"], e["reason"]) for e in result.events if e["event"] == "partial_reply"] == [
        ("Bring sand", "the run was cancelled")]


def test_cancelling_mid_stream_loses_nothing_committed_and_a_resume_asks_the_cut_reply_again(tmp_path):
    """alice's reply is committed; bob's stream is cancelled after "Bring sand": the run stops as
    cancelled, the partial reply is an event marked partial (never a message), the stored run holds
    User and alice, and a resume asks bob once more and finishes."""
    from fsmchat.store.checkpoint import SqliteCheckpointer
    from support.openai_server import per_agent

    cp = SqliteCheckpointer(tmp_path / "runs.db")

    async def main(srv):
        seen = asyncio.Event()

        def on_token(d):
            if d.agent == "bob" and d.text == "sand":
                seen.set()
        pattern = RoundRobinSwarm(agents=[local(srv.api_base), local(srv.api_base, name="bob")], max_loops=1)
        task = asyncio.ensure_future(pattern.aexecute(TASK, on_token=on_token, checkpoint=cp, run_id="cut"))
        await seen.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError as exc:
            return pattern, exc.fsmchat_result
        raise AssertionError("the run was not cancelled")

    script = per_agent({"alice": [streamed(["Take ", "fruit."])],
                        "bob": [streamed(["Bring ", "sand", "wiches."], stall_after=2), streamed(["Bring ", "tea."])]})
    with OpenAIServer(script, max_lifetime=30) as srv:
        pattern, result = asyncio.run(main(srv))
        assert str(result.stop_reason) == "cancelled"
        assert [(m.role, m.content) for m in result.transcript] == [("User", TASK), ("alice", "Take fruit.")]
        assert [(e["agent"], e["text"], e["reason"]) for e in result.events if e["event"] == "partial_reply"] == [
            ("bob", "Bring sand", "the run was cancelled")]
        saved = cp.load("cut")
        assert [m.content for m in saved.messages] == [TASK, "Take fruit."] and saved.stop_reason == "cancelled"
        done = pattern.resume("cut", cp)
        assert done.ok and [m.content for m in done.transcript] == [TASK, "Take fruit.", "Bring tea."]
        assert [len(srv.requests_for(a)) for a in ("alice", "bob")] == [1, 2]  # alice never asked again


# ---- the live CLI --------------------------------------------------------------------------------
def test_live_view_prints_each_reply_as_it_is_written_once():
    import io

    from fsmchat.cli.live import LiveRun

    out = io.StringIO()
    lines_at_first_token: list = []
    view = LiveRun(status=False, out=out, tokens=True)
    orig = view.on_token

    def spy(item):
        if not lines_at_first_token:
            lines_at_first_token.append(out.getvalue())
        orig(item)

    with view:
        result = pair().execute(TASK, observers=[view.on_event], on_message=[view.on_message],
                                on_start=[view.on_start], on_token=[spy])
    a, b = result.transcript[1].content, result.transcript[2].content
    assert out.getvalue() == f"User: {TASK}\nA: {a}\nB: {b}\n"  # each reply once, as it was written
    assert lines_at_first_token == [f"User: {TASK}\n"]


def test_live_view_says_when_a_shown_stream_is_asked_again():
    import io

    from fsmchat.cli.live import LiveRun

    out = io.StringIO()
    view = LiveRun(status=False, out=out, tokens=True)
    view.on_token(TokenDelta("alice", "alice", "Bring "))
    view.on_token(StreamRetry("alice", "alice", 1, 6, "TimeoutError: (no message)"))
    view.on_token(TokenDelta("alice", "alice", "Fruit.", 2))
    view.on_message(Message(role="alice", content="Fruit."))
    assert out.getvalue() == ("alice: Bring \n  alice's reply broke after 6 characters (TimeoutError: (no message)); "
                              "asking again (attempt 2)\nalice: Fruit.\n")


def test_live_view_streams_only_on_a_terminal_by_default():
    import io

    from fsmchat.cli.live import LiveRun

    assert LiveRun(status=False, out=io.StringIO()).tokens is False
    assert LiveRun(status=False, out=io.StringIO(), tokens=True).tokens is True


def test_fsmchat_run_no_stream_turns_token_display_off(capsys):
    from fsmchat.cli import main, parser

    assert parser().parse_args(["run", "x.py", "--no-stream"]).no_stream is True
    assert parser().parse_args(["run", "x.py"]).no_stream is False
    assert main(["run", "examples/round_robin.py", "--no-stream"]) == 0
    printed = capsys.readouterr().out
    assert "-- stopped:" in printed


def test_the_notebook_view_grows_with_the_tokens_then_holds_the_message():
    from fsmchat.cli.live import NotebookLive

    shown: list = []

    class Handle:
        def update(self, obj):
            shown.append(obj._repr_html_())

    def display(obj):
        shown.append(obj._repr_html_())
        return Handle()

    view = NotebookLive(display=display)
    result = pair().execute(TASK, **view.hooks())
    a = result.transcript[1].content
    rows_of_a = [next(r for r in h.removesuffix("</table>").split("<tr>") if r.startswith("<td><b>A</b>"))
                 for h in shown if "<b>A</b>" in h]
    writing = [r for r in rows_of_a if "writing..." in r]
    assert len(writing) == len(a.split())  # one update per word of A's reply
    assert writing[:2] == ["<td><b>A</b></td><td>Since  <i>writing...</i></td></tr>",
                           "<td><b>A</b></td><td>Since I  <i>writing...</i></td></tr>"]
    assert "writing..." not in shown[-1] and f"<td>{a}</td>" in shown[-1]


def test_group_chat_bids_of_agents_with_stream_true_are_assembled_from_their_deltas():
    def agents(**kw):
        return [Agent("A", system_prompt="You argue for cats.", **kw), Agent("B", system_prompt="You argue for dogs.", **kw)]
    plain = GroupChat(agents=agents(), max_loops=2).execute(TASK)
    streaming = GroupChat(agents=agents(stream=True), max_loops=2).execute(TASK)
    assert streaming.ok, streaming.error  # a forced respond call streamed and assembled: never "no choices"
    assert [(m.role, m.content) for m in streaming.transcript] == [(m.role, m.content) for m in plain.transcript]
    assert [m.role for m in streaming.transcript] == ["User", "A"]


def test_a_pattern_nested_in_a_flow_streams_with_its_qualified_state():
    inner = RoundRobinSwarm(agents=[Agent("A", system_prompt="You argue for cats.")], max_loops=1)
    flow = AgentFlow(steps=[inner, Agent("Writer", system_prompt="You sum up.")])
    seen: list = []
    result = flow.execute(TASK, on_token=seen.append)
    assert result.ok, result.error
    assert list(dict.fromkeys((d.agent, d.step) for d in seen)) == [("A", "round_robin.A"), ("Writer", "Writer")]
    by_agent = {m.role: m.content for m in result.transcript}
    assert "".join(d.text for d in seen if d.agent == "A") == by_agent["A"]


def test_a_scripted_model_streams_its_reply_word_by_word():
    """fsmchat.testing's scripted models stream as the offline model does, so a run with a token
    sink (``fsmchat serve`` always has one) works with them."""
    from fsmchat.testing import ScriptedModel
    scripted = ScriptedModel({"alice": ["Bring sand, then  fruit."], "bob": ["Agreed."]})
    seen: list = []
    result = RoundRobinSwarm(agents=[scripted.agent("alice"), scripted.agent("bob")], max_loops=1).execute(
        TASK, on_token=seen.append)
    assert result.ok, result.error
    assert [(d.agent, d.text) for d in seen] == [("alice", "Bring "), ("alice", "sand, "), ("alice", "then  "),
                                                 ("alice", "fruit."), ("bob", "Agreed.")]
    assert [m.content for m in result.transcript] == [TASK, "Bring sand, then  fruit.", "Agreed."]
