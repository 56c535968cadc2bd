"""Compile workflow steps into ONE nested ``StateGraph``: each step a state, each combinator a
subgraph (a cluster in the diagram), each Discussion ``begin -> turn -> (turn | done)``, with a
``check_until`` state after each turn only when it has an ``until``. Every step state leaves by
``[halted] -> done`` first, so a failure or a deliberate stop propagates out of every level as an
edge in the graph.

This module holds what every step kind shares (running a ``Task`` under its policy, a sequence of
steps, the exits of a bounded loop, forks and joins, the call bound); each block kind compiles and
bounds itself (``Block.compile``, ``Block.calls``: one file per kind in ``fsmchat.flow.blocks``)."""
from __future__ import annotations

import asyncio
import copy
import re
from typing import Callable, Sequence, TypeVar

from ..speakers.deadline import call_within
from ..errors import (BudgetExceeded, ConfigError, DeadlineExceeded, FsmchatError, Interrupted, fatal_error,
                      limit_reached)
from ..graph.state_graph import Guard, Reason, StateGraph, state_names
from ..graph.turns import Exit
from ..models import RunResult, StopReason, shorten
from ..patterns.interrupts import TARGET, WaitPoint
from ..speakers.agent import Turn
from ..speakers.human import USER, Edit, Reject, Say, request
from ..speakers.tool_loop import ToolRound, add_tool_loop
from ..speakers.tools import calls_per_turn
from .context import BUILT_IN_NAMES, FlowContext, StepResult, pick, template_slots
from .task import Block, Task, as_task, step_names


class StepError(FsmchatError, RuntimeError):
    """A flow step failed under ``on_error="stop"``; the message names the step and the cause.

    The flow ends with status ``"failed"``; ``run`` returns PraisonAI's dict with ``"error"``
    rather than raising it.

    Examples:
        >>> from fsmchat import AgentFlow
        >>> def flaky(ctx):
        ...     raise RuntimeError("service down")
        >>> result = AgentFlow(steps=[flaky]).execute("go")
        >>> result.stop_reason, result.error
        ('error', StepError("step 'flaky' failed: RuntimeError: service down"))
    """


def halted(ctx: FlowContext) -> bool:
    """a step failed or stopped the workflow"""
    return ctx.halted


def branch_reason(ctx: FlowContext) -> StopReason:
    """How a branch run ended: its steps' status (done, or error / stopped when one halted it)."""
    return {"failed": StopReason.ERROR, "stopped": StopReason.STOPPED}.get(ctx.status, StopReason.DONE)


Fn = TypeVar("Fn", bound=Callable[..., object])


def named(fn: Fn, name: str, doc: str = "") -> Fn:
    fn.__name__ = state_names([name], fallback="step")[0]  # a label: the state-name rule
    fn.__doc__ = doc
    return fn


# ---- running one step under its policy ----
def _hear(task: Task, ctx: FlowContext, prompt: str | None) -> object:
    """A person's answer for their step (``ask``: the answer, or ``Reject`` stops the flow) or their
    Discussion turn (``message``, given ``prompt``); the run stops here until it comes."""
    person = task.person
    assert person is not None
    if prompt is not None:
        said = ctx.people.ask(request("message", prompt, {"say": f"your message is {person.name}'s turn"},
                                      person=person.name), person)
        assert isinstance(said, Say)  # the only answer allowed (check_input refuses any other)
        return said.text
    question = ctx.fill(task.action, f"step {task.name!r}") if task.action is not None else \
        (str(ctx.previous_result) if ctx.previous_result is not None else ctx.input)
    allowed = {"say": "your answer is the step's output" + (f" (saved as {{{{{task.save_as}}}}})" if task.save_as
                                                              else ""),
               "reject": "stop the flow here (status 'stopped')"}
    answer = ctx.people.ask(request("ask", question, allowed, person=person.name), person)
    if isinstance(answer, Reject):
        ctx.events.append({"event": "rejected", "step": task.name, "reason": answer.reason})
        return StepResult(output=answer.reason, stop_workflow=True)
    assert isinstance(answer, Say)  # the other answer allowed (check_input refuses any other)
    return answer.text


