"""Compile workflow steps into ONE nested ``StateGraph``: each step a state, each combinator a
subgraph (a cluster in the diagram), each Discussion ``begin -> turn -> (turn | done)``, with a
``check_until`` state after each turn only when it has an ``until``. Every step state leaves by ``[halted] -> done`` first, so a failure or a deliberate stop
propagates out of every level as an edge in the graph."""
from __future__ import annotations

import asyncio
import copy
import re
from typing import Any, Callable, Sequence

from ..deadline import call_within
from ..errors import BudgetExceeded, DeadlineExceeded, FsmchatError, Interrupted, fatal_error, limit_reached
from ..graph.state_graph import Guard, StateGraph, state_names
from ..patterns.interrupts import TARGET, WaitPoint
from ..speakers.agent import Turn
from ..speakers.human import USER, Edit, Reject, Say, request
from ..statelog import AppendLog
from .context import FlowContext, StepResult
from .steps import Block, Discussion, If, Loop, Parallel, Repeat, Route, Task, as_task


class StepError(FsmchatError, RuntimeError):
    """A flow step failed under ``on_error="stop"``; the message names the step and the cause.

    The flow ends with status ``"failed"``; ``run`` returns the reference's dict with ``"error"``
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


def branch_reason(ctx: FlowContext) -> str:
    """How a branch run ended: its steps' status (done, or error / stopped when one halted it)."""
    return {"failed": "error", "stopped": "stopped"}.get(ctx.status, "done")


def _named(fn: Callable[..., Any], name: str, doc: str = "") -> Callable[..., Any]:
    fn.__name__ = re.sub(r"\W+", "_", name).strip("_") or "step"
    fn.__doc__ = doc
    return fn


# ---- running one step under its policy ----
def _hear(task: Task, ctx: FlowContext, prompt: str | None) -> Any:
    """A person's answer for their step (``ask``: the answer, or ``Reject`` stops the flow) or their
    Discussion turn (``message``, given ``prompt``); the run stops here until it comes."""
    person = task.person
    assert person is not None
    if prompt is not None:
        return ctx.people.ask(request("message", prompt, {"say": f"your message is {person.name}'s turn"},
                                      person=person.name), person).text  # type: ignore[union-attr]
    question = ctx.render(task.action) if task.action is not None else \
        (str(ctx.previous_result) if ctx.previous_result is not None else ctx.input)
    allowed = {"say": "your answer is the step's output" + (f" (saved as {{{{{task.save_as}}}}})" if task.save_as
                                                              else ""),
               "reject": "stop the flow here (status 'stopped')"}
    answer = ctx.people.ask(request("ask", question, allowed, person=person.name), person)
    if isinstance(answer, Reject):
        ctx.events.append({"event": "rejected", "step": task.name, "reason": answer.reason})
        return StepResult(output=answer.reason, stop_workflow=True)
    return answer.text  # type: ignore[union-attr]


