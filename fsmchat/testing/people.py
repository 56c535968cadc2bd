"""People in the loop, scripted: run a pattern and answer every interrupt from a list or a function."""
from __future__ import annotations

from typing import Callable, NamedTuple, Protocol, Sequence

from ..errors import FsmchatError
from ..models import RunResult
from ..speakers.human import Pending
from ..store.checkpoint import Checkpointer, MemoryCheckpointer


# ---- people in the loop ----
class AnswerScriptError(FsmchatError, AssertionError):
    """The answers given to ``answer()`` do not fit the run: it waited with none left, or some were left over.

    Examples:
        >>> from fsmchat import Human, RoundRobinSwarm
        >>> from fsmchat.testing import answer
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> swarm = RoundRobinSwarm(agents=[writer, Human("editor")])
        >>> answer(swarm, "Announce the launch.", ["Approved: ship it.", "And again."])
        Traceback (most recent call last):
        ...
        fsmchat.testing.people.AnswerScriptError: the run ended (max_loops) after 1 interrupt(s); 1 scripted answer(s) were not used: ['And again.']
    """


class Answered(NamedTuple):
    """What ``answer()`` returns: the final result and every request the run stopped at, in order.

    Attributes:
        result: The run's final result.
        asked: What the run waited for at each stop (``Pending``), in order.

    Examples:
        >>> from fsmchat import Human, RoundRobinSwarm
        >>> from fsmchat.testing import answer
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> result, asked = answer(RoundRobinSwarm(agents=[writer, Human("editor")]), "Announce the launch.",
        ...                        ["Approved: ship it."])
        >>> result.stop_reason, [p.person for p in asked]
        ('max_loops', ['editor'])
    """

    result: RunResult
    asked: list[Pending]


class Resumable(Protocol):
    """What ``answer`` runs: a pattern or a flow, which checkpoints a run and resumes it with an input."""

    def execute(self, task: str, *, checkpoint: Checkpointer, run_id: str | None) -> RunResult: ...

    def resume(self, run_id: str, checkpoint: Checkpointer, *, input: object = None) -> RunResult: ...


def answer(pattern: Resumable, task: str, answers: Sequence[object] | Callable[[Pending], object], *,
           checkpoint: Checkpointer | None = None, run_id: str | None = None) -> Answered:
    """Run ``pattern`` on ``task`` and answer each interrupt, resuming until the run ends.

    The run stops for real at each interrupt (checkpointed) and goes on through
    ``pattern.resume(run_id, checkpoint, input=...)``, exactly as a person's later answer would.

    Args:
        pattern: The pattern or flow to run.
        task: Its task.
        answers: The inputs in order (``Approve()``, ``Edit(...)``, ``Reject(...)``, ``Say(...)``
            or a str), or a function ``(pending) -> input``.
        checkpoint: Where the run is checkpointed (a ``MemoryCheckpointer`` by default).
        run_id: The run's id (a new one by default).

    Returns:
        The final result and the ``Pending`` requests seen (an ``Answered``).

    Raises:
        AnswerScriptError: The run waits with no answer left, or a list of answers is not used up.

    Examples:
        >>> from fsmchat import Human, RoundRobinSwarm
        >>> from fsmchat.testing import answer
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> swarm = RoundRobinSwarm(agents=[writer, Human("editor")])
        >>> out = answer(swarm, "Announce the launch.", ["Approved: ship it."])
        >>> out.result.stop_reason, [m.role for m in out.result.transcript], len(out.asked)
        ('max_loops', ['User', 'writer', 'editor'], 1)
    """
    cp = checkpoint if checkpoint is not None else MemoryCheckpointer()
    reply = answers if callable(answers) else None
    script = [] if callable(answers) else list(answers)
    result = pattern.execute(task, checkpoint=cp, run_id=run_id)
    asked: list[Pending] = []
    while result.waiting:
        asked.append(result.pending)
        if reply is not None:
            given = reply(result.pending)
        elif len(asked) <= len(script):
            given = script[len(asked) - 1]
        else:
            raise AnswerScriptError(f"the run waits for a person ({result.pending}) but all {len(script)} "
                                    "scripted answer(s) are used; add answers")
        assert result.run_id is not None  # a waiting run is checkpointed under its id
        result = pattern.resume(result.run_id, cp, input=given)
    if reply is None and len(asked) < len(script):
        raise AnswerScriptError(f"the run ended ({result.stop_reason}) after {len(asked)} interrupt(s); "
                                f"{len(script) - len(asked)} scripted answer(s) were not used: {script[len(asked):]!r}")
    return Answered(result, asked)


