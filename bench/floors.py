"""The floors: the same GroupChat work written as a plain asyncio loop, and the bidding agents
both sides call. A floor does what the reference semantics require and nothing else (no graph,
no trace, no engine), so ``fsmchat / floor`` is what the engine and the pattern layer cost.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Sequence

from fsmchat.models import Bid, Message

AgentFn = Callable[[Any], Awaitable[Bid]]


def sleeping_agent(name: str, seconds: float, score: float = 0.9) -> AgentFn:
    """An ``async def`` participant that waits ``seconds`` (the model's latency) and bids ``score``
    with a one-line message. Both fsmchat (as a callable participant) and the floor call it."""
    async def agent(turn: Any) -> Bid:
        await asyncio.sleep(seconds)
        return Bid(score, f"{name} speaks")
    agent.__name__ = agent.__qualname__ = name
    return agent


async def group_chat_floor(task: str, agents: Sequence[AgentFn], max_loops: int, threshold: float = 0.5,
                           recency_penalty: float = 0.3, recency_window: int = 1) -> list[Message]:
    """GroupChat's semantics (seed, concurrent bids read in list order, best recency-adjusted bid
    strictly above threshold posted, stop on lull or ``max_loops`` messages) as a plain loop.
    Each agent gets what fsmchat's callables get: its name, the rows (fsmchat passes a read-only
    view, not a copy: no O(T) work per turn on either side) and an instruction."""
    names = [a.__name__ for a in agents]
    rows = [Message(role="User", content=task)]
    recent: list[str] = []
    while len(rows) < max_loops:
        last = rows[-1]

        def turn(i: int) -> tuple[str, list[Message], str]:
            others = ", ".join(n for n in names if n != names[i])
            return names[i], rows, (f"You are {names[i]} in a group chat with {others}. The latest "
                                         f"message is from {last.role}:\n\n{last.content}\n\nDecide.")
        bids = await asyncio.gather(*(a(turn(i)) for i, a in enumerate(agents)))
        window = set(recent[-max(1, recency_window):])
        best_i, best = None, threshold
        for i, b in enumerate(bids):
            if not b.message:
                continue
            score = b.score - recency_penalty if names[i] in window else b.score
            if score > best:
                best_i, best = i, score
        if best_i is None:
            break
        rows.append(Message(role=names[best_i], content=bids[best_i].message, metadata={"score": bids[best_i].score}))
        recent.append(names[best_i])
    return rows


async def batch_floor(tasks: Sequence[str], agents: Sequence[AgentFn], max_loops: int,
                      max_concurrency: int) -> list[list[Message]]:
    """``run_batch``'s floor: one floor chat per task, bounded by a semaphore, results in order."""
    gate = asyncio.Semaphore(max_concurrency)

    async def one(t: str) -> list[Message]:
        async with gate:
            return await group_chat_floor(t, agents, max_loops)
    return list(await asyncio.gather(*(one(t) for t in tasks)))