async def _invoke(task: Task, ctx: FlowContext, prompt: str | None) -> Any:
    if task.person is not None:
        return _hear(task, ctx, prompt)
    if task.agent is not None:
        agent = task.agent
        system = ctx.render(agent.system_prompt)
        if system != agent.system_prompt:
            agent = agent.model_copy(update={"system_prompt": system})
        if prompt is None:
            template = task.action if task.action is not None else None
            prompt = ctx.render(template) if template is not None else \
                (str(ctx.previous_result) if ctx.previous_result is not None else ctx.input)
        memory = ctx.remember(agent.name) if ctx.memory is not None else []
        reply = await agent.reply(Turn(agent.name, [], prompt, stats=ctx.stats, variables=ctx.variables,
                                       history=list(memory)))
        if ctx.memory is not None:  # the agent remembers its own prompt and reply for the rest of the run
            memory += [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
        return reply
    try:
        return await call_within(task.handler, ctx, deadline=ctx.stats.deadline, what=f"step {task.name!r}")
    except DeadlineExceeded as exc:
        ctx.events.append({"event": "deadline", "step": task.name, "detail": str(exc)})
        raise


async def run_task(task: Task, ctx: FlowContext, prompt: str | None = None, record_as: str | None = None
                   ) -> tuple[str, Any]:
    """Run ``task``; returns (status, output) with status completed | failed | skipped | stopped.
    Failures follow ``task.on_error``; ``ctx.status`` becomes failed/stopped when the flow must halt."""
    name = record_as or task.name or "step"
    if task.should_run is not None and not task.should_run(ctx):
        ctx.steps.append({"name": name, "output": None, "status": "skipped"})
        return "skipped", None
    attempts = 1 + (task.max_retries if task.on_error == "retry" else 0)
    for k in range(attempts):
        try:
            out = await _invoke(task, ctx, prompt)
            break
        except (asyncio.CancelledError, Interrupted):  # a cancellation, or the run waits for a person
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
    ctx.steps.append({"name": name, "output": output, "status": "stopped" if stop else "completed"})
    if task.post:
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


def _as_list(value: Any, task: Task) -> list[Any]:
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

    def sequence(self, steps: Sequence[Any], name: str, final: str = "done", reason: Any = None,
                 description: str = "") -> StateGraph:
        g = StateGraph(name, description=description)
        labels = [getattr(step, "name", None) or as_task(step).name or "step" for step in steps]
        names = state_names(labels, reserved=[final], fallback="step")
        for state, step in zip(names, steps):
            self.add(g, state, step)
        g.final(final, reason=reason)
        for i, state in enumerate(names):
            nxt = names[i + 1] if i + 1 < len(names) else final
            if nxt != final:
                g.edge(state, final, when=halted, label="halt")
            g.edge(state, nxt)
        return g

    def add(self, g: StateGraph, state: str, step: Any) -> None:
        if isinstance(step, Discussion):
            g.subgraph(state, self.discussion(step), f"Discussion: {step.rounds} round(s) of "
                                                     f"{', '.join(t.name for t in step.tasks)}")
        elif isinstance(step, Loop):
            if step.parallel:
                body = self.sequence(step.steps, f"{state}_body", reason=branch_reason)
                g.fork(state, [body], *self.loop_parallel(step), f"each {step.var_name} in {over_text(step)}, "
                       "concurrently")
            else:
                g.subgraph(state, self.loop(step), f"each {step.var_name} in {over_text(step)}")
        elif isinstance(step, Parallel):
            branches = [self.sequence([s], f"{state}_{i + 1}", reason=branch_reason) for i, s in enumerate(step.steps)]
            limit = step.max_concurrency
            how = "concurrently" if limit is None or limit >= len(branches) else \
                "one after another" if limit == 1 else f"at most {limit} at once"
            g.fork(state, branches, _split_into(len(branches)), _join_to("parallel_outputs"),
                   f"{len(branches)} branches {how}", max_concurrency=limit)
        elif isinstance(step, Route):
            g.subgraph(state, self.route(step), "first key said in the previous output" if step.on is None
                       else f"the key equal to {step.on}")
        elif isinstance(step, If):
            g.subgraph(state, self.if_(step), f"if {step.condition.__doc__ or step.condition.__name__}")
        elif isinstance(step, Repeat):
            g.subgraph(state, self.repeat(step), f"until {getattr(step.until, '__name__', 'max')}, "
                                                 f"at most {step.max_iterations}x")
        else:
            task = as_task(step)

            async def run_step(ctx: FlowContext, task: Task = task) -> str:
                status, _ = await run_task(task, ctx)
                return status

            desc = (f"agent {task.agent.name}" if task.agent is not None else
                    f"asks {task.person.name} (a person: waits for the answer)" if task.person is not None
                    else f"call {task.name}") + task_notes(task)
            g.state(state, _named(run_step, f"run_{task.name}", desc), desc, waits=task.person is not None)

    # -- Discussion: begin -> turn -> (turn | done); with until: begin -> turn -> check_until -> (turn | done)
    def discussion(self, d: Discussion) -> StateGraph:
        key, n = self.key(), len(d.tasks)
        limit = d.rounds * n

        def begin(ctx: FlowContext) -> None:
            """start a fresh transcript"""
            ctx.frames[key] = {"t": 0, "lines": AppendLog(), "topic": ctx.previous_result if ctx.previous_result
                               is not None else ctx.input}
            ctx.join_lines("discussion_transcript", key)

        async def turn(ctx: FlowContext) -> str:
            """the scheduled speaker talks"""
            f = ctx.frames[key]
            t = f["t"]
            task = d.task_for(d.select(t, ctx)) if d.select is not None else d.tasks[t % n]
            prompt = None
            if task.agent is not None or task.person is not None:
                topic = ctx.render(task.action) if task.action is not None else f["topic"]
                prompt = discussion_prompt(task.name or "", topic, f["lines"], ctx.previous_result)
            status, out = await run_task(task, ctx, prompt, record_as=task.name)
            f["t"] = t + 1
            if status in ("completed", "stopped"):
                line = f"{task.name}: {out}"
                lines = f["lines"]
                if type(lines) is not AppendLog:  # restored from a checkpoint as a plain list
                    lines = f["lines"] = AppendLog(lines)
                lines.append(line)
                ctx.join_lines("discussion_transcript", key, line)
            return f"{task.name}: {status}"

        def check_until(ctx: FlowContext) -> bool | None:
            """until(ctx) after every turn"""
            if ctx.halted:
                ctx.frames[key]["met"] = False
                return None
            try:
                met = bool(d.until(ctx))
            except Exception as exc:
                raise ValueError(f"Discussion until() raised {type(exc).__name__}: {exc}. It is checked after "
                                 "every turn, so a failing condition would run the full round budget.") from exc
            ctx.frames[key]["met"] = met
            return met

        def turns_left(ctx: FlowContext) -> bool:
            return ctx.frames[key]["t"] < limit

        _named(turns_left, "turns_left", f"fewer than {d.rounds} x {n} turns")
        g = StateGraph(d.name, description=f"Discussion {d.name}")
        people = [t.person.name for t in d.tasks if t.person is not None]
        g.state("begin", begin)
        g.state("turn", turn, "the scheduled speaker talks" + (f" (waits for {', '.join(people)}: a person's "
                                                                "turn takes their message)" if people else ""),
                waits=bool(people))
        g.edge("begin", "turn")
        if d.until is not None:
            g.state("check_until", check_until, pure=True)  # committed with the next turn: one commit per turn
            g.edge("turn", "check_until")
        g.final("done")
        bounded_exits(g, "check_until" if d.until is not None else "turn", "turn", key, turns_left, "rounds",
                      until=d.until is not None)
        return g

    # -- loop: begin -> next -> (body -> next | done)
    def loop(self, lp: Loop) -> StateGraph:
        key = self.key()

        def begin(ctx: FlowContext) -> int:
            """read the list to iterate"""
            items = _items(ctx, lp)
            ctx.frames[key] = {"i": -1, "items": items}
            return len(items)

        def next_item(ctx: FlowContext) -> Any:
            """set item and loop_index"""
            f = ctx.frames[key]
            f["i"] += 1
            if f["i"] < len(f["items"]):
                ctx.variables[lp.var_name] = f["items"][f["i"]]
                ctx.variables["loop_index"] = f["i"]
                return f["i"]
            return None

        def has_item(ctx: FlowContext) -> bool:
            """items left"""
            f = ctx.frames[key]
            return f["i"] < len(f["items"])

        def end(ctx: FlowContext) -> None:
            """unset item and loop_index (they are scoped to the loop)"""
            ctx.variables.pop(lp.var_name, None)
            ctx.variables.pop("loop_index", None)

        g = StateGraph(lp.name, description=f"loop over {over_text(lp)}")
        g.state("begin", begin).state("next", next_item)
        g.subgraph("body", self.sequence(lp.steps, "body"), "")
        g.state("end", end)
        g.final("done")
        g.edge("begin", "next")
        g.edge("next", "body", when=has_item)
        g.edge("next", "end", label="exhausted")
        g.edge("body", "end", when=halted, label="halt")
        g.edge("body", "next")
        g.edge("end", "done")
        return g

    def loop_parallel(self, lp: Loop) -> tuple[Callable[[FlowContext], Any], Callable[..., Any]]:
        def split_items(ctx: FlowContext) -> list[tuple[int, FlowContext, int]]:
            """one child run of the body per item, with item and loop_index set"""
            children = []
            for i, item in enumerate(_items(ctx, lp)):
                c = ctx.child()
                c.variables[lp.var_name], c.variables["loop_index"] = item, i
                children.append((0, _forked(c), i))
            return children

        join = _join_to("loop_outputs", unset=(lp.var_name, "loop_index"))
        return split_items, join

    # -- route: decide -> (route_<key> | default | done)
    def route(self, r: Route) -> StateGraph:
        g = StateGraph(r.name, description="route")
        g.state("decide", r.decide, "match a key in the previous output" if r.on is None else f"look up {r.on}")
        states = list(zip(r.routes, state_names(list(r.routes), reserved=["decide", "default", "done"],
                                                 prefix="to_", fallback="route")))
        for k, st in states:
            g.subgraph(st, self.sequence(r.routes[k], st), f"route {k!r}")
        if r.default:
            g.subgraph("default", self.sequence(r.default, "default"), "no key matched")
        g.final("done")
        for k, st in states:
            def matches(ctx: FlowContext, k: str = k) -> bool:
                return r.matches(k, r.value(ctx))

            g.edge("decide", st, when=_named(matches, f"says_{k}" if r.on is None else f"{r.on}_is_{k}",
                                             f"previous output says {k!r}" if r.on is None else f"{r.on} == {k!r}"))
        g.edge("decide", "default" if r.default else "done", label="no_match")
        for _, st in states:
            g.edge(st, "done")
        if r.default:
            g.edge("default", "done")
        return g

    # -- if_: check -> (then | else | done)
    def if_(self, c: If) -> StateGraph:
        g = StateGraph(c.name, description="if")
        g.state("check", None, c.condition.__doc__ or c.condition.__name__)
        g.subgraph("then", self.sequence(c.then_steps, "then"), "")
        if c.else_steps:
            g.subgraph("else", self.sequence(c.else_steps, "else"), "")
        g.final("done")
        g.edge("check", "then", when=c.condition)
        g.edge("check", "else" if c.else_steps else "done", label="otherwise")
        g.edge("then", "done")
        if c.else_steps:
            g.edge("else", "done")
        return g

    # -- repeat: begin -> body -> check -> (body | done)
    def repeat(self, rp: Repeat) -> StateGraph:
        key = self.key()

        def begin(ctx: FlowContext) -> None:
            """reset the iteration count"""
            ctx.frames[key] = {"n": 0, "met": False}

        def check(ctx: FlowContext) -> int:
            """count a pass, evaluate until"""
            f = ctx.frames[key]
            f["n"] += 1
            f["met"] = bool(rp.until(ctx)) if rp.until is not None and not ctx.halted else False
            return f["n"]

        def iterations_left(ctx: FlowContext) -> bool:
            return ctx.frames[key]["n"] < rp.max_iterations

        _named(iterations_left, "iterations_left", f"fewer than {rp.max_iterations} passes")
        g = StateGraph(rp.name, description="repeat")
        g.state("begin", begin)
        g.subgraph("body", self.sequence(rp.steps, "body"), "")
        g.state("check", check)
        g.final("done")
        g.edge("begin", "body").edge("body", "check")
        bounded_exits(g, "check", "body", key, iterations_left, "max_iterations", until=rp.until is not None)
        return g


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

    _named(review, f"ask_{where}_{qualified}", f"a person reviews the flow {where} {short}")
    exits: list[tuple[str, Guard | None, str]] = [("<final>", halted, "halt")]
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


def bounded_exits(g: StateGraph, check: str, again: str, key: int, more: Callable[[FlowContext], bool],
                  exhausted: str, until: bool = True) -> None:
    """The exits of a bounded loop's check state (Discussion, repeat), in order: a halt, ``until``
    (only when the block has one: the check action stored ``met`` in the block's frame), another
    pass while ``more``, else ``exhausted`` (the limit's name)."""
    def until_met(ctx: FlowContext) -> bool:
        """until(ctx) is true"""
        return ctx.frames[key]["met"]

    g.edge(check, "done", when=halted, label="halt")
    if until:
        g.edge(check, "done", when=until_met, label="until")
    g.edge(check, again, when=more)
    g.edge(check, "done", label=exhausted)


def discussion_prompt(name: str, topic: Any, lines: list[str], previous: Any) -> str:
    """What an agent speaker is asked on its Discussion turn."""
    parts = [str(topic) if topic is not None else ""]
    if lines:
        parts.append("Discussion so far:\n" + "\n".join(lines))
    parts.append(f"You are {name}. " + ("Respond to the latest turn and move the discussion forward."
                                         if lines else "Open the discussion."))
    return "\n\n".join(p for p in parts if p)


def over_text(lp: Loop) -> str:
    """How a loop's list is named in the diagram: the variable, a short literal list of plain
    values as written, or a literal list's length."""
    if isinstance(lp.over, str):
        return lp.over
    shown = repr(lp.over)
    plain = all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in lp.over)
    return shown if plain and len(shown) <= 60 else f"a list of {len(lp.over)}"