async def _invoke(task: Task, ctx: FlowContext, prompt: str | None) -> object:
    if task.person is not None:
        return _hear(task, ctx, prompt)
    if task.agent is not None:
        agent = task.agent
        system = ctx.fill(agent.system_prompt, f"the system_prompt of agent {agent.name!r}")
        if system != agent.system_prompt:
            agent = agent.model_copy(update={"system_prompt": system})
        if prompt is None:
            template = task.action if task.action is not None else None
            prompt = ctx.fill(template, f"step {task.name!r}") if template is not None else \
                (str(ctx.previous_result) if ctx.previous_result is not None else ctx.input)
        memory = ctx.remember(agent.name) if ctx.memory is not None else []
        reply = await ctx.tool_loop.speak(agent, Turn(agent.name, [], prompt, stats=ctx.stats,
                                                      variables=ctx.variables, history=list(memory)))
        if ctx.memory is not None and ctx.tool_loop.once(agent.name, "memory"):  # the agent remembers its own prompt and reply for the rest of the run
            memory += [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
        return reply
    assert task.handler is not None  # a Task has exactly one of handler, agent and person
    try:
        return await call_within(task.handler, ctx, deadline=ctx.stats.deadline, what=f"step {task.name!r}")
    except DeadlineExceeded as exc:
        ctx.events.append({"event": "deadline", "step": task.name, "detail": str(exc)})
        raise


async def run_task(task: Task, ctx: FlowContext, prompt: str | None = None, record_as: str | None = None
                   ) -> tuple[str, object]:
    """Run ``task``; returns (status, output) with status completed | failed | skipped | stopped.
    Failures follow ``task.on_error``; ``ctx.status`` becomes failed/stopped when the flow must halt."""
    name = record_as or task.name or "step"
    if task.should_run is not None and not task.should_run(ctx):
        ctx.steps.append({"name": name, "output": None, "status": "skipped"})
        return "skipped", None
    attempts = 1 + (task.max_retries if task.on_error == "retry" else 0)
    out: object = None
    for k in range(attempts):
        try:
            out = await _invoke(task, ctx, prompt)
            break
        except (asyncio.CancelledError, Interrupted, ToolRound):  # a cancellation, the run waits for a person, a tool round
            raise
        except Exception as exc:
            if fatal_error(exc) is not None:  # a run limit, a request error no retry can fix, a broken script
                if limit_reached(exc) is None:
                    ctx.steps.append({"name": name, "output": None, "status": "failed",
                                      "error": f"{type(exc).__name__}: {exc}"})
                raise
            if k + 1 < attempts:
                ctx.events.append({"event": "retry", "step": name, "attempt": k + 1, "error": repr(exc)})
                await asyncio.sleep(task.retry_delay * (2 ** k))
                continue
            ctx.steps.append({"name": name, "output": None, "status": "failed",
                              "error": f"{type(exc).__name__}: {exc}"})
            if task.on_error == "continue":
                ctx.events.append({"event": "step_failed", "step": name, "error": repr(exc), "policy": "continue"})
                return "failed", None
            err = StepError(f"step {name!r} failed: {type(exc).__name__}: {exc}")
            err.__cause__ = exc
            ctx.status, ctx.error = "failed", err
            return "failed", None
    stop = False
    if isinstance(out, StepResult):
        ctx.variables.update(out.variables)
        stop, out = out.stop_workflow, out.output
    output = ctx.transcript.admit(name, "" if out is None else (out if isinstance(out, str) else str(out)))
    ctx.previous_result = output
    record: dict[str, object] = {"name": name, "output": output, "status": "stopped" if stop else "completed"}
    speaker = task.agent.name if task.agent is not None else ""
    calls = ctx.tool_loop.entries(speaker) if speaker and ctx.tool_loop.exchanges else []
    if calls:  # the agent's tool calls of this step, in the step's record and on its message
        record["tool_calls"] = calls
    ctx.steps.append(record)
    if task.post:
        if calls:
            shared = {"share_tool_calls": True} if ctx.tool_loop.shares(speaker) else {}
            ctx.transcript.post(name, output, tool_calls=calls, **shared)
        else:
            ctx.transcript.post(name, output)
    if task.save_as is not None:
        ctx.variables[task.save_as] = output
    if task.append_to is not None:
        ctx.variables[task.append_to] = [*_as_list(ctx.variables.get(task.append_to), task), output]
    if stop:
        ctx.status = "stopped"
        ctx.events.append({"event": "stop_workflow", "step": name})
        return "stopped", output
    return "completed", output


def _as_list(value: object, task: Task) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"Task {task.name!r} append_to={task.append_to!r}: the variable holds a "
                        f"{type(value).__name__}, not a list; start it as [] or use save_as=")
    return value


