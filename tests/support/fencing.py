"""The fencing tests' run: a deterministic two-agent swarm, the same model id in every process (the owner subprocesses import it too)."""
from fsmchat import RoundRobinSwarm
from fsmchat.testing import FunctionModel


def reply(request):
    """A deterministic model: who speaks and how long the conversation it was shown is."""
    return f"{request.agent} speaks at {len(request.messages)}"


def swarm(fn=reply):
    model = FunctionModel(fn, id="fenced")  # one model id in every process: the run's fingerprint matches
    return RoundRobinSwarm(agents=[model.agent("x"), model.agent("y")], max_loops=3), model
