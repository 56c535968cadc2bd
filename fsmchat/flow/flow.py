"""Layer 16: ``AgentFlow`` (alias ``Flow``), a workflow of steps compiled to one nested graph."""
from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Annotated, Any, Sequence, Sized

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo, model_validator

from ..checks import RUN_KEYWORDS, check_agents, check_keywords
from ..config.convert import AgentRoster, FlowSteps, JsonData
from ..errors import ConfigError, attach_result, bad_value, fatal_error
from ..graph.state_graph import StateGraph
from ..models import RunResult, StopReason, check_output_type, format_output
from ..patterns.base import Pattern, PatternConfig
from ..patterns.interrupts import WaitPoint
from ..speakers.agent import Agent
from ..speakers.compaction import check_drawn, check_limits
from ..speakers.context import counted_usage
from ..speakers.llm import shown_events
from ..store.checkpoint import NotSerializable, encode
from .compile import Compiler, StepError, bound, check_templates, flow_point, walk_steps
from .context import FlowContext
from .pattern_step import as_step
from .task import Block, Task, as_task

_REASON = {"completed": StopReason.DONE, "failed": StopReason.ERROR, "stopped": StopReason.STOPPED,
           "running": StopReason.DONE, "waiting": StopReason.INTERRUPTED}


def _flow_reason(ctx: FlowContext) -> StopReason:
    return _REASON[ctx.status]


_blocks_in = walk_steps


def _tasks_in(steps: Sequence[object]) -> list[Task]:
    """Every Task the steps run (a Discussion's speakers included)."""
    found: list[Task] = []
    for s in _blocks_in(steps):
        found += s.own_tasks() if isinstance(s, Block) else [as_task(s)]
    return found


def _agents_in(steps: Sequence[object]) -> list[Agent]:
    return [t.agent for t in _tasks_in(steps) if t.agent is not None]


# the stop reasons a flow keeps as the engine gave them (every other one is the flow's status)
_KEPT = (StopReason.BUDGET, StopReason.DEADLINE, StopReason.CANCELLED, StopReason.MAX_STEPS, StopReason.INTERRUPTED)


def _owner(info: ValidationInfo) -> str:
    return f"AgentFlow {info.data.get('name', 'flow')!r}"


def _flow_steps(steps: object) -> list[object]:
    if not steps:
        raise ConfigError("AgentFlow needs at least one step")
    if not isinstance(steps, Iterable):
        raise TypeError(f"'{type(steps).__name__}' object is not iterable")  # what iterating it would say
    return [as_step(s) for s in steps]  # a pattern wrapped; a step of no known kind refused now, by type


def _variables(variables: object) -> dict[str, object]:
    if variables is not None and not isinstance(variables, dict):
        raise TypeError(f"AgentFlow variables must be a dict, got {type(variables).__name__}")
    return dict(variables or {})


def _roster(agents: object, info: ValidationInfo) -> list[Agent] | None:
    check_agents(agents, _owner(info))  # None, a list or a tuple
    roster: list[Agent] = []
    for a in agents if isinstance(agents, (list, tuple)) else []:
        if not isinstance(a, Agent):
            raise bad_value(_owner(info), "agents", agents, "the flow's roster, a list of Agent "
                            f"objects (found a {type(a).__name__})", type_error=True)
        roster.append(a)
    return roster if agents is not None else None


def _memory(memory: object, info: ValidationInfo) -> bool:
    if not isinstance(memory, bool):
        raise bad_value(_owner(info), "memory", memory, "True (each agent remembers its own prompts "
                        "and replies of the run) or False", type_error=True)
    return memory


def _output_type(output_type: Any, info: ValidationInfo) -> str | None:
    if output_type is None:
        return None
    try:
        return check_output_type(output_type)
    except ValueError as exc:
        raise ConfigError(f"{_owner(info)}: {exc}") from None