# ---- compiling ----
class Compiler:
    """Builds the nested graph; ``bound`` computes the worst-case number of model calls."""

    def __init__(self) -> None:
        self._ids = 0

    def key(self) -> int:
        self._ids += 1
        return self._ids

    def sequence(self, steps: Sequence[object], name: str, final: str = "done",
                 reason: str | Reason[FlowContext] | None = None,
                 description: str = "") -> StateGraph[FlowContext]:
        g = StateGraph(name, context=FlowContext, description=description)
        names = state_names(step_names(steps), reserved=[final], fallback="step")
        for state, step in zip(names, steps):
            self.add(g, state, step)
        g.final(final, reason=reason)
        for i, state in enumerate(names):
            nxt = names[i + 1] if i + 1 < len(names) else final
            if nxt != final:
                g.edge(state, final, when=halted, label="halt")
            g.edge(state, nxt)
        return g

    def add(self, g: StateGraph[FlowContext], state: str, step: object) -> None:
        """Declare ``step`` as ``state`` of ``g``: a block compiles itself; anything else runs as a ``Task``."""
        if isinstance(step, Block):
            step.compile(self, g, state)
            return
        task = as_task(step)

        async def run_step(ctx: FlowContext, task: Task = task) -> str:
            status, _ = await run_task(task, ctx)
            return status

        desc = (f"agent {task.agent.name}" if task.agent is not None else
                f"asks {task.person.name} (a person: waits for the answer)" if task.person is not None
                else f"call {task.name}") + task_notes(task)
        g.state(state, named(run_step, f"run_{task.name}", desc), desc, waits=task.person is not None)
        if task.agent is not None:
            add_tool_loop(g, state, [task.agent])


# ---- people in the loop: interrupt_before / interrupt_after in a flow ----
def flow_point(where: str, qualified: str, g: StateGraph) -> WaitPoint:
    """A person reviews the flow before/after a step: ``Approve`` goes on, ``Edit(vars={...})`` sets
    variables then goes on, ``Say(text)`` makes their message the previous output (posted as
    ``User``) then goes on, ``Reject(reason)`` stops the flow ("stopped"). A halted flow is not asked."""
    short = qualified.rsplit(".", 1)[-1]
    allowed = {"approve": "go on", "edit": "set those variables, then go on",
               "say": f"your message becomes the previous output (posted as {USER!r}), then go on",
               "reject": "stop the flow here (status 'stopped')"}

    def review(ctx: FlowContext) -> str | None:
        if ctx.halted:
            return None
        answer = ctx.people.ask(request(where, f"{where} {qualified}: go on?", allowed, edit="vars", proposed={
            "next" if where == "before" else "done": qualified, "previous_output": ctx.previous_result,
            "variables": ctx.variables}))
        if isinstance(answer, Edit):
            ctx.variables.update(answer.vars or {})
            ctx.events.append({"event": "edited", "state": qualified, "vars": sorted(answer.vars or {})})
        elif isinstance(answer, Say):
            ctx.previous_result = ctx.transcript.admit(USER, answer.text)
            ctx.transcript.post(USER, ctx.previous_result, by="person")
        elif isinstance(answer, Reject):
            ctx.status = "stopped"
            ctx.events.append({"event": "rejected", "state": qualified, "reason": answer.reason})
        return answer.kind

    named(review, f"ask_{where}_{qualified}", f"a person reviews the flow {where} {short}")
    exits: list[tuple[str, Guard[FlowContext] | None, str]] = [("<final>", halted, "halt")]
    if where == "before":
        exits.append((TARGET, None, "approved"))
    return WaitPoint(review, exits, f"waits for a person: go on {where} {short}? (approve, edit vars, say, reject)")


