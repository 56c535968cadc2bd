"""The checkpointed runs several store and flow tests share: an offline GroupChat and a run cancelled mid-way, as a kill would."""
import asyncio

import pytest

from fsmchat import Agent, GroupChat


def chat():
    return GroupChat(agents=[Agent("a", system_prompt="You argue for cats."),
                             Agent("b", system_prompt="You argue for dogs."),
                             Agent("c", system_prompt="You love birds and feathers.")], max_loops=8)


def interrupt_after(pattern, task, cp, run_id, state, k):
    """Run with checkpoints and cancel the run when `state` has been left k times."""
    async def go():
        me = asyncio.current_task()
        seen = []

        def obs(ev):
            if ev.state == state and ev.dest is not None:
                seen.append(ev)
                if len(seen) == k:
                    me.cancel()

        with pytest.raises(asyncio.CancelledError):
            await pattern.aexecute(task, checkpoint=cp, run_id=run_id, observers=[obs])
    asyncio.run(go())
