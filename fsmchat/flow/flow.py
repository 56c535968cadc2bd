"""Layer 7: ``AgentFlow`` (alias ``Flow``), a workflow of steps compiled to one nested graph."""
from __future__ import annotations

import copy
from typing import Any, Sequence

from ..graph.state_graph import StateGraph
from ..checks import check_agents
from ..errors import ConfigError, attach_result, bad_value, fatal_error, run_finished
from ..models import RunResult, check_output_type, format_output
from ..patterns.base import Pattern, set_pending
from ..speakers.agent import Agent
from ..patterns.interrupts import WaitPoint
from .compile import Compiler, StepError, bound, flow_point, walk_steps
from .context import FlowContext
from .steps import Block, Discussion, If, Loop, Parallel, Repeat, Route, as_task

_REASON = {"completed": "done", "failed": "error", "stopped": "stopped", "running": "done", "waiting": "interrupted"}


def _flow_reason(ctx: FlowContext) -> str:
    return _REASON[ctx.status]


_blocks_in = walk_steps


def _loops_in(steps: Sequence[Any]) -> list[Loop]:
    return [s for s in _blocks_in(steps) if isinstance(s, Loop)]


def _tasks_in(steps: Sequence[Any]) -> list[Any]:
    """Every Task the steps run (a Discussion's speakers included)."""
    found: list[Any] = []
    for s in _blocks_in(steps):
        if isinstance(s, Discussion):
            found += s.tasks
        elif not isinstance(s, Block):
            found.append(as_task(s))
    return found


def _agents_in(steps: Sequence[Any]) -> list[Agent]:
    return [t.agent for t in _tasks_in(steps) if t.agent is not None]