class FlowConfig(PatternConfig):
    """AgentFlow's parameters, declared once: validated before any model call.

    The fields are ``AgentFlow``'s constructor parameters in PraisonAI's order; a step agent
    missing from ``agents=`` or a person asked in a parallel branch is refused here too.

    Attributes:
        steps: The steps, in order (at least one).
        variables: The declared initial variables.
        name: The flow's name.
        agents: The flow's roster, when declared.
        verbose: Print each message as it is posted.
        memory: Give every agent a private memory for the run.
        output_type: Format ``"output"`` as the flow's transcript this way.

    Examples:
        >>> from fsmchat.flow import FlowConfig
        >>> def hello(ctx):
        ...     return "hi"
        >>> FlowConfig(steps=[hello], name="greet").name
        'greet'
        >>> FlowConfig(steps=[])
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: AgentFlow needs at least one step
    """

    steps: Annotated[FlowSteps, AfterValidator(_flow_steps)] = Field(None, validate_default=True)
    variables: Annotated[JsonData, AfterValidator(_variables)] = Field(None, validate_default=True)
    name: str = "flow"
    agents: Annotated[AgentRoster, AfterValidator(_roster)] = None
    verbose: bool = False
    memory: Annotated[bool, BeforeValidator(_memory)] = False
    output_type: Annotated[str | None, BeforeValidator(_output_type)] = None

    @model_validator(mode="after")
    def _whole(self) -> "FlowConfig":
        owner = f"AgentFlow {self.name!r}"
        if self.agents is not None:
            roster = {a.name for a in self.agents}
            for a in _agents_in(self.steps):
                if a.name not in roster:
                    raise ConfigError(f"{owner}: step agent {a.name!r} is not in agents= {sorted(roster)}; add it "
                                      "to the roster or drop agents=")
        for block in _blocks_in(self.steps):
            if isinstance(block, Block) and block.forks:
                asked = [t.name for t in _tasks_in(block.children()) if t.person is not None]
                if asked:
                    raise ConfigError(f"{owner}: {block.name!r} runs {asked[0]!r} (a person) in a parallel branch, "
                                      "which cannot stop for them; ask before or after the parallel step instead")
        check_templates(self.steps, self.variables, owner)
        return self


