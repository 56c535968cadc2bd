"""The leaf step of a workflow (``Task``: a handler, an agent or a person, with its error policy)
and ``Block``, the base every composite step kind derives from. A step kind is declared once, by
its model, in its class line, ``class Loop(Block, kind="loop", config=LoopConfig)``
(``fsmchat.flow.declare``), which derives its config form and registers it in
``fsmchat.config.STEP_KINDS``: the flow's compiler, its call bound and ``to_config``/``from_config``
ask the block itself, so a new kind touches none of them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Callable, Literal, Optional, Sequence

from pydantic import model_validator

from ..checks import Amount, Count
from ..config.convert import AgentSpec, ConfigReader, ConfigWriter, HumanSpec, human_spec
from ..errors import ConfigError, bad_value
from .declare import FUNCTION, BlockConfig, Declared, Form
from ..speakers.agent import Agent
from ..speakers.human import Human

if TYPE_CHECKING:
    from ..graph.state_graph import StateGraph
    from .compile import Compiler
    from .context import FlowContext

OnError = Literal["stop", "continue", "retry"]


def _agent_spec(w: ConfigWriter, a: object, what: str) -> AgentSpec | None:
    return w.agent(a) if isinstance(a, Agent) else None  # TaskConfig holds an Agent or None


def _human_spec(w: ConfigWriter, h: object, what: str) -> HumanSpec | None:
    return human_spec(h) if isinstance(h, Human) else None  # TaskConfig holds a Human or None


def _built(r: ConfigReader, data: object, what: str) -> object:
    return data.build(r) if isinstance(data, (AgentSpec, HumanSpec)) else None  # its Form's data: one, or None


AGENT = Form(Optional[AgentSpec], _agent_spec, _built)
PERSON = Form(Optional[HumanSpec], _human_spec, _built)


class TaskConfig(BlockConfig):
    """A Task's parameters, declared once (see ``Task``)."""

    handler: Annotated[object, FUNCTION] = None
    agent: Annotated[object, AGENT] = None
    name: Optional[str] = None
    action: Optional[str] = None
    on_error: object = "stop"
    max_retries: Annotated[int, Count(0, "retries under on_error='retry'")] = 0
    should_run: Annotated[object, FUNCTION] = None
    retry_delay: Annotated[float, Amount(ge=0, meaning="seconds before the first retry")] = 0.1
    post: object = True
    save_as: object = None
    append_to: object = None
    person: Annotated[object, PERSON] = None

    @model_validator(mode="after")
    def _check(self) -> "TaskConfig":
        if sum(x is not None for x in (self.handler, self.agent, self.person)) != 1:
            raise ConfigError("Task needs exactly one of handler= (a callable), agent= (an Agent) or person= (a Human)")
        if self.person is not None and not isinstance(self.person, Human):
            raise TypeError(f"Task person must be an fsmchat Human, got {type(self.person).__name__}")
        if self.handler is not None and not callable(self.handler):
            raise TypeError(f"Task handler must be callable, got {type(self.handler).__name__}")
        if self.agent is not None and not isinstance(self.agent, Agent):
            raise TypeError(f"Task agent must be an fsmchat Agent, got {type(self.agent).__name__}")
        if self.on_error not in ("stop", "continue", "retry"):
            raise ConfigError(f"Task on_error={self.on_error!r} is not allowed; choose from "
                              "['stop', 'continue', 'retry']")
        if self.should_run is not None and not callable(self.should_run):
            raise bad_value("Task", "should_run", self.should_run, "a callable (ctx) -> bool, or None",
                            type_error=True)
        if not isinstance(self.post, bool):
            raise bad_value("Task", "post", self.post, "True (post the output to the transcript) or False",
                            type_error=True)
        for key in ("save_as", "append_to"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, str) or not v.isidentifier()):
                raise bad_value("Task", key, v, "a variable name such as 'answer' (read later as {{answer}})",
                                type_error=not isinstance(v, str))
        if self.name is None:
            self.name = self.agent.name if self.agent is not None else self.person.name \
                if self.person is not None else getattr(self.handler, "__name__", type(self.handler).__name__)
        return self


