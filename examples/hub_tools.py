"""A hub discussion channel where one participant calls a tool: bob checks the forecast before
he answers, and the channel's turn graph draws his tool round as every pattern's
(`awaiting_bob -[tool_calls]-> tools_awaiting_bob -> awaiting_bob`).

Runs offline by default (fsmchat's simulated model calls the tool when the topic names it);
`fsmchat run examples/hub_tools.py --model gpt-4o-mini` (or FSMCHAT_MODEL=...) uses a real model.
Each tool call is committed to the channel's log before it runs and its result before bob's model
is asked again (`fsmchat.tool_calls`, `fsmchat.tool_result`).
"""
import asyncio
import os

from fsmchat import Agent, Tool
from fsmchat.graph import StateGraph
from fsmchat.network import EV_TEXT, ORDERING_ROUND_ROBIN, Hub, MemoryKnowledgeStore, turn_graph, \
    wait_for_text_count

TOPIC = "Topic: should we hold the picnic on Saturday? Check the forecast first."
MAX_TEXTS = 4


def forecast(day: str) -> str:
    """The weather forecast for a day of this week."""
    return f"{day}: sunny, 22 C, light wind"


def people() -> list[Agent]:
    return [Agent("alice", prompt="The organiser. One short sentence."),
            Agent("bob", prompt="The planner: check the forecast tool, then answer in one sentence.",
                  tools=[Tool(forecast)])]


def build() -> StateGraph:
    """The turn graph this example's channel runs (rendered in graphs/): bob's tool round drawn."""
    agents = people()
    return turn_graph([a.name for a in agents], max_texts=MAX_TEXTS, name="hub_tools",
                      speakers={a.name: a for a in agents})


async def discuss(topic: str) -> None:
    async with await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0) as hub:
        alice, bob = [await hub.register(agent) for agent in people()]
        channel = await alice.open(type="discussion", target=[bob.agent_id],
                                   knobs={"ordering": ORDERING_ROUND_ROBIN, "max_texts": MAX_TEXTS}, ttl=3600)
        await channel.send(topic)
        await wait_for_text_count(hub, channel.channel_id, expected=MAX_TEXTS, timeout=600)
        await hub.drain(timeout=600)
        log = hub.read_log(channel.channel_id)
        for env in log:
            if env.event_type == EV_TEXT:
                print(f"[{env.sender}]: {env.text}")
        calls = [env for env in log if env.event_type == "fsmchat.tool_calls"]
        results = [env for env in log if env.event_type == "fsmchat.tool_result"]
        _, turns = hub.runs(channel.channel_id)
        print(f"\n-- tool calls committed: {len(calls)}, results committed: {len(results)}")
        print(f"-- closed: {hub.close_reason(channel.channel_id)}; turns: {' -> '.join(turns.path)}")


def main() -> None:
    asyncio.run(discuss(os.environ.get("FSMCHAT_TASK", TOPIC)))


if __name__ == "__main__":
    main()
