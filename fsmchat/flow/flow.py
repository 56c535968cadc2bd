"""Layer 7: ``AgentFlow`` (alias ``Flow``), a workflow of steps compiled to one nested graph."""
from __future__ import annotations

import copy
from typing import Any, Sequence

from ..graph.state_graph import StateGraph
from ..models import RunResult
from ..patterns.base import Pattern
from ..speakers.agent import Agent
from .compile import Compiler, bound
from .context import FlowContext
from .steps import Block, Discussion, If, Loop, Parallel, Repeat, Route, as_task

_REASON = {"completed": "done", "failed": "error", "stopped": "stopped", "running": "done"}


def _flow_reason(ctx: FlowContext) -> str:
    return _REASON[ctx.status]


def _agents_in(steps: Sequence[Any]) -> list[Agent]:
    found: list[Agent] = []
    for s in steps:
        if isinstance(s, Discussion):
            found += [t.agent for t in s.tasks if t.agent is not None]
        elif isinstance(s, (Loop, Parallel, Repeat)):
            found += _agents_in(s.steps)
        elif isinstance(s, Route):
            for v in s.routes.values():
                found += _agents_in(v)
            found += _agents_in(s.default)
        elif isinstance(s, If):
            found += _agents_in(s.then_steps) + _agents_in(s.else_steps)
        elif not isinstance(s, Block):
            t = as_task(s)
            if t.agent is not None:
                found.append(t.agent)
    return found


class AgentFlow(Pattern):
    """A workflow: ``steps`` run in order, each an Agent, a callable ``(ctx) -> str | StepResult``,
    a ``Task``, a ``Discussion`` or a combinator; ``variables`` is the declared initial state
    (never mutated by a run). ``run``/``start`` return ``{"output", "steps", "variables",
    "status"}`` plus ``"error"`` when failed; ``execute`` returns the ``RunResult``."""

    def __init__(self, steps: Sequence[Any] | None = None, variables: dict[str, Any] | None = None,
                 name: str = "flow", agents: Sequence[Agent] | None = None, verbose: bool = False):
        if not steps:
            raise ValueError("AgentFlow needs at least one step")
        if variables is not None and not isinstance(variables, dict):
            raise TypeError(f"AgentFlow variables must be a dict, got {type(variables).__name__}")
        self.steps = list(steps)
        for s in self.steps:
            if not isinstance(s, Block):
                as_task(s)
        self.variables = dict(variables or {})
        self.name, self.verbose = name, verbose
        self.agents = list(agents) if agents is not None else None
        if self.agents is not None:
            roster = {a.name for a in self.agents}
            for a in _agents_in(self.steps):
                if a.name not in roster:
                    raise ValueError(f"AgentFlow {name!r}: step agent {a.name!r} is not in agents= "
                                     f"{sorted(roster)}; add it to the roster or drop agents=")

    def _compile(self) -> StateGraph:
        return Compiler().sequence(self.steps, self.name, final="end", reason=_flow_reason,
                                   description=f"AgentFlow {self.name}")

    def _check_run(self, task: Any) -> None:
        if not isinstance(task, str):
            raise TypeError(f"AgentFlow.run(input): input must be a str, got {type(task).__name__}")

    def _context(self, task: str) -> FlowContext:  # type: ignore[override]
        return FlowContext(task, copy.deepcopy(self.variables))

    def _finish(self, result: RunResult) -> RunResult:
        ctx: FlowContext = result.context
        if result.error is not None and not ctx.halted:
            ctx.status, ctx.error = "failed", result.error
        elif ctx.status == "running":
            ctx.status = "completed"
        if result.stop_reason not in ("budget", "deadline", "cancelled", "max_steps") and result.error is None:
            result.stop_reason = _flow_reason(ctx)
        if result.stop_reason in ("budget", "deadline"):
            ctx.status = "stopped"
        result.transcript = ctx.transcript.messages
        result.calls = ctx.stats.calls
        result.usage = dict(ctx.stats.usage)
        result.events = list(ctx.events)
        out: dict[str, Any] = {"output": ctx.previous_result, "steps": ctx.steps, "variables": ctx.variables,
                               "status": ctx.status}
        if ctx.error is not None:
            out["error"] = str(ctx.error)
        result.output = out
        return result

    def start(self, input: str = "") -> dict[str, Any]:
        """Alias of ``run`` (the reference's spelling)."""
        return self.run(input)

    def max_calls(self, **lengths: Any) -> int:
        """The most model calls this flow can make, given each looped-over variable's length (an int)
        or list, e.g. ``flow.max_calls(items=2)``; missing ones default to the declared variables."""
        known = {k: v for k, v in self.variables.items() if isinstance(v, (list, tuple))}
        known.update(lengths)
        return bound(self.steps, {k: v if isinstance(v, int) else len(v) for k, v in known.items()})


Flow = AgentFlow
