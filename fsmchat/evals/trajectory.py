"""What an evaluation keeps of one run: its output and its trajectory, as JSON data.

A ``Trajectory`` is read from a ``RunResult`` once, when the run ends: who spoke in order, the
tools called with their arguments, the states visited, the stop reason, calls, tokens and cost,
and the drawn graph's edges. Evaluators score it, cassettes store it (so re-scoring needs no model
call), and a report shows it.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..models import RunResult


class ToolUse(BaseModel):
    """One tool call of a run, as an evaluator reads it.

    Attributes:
        speaker: Who called it.
        name: The tool's name.
        arguments: The arguments it ran with.
        status: ``done``, ``error`` or ``rejected``.
        result: What the tool returned, as the model read it.

    Examples:
        >>> ToolUse(speaker="Billing", name="refund", arguments={"amount": 20}).name
        'refund'
    """

    model_config = ConfigDict(extra="forbid")
    speaker: str
    name: str
    arguments: Any = None
    status: str = "done"
    result: Any = None


class Trajectory(BaseModel):
    """One run, as an evaluation keeps it: its output and how it got there (JSON data).

    Attributes:
        output: The run's output (the pattern's ``output_type``), as text.
        ok: The run ended without an error and was not cancelled.
        error: The error that ended it (``Type: message``), or None.
        stop_reason: Why it stopped.
        speakers: Who spoke, in order (the task excluded).
        tools: The tool calls, in order.
        path: The states the run went through (the top-level run's path).
        calls: Model calls made.
        tokens: Tokens used (prompt and completion).
        cost_usd: What the calls cost, or None when unknown.
        edges: The drawn graph's transitions (source, dest), flattened; empty when the run kept no graph.
        transcript: The messages, as ``{"role", "content"}``.
        run_id: The stored run's id, when the evaluation kept its runs in a store.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> def critic(turn):
        ...     return "Not yet."
        >>> t = Trajectory.of(RoundRobinSwarm(agents=[critic], max_loops=2).execute("Ship it?"))
        >>> t.speakers, t.path, t.stop_reason
        (['critic', 'critic'], ['seed', 'critic', 'critic', 'stop'], 'max_loops')
    """

    model_config = ConfigDict(extra="forbid")
    output: str = ""
    ok: bool = True
    error: str | None = None
    stop_reason: str = ""
    speakers: list[str] = Field(default_factory=list)
    tools: list[ToolUse] = Field(default_factory=list)
    path: list[str] = Field(default_factory=list)
    calls: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    edges: list[tuple[str, str]] = Field(default_factory=list)
    transcript: list[dict[str, str]] = Field(default_factory=list)
    run_id: str | None = None

    @classmethod
    def of(cls, result: RunResult) -> "Trajectory":
        """The trajectory of a finished run.

        Args:
            result: The run's result.

        Returns:
            Its trajectory.

        Examples:
            >>> from fsmchat import RoundRobinSwarm
            >>> Trajectory.of(RoundRobinSwarm(agents=[lambda turn: "Hi."], max_loops=1).execute("Go")).output
            'Hi.'
        """
        said = result.transcript[1:]  # the first message is the task
        edges: list[tuple[str, str]] = []
        if result.graph is not None:
            flat = result.graph.flatten()
            edges = [(t.source, t.dest) for s in flat.states.values() for t in s.out]
        output = result.output if isinstance(result.output, str) else \
            ("" if result.output is None else str(result.output))
        return cls(output=output, ok=result.ok, stop_reason=str(result.stop_reason),
                   error=None if result.error is None else f"{type(result.error).__name__}: {result.error}",
                   speakers=[m.role for m in said],
                   tools=[ToolUse(speaker=m.role, name=c.name, arguments=c.arguments, status=c.status, result=c.result)
                          for m in said for c in m.tool_calls],
                   path=list(result.path), calls=result.calls, tokens=int(result.usage.get("total_tokens", 0)),
                   cost_usd=result.cost_usd, edges=edges, run_id=result.run_id,
                   transcript=[{"role": m.role, "content": m.content} for m in result.transcript])


def trajectory_data(result: RunResult) -> dict[str, Any]:
    """A run's trajectory as JSON data, what a batch's worker sends back of each run it made.

    ``execute_batch(keep=trajectory_data)`` puts it in each ``TaskOutcome.kept``;
    ``Trajectory.model_validate`` reads it back.

    Args:
        result: The run's result, where the run ran.

    Returns:
        ``Trajectory.of(result)`` as a dict of JSON values.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> data = trajectory_data(RoundRobinSwarm(agents=[lambda turn: "Hi."], max_loops=1).execute("Go"))
        >>> data["speakers"], Trajectory.model_validate(data).output
        (['<lambda>'], 'Hi.')
    """
    return Trajectory.of(result).model_dump(mode="json")