class Task(Declared, kind="task", config=TaskConfig, owner="Task"):
    """A flow step with its error policy: a handler, an agent or a person, and where its output goes.

    A bare Agent, callable or ``Human`` in a flow's steps is a ``Task`` with the defaults. The
    output is always the step's record and the next step's previous output; it is posted to the
    flow's transcript unless ``post=False``; ``save_as`` and ``append_to`` also keep it in variables.

    Attributes:
        handler: A callable ``(ctx) -> str | StepResult`` (exactly one of handler, agent, person).
        agent: An ``Agent`` asked with ``action`` as its prompt.
        name: The step's name (default: the agent's or person's name, or the handler's ``__name__``).
        action: The agent's prompt template (``{{var}}`` templating), or the question for a person;
            default: the previous output, or the flow's input.
        on_error: ``"stop"`` (halt the flow), ``"continue"`` (record the failure and go on) or
            ``"retry"`` (up to ``max_retries`` more attempts, backing off exponentially).
        max_retries: Retries under ``on_error="retry"``.
        should_run: ``should_run(ctx)`` false skips the step.
        retry_delay: Seconds before the first retry (doubling after each).
        post: Post the output to the flow's transcript (False: e.g. an introduction whose reply is
            thrown away).
        save_as: Also store the output in this variable (read later as ``{{x}}``).
        append_to: Also append the output to this list variable (created empty; read as ``{{xs}}``
            or a window such as ``{{xs[-3:]}}``).
        person: A ``Human``: the run stops until they answer (see ``ask_human``).

    Raises:
        ValueError: Not exactly one of handler, agent and person, or a bad ``on_error`` or
            ``max_retries`` (a ``ConfigError``).
        TypeError: A handler that is not callable, an agent that is not an ``Agent``, a person
            that is not a ``Human``.

    Examples:
        >>> from fsmchat import AgentFlow, Task
        >>> def flaky(ctx):
        ...     raise RuntimeError("service down")
        >>> def reply(ctx):
        ...     return "thanks"
        >>> out = AgentFlow(steps=[Task(handler=flaky, on_error="continue"), reply]).run("hello")
        >>> out["status"], [(s["name"], s["status"]) for s in out["steps"]]
        ('completed', [('flaky', 'failed'), ('reply', 'completed')])
        >>> Task(handler=flaky, on_error="retry", max_retries=2)
        Task('flaky', handler=flaky, on_error='retry', max_retries=2)
    """

    # the model's fields, as the flow reads them (attributes of ``config``)
    handler: Callable[..., object] | None
    agent: Agent | None
    name: str | None
    action: str | None
    on_error: OnError
    max_retries: int
    should_run: Callable[[FlowContext], bool] | None
    retry_delay: float
    post: bool
    save_as: str | None
    append_to: str | None
    person: Human | None

    def __repr__(self) -> str:
        who = f"agent={self.agent.name!r}" if self.agent is not None else f"person={self.person.name!r}" \
            if self.person is not None else f"handler={getattr(self.handler, '__name__', type(self.handler).__name__)}"
        extra = "" if self.on_error == "stop" else f", on_error={self.on_error!r}" + \
            (f", max_retries={self.max_retries}" if self.on_error == "retry" else "")
        return f"Task({self.name!r}, {who}{extra})"


TaskSpec = Task.Spec


def as_task(step: object) -> Task:
    """A bare Agent or callable becomes a Task with the default policy (on_error="stop")."""
    if isinstance(step, Task):
        return step
    if isinstance(step, Agent):
        return Task(agent=step)
    if isinstance(step, Human):
        return Task(person=step)
    if callable(step) and not isinstance(step, Block):
        return Task(handler=step)
    raise TypeError(f"a step must be an Agent, a Human, a callable (ctx) -> str | StepResult, a Task, a Discussion or "
                    f"a combinator (loop, parallel, route, if_, repeat); got {type(step).__name__}")


def fn_name(f: object) -> str:
    """How a block's repr names a function it holds (``until=agreed``)."""
    return getattr(f, "__name__", type(f).__name__)


def step_names(steps: Sequence[object]) -> list[str]:
    """Each step's name (a block's, a task's)."""
    return [getattr(s, "name", None) or as_task(s).name or "step" for s in steps]


class Block(Declared):
    """Base of composite steps (each compiles to a subgraph or a fork state).

    A step kind is declared once, in its class line, ``class Loop(Block, kind="loop",
    config=LoopConfig)``, as a pattern is: the model's fields, in order, are the constructor's
    parameters and the block's attributes, its validator holds the block's checks, and its config
    form (``Loop.Spec``, derived from the model) is registered in ``STEP_KINDS``. The block then
    answers for itself: ``compile`` (its states in the flow's graph), ``calls`` (its worst-case
    model calls), ``children`` (the steps it holds), ``own_tasks`` (the tasks it runs itself),
    ``writes`` (a variable it sets), ``forks`` (its steps run as parallel branches) and
    ``check_run`` (checks against the flow's variables before a run); ``to_spec`` is derived.

    Examples:
        >>> from fsmchat.flow import Block, loop
        >>> def write(ctx):
        ...     return "a section"
        >>> each = loop(write, over="parts", name="each")
        >>> isinstance(each, Block), each.kind, each.children() == [write], each.over
        (True, 'loop', True, 'parts')
        >>> type(each).Spec.__qualname__, list(type(each).Spec.model_fields)
        ('Loop.Spec', ['kind', 'steps', 'over', 'var_name', 'parallel', 'name', 'max_items'])
    """

    name: str = "block"
    forks: bool = False  # its steps run as parallel branches (which cannot stop for a person)

    def _repr_fields(self) -> list[str]:
        return [f"steps={step_names(getattr(self, 'steps', []))!r}"]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join([repr(self.name), *self._repr_fields()])})"

    # ---- what a step kind supplies ----
    def compile(self, c: Compiler, g: StateGraph[FlowContext], state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        raise TypeError(f"step {self.name!r}: a {type(self).__name__} does not compile (it defines no compile())")

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, object]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        raise TypeError(f"unknown block {type(self).__name__}")

    def children(self) -> list[object]:
        """The steps this block holds, in declaration order."""
        return list(getattr(self, "steps", []))

    def own_tasks(self) -> list[Task]:
        """The tasks this block runs itself (not those of the steps it holds)."""
        return []

    def compacted_agents(self) -> list[Agent]:
        """The agents of this block whose turns draw a compaction (``Summarize``): none by default."""
        return []

    def writes(self, var: str) -> bool:
        """Whether this block itself sets variable ``var`` (its own output variables)."""
        return False

    def check_run(self, variables: dict[str, object]) -> None:
        """Refuse a run whose declared ``variables`` this block cannot use (before any call)."""
