"""The Ray requeue tests' chat: a scripted GroupChat whose model holds the task naming a folder inside a model call (its worker's pid written there) until that folder's ``release`` exists."""
import os
from pathlib import Path

from fsmchat import GroupChat
from fsmchat.testing import Delay, FunctionModel
from support.scripted import bid_fn

HOLD = 7  # the task held mid-call until its worker is killed
HANG_GUARD = 900  # seconds before a hung batch fails the test (never a verdict: Ray starts slowly under load)


def held_bid_fn(req):
    """``bid_fn``, except that calls for a task naming a folder (``hold <dir>``) write this worker's
    pid to ``<dir>/pid`` and wait (asynchronously, in the model call) until ``<dir>/release`` exists."""
    task = str(req.messages[0].get("content") or "")
    if not task.startswith("hold "):
        return bid_fn(req)
    folder = Path(task.split(" ", 2)[1])

    def wait(_req):
        if (folder / "release").exists():
            return bid_fn(req)
        pid_file = folder / "pid"
        if not pid_file.exists():
            tmp = folder / f"pid.{os.getpid()}"
            tmp.write_text(str(os.getpid()))
            tmp.replace(pid_file)
        return Delay(0.02, wait)
    return wait


def chat():
    m = FunctionModel(held_bid_fn)
    return GroupChat(agents=[m.agent("alice", system_prompt="You like cats."),
                             m.agent("bob", system_prompt="You like dogs."), m.agent("carol")],
                     max_loops=3, threshold=0.3)
