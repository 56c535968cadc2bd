"""Workflow step kinds: ``Discussion`` and the combinators ``loop``, ``parallel``, ``route``,
``if_`` (``when``) and ``repeat``, and ``ask_human``. Each kind is a ``Block`` declared once by its
model, one module each in ``fsmchat.flow.blocks``; ``Task`` is the leaf step (``fsmchat.flow.task``)."""
from __future__ import annotations

from typing import Sequence

from ..errors import bad_value
from ..speakers.human import Human
from .blocks import Discussion, If, Loop, Parallel, Repeat, Route
from .task import Block, OnError, Task, as_task

__all__ = ["Task", "as_task", "Block", "OnError", "Discussion", "Loop", "Parallel", "Route", "If", "Repeat", "loop",
           "parallel", "route", "if_", "when", "repeat", "ask_human"]


def loop(step: object = None, over: str | Sequence[object] = "items", var_name: str = "item", parallel: bool = False,
         steps: object = None, name: str = "loop", max_items: int | None = None) -> Loop:
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


def parallel(steps: Sequence[object], name: str = "parallel", max_concurrency: int | None = None) -> Parallel:
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


def route(routes: dict[str, object], default: object = None, name: str = "route", on: str | None = None) -> Route:
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


def if_(condition: object, then_steps: object, else_steps: object = None, name: str = "if") -> If:
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


def repeat(step: object, until: object = None, max_iterations: int = 10, name: str = "repeat") -> Repeat:
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