def _items(ctx: FlowContext, lp: Loop) -> list[Any]:
    over = lp.over
    if isinstance(over, list):
        return copy.deepcopy(over)  # a literal list: the same items every run
    try:
        items = ctx.lookup(over)
    except KeyError:
        raise ValueError(f"loop over={over!r}: no such variable; variables are {sorted(ctx.variables)}") from None
    if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
        raise ValueError(f"loop over={over!r}: expected a list, got {type(items).__name__}"
                         + (" (loop over list(d.items()) or list(d) instead)" if isinstance(items, dict) else ""))
    items = list(items)
    cap = lp.max_items
    if cap is not None and len(items) > cap:
        raise ValueError(f"loop {lp.name!r}: {over!r} holds {len(items)} items, over its max_items={cap} "
                         "(the bound max_calls() promised)")
    return items


def _split_into(n: int) -> Callable[[FlowContext], list[tuple[int, FlowContext, None]]]:
    def split(ctx: FlowContext) -> list[tuple[int, FlowContext, None]]:
        """one child run per branch, each on a copy of the variables"""
        return [(i, _forked(ctx.child()), None) for i in range(n)]
    return split


def _forked(child: FlowContext) -> FlowContext:
    """Remember the child's variables as they were at the fork (the join merges only changes)."""
    child.at_fork = copy.deepcopy(child.variables)  # type: ignore[attr-defined]
    child.memory_at_fork = {k: len(v) for k, v in (child.memory or {}).items()}  # type: ignore[attr-defined]
    return child