def task_notes(task: Task) -> str:
    """What a diagram shows of a step besides its speaker: its prompt template (a long one cut at
    60 characters, with the ``{{fields}}`` it reads after the cut still shown) and where its output
    goes, when they differ from the defaults."""
    notes = []
    if task.action is not None:
        action = " ".join(task.action.split())
        if len(action) > 70:
            head = action[:60]
            cut = [f for f in re.findall(r"\{\{[^}]*\}\}", action) if f not in head]
            action = head.rstrip() + "…" + "".join(" " + f for f in cut)
        notes.append("asked: " + action)
    where = [f"saves {{{{{task.save_as}}}}}"] if task.save_as else []
    where += [f"appends to {{{{{task.append_to}}}}}"] if task.append_to else []
    where += ["not posted"] if not task.post else []
    if where:
        notes.append(", ".join(where))
    return "".join("\n" + n for n in notes)


def bounded_exits(met: Callable[[FlowContext], bool] | None = None) -> list[Exit[FlowContext]]:
    """The exits of a bounded loop's check state (Discussion, repeat) before its next pass
    (``fsmchat.graph.turns.add_turns``), in order: a halt, then ``until`` (only when the block has
    one: ``met(ctx)`` reads what the check action stored in the block's frame)."""
    exits: list[Exit[FlowContext]] = [("done", halted, "halt")]
    if met is None:
        return exits

    def until_met(ctx: FlowContext) -> bool:
        """until(ctx) is true"""
        return met(ctx)

    return exits + [("done", until_met, StopReason.UNTIL)]


def split_into(n: int) -> Callable[[FlowContext], list[tuple[int, FlowContext, None]]]:
    def split(ctx: FlowContext) -> list[tuple[int, FlowContext, None]]:
        """one child run per branch, each on a copy of the variables"""
        return [(i, forked(ctx.child()), None) for i in range(n)]
    return split


def forked(child: FlowContext) -> FlowContext:
    """Remember the child's variables as they were at the fork (the join merges only changes)."""
    child.at_fork = copy.deepcopy(child.variables)
    child.memory_at_fork = {k: len(v) for k, v in (child.memory or {}).items()}
    return child


_LIMIT_ERRORS: dict[StopReason | str, type[FsmchatError]] = {StopReason.DEADLINE: DeadlineExceeded,
                                                           StopReason.BUDGET: BudgetExceeded}


Join = Callable[[FlowContext, list[tuple[FlowContext, RunResult]]], dict[str, object]]


def join_to(out_var: str, unset: tuple[str, ...] = ()) -> Join:
    def join(ctx: FlowContext, runs: list[tuple[FlowContext, RunResult]]) -> dict[str, object]:
        """Merge the child runs in declaration order: a branch's variable overrides only if that
        branch changed it (compared with the value at the fork); nothing is merged (or posted)
        unless every branch ran to its end."""
        for _c, r in runs:
            if r.error is not None:
                raise r.error
            hit = _LIMIT_ERRORS.get(r.stop_reason)
            if hit is not None:  # a branch stopped at a budget or the deadline: so does the parent
                raise hit(f"a branch stopped at its {r.stop_reason} limit")
        outputs: list[object] = []
        for c, _r in runs:
            at_fork = c.at_fork
            for k, v in c.variables.items():
                if k not in unset and (k not in at_fork or at_fork[k] != v):
                    ctx.variables[k] = v
            ctx.steps.extend(c.steps)
            if ctx.memory is not None and c.memory is not None:  # what each agent was told in the branch
                at_fork_memory = c.memory_at_fork
                for agent, entries in c.memory.items():
                    ctx.remember(agent).extend(entries[at_fork_memory.get(agent, 0):])
            for m in c.transcript:
                ctx.transcript.post(m.role, m.content, **m.metadata)
            ctx.events.extend(c.events)
            outputs.append(c.previous_result)
            if c.halted and not ctx.halted:
                ctx.status, ctx.error = c.status, c.error
        ctx.variables[out_var] = outputs
        ctx.previous_result = "\n\n".join("" if o is None else str(o) for o in outputs)
        return {"branches": [r.stop_reason for _c, r in runs]}
    return join


# ---- worst-case model calls ----
def bound(steps: Sequence[object], items: dict[str, int], requests: bool = False,
          known: dict[str, object] | None = None) -> int:
    """The most model calls ``steps`` can make (with ``requests``: HTTP requests, each agent's own
    ``num_retries`` included). A loop's length is ``items[over]`` if given, else its declared
    ``max_items`` (enforced when the loop starts); with neither, ``ValueError`` names the loop. A
    loop over a literal list is counted pass by pass with its item ``known``, so a route on that
    variable counts only the branch the item takes (unless a step of the body may rewrite it).
    Each block bounds itself (``Block.calls``)."""
    known = known or {}
    return sum(s.calls(items, requests, known) if isinstance(s, Block) else task_calls(as_task(s), requests)
               for s in steps)


