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
    """A step with its error policy: a ``handler`` callable ``(ctx) -> str | StepResult``, an
    ``agent``, or a ``person`` (a ``Human``: the run stops until they answer, see ``ask_human``);
    ``on_error`` is "stop" (halt the flow), "continue" (record and go on) or "retry" (up to
    ``max_retries`` more attempts with exponential backoff from ``retry_delay`` s).
    ``should_run(ctx)`` false skips the step. ``action`` is the agent's prompt template (the
    question, for a person) (default: the previous output, or the flow's input).

    Where the output goes: it is always the step's record and the next previous output; it is
    posted to the flow's transcript unless ``post=False`` (an introduction whose reply is thrown
    away); ``save_as="x"`` also stores it in variable ``x`` (read later as ``{{x}}``);
    ``append_to="xs"`` appends it to the list variable ``xs`` (created empty; an accumulator,
    read as ``{{xs}}`` or a window such as ``{{xs[-3:]}}``)."""

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
    """N speakers take turns on one thread: ``rounds`` passes, an optional ``select(turn, ctx)``
    choosing each speaker, and ``until(ctx)`` checked after every turn."""

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
    """Run the body once per item of the list variable ``over`` (``item``/``loop_index`` set, and
    unset after the loop). ``max_items`` bounds the list (a longer one is refused when the loop
    starts), so ``max_calls()`` can be computed without knowing the list. ``over`` may also be a
    list itself (fixed when the flow is built, e.g. ``over=list(range(1, R + 1))`` for numbered
    rounds, or a user's phase list): ``max_calls()`` then counts each pass with its item known, so
    a ``route(on=var_name)`` in the body costs only the branch that item takes."""
    return Loop(steps if steps is not None else step, over, var_name, parallel, name, max_items)


def parallel(steps: Sequence[Any], name: str = "parallel", max_concurrency: int | None = None) -> Parallel:
    """Run the steps concurrently on copies of the variables; merge writes in declaration order
    (outputs in ``{{parallel_outputs}}``, a list). ``max_concurrency`` caps the branches running at
    once; they start in declaration order, so ``max_concurrency=1`` is a sequential fan-out (each
    branch still sees only the variables as they were at the fork) with a fixed call order."""
    return Parallel(steps, name, max_concurrency)


def route(routes: dict[str, Any], default: Any = None, name: str = "route", on: str | None = None) -> Route:
    """Take the first route whose key appears as a whole word in the previous output; with
    ``on="phase"``, the route whose key equals the variable ``phase`` exactly (case-sensitive; a
    dotted name reads into a dict, ``on="phase.name"``). No match runs ``default`` (or nothing)."""
    return Route(routes, default, name, on)


def if_(condition: Any, then_steps: Any, else_steps: Any = None, name: str = "if") -> If:
    """Branch on ``condition(ctx)`` or an expression such as ``"{{score}} >= 70"``."""
    return If(condition, then_steps, else_steps, name)


when = if_


def repeat(step: Any, until: Any = None, max_iterations: int = 10, name: str = "repeat") -> Repeat:
    """Run ``step`` until ``until(ctx)`` holds (checked after each pass), at most ``max_iterations``."""
    return Repeat(step, until, max_iterations, name)


def ask_human(prompt: str, save_as: str | None = None, *, name: str = "ask_human", person: str = "User",
              post: bool = False) -> Task:
    """A step that asks a person ``prompt`` (``{{var}}`` templating) and stops the run until they
    answer: ``resume(run_id, checkpoint, input="their answer")``. The answer is the step's output
    (the next previous output), stored in ``save_as`` when given and posted to the transcript as
    ``name`` when ``post=True``; ``Reject(reason)`` stops the flow instead (status "stopped").
    ``person`` names who is asked (shown in ``result.pending``). The flow needs a checkpoint."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise bad_value("ask_human", "prompt", prompt, "the question for the person, a non-empty string",
                        type_error=not isinstance(prompt, str))
    return Task(person=Human(person), name=name, action=prompt, save_as=save_as, post=post)
