"""The runs the run viewer's tests look at: a scripted GroupChat and a flow with a Discussion, each
checkpointed into a store, and a script that runs a GroupChat step by step on cue (a live run)."""
import json

from fsmchat import AgentFlow, Bid, Discussion, GroupChat
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.testing import ScriptedModel

TASK = "Cats or dogs?"
XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> purr'
FLOW_TASK = "Draft: renewable energy is the only path forward."


def group_chat_run(cp: SqliteCheckpointer, run_id: str = "chat-1"):
    """Three turns: a wins (its message is markup), b wins over a's recency-penalised bid while c's bid is
    invalid, then no bid clears the threshold (lull)."""
    m = ScriptedModel({"a": [Bid(0.9, XSS), Bid(0.8, "a again"), Bid(0.1, "")],
                       "b": [Bid(0.7, "b first"), Bid(0.85, "b wins turn two"), Bid(0.2, "meh")],
                       "c": [Bid(0.3, ""), "not a bid", Bid(0.1, "")]})
    chat = GroupChat(agents=[m.agent(n, system_prompt=f"You are {n}.") for n in "abc"], max_loops=8)
    return chat.execute(TASK, checkpoint=cp, run_id=run_id)


def agreed(ctx) -> bool:
    """the author agreed"""
    return "AGREED" in (ctx.previous_result or "")


def flow_run(cp: SqliteCheckpointer, run_id: str = "flow-1"):
    """A Discussion of critic and author until the author agrees (4 turns), then a summary."""
    m = ScriptedModel({"critic": ["too vague", "better, cite sources"], "author": ["revised once", "AGREED, cited"],
                       "summarizer": ["they agreed after two rounds"]})
    flow = AgentFlow(steps=[Discussion([m.agent("critic", "Critique"), m.agent("author", "Revise")], rounds=3,
                                       until=agreed), m.agent("summarizer", "Summarize {{discussion_transcript}}")])
    return flow.execute(FLOW_TASK, checkpoint=cp, run_id=run_id)


def store_of(path, runs=(group_chat_run, flow_run)):
    """A store at ``path`` holding ``runs`` (each ``run(checkpointer)``, in order); returns ``path``."""
    cp = SqliteCheckpointer(path)
    try:
        for run in runs:
            run(cp)
    finally:
        cp.close()
    return path


LIVE_SCRIPT = '''
import sys
from fsmchat import Bid, GroupChat
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.testing import ScriptedModel

def on_cue(text):
    def answer(request):
        sys.stdin.readline()  # the test's cue: one line per turn
        return Bid(0.9, text)
    return answer

m = ScriptedModel({"a": [on_cue("first live message"), on_cue("second live message"), Bid(0.0, "")],
                   "b": [Bid(0.1, ""), Bid(0.1, ""), Bid(0.0, "")]})
chat = GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=8)
result = chat.execute("Go live", checkpoint=SqliteCheckpointer(sys.argv[1]), run_id=sys.argv[2])
print(result.stop_reason)
'''


def sse_events(client, run_id):
    """A run's server-sent events from ``fsmchat serve`` (``/api/runs/ID/events``) as (event, data)
    pairs, read line by line up to ``end``."""
    out, kind = [], None
    with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                out.append((kind, json.loads(line[len("data: "):])))
                if kind == "end":
                    break
    return out