UNKNOWN = object()


def known_value(known: dict[str, object], name: str) -> object:
    """The value of variable ``name`` (dotted: into dicts) when ``bound`` knows it, else ``UNKNOWN``."""
    head, *rest = name.split(".")
    value = known.get(head, UNKNOWN)
    for part in rest:
        value = value.get(part, UNKNOWN) if isinstance(value, dict) else UNKNOWN
    return value


def may_write(steps: Sequence[object], var: str) -> bool:
    """Whether a step of ``steps`` may set variable ``var``: a callable (it may return
    ``StepResult(variables=...)`` or write ``ctx.variables``), a step saving its output under
    that name, or a block's own output variable (a loop's item, ``parallel_outputs``...)."""
    for s in walk_steps(steps):
        if isinstance(s, Block):
            if s.writes(var) or may_write(s.own_tasks(), var):
                return True
        else:
            t = as_task(s)
            if t.handler is not None or var in (t.save_as, t.append_to):
                return True
    return False


_OUTPUT_NAMES = ("discussion_transcript", "loop_index", "loop_outputs", "parallel_outputs")


def check_templates(steps: Sequence[object], variables: dict[str, object], owner: str) -> None:
    """Refuse, when the flow is built, a ``{{name}}`` in a prompt, system prompt or question that
    can never be filled: a name that is neither built in, declared in ``variables`` nor set by a
    step, or an index out of range of a declared value no step may change. A name some step may
    set (a callable step may set any) is checked when it is filled (``FlowContext.fill``)."""
    tasks: list[Task] = []
    for s in walk_steps(steps):
        tasks += s.own_tasks() if isinstance(s, Block) else [as_task(s)]
    for task in tasks:
        where = [(f"step {task.name!r}", task.action)] if task.handler is None else []
        if task.agent is not None:
            where.append((f"the system_prompt of agent {task.agent.name!r}", task.agent.system_prompt))
        for what, template in where:
            for written, name, index in template_slots(template or ""):
                head = name.split(".")[0]
                if head in BUILT_IN_NAMES or may_write(steps, head):
                    continue
                value = known_value(variables, name)
                if value is UNKNOWN:
                    raise ConfigError(f"{owner}: {what}: template {written} names no variable; the known ones "
                                      f"are {', '.join(_known_names(steps, variables))} (declare it in variables= "
                                      "or set it in an earlier step)")
                if index:
                    try:
                        pick(value, index)
                    except (IndexError, TypeError, ValueError):
                        length = f" (length {len(value)})" if hasattr(value, "__len__") else ""
                        raise ConfigError(f"{owner}: {what}: template {written} indexes out of range: "
                                          f"{name!r} is {shorten(repr(value), 60)}{length}, and no step changes "
                                          "it") from None


def _known_names(steps: Sequence[object], variables: dict[str, object]) -> list[str]:
    named = {*BUILT_IN_NAMES, *variables}
    for s in walk_steps(steps):
        if isinstance(s, Block):
            named.update(n for n in (*_OUTPUT_NAMES, getattr(s, "var_name", None)) if n and s.writes(n))
            tasks = s.own_tasks()
        else:
            tasks = [as_task(s)]
        named.update(n for t in tasks for n in (t.save_as, t.append_to) if n)
    return sorted(named)


def walk_steps(steps: Sequence[object]) -> list[object]:
    """Every step, nested ones included, in declaration order."""
    found: list[object] = []
    for s in steps:
        found.append(s)
        if isinstance(s, Block):
            found += walk_steps(s.children())
    return found


def task_calls(task: Task, requests: bool = False) -> int:
    """Model calls of one run of ``task``: its flow-level retries; with ``requests``, times the
    attempts each call may make (the agent's ``num_retries``)."""
    if task.agent is None:
        return 0
    calls = ((1 + task.max_retries) if task.on_error == "retry" else 1) * calls_per_turn(task.agent)
    return calls * (1 + task.agent.num_retries) if requests else calls