class AgentFlow(Pattern):
    """A workflow of steps run in order, compiled into one nested state graph (``Flow`` is the same class).

    Each step is an Agent, a callable ``(ctx) -> str | StepResult``, a ``Task``, a ``Discussion``
    or a combinator (``loop``, ``parallel``, ``route``, ``if_``, ``repeat``, ``ask_human``).
    ``run``/``start`` return the reference's ``{"output", "steps", "variables", "status"}`` (plus
    ``"error"`` when failed); ``execute`` returns the ``RunResult``. A flow that asks a person
    stops there with status ``"waiting"`` (stop reason ``"interrupted"``) and goes on with
    ``resume(run_id, checkpoint, input=...)``; it must be run with a checkpoint.

    Args:
        steps: The steps, in order (at least one).
        variables: The declared initial variables (``{{name}}`` in prompts); a run works on a copy.
        name: The flow's name (its graph's name).
        agents: The flow's roster, when declared: every step agent must be in it.
        verbose: Print each message as it is posted.
        memory: Give every agent a private memory for the run: each of its calls is sent its own
            earlier prompts and replies first (as swarms' agents keep theirs).
        output_type: Make ``"output"`` the flow's transcript formatted this way (any of the
            patterns' output types) instead of the last step's output.
        interrupt_before: States where the run stops for a person before entering them.
        interrupt_after: States where the run stops for a person after leaving them.

    Raises:
        ValueError: No steps, or a step agent missing from ``agents``.
        TypeError: ``variables`` is not a dict, or a step is not a step.
        ConfigError: A bad ``memory``, ``output_type`` or roster, or a person in a parallel branch.

    Examples:
        >>> from fsmchat import AgentFlow, loop
        >>> def outline(ctx):
        ...     return f"outline of {ctx.input}"
        >>> def section(ctx):
        ...     return f"section on {ctx.variables['item']}"
        >>> flow = AgentFlow(steps=[outline, loop(section, over="parts")], variables={"parts": ["why", "how"]})
        >>> out = flow.run("the talk")
        >>> out["status"], [s["output"] for s in out["steps"]]
        ('completed', ['outline of the talk', 'section on why', 'section on how'])
        >>> flow.execute("the talk").stop_reason
        'done'
    """

    def __init__(self, steps: Sequence[Any] | None = None, variables: dict[str, Any] | None = None,
                 name: str = "flow", agents: Sequence[Agent] | None = None, verbose: bool = False,
                 memory: bool = False, output_type: str | None = None, *,
                 interrupt_before: Sequence[str] | None = None, interrupt_after: Sequence[str] | None = None):
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
        if not isinstance(memory, bool):
            raise bad_value(f"AgentFlow {name!r}", "memory", memory, "True (each agent remembers its own prompts "
                            "and replies of the run) or False", type_error=True)
        if output_type is not None:
            try:
                check_output_type(output_type)
            except ValueError as exc:
                raise ConfigError(f"AgentFlow {name!r}: {exc}") from None
        self.memory, self.output_type = memory, output_type
        check_agents(agents, f"AgentFlow {name!r}")
        for a in agents or []:
            if not isinstance(a, Agent):
                raise bad_value(f"AgentFlow {name!r}", "agents", agents, "the flow's roster, a list of Agent "
                                f"objects (found a {type(a).__name__})", type_error=True)
        self.agents = list(agents) if agents is not None else None
        if self.agents is not None:
            roster = {a.name for a in self.agents}
            for a in _agents_in(self.steps):
                if a.name not in roster:
                    raise ValueError(f"AgentFlow {name!r}: step agent {a.name!r} is not in agents= "
                                     f"{sorted(roster)}; add it to the roster or drop agents=")
        for block in _blocks_in(self.steps):
            if isinstance(block, Parallel) or (isinstance(block, Loop) and block.parallel):
                asked = [t.name for t in _tasks_in(block.steps) if t.person is not None]
                if asked:
                    raise ConfigError(f"AgentFlow {name!r}: {block.name!r} runs {asked[0]!r} (a person) in a "
                                      "parallel branch, which cannot stop for them; ask before or after the "
                                      "parallel step instead")
        self._set_interrupts(interrupt_before, interrupt_after)

    def _compile(self) -> StateGraph:
        return Compiler().sequence(self.steps, self.name, final="end", reason=_flow_reason,
                                   description=f"AgentFlow {self.name}")

    def _wait_point(self, where: str, qualified: str, level: StateGraph) -> WaitPoint:
        return flow_point(where, qualified, level)

    def _check_run(self, task: Any) -> None:
        if not isinstance(task, str):
            raise TypeError(f"AgentFlow.run(input): input must be a str, got {type(task).__name__}")
        if not task.strip():
            raise ConfigError(f"AgentFlow.run(input): input={task!r} is invalid: a non-empty string (the flow's "
                              "{{input}} and its first step's prompt)")
        for lp in _loops_in(self.steps):
            if not isinstance(lp.over, str):
                continue  # a literal list
            items = self.variables.get(lp.over)
            if items is not None and not isinstance(items, (list, tuple)):
                raise ConfigError(f"AgentFlow: loop over={lp.over!r} is invalid: expected a list, the variable "
                                  f"holds a {type(items).__name__} (for a dict, loop over list(d.items()) or "
                                  "list(d))")

    def _context(self, task: str) -> FlowContext:  # type: ignore[override]
        ctx = FlowContext(task, copy.deepcopy(self.variables))
        ctx.stats.roster = _agents_in(self.steps)
        if self.memory:
            ctx.memory = {}
        return ctx

    async def arun(self, task: str, **kw: Any) -> Any:
        """Run once and return the reference's ``{"output", "steps", "variables", "status"}`` dict.

        The dict has ``"error"`` when a step failed under its ``on_error`` policy. A failure of the
        run itself (a request error no retry can fix, missing credentials, an exhausted test
        script, a bug in a condition) is raised with the result as ``exc.fsmchat_result``, as every
        pattern's ``run`` does.

        Args:
            task: The flow's input (``{{input}}``, and the first step's prompt).
            **kw: ``aexecute``'s keywords (``checkpoint``, ``run_id``, ``observers``, ...).
        """
        result = await self.aexecute(task, **kw)
        if result.error is not None and not isinstance(result.error, StepError):
            raise attach_result(result.error, result)
        return result.output

    def _finish(self, result: RunResult) -> RunResult:
        ctx: FlowContext = result.context
        if result.stop_reason == "interrupted":
            ctx.status = "waiting"
        if result.error is not None and not ctx.halted:
            ctx.status, ctx.error = "failed", result.error
        elif ctx.status == "running":
            ctx.status = "completed"
        if result.error is None and ctx.status == "failed" and ctx.error is not None:
            result.error = ctx.error  # a failed flow is never ok
        fatal = ctx.stats.refused or (fatal_error(result.error) if isinstance(result.error, StepError) else None)
        if fatal is not None and result.error is not fatal:
            # a request error no retry can fix, or a broken test double (an exhausted script), is the
            # run's error whatever the step's on_error policy: it refused every later request
            ctx.status, ctx.error, result.error = "failed", fatal, fatal
        if result.stop_reason not in ("budget", "deadline", "cancelled", "max_steps", "interrupted") and \
                result.error is None:
            result.stop_reason = _flow_reason(ctx)
        if result.stop_reason in ("budget", "deadline"):
            ctx.status = "stopped"
        result.transcript = ctx.transcript.messages
        result.calls = ctx.stats.calls
        result.usage = dict(ctx.stats.usage)
        result.events = list(ctx.events)
        output = ctx.previous_result if self.output_type is None else \
            format_output(ctx.transcript.messages, self.output_type)
        out: dict[str, Any] = {"output": output, "steps": ctx.steps, "variables": ctx.variables,
                               "status": ctx.status}
        if ctx.error is not None:
            out["error"] = str(ctx.error)
        result.output = out
        set_pending(result)
        run_finished(result)
        return result

    def start(self, input: str = "") -> dict[str, Any]:
        """Run once and return the reference's dict: ``run`` under the reference's name.

        Args:
            input: The flow's input.
        """
        return self.run(input)

    def max_calls(self, *, requests: bool = False, **lengths: Any) -> int:  # type: ignore[override]
        """Return the most model calls one run of this flow can make.

        A loop's length is the one given here or its declared ``max_items``; a loop with neither
        raises rather than guess (its list is only known when it runs).

        Args:
            requests: Count HTTP requests instead: each agent's ``num_retries`` included.
            **lengths: A loop variable's length, an int or the list (``flow.max_calls(items=2)``).

        Raises:
            ValueError: A loop's length is unknown; the message names the loop.
        """
        return bound(self.steps, {k: v if isinstance(v, int) else len(v) for k, v in lengths.items()}, requests)

    def _repr_fields(self) -> list[str]:
        names = [getattr(s, "name", None) or as_task(s).name for s in self.steps]
        shown = names[:8] + ([f"+{len(names) - 8} more"] if len(names) > 8 else [])
        return [f"steps={shown!r}", *super()._repr_fields()]

    def _calls_by_speaker(self) -> list[tuple[Any, int]]:
        return [(a, 1) for a in _agents_in(self.steps)]  # for the fingerprint (flows bound calls by step)


Flow = AgentFlow