_LIMIT_ERRORS = {"deadline": DeadlineExceeded, "budget": BudgetExceeded}


def _join_to(out_var: str, unset: tuple[str, ...] = ()) -> Callable[[FlowContext, list[Any]], Any]:
    def join(ctx: FlowContext, runs: list[tuple[FlowContext, Any]]) -> dict[str, Any]:
        """Merge the child runs in declaration order: a branch's variable overrides only if that
        branch changed it (compared with the value at the fork); nothing is merged (or posted)
        unless every branch ran to its end."""
        for _c, r in runs:
            if r.error is not None:
                raise r.error
            hit = _LIMIT_ERRORS.get(r.stop_reason)
            if hit is not None:  # a branch stopped at a budget or the deadline: so does the parent
                raise hit(f"a branch stopped at its {r.stop_reason} limit")
        outputs = []
        for c, _r in runs:
            at_fork = c.at_fork  # type: ignore[attr-defined]
            for k, v in c.variables.items():
                if k not in unset and (k not in at_fork or at_fork[k] != v):
                    ctx.variables[k] = v
            ctx.steps.extend(c.steps)
            if ctx.memory is not None and c.memory is not None:  # what each agent was told in the branch
                at_fork_memory = c.memory_at_fork  # type: ignore[attr-defined]
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
def bound(steps: Sequence[Any], items: dict[str, int], requests: bool = False,
          known: dict[str, Any] | None = None) -> int:
    """The most model calls ``steps`` can make (with ``requests``: HTTP requests, each agent's own
    ``num_retries`` included). A loop's length is ``items[over]`` if given, else its declared
    ``max_items`` (enforced when the loop starts); with neither, ``ValueError`` names the loop. A
    loop over a literal list is counted pass by pass with its item ``known``, so a route on that
    variable counts only the branch the item takes (unless a step of the body may rewrite it)."""
    known = known or {}
    total = 0
    for s in steps:
        if isinstance(s, Loop) and isinstance(s.over, list):
            if _may_write(s.steps, s.var_name):
                drop = {k: v for k, v in known.items() if k != s.var_name}
                total += sum(bound(s.steps, items, requests, drop) for _ in s.over)
            else:
                total += sum(bound(s.steps, items, requests, {**known, s.var_name: x}) for x in s.over)
        elif isinstance(s, Route) and s.on is not None and _known_value(known, s.on) is not _UNKNOWN:
            value = _known_value(known, s.on)
            key = next((k for k in s.routes if s.matches(k, value)), None)
            total += bound(s.routes[key] if key is not None else s.default, items, requests, known)
        elif isinstance(s, Discussion):
            per_turn = [_calls(t, requests) for t in s.tasks]
            # a selector may pick the costliest speaker on every one of the rounds x speakers turns
            total += s.rounds * (len(per_turn) * max(per_turn) if s.select is not None else sum(per_turn))
        elif isinstance(s, Loop):
            n = items.get(s.over, s.max_items)
            if n is None:
                raise ValueError(f"max_calls: loop {s.name!r} iterates over {s.over!r}, a list only known when it "
                                 f"runs; declare loop(..., max_items=N) (a longer list is then refused when the "
                                 f"loop starts) or give its length: max_calls({s.over}=N)")
            total += n * bound(s.steps, items, requests, known)
        elif isinstance(s, Parallel):
            total += sum(bound([x], items, requests, known) for x in s.steps)
        elif isinstance(s, Route):
            total += max([bound(v, items, requests, known) for v in s.routes.values()]
                         + [bound(s.default, items, requests, known)])
        elif isinstance(s, If):
            total += max(bound(s.then_steps, items, requests, known), bound(s.else_steps, items, requests, known))
        elif isinstance(s, Repeat):
            total += s.max_iterations * bound(s.steps, items, requests, known)
        elif isinstance(s, Block):
            raise TypeError(f"unknown block {type(s).__name__}")
        else:
            total += _calls(as_task(s), requests)
    return total


