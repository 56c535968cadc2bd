"""The reference's network discussion channel: alice, bob and carol take turns on
"should every developer learn Rust?".

Runs offline by default (fsmchat's simulated model); `fsmchat run examples/discussion_channel.py
--model gpt-4o-mini` (or FSMCHAT_MODEL=...) uses a real model through litellm. The channel
closes at exactly MAX_TEXTS texts (the `max_texts` knob), and each text costs exactly one model
call: the other participants' handlers see it is not their turn and skip theirs.
"""
import asyncio
import os

from fsmchat import Agent
from fsmchat.graph import StateGraph
from fsmchat.network import EV_TEXT, ORDERING_ROUND_ROBIN, Hub, MemoryKnowledgeStore, turn_graph, \
    wait_for_text_count

TOPIC = "Topic: should every developer learn Rust?"
MAX_TEXTS = 6
PEOPLE = [("alice", "The optimist. One short sentence."),
          ("bob", "The realist. One short sentence."),
          ("carol", "The skeptic. One short sentence.")]


def build() -> StateGraph:
    """The turn graph this example's channel runs (rendered in graphs/)."""
    return turn_graph([name for name, _ in PEOPLE], max_texts=MAX_TEXTS)


async def discuss(topic: str) -> None:
    async with await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0) as hub:
        alice, bob, carol = [await hub.register(Agent(name, prompt=prompt)) for name, prompt in PEOPLE]
        channel = await alice.open(type="discussion", target=[bob.agent_id, carol.agent_id],
                                   knobs={"ordering": ORDERING_ROUND_ROBIN, "max_texts": MAX_TEXTS}, ttl=3600)
        await channel.send(topic)  # alice's kickoff; then each default handler answers on its own turn
        await wait_for_text_count(hub, channel.channel_id, expected=MAX_TEXTS, timeout=600)
        await hub.drain(timeout=600)

        said = [env for env in hub.read_log(channel.channel_id) if env.event_type == EV_TEXT]
        for env in said:
            print(f"[{env.sender}]: {env.text}")
        stats = hub.stats(channel.channel_id)
        lifecycle, turns = hub.runs(channel.channel_id)
        print(f"\n-- spoke: {' -> '.join(env.sender for env in said)}")
        print(f"-- texts: {stats.texts} (1 kickoff + {stats.replies} replies); model calls: {stats.model_calls}; "
              f"skipped deliveries: {stats.skipped_deliveries}; wasted calls: {stats.wasted_calls}")
        print(f"-- closed: {hub.close_reason(channel.channel_id)}; lifecycle: {' -> '.join(lifecycle.path)}; "
              f"turns: {' -> '.join(turns.path)}")


def main() -> None:
    asyncio.run(discuss(os.environ.get("FSMCHAT_TASK", TOPIC)))


if __name__ == "__main__":
    main()
