"""The hubs the network, hub and no-text-reply tests open: a passive hub (the test sends every text) and one whose participants answer from a model."""
import asyncio

from fsmchat.network import Hub, ManualClock, MemoryKnowledgeStore

TOPIC = "Topic: should every developer learn Rust?"


def arun(coro):
    return asyncio.run(coro)


async def passive_hub(names, clock=None, **kw):
    """A hub whose participants have no model: the test sends every text itself."""
    hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=clock or ManualClock(), **kw)
    return hub, [await hub.register(n) for n in names]


async def model_hub(names, model, clock=None, **register_kw):
    hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, clock=clock or ManualClock())
    clients = [await hub.register(model.agent(n, f"You are {n}. One short sentence."), **register_kw.get(n, {}))
               for n in names]
    return hub, clients


def our_tasks():
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("fsmchat")]