_UNKNOWN = object()


def _known_value(known: dict[str, Any], name: str) -> Any:
    """The value of variable ``name`` (dotted: into dicts) when ``bound`` knows it, else ``_UNKNOWN``."""
    head, *rest = name.split(".")
    value = known.get(head, _UNKNOWN)
    for part in rest:
        value = value.get(part, _UNKNOWN) if isinstance(value, dict) else _UNKNOWN
    return value


def _may_write(steps: Sequence[Any], var: str) -> bool:
    """Whether a step of ``steps`` may set variable ``var``: a callable (it may return
    ``StepResult(variables=...)`` or write ``ctx.variables``), a step saving its output under
    that name, a nested loop over the same variable, or a block's own output variable."""
    for s in walk_steps(steps):
        if isinstance(s, Loop) and var in (s.var_name, "loop_index", "loop_outputs"):
            return True
        if (isinstance(s, Parallel) and var == "parallel_outputs") or \
                (isinstance(s, Discussion) and var == "discussion_transcript"):
            return True
        if isinstance(s, Discussion):
            if any(_may_write([t], var) for t in s.tasks):
                return True
        elif not isinstance(s, Block):
            t = as_task(s)
            if t.handler is not None or var in (getattr(t, "save_as", None), getattr(t, "append_to", None)):
                return True
    return False


def walk_steps(steps: Sequence[Any]) -> list[Any]:
    """Every step, nested ones included, in declaration order."""
    found: list[Any] = []
    for s in steps:
        found.append(s)
        if isinstance(s, (Loop, Parallel, Repeat)):
            found += walk_steps(s.steps)
        elif isinstance(s, Route):
            found += walk_steps([x for v in s.routes.values() for x in v] + s.default)
        elif isinstance(s, If):
            found += walk_steps(s.then_steps + s.else_steps)
    return found


def _calls(task: Task, requests: bool = False) -> int:
    """Model calls of one run of ``task``: its flow-level retries; with ``requests``, times the
    attempts each call may make (the agent's ``num_retries``)."""
    if task.agent is None:
        return 0
    calls = (1 + task.max_retries) if task.on_error == "retry" else 1
    return calls * (1 + task.agent.num_retries) if requests else calls