class AgentFlow(Pattern, kind="flow", config=FlowConfig):
    """A workflow of steps run in order, compiled into one nested state graph (``Flow`` is the same class).

    Each step is an Agent, a callable ``(ctx) -> str | StepResult``, a ``Task``, a ``Discussion``
    or a combinator (``loop``, ``parallel``, ``route``, ``if_``, ``repeat``, ``ask_human``).
    ``run``/``start`` return PraisonAI's ``{"output", "steps", "variables", "status"}`` (plus
    ``"error"`` when failed); ``execute`` returns the ``RunResult``. A flow that asks a person
    stops there with status ``"waiting"`` (stop reason ``"interrupted"``) and goes on with
    ``resume(run_id, checkpoint, input=...)``; it must be run with a checkpoint.

    The attributes below are also the constructor's parameters, in this order (``FlowConfig``
    declares and validates them; setting one later is validated the same way).

    Attributes:
        steps (list): The steps, in order (at least one).
        variables (dict): The declared initial variables (``{{name}}`` in prompts); a run works on a copy.
        name (str): The flow's name (its graph's name).
        agents (list | None): The flow's roster, when declared: every step agent must be in it.
        verbose (bool): Print each message as it is posted.
        memory (bool): Give every agent a private memory for the run: each of its calls is sent its own
            earlier prompts and replies first (as swarms' agents keep theirs).
        output_type (str | None): Make ``"output"`` the flow's transcript formatted this way (any of the
            patterns' output types) instead of the last step's output.

    Args:
        *args: The attributes above by position (``steps``, ``variables``, ...).
        **kwargs: The attributes above by name.
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

    config: FlowConfig

    def _compile(self) -> StateGraph:
        return Compiler().sequence(self.config.steps, self.config.name, final="end", reason=_flow_reason,
                                   description=f"AgentFlow {self.config.name}")

    def _wait_point(self, where: str, qualified: str, level: StateGraph) -> WaitPoint:
        return flow_point(where, qualified, level)

    def _check_run(self, task: object) -> None:
        if not isinstance(task, str):
            raise TypeError(f"AgentFlow.run(input): input must be a str, got {type(task).__name__}")
        if not task.strip():
            raise ConfigError(f"AgentFlow.run(input): input={task!r} is invalid: a non-empty string (the flow's "
                              "{{input}} and its first step's prompt)")
        for block in _blocks_in(self.config.steps):
            if isinstance(block, Block):
                block.check_run(self.config.variables)

    def _check_checkpointed(self) -> None:
        """A checkpoint stores the variables after every step: they must be JSON-able, checked now
        rather than at the first commit (after the first step's model call)."""
        try:
            encode(self.config.variables)
        except NotSerializable as exc:
            raise bad_value(f"AgentFlow {self.config.name!r}", "variables", self.config.variables,
                            "JSON-able values (str, int, float, bool, None, and lists and dicts of them) to be "
                            f"checkpointed after each step; found a {exc}", type_error=True) from None

    def _context(self, task: str) -> FlowContext:
        ctx = FlowContext(task, copy.deepcopy(self.config.variables))
        if self.config.memory:
            ctx.memory = {}
        return ctx

    async def arun(self, task: str, **kw: Any) -> Any:
        """Run once and return PraisonAI's ``{"output", "steps", "variables", "status"}`` dict.

        The dict has ``"error"`` when a step failed under its ``on_error`` policy. A failure of the
        run itself (a request error no retry can fix, missing credentials, an exhausted test
        script, a bug in a condition) is raised with the result as ``exc.fsmchat_result``, as every
        pattern's ``run`` does.

        Args:
            task: The flow's input (``{{input}}``, and the first step's prompt).
            **kw: ``aexecute``'s keywords (``checkpoint``, ``run_id``, ``observers``, ...).
        """
        check_keywords(kw, RUN_KEYWORDS, "AgentFlow.arun")
        result = await self.aexecute(task, **kw)
        if result.error is not None and not isinstance(result.error, StepError):
            raise attach_result(result.error, result)
        return result.output

    def fill_result(self, result: RunResult) -> RunResult:
        """The flow's result: its status, and its output as the dict ``run`` returns."""
        ctx: FlowContext = result.context
        if result.stop_reason == StopReason.INTERRUPTED:
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
        if result.stop_reason not in _KEPT and result.error is None:
            result.stop_reason = _flow_reason(ctx)
        if result.stop_reason in (StopReason.BUDGET, StopReason.DEADLINE):
            ctx.status = "stopped"
        result.transcript = ctx.transcript.messages
        result.calls = ctx.stats.calls
        result.usage = counted_usage(dict(ctx.stats.usage), ctx.events)
        result.events = shown_events(ctx.events, ctx.stats)
        output = ctx.previous_result if self.config.output_type is None else \
            format_output(ctx.transcript.messages, self.config.output_type)
        out: dict[str, object] = {"output": output, "steps": ctx.steps, "variables": ctx.variables,
                               "status": ctx.status}
        if ctx.error is not None:
            out["error"] = str(ctx.error)
        result.output = out
        return result

    def start(self, input: str = "") -> dict[str, object]:
        """Run once and return PraisonAI's dict: ``run`` under PraisonAI's name.

        Args:
            input: The flow's input.
        """
        out: dict[str, object] = self.run(input)
        return out

    def max_calls(self, *, requests: bool = False, **lengths: int | Sized) -> int:
        """Return the most model calls one run of this flow can make.

        A loop's length is the one given here or its declared ``max_items``; a loop with neither
        raises rather than guess (its list is only known when it runs).

        Args:
            requests: Count HTTP requests instead: each agent's ``num_retries`` included.
            **lengths: A loop variable's length, an int or the list (``flow.max_calls(items=2)``).

        Raises:
            ValueError: A loop's length is unknown; the message names the loop.
        """
        return bound(self.config.steps, {k: v if isinstance(v, int) else len(v) for k, v in lengths.items()}, requests)

    def _repr_fields(self) -> list[str]:
        names = [getattr(s, "name", None) or as_task(s).name for s in self.config.steps]
        shown = names[:8] + ([f"+{len(names) - 8} more"] if len(names) > 8 else [])
        return [f"steps={shown!r}", *super()._repr_fields()]

    def _calls_by_speaker(self) -> list[tuple[object, int]]:
        return [(a, 1) for a in _agents_in(self.config.steps)]  # for the fingerprint (flows bound calls by step)

    def _check_context(self) -> None:
        """A ``Summarize`` agent must speak where a compaction is drawn (a Discussion's turns) and
        have a known input limit: refused before any call."""
        blocks = [b for b in _blocks_in(self.config.steps) if isinstance(b, Block)]
        states = [(b.name, b.compacted_agents()) for b in blocks]
        for b, state in zip(blocks, states):  # each under its own policy (a Discussion's context=)
            check_limits([state], getattr(getattr(b, "config", None), "context", None), type(self).__name__)
        check_drawn(states, self._calls_by_speaker(), None, type(self).__name__)


Flow = AgentFlow
