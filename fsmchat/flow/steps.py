"""Workflow steps as data: ``Task``, ``Discussion`` and the combinators ``loop``, ``parallel``,
``route``, ``if_`` (``when``) and ``repeat``. ``compile.py`` turns them into state graphs."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from ..checks import check_agents
from ..errors import ConfigError, bad_value
from ..speakers.agent import Agent
from ..speakers.human import Human
from .context import compile_condition

OnError = Literal["stop", "continue", "retry"]


@dataclass
class Task:
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
            ``max_retries``.
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

    handler: Callable[..., Any] | None = None
    agent: Agent | None = None
    name: str | None = None
    action: str | None = None
    on_error: OnError = "stop"
    max_retries: int = 0
    should_run: Callable[[Any], bool] | None = None
    retry_delay: float = 0.1
    post: bool = True
    save_as: str | None = None
    append_to: str | None = None
    person: Human | None = None

    def __repr__(self) -> str:
        who = f"agent={self.agent.name!r}" if self.agent is not None else f"person={self.person.name!r}" \
            if self.person is not None else f"handler={getattr(self.handler, '__name__', type(self.handler).__name__)}"
        extra = "" if self.on_error == "stop" else f", on_error={self.on_error!r}" + \
            (f", max_retries={self.max_retries}" if self.on_error == "retry" else "")
        return f"Task({self.name!r}, {who}{extra})"

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.handler, self.agent, self.person)) != 1:
            raise ValueError("Task needs exactly one of handler= (a callable), agent= (an Agent) or person= (a Human)")
        if self.person is not None and not isinstance(self.person, Human):
            raise TypeError(f"Task person must be an fsmchat Human, got {type(self.person).__name__}")
        if self.handler is not None and not callable(self.handler):
            raise TypeError(f"Task handler must be callable, got {type(self.handler).__name__}")
        if self.agent is not None and not isinstance(self.agent, Agent):
            raise TypeError(f"Task agent must be an fsmchat Agent, got {type(self.agent).__name__}")
        if self.on_error not in ("stop", "continue", "retry"):
            raise ValueError(f"Task on_error={self.on_error!r} is not allowed; choose from "
                             "['stop', 'continue', 'retry']")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"Task max_retries must be an int >= 0, got {self.max_retries!r}")
        if isinstance(self.retry_delay, bool) or not isinstance(self.retry_delay, (int, float)) or \
                not 0 <= self.retry_delay < float("inf"):
            raise bad_value("Task", "retry_delay", self.retry_delay, "seconds before the first retry, a finite "
                            "number >= 0")
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


def as_task(step: Any) -> Task:
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


def _steps(steps: Any, what: str) -> list[Any]:
    items = list(steps) if isinstance(steps, (list, tuple)) else [steps]
    if not items:
        raise ValueError(f"{what} needs at least one step")
    for s in items:
        if not isinstance(s, Block):
            as_task(s)  # type check now, before any call
    return items


def _names(steps: Sequence[Any]) -> list[str]:
    return [getattr(s, "name", None) or as_task(s).name or "step" for s in steps]


def _fn(f: Any) -> str:
    return getattr(f, "__name__", type(f).__name__)


class Block:
    """Base of composite steps (each compiles to a subgraph or a fork state)."""

    name: str = "block"

    def _repr_fields(self) -> list[str]:
        return [f"steps={_names(getattr(self, 'steps', []))!r}"]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join([repr(self.name), *self._repr_fields()])})"


class Discussion(Block):
    """A flow step where speakers take turns on one thread, compiled to ``begin -> turn -> (turn | done)``.

    Each round every speaker speaks once, in order, unless ``select`` chooses; ``until`` is checked
    after every turn (drawn as a ``check_until`` state).

    Args:
        agents: The speakers: agents, callables ``(turn) -> str``, ``Task``s or ``Human``s, each once.
        rounds: Full passes over the speakers (at most, with ``until``).
        until: ``until(ctx) -> bool``, checked after every turn; true ends the discussion.
        select: ``select(turn, ctx)`` returns the speaker of turn ``turn`` (one of ``agents``).
        name: The step's name (its states are ``<name>.turn``, ...).

    Raises:
        ValueError: No speakers, or ``rounds`` below 1.
        TypeError: ``until`` or ``select`` is not callable.
        ConfigError: A speaker is listed twice.

    Examples:
        >>> from fsmchat import AgentFlow, Discussion
        >>> def alice(turn):
        ...     return "Cats."
        >>> def bob(turn):
        ...     return "Dogs."
        >>> talk = Discussion([alice, bob], rounds=2)
        >>> talk
        Discussion('discussion', speakers=['alice', 'bob'], rounds=2)
        >>> result = AgentFlow(steps=[talk]).execute("Which pet?")
        >>> result.path
        ['discussion.begin', 'discussion.turn', 'discussion.turn', 'discussion.turn', 'discussion.turn', 'discussion.done', 'end']
        >>> [m.content for m in result.transcript]
        ['Cats.', 'Dogs.', 'Cats.', 'Dogs.']
    """

    def __init__(self, agents: Sequence[Any] | None = None, rounds: int = 3, until: Callable[[Any], bool] | None = None,
                 select: Callable[[int, Any], Any] | None = None, name: str = "discussion"):
        if not check_agents(agents, f"Discussion {name!r}"):
            raise ValueError("Discussion needs at least one speaker; an empty discussion would run zero turns "
                             "and report success.")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError("Discussion rounds must be >= 1.")
        if until is not None and not callable(until):
            raise TypeError(f"Discussion until must be a callable (ctx) -> bool, got {type(until).__name__}")
        if select is not None and not callable(select):
            raise TypeError(f"Discussion select must be a callable (turn, ctx) -> speaker, got {type(select).__name__}")
        self.agents = list(agents)
        self.tasks = [as_task(a) for a in self.agents]
        names = [t.name for t in self.tasks]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"Discussion {name!r}: agents={names!r} is invalid: {twice[0]!r} is listed more than "
                              "once; each speaker takes its turns in order (use rounds= for more turns, or "
                              "select= to let one speaker talk more often)")
        self.rounds, self.until, self.select, self.name = rounds, until, select, name

    def _repr_fields(self) -> list[str]:
        return [f"speakers={_names(self.tasks)!r}", f"rounds={self.rounds}"] + \
            ([f"until={_fn(self.until)}"] if self.until is not None else []) + \
            ([f"select={_fn(self.select)}"] if self.select is not None else [])

    def task_for(self, speaker: Any) -> Task:
        """Return the step of one of this discussion's speakers (what ``select`` returned).

        Args:
            speaker: One of ``agents`` (or its ``Task``, or an agent of the same name).

        Raises:
            ValueError: ``speaker`` is not one of the discussion's speakers.
        """
        for a, t in zip(self.agents, self.tasks):
            if speaker is a or speaker is t:
                return t
        for t in self.tasks:  # a selector may return an equal-named agent copy
            if isinstance(speaker, (Agent, Task, Human)) and speaker.name == t.name:
                return t
        names = [t.name for t in self.tasks]
        raise ValueError(f"Discussion {self.name!r} select() returned {speaker!r}, which is not one of its "
                         f"speakers {names}")


class Loop(Block):
    def __init__(self, steps: Any, over: str | Sequence[Any] = "items", var_name: str = "item", parallel: bool = False,
                 name: str = "loop", max_items: int | None = None):
        if isinstance(over, (list, tuple)):
            over = list(over)  # a literal list, fixed when the flow is built
        elif not isinstance(over, str) or not over:
            raise ValueError(f"loop over= must name a variable holding a list, or be a list, got {over!r}")
        if not isinstance(var_name, str) or not var_name.isidentifier():
            raise bad_value("loop", "var_name", var_name, "a variable name such as 'item' (set to each item, "
                            "read as {{item}})", type_error=not isinstance(var_name, str))
        if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 0):
            raise bad_value("loop", "max_items", max_items, "an int >= 0: the most items the loop accepts (a longer "
                            "list is refused when the loop starts); it bounds max_calls()",
                            type_error=not isinstance(max_items, int))
        self.steps, self.over, self.var_name = _steps(steps, "loop"), over, var_name
        self.parallel, self.name, self.max_items = bool(parallel), name, max_items

    def _repr_fields(self) -> list[str]:
        return [f"over={self.over!r}", *super()._repr_fields()] + (["parallel=True"] if self.parallel else []) + \
            ([f"max_items={self.max_items}"] if self.max_items is not None else [])


class Parallel(Block):
    def __init__(self, steps: Sequence[Any], name: str = "parallel", max_concurrency: int | None = None):
        if max_concurrency is not None and (isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int)
                                            or max_concurrency < 1):
            raise bad_value("parallel", "max_concurrency", max_concurrency, "an int >= 1, the most branches "
                            "running at once (1: one after another, in order), or None for all",
                            type_error=not isinstance(max_concurrency, int))
        self.steps, self.name = _steps(list(steps), "parallel"), name
        self.max_concurrency = max_concurrency


class Route(Block):
    def __init__(self, routes: dict[str, Any], default: Any = None, name: str = "route", on: str | None = None):
        if not isinstance(routes, dict) or not routes:
            raise ValueError("route needs routes={'key': [steps], ...} with at least one key")
        for k in routes:
            if not isinstance(k, str) or not k.strip():
                raise bad_value("route", "routes key", k, "a non-empty string, matched as a whole word in the "
                                "previous output", type_error=not isinstance(k, str))
        if on is not None and (not isinstance(on, str) or not all(p.isidentifier() for p in on.split("."))):
            raise bad_value("route", "on", on, "a variable name such as 'phase' (or 'phase.name'), whose value is "
                            "compared exactly with the keys", type_error=not isinstance(on, str))
        self.routes = {k: _steps(v, f"route {k!r}") for k, v in routes.items()}
        self.default = _steps(default, "route default") if default else []
        self.name, self.on = name, on

    def _repr_fields(self) -> list[str]:
        return [f"routes={list(self.routes)!r}"] + ([f"default={_names(self.default)!r}"] if self.default else [])

    def says(self, key: str, text: Any) -> bool:
        """Whether ``key`` appears as a whole word in ``text`` (case-insensitive)."""
        return re.search(rf"\b{re.escape(key)}\b", str(text or ""), re.IGNORECASE) is not None

    def value(self, ctx: Any) -> Any:
        """What the route looks at: the variable ``on`` (None when unset), else the previous output."""
        if self.on is None:
            return ctx.previous_result
        try:
            return ctx.lookup(self.on)
        except KeyError:
            return None

    def matches(self, key: str, value: Any) -> bool:
        """With ``on``: the value equals ``key`` exactly (case-sensitive); else ``key`` is said in it."""
        return (value is not None and str(value) == key) if self.on is not None else self.says(key, value)

    def decide(self, ctx: Any) -> str | None:
        """match a key in the previous output (or, with on=, equal to that variable)"""
        value = self.value(ctx)
        key = next((k for k in self.routes if self.matches(k, value)), None)
        if key is None:
            seen = {"value": str(value)[:200], "on": self.on} if self.on is not None else \
                {"previous_output": str(value)[:200]}
            ctx.events.append({"event": "route_no_match", "route": self.name, "keys": list(self.routes),
                               "default": bool(self.default), **seen,
                               "note": "no key matched; " + ("the default steps run" if self.default else
                                                             "no default, so the route runs no step")})
        return key


class If(Block):
    def __init__(self, condition: Any, then_steps: Any, else_steps: Any = None, name: str = "if"):
        self.condition = compile_condition(condition, "if_ condition")
        self.then_steps = _steps(then_steps, "if_ then_steps")
        self.else_steps = _steps(else_steps, "if_ else_steps") if else_steps else []
        self.name = name

    def _repr_fields(self) -> list[str]:
        return [f"condition={_fn(self.condition)}", f"then={_names(self.then_steps)!r}"] + \
            ([f"else={_names(self.else_steps)!r}"] if self.else_steps else [])


class Repeat(Block):
    def __init__(self, step: Any, until: Any = None, max_iterations: int = 10, name: str = "repeat"):
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError(f"repeat max_iterations must be an int >= 1, got {max_iterations!r}")
        self.steps = _steps(step, "repeat")
        self.until = compile_condition(until, "repeat until") if until is not None else None
        self.max_iterations, self.name = max_iterations, name

    def _repr_fields(self) -> list[str]:
        return [*super()._repr_fields(), f"max_iterations={self.max_iterations}"] + \
            ([f"until={_fn(self.until)}"] if self.until is not None else [])


def loop(step: Any = None, over: str | Sequence[Any] = "items", var_name: str = "item", parallel: bool = False,
         steps: Any = None, name: str = "loop", max_items: int | None = None) -> Loop:
    """Run the body once per item of a list, with the item in a variable.

    ``var_name`` and ``loop_index`` are set on each pass and unset after the loop.

    Args:
        step: The body: a step or a list of steps.
        over: The variable holding the list, or the list itself (fixed when the flow is built,
            e.g. ``list(range(1, R + 1))`` for numbered rounds): ``max_calls()`` then counts each
            pass with its item known, so a ``route(on=var_name)`` in the body costs only its branch.
        var_name: The variable each item is set in.
        parallel: Run the passes concurrently, as branch runs on copies of the variables.
        steps: The body, when given by this name instead of ``step``.
        name: The step's name.
        max_items: The most items the loop accepts (a longer list is refused when the loop starts),
            so ``max_calls()`` can be computed without knowing the list.

    Returns:
        The loop step.

    Raises:
        ValueError: ``over`` is neither a variable name nor a list, or the body is empty.
        ConfigError: A bad ``var_name`` or ``max_items``.

    Examples:
        >>> from fsmchat import AgentFlow, loop
        >>> def draft(ctx):
        ...     return f"a draft on {ctx.variables['item']}"
        >>> flow = AgentFlow(steps=[loop(draft, over="topics")], variables={"topics": ["cats", "dogs"]})
        >>> [s["output"] for s in flow.run("Write.")["steps"]]
        ['a draft on cats', 'a draft on dogs']
    """
    return Loop(steps if steps is not None else step, over, var_name, parallel, name, max_items)


def parallel(steps: Sequence[Any], name: str = "parallel", max_concurrency: int | None = None) -> Parallel:
    """Run steps concurrently, as branch runs on copies of the variables.

    Their writes are merged in declaration order and their outputs collected in the list variable
    ``parallel_outputs``; the step's output is the outputs joined by blank lines.

    Args:
        steps: The branches, one step each.
        name: The step's name (branch states are traced as ``<name>|<n>.<state>``).
        max_concurrency: The most branches running at once (None: all); they start in declaration
            order, so 1 is a sequential fan-out with a fixed call order (each branch still sees
            the variables as they were at the fork).

    Returns:
        The parallel step.

    Raises:
        ValueError: No steps.
        ConfigError: A bad ``max_concurrency``.

    Examples:
        >>> from fsmchat import AgentFlow, parallel
        >>> def pro(ctx):
        ...     return "yes"
        >>> def con(ctx):
        ...     return "no"
        >>> AgentFlow(steps=[parallel([pro, con])]).run("Ship it?")["variables"]
        {'parallel_outputs': ['yes', 'no']}
    """
    return Parallel(steps, name, max_concurrency)


def route(routes: dict[str, Any], default: Any = None, name: str = "route", on: str | None = None) -> Route:
    """Run the steps of the first route whose key matches; no match runs ``default`` (or nothing).

    A key matches when it appears as a whole word in the previous output (case-insensitive), or,
    with ``on``, when it equals that variable's value exactly.

    Args:
        routes: Key -> the steps to run.
        default: The steps to run when no key matches.
        name: The step's name.
        on: A variable to compare the keys with, exactly (case-sensitive; a dotted name reads into
            a dict, ``on="phase.name"``).

    Returns:
        The route step.

    Raises:
        ValueError: No routes.
        ConfigError: An empty key, or a bad ``on``.

    Examples:
        >>> from fsmchat import AgentFlow, route
        >>> def triage(ctx):
        ...     return "this is a bug report"
        >>> def fix(ctx):
        ...     return "fixing it"
        >>> def thank(ctx):
        ...     return "thanks"
        >>> AgentFlow(steps=[triage, route({"bug": [fix], "question": [thank]})]).run("Crash on save")["output"]
        'fixing it'
    """
    return Route(routes, default, name, on)


def if_(condition: Any, then_steps: Any, else_steps: Any = None, name: str = "if") -> If:
    """Run ``then_steps`` when the condition holds, else ``else_steps``; ``when`` is the same function.

    Args:
        condition: ``condition(ctx) -> bool``, or an expression such as ``"{{score}} >= 70"``.
        then_steps: The steps to run when it holds.
        else_steps: The steps to run otherwise (none when None).
        name: The step's name.

    Returns:
        The step.

    Raises:
        ConfigError: The condition is neither callable nor a valid expression.

    Examples:
        >>> from fsmchat import AgentFlow, if_
        >>> def publish(ctx):
        ...     return "published"
        >>> def revise(ctx):
        ...     return "back to the author"
        >>> AgentFlow(steps=[if_("{{score}} >= 70", [publish], [revise])], variables={"score": 80}).run("go")["output"]
        'published'
    """
    return If(condition, then_steps, else_steps, name)


when = if_


def repeat(step: Any, until: Any = None, max_iterations: int = 10, name: str = "repeat") -> Repeat:
    """Run ``step`` until ``until`` holds, checked after each pass, at most ``max_iterations`` times.

    Args:
        step: The body: a step or a list of steps.
        until: ``until(ctx) -> bool`` or an expression; None runs ``max_iterations`` passes.
        max_iterations: The most passes.
        name: The step's name.

    Returns:
        The repeat step.

    Raises:
        ValueError: ``max_iterations`` is not an int >= 1.

    Examples:
        >>> from fsmchat import AgentFlow, repeat
        >>> def polish(ctx):
        ...     ctx.variables["passes"] = ctx.variables.get("passes", 0) + 1
        ...     return f"pass {ctx.variables['passes']}"
        >>> def good_enough(ctx):
        ...     return ctx.variables["passes"] >= 3
        >>> AgentFlow(steps=[repeat(polish, until=good_enough, max_iterations=5)]).run("go")["output"]
        'pass 3'
    """
    return Repeat(step, until, max_iterations, name)


def ask_human(prompt: str, save_as: str | None = None, *, name: str = "ask_human", person: str = "User",
              post: bool = False) -> Task:
    """Return a step that asks a person a question and stops the run until they answer.

    The flow needs a checkpoint; it goes on with ``resume(run_id, checkpoint, input="answer")``.
    The answer is the step's output (the next previous output); ``Reject(reason)`` stops the flow
    instead (status ``"stopped"``).

    Args:
        prompt: The question (``{{var}}`` templating).
        save_as: Also store the answer in this variable.
        name: The step's name (and the answer's role when posted).
        person: Who is asked (shown in ``result.pending``).
        post: Post the answer to the flow's transcript.

    Raises:
        ConfigError: An empty prompt.

    Examples:
        >>> from fsmchat import AgentFlow, MemoryCheckpointer, ask_human
        >>> flow, store = AgentFlow(steps=[ask_human("Which topic?", save_as="topic")]), MemoryCheckpointer()
        >>> result = flow.execute("Plan the talk.", checkpoint=store, run_id="talk")
        >>> result.output["status"], result.pending.prompt
        ('waiting', 'Which topic?')
        >>> flow.resume("talk", store, input="cats").output["variables"]
        {'topic': 'cats'}
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise bad_value("ask_human", "prompt", prompt, "the question for the person, a non-empty string",
                        type_error=not isinstance(prompt, str))
    return Task(person=Human(person), name=name, action=prompt, save_as=save_as, post=post)
