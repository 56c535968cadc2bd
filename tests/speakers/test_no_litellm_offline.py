"""The offline and scripted models answer in this process, through fsmchat's own speaking path:
an offline run of every kind (agents whose prompts are counted against ``max_input_tokens`` among
them: fsmchat counts tokens itself), and a fast-path run at a local OpenAI-compatible server, never
import litellm (its import is seconds of every offline process otherwise)."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import asyncio, json, sys
    from fsmchat import (Agent, AgentFlow, Discussion, GroupChat, OneOnOneDebate, RoundRobinSwarm, Task, Tool,
                         ExpertPanelDiscussion)
    from fsmchat.testing import ScriptedModel, ToolCall

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    out = {}
    pair = [Agent("Cat", system_prompt="You argue for cats."), Agent("Dog", system_prompt="You argue for dogs.")]
    out["group_chat"] = GroupChat(agents=pair, max_loops=4).execute("Cats or dogs?").ok
    out["round_robin"] = RoundRobinSwarm(agents=pair, max_loops=1).execute("Cats or dogs?").ok
    out["debate"] = OneOnOneDebate(agents=pair, max_loops=2).execute("Cats or dogs?").ok
    out["flow"] = AgentFlow(steps=[Task(agent=pair[0]), Discussion(agents=pair, rounds=1)]).execute("Pets?").ok
    tools = RoundRobinSwarm(agents=[Agent("Calc", system_prompt="You add.", tools=[add])], max_loops=1)
    r = tools.execute("Add 2 and 3 please")
    out["tools"] = r.ok and r.transcript[1].tool_calls[0].result == "5"
    seen = []
    r = RoundRobinSwarm(agents=pair, max_loops=1).execute("Cats or dogs?", on_token=seen.append)
    out["streaming"] = r.ok and len(seen) > 2
    m = ScriptedModel({"a": [ToolCall("add", {"a": 1, "b": 2}), "3."], "b": ["ok"]})
    out["scripted"] = RoundRobinSwarm(agents=[m.agent("a", tools=[add]), m.agent("b")]).execute("go").ok
    from fsmchat.network import EV_TEXT, ORDERING_ROUND_ROBIN, Hub, MemoryKnowledgeStore, wait_for_text_count

    async def hub_run():
        async with await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0) as hub:
            a, b = [await hub.register(Agent(n, prompt="One short sentence.")) for n in ("alice", "bob")]
            channel = await a.open(type="discussion", target=[b.agent_id],
                                   knobs={"ordering": ORDERING_ROUND_ROBIN, "max_texts": 3}, ttl=3600)
            await channel.send("Topic: tabs or spaces?")
            await wait_for_text_count(hub, channel.channel_id, expected=3, timeout=60)
            await hub.drain(timeout=60)
            return [e.sender for e in hub.read_log(channel.channel_id) if e.event_type == EV_TEXT]
    out["hub"] = asyncio.run(hub_run())
    from fsmchat.speakers.context import LastMessages  # counted prompts: fsmchat's own count, not litellm's
    capped = [Agent("Cat", system_prompt="You argue for cats.", max_input_tokens=4000, context=LastMessages(2)),
              Agent("Dog", system_prompt="You argue for dogs.", max_input_tokens=4000)]
    counted = []
    for pattern in (GroupChat(agents=capped, max_loops=4, context="full"), RoundRobinSwarm(agents=capped, max_loops=2)):
        r = pattern.execute("Cats or dogs?")
        counted.append(r.ok and sum(e["event"] == "prompt_tokens" for e in r.events) > 0
                       and r.usage["max_prompt_tokens"] > 20)
    out["max_input_tokens"] = counted
    if len(sys.argv) > 1:  # the fast path at a local server
        fast = Agent("alice", model="openai/test-model", api_base=sys.argv[1], api_key="sk-test", num_retries=0)
        out["fast_path"] = RoundRobinSwarm(agents=[fast], max_loops=1).execute("Hi").ok
        import tempfile  # a checkpointed batch (the batch runner counts each task's requests) on the fast path too
        out["fast_path_batch"] = RoundRobinSwarm(agents=[fast], max_loops=1).run_batch(
            ["Hi", "Hello"], checkpoint_dir=tempfile.mkdtemp(), progress=False)
    out["litellm imported"] = "litellm" in sys.modules
    out["networkx imported"] = "networkx" in sys.modules  # validate() walks the graphs itself
    print(json.dumps(out))
''')


def run(*args):
    env = {k: v for k, v in os.environ.items() if k != "FSMCHAT_MODEL"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_offline_runs_of_every_kind_never_import_litellm():
    assert run() == {"group_chat": True, "round_robin": True, "debate": True, "flow": True, "tools": True,
                     "streaming": True, "scripted": True, "hub": ["alice", "bob", "alice"],
                     "max_input_tokens": [True, True], "litellm imported": False, "networkx imported": False}


def test_a_fast_path_run_at_a_local_server_never_imports_litellm():
    from support.openai_server import OpenAIServer, text

    with OpenAIServer(lambda req: text("Hello."), max_lifetime=60) as srv:
        out = run(srv.url + "/v1")
        assert len(srv.requests) == 3  # the run, then the batch's two tasks
    assert out["fast_path"] is True and out["fast_path_batch"] == ["Hello.", "Hello."]
    assert out["litellm imported"] is False and out["networkx imported"] is False


IMPORT = textwrap.dedent('''
    import json, sys
    from fsmchat import Agent, RoundRobinSwarm
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
                            ("fsmchat", "litellm", "networkx", "aiohttp", "mcp", "graphviz", "rich"))))
''')


def test_importing_an_agent_and_a_round_robin_loads_neither_the_other_patterns_nor_a_heavy_dependency():
    """The facades load a name's module on first use: ``from fsmchat import Agent, RoundRobinSwarm``
    brings the round robin and what it runs on, not GroupChat, the selector, the batch runners on
    Ray, the event models, litellm, networkx, aiohttp, the MCP SDK, Graphviz or rich (docs/benchmarks.md:
    its CPU)."""
    done = subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(json.loads(done.stdout))
    assert {"fsmchat.speakers.agent", "fsmchat.patterns.round_robin"} <= loaded
    assert loaded.isdisjoint({"fsmchat.patterns.group_chat", "fsmchat.patterns.selector", "fsmchat.patterns.handoffs",
                              "fsmchat.patterns.debate", "fsmchat.patterns.panel", "fsmchat.flow", "fsmchat.network",
                              "fsmchat.testing", "fsmchat.patterns.distributed", "fsmchat.events", "litellm", "networkx",
                              "aiohttp", "mcp", "graphviz", "rich"}), loaded


def test_how_a_model_bids_is_read_from_litellms_map_without_importing_litellm():
    """``tool_mode_for`` asks litellm's model map whether a model lacks function calling (then it
    bids in JSON mode); a GroupChat at an OpenAI-compatible server used to import litellm for it."""
    code = ("import sys; from fsmchat.speakers.llm import tool_mode_for; "
            "print([tool_mode_for(m) for m in ('gpt-4o-mini', 'deepseek-reasoner', 'openai/my-model')], "
            "'litellm' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "FSMCHAT_MODEL"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "['native', 'json', 'native'] False"
