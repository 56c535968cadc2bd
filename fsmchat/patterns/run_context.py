"""What every run's context has, written once: a pattern's (``ChatContext``) and a flow's
(``fsmchat.flow.FlowContext``) derive from ``RunContext``.

Both hold the run's transcript, its model-call counts, usage, limits and deadline (``stats``), its
events, the answers of people in the loop and the agents' tool calls in progress (the speaking
block's ``tool_loop``), and store the last four the same way in a checkpoint.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..models import Transcript
from ..speakers.human import People
from ..speakers.llm import CallStats
from ..speakers.tool_loop import ToolLoop
from ..store.statelog import AppendLog


@dataclass(kw_only=True, eq=False)  # a flow context compares (and hashes) by identity
class RunContext:
    """The parts of a run's context every pattern and flow shares.

    Attributes:
        transcript: The shared conversation (append-only).
        stats: Model calls, usage and the run's limits and deadline.
        events: Notable facts of the run (invalid bids, repaired texts, retries...), in order.
        people: The answers of people in the loop.
        tool_loop: The agents' tool calls in progress and the run's tool sources (the speaking
            block every model call goes through).

    Examples:
        >>> ctx = RunContext()
        >>> ctx.events.append({"event": "note"})
        >>> ctx.shared_state()["events"], ctx.stats.events is ctx.events, ctx.deadline
        ([{'event': 'note'}], True, None)
    """

    transcript: Transcript = field(default_factory=Transcript)
    stats: CallStats = field(default_factory=CallStats)
    events: list[dict[str, Any]] = field(default_factory=AppendLog)
    people: People = field(default_factory=People)
    tool_loop: ToolLoop = field(default_factory=ToolLoop)

    def __post_init__(self) -> None:
        self.transcript.events = self.events  # repaired or cut texts are noted with the run's events
        self.stats.events = self.events  # and a model call's transport fallback or rate-limit wait

    @property
    def deadline(self) -> float | None:
        """The run's deadline (``stats.deadline``: a monotonic clock reading), None when it has none."""
        return self.stats.deadline

    def shared_state(self) -> dict[str, Any]:
        """What a checkpoint stores of these parts after each step (people and tool calls only once used)."""
        state: dict[str, Any] = {"events": self.events, "stats": self.stats.to_state()}
        if self.people.used:
            state["people"] = self.people.to_state()
        if self.tool_loop.used:
            state["tools"] = self.tool_loop.snapshot()
        return state

    def restore_shared(self, state: dict[str, Any]) -> None:
        """Set these parts back to a checkpoint's ``shared_state`` (on resume)."""
        self.events[:] = state["events"]
        self.stats.restore(state["stats"])
        if "people" in state:
            self.people.restore(state["people"])
        if "tools" in state:
            self.tool_loop.restore(state["tools"])
