"""The typed context of a flow run: input, variables, previous result, step records, status,
the agents' private memories (``AgentFlow(memory=True)``); plus ``{{name}}`` templating (with an
index or slice, ``{{xs[-3:]}}``) and the small condition language (``"{{score}} > 80"``)."""
from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, ClassVar, TypeVar, Union

from ..checks import as_list, as_object, as_str_map, get_int, get_opt_str, get_str
from ..errors import ConfigError
from ..patterns.run_context import RunContext
from ..speakers.llm import CallStats
from ..store.checkpoint import NotSerializable, decode, encode
from ..store.statelog import AppendLog, Frozen

if TYPE_CHECKING:
    from ..patterns.context import ChatContext

_VAR = re.compile(r"\{\{\s*([\w.]+)\s*(\[\s*-?\d*\s*(?::\s*-?\d*\s*)?\])?\s*\}\}")


BUILT_IN_NAMES = ("input", "previous_output", "previous_result", "transcript")  # what every template may name


class TemplateError(ConfigError):
    """A ``{{name}}`` template that cannot be filled: no variable of that name, or an index out of
    range. Refused when the flow is built where the names and values are static; otherwise the
    step fails when it is filled (with a ``template_error`` event), before its model call."""


def template_slots(template: str) -> list[tuple[str, str, str]]:
    """Each ``{{...}}`` of ``template``: (as written, the name, the ``[...]`` index or "")."""
    return [(m.group(0), m.group(1), m.group(2) or "") for m in _VAR.finditer(template)]


def pick(value: Any, spec: str) -> Any:
    """``value[i]`` or ``value[a:b]`` for a ``[...]`` suffix (Python's own indexing rules)."""
    inner = spec[1:-1].replace(" ", "")
    if ":" in inner:
        a, b = inner.split(":")
        return value[slice(int(a) if a else None, int(b) if b else None)]
    return value[int(inner)]


@dataclass
class StepResult:
    """What a step may return instead of a plain string: its output, a stop, variables to set.

    Attributes:
        output: The step's output (the next step's ``ctx.previous_result``).
        stop_workflow: End the flow after this step (status ``"stopped"``).
        variables: Variables to set (merged into ``ctx.variables``).

    Examples:
        >>> from fsmchat import AgentFlow, StepResult
        >>> def gate(ctx):
        ...     return StepResult(output="blocked", stop_workflow=True, variables={"verdict": "no"})
        >>> def publish(ctx):
        ...     return "published"
        >>> out = AgentFlow(steps=[gate, publish]).run("Ship it?")
        >>> out["status"], out["output"], out["variables"]
        ('stopped', 'blocked', {'verdict': 'no'})
    """

    output: Any = None
    stop_workflow: bool = False
    variables: dict[str, Any] = field(default_factory=dict)


F = TypeVar("F", bound="Frame")


@dataclass
class Frame:
    """A block's working state during one run of it, declared by each block kind as a dataclass.

    A Discussion's holds its turn count and lines, a loop's its items and index, and so on.

    A checkpoint stores it as a dict of its fields (``OPTIONAL`` ones only when set), so a run
    resumes from it; a restored frame is read back as its dataclass on the block's first access
    (``FlowContext.frame``).

    Attributes:
        OPTIONAL: The fields stored only when not None (a kind's class attribute).

    Examples:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Count(Frame):
        ...     n: int = 0
        >>> Count(2).to_state(), Count.from_state({"n": 3})
        ({'n': 2}, Count(n=3))
    """

    OPTIONAL: ClassVar[tuple[str, ...]] = ()  # fields stored only when not None

    def to_state(self) -> dict[str, object]:
        """The fields, as a checkpoint stores them."""
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in state.items() if v is not None or k not in self.OPTIONAL}

    @classmethod
    def from_state(cls: type[F], state: Mapping[str, object]) -> F:
        """The frame a checkpoint stored (a field it lacks takes its default)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in state.items() if k in names})


class FlowContext(RunContext):
    """The context every step, guard and predicate of a flow sees (``ctx``).

    A step reads ``ctx.input``, ``ctx.variables``, ``ctx.previous_result`` (the last step's
    output), ``ctx.steps`` (the records so far) and ``ctx.transcript``; ``ctx.render`` fills
    ``{{name}}`` templates. The engine makes one per run (a branch of ``parallel`` gets a
    ``child``). What a pattern's context has too (transcript, stats, events, people, tool loop)
    is its base, ``RunContext``.

    Args:
        input: The flow's input (the task).
        variables: The run's variables (a copy of the flow's declared ones).
        stats: The run's model-call counts and usage (a new one by default).

    Examples:
        >>> from fsmchat import AgentFlow
        >>> def greet(ctx):
        ...     return f"Hello {ctx.variables['name']}, re: {ctx.input}"
        >>> AgentFlow(steps=[greet], variables={"name": "Ada"}).run("the launch")["output"]
        'Hello Ada, re: the launch'
        >>> from fsmchat.flow import FlowContext
        >>> ctx = FlowContext("the launch", {"parts": ["why", "how"]})
        >>> ctx.render("{{input}}: {{parts[-1]}}"), ctx.halted
        ('the launch: how', False)
    """

    def __init__(self, input: str, variables: dict[str, Any], stats: CallStats | None = None):
        super().__init__(stats=stats or CallStats())
        self.input = input
        self.variables: dict[str, Any] = variables
        self.previous_result: Any = None
        self.steps: list[dict[str, Any]] = AppendLog()
        self.status = "running"  # running | completed | failed | stopped | waiting (for a person)
        self.error: BaseException | None = None
        # per-block working state, keyed by block id (a restored one is a dict until its block reads it)
        self.frames: dict[int, Union[Frame, Mapping[str, object]]] = {}
        # the live context of each pattern run as a step, by block id (not stored: rebuilt from its frame)
        self.nested: dict[int, ChatContext] = {}
        # each agent's own prompts and replies this run (AgentFlow(memory=True)); None: agents remember nothing
        self.memory: dict[str, list[dict[str, str]]] | None = None
        # a branch run's variables and agents' memory lengths at its fork (what the join merges against)
        self.at_fork: dict[str, object] = {}
        self.memory_at_fork: dict[str, int] = {}
        # variable -> (block id, the text set): a Discussion's lines joined, rebuilt from them on restore
        self.joined: dict[str, tuple[int, str]] = {}
        self._joined_state: Frozen | None = None  # what the last snapshot stored of it

    @property
    def previous_output(self) -> object:
        """The last step's output: ``previous_result`` under the name ``{{previous_output}}`` templates use."""
        return self.previous_result

    @property
    def halted(self) -> bool:
        """Whether the flow failed or a step stopped it (no further step runs)."""
        return self.status in ("failed", "stopped")

    def lookup(self, name: str) -> Any:
        """The value ``{{name}}`` stands for: ``input``, ``previous_output``, ``transcript`` or a
        variable (``a.b`` reads into a dict); ``KeyError`` when there is none."""
        if name == "input":
            return self.input
        if name in ("previous_output", "previous_result"):
            return self.previous_result
        if name == "transcript" and name not in self.variables:
            return [m.content for m in self.transcript]
        value: object = self.variables
        for part in name.split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            else:
                raise KeyError(name)
        return value

    def render(self, template: str) -> str:
        """Replace ``{{name}}`` with input, previous_output, ``transcript`` (the contents posted so
        far, a list) or a variable; ``{{name[i]}}`` / ``{{name[a:b]}}`` index or slice it first (a
        list renders as Python's ``str(list)``, e.g. ``['a', 'b']``). Unknown names and indexes out
        of range stay as written (conditions compare them as text); prompts use ``fill``."""
        def sub(m: re.Match[str]) -> str:
            try:
                v = self.lookup(m.group(1))
                if m.group(2):
                    v = pick(v, m.group(2))
            except (KeyError, IndexError, TypeError):
                return m.group(0)
            return "" if v is None else str(v)
        return _VAR.sub(sub, template) if "{{" in template else template

    def fill(self, template: str, what: str) -> str:
        """``template`` with every ``{{name}}`` (``{{name[i]}}``, ``{{name[a:b]}}``) filled, for a
        prompt, system prompt or question that goes to a model or a person: a name with no value,
        or an index out of range, adds a ``template_error`` event and raises ``TemplateError``
        (``what`` says whose template it is). ``render`` is the lenient form conditions use."""
        if "{{" not in template:
            return template

        def sub(m: re.Match[str]) -> str:
            name, index = m.group(1), m.group(2)
            try:
                v = self.lookup(name)
            except KeyError:
                known = sorted({*BUILT_IN_NAMES, *self.variables})
                reason = f"{name!r} is not set; known now: {', '.join(known)}"
            else:
                if not index:
                    return "" if v is None else str(v)
                try:
                    v = pick(v, index)
                    return "" if v is None else str(v)
                except IndexError:
                    reason = f"index {index.replace(' ', '')} is out of range for {name!r} (length {len(v)})"
                except (TypeError, ValueError):
                    reason = f"{name!r} is a {type(v).__name__}, which {index.replace(' ', '')} cannot index"
            self.events.append({"event": "template_error", "where": what, "template": m.group(0), "reason": reason})
            raise TemplateError(f"{what}: template {m.group(0)} cannot be filled: {reason}")
        return _VAR.sub(sub, template)

    def remember(self, agent: str) -> list[dict[str, str]]:
        """``agent``'s private memory (``memory=True``), started empty on its first call."""
        assert self.memory is not None
        memory = self.memory.get(agent)
        if type(memory) is not AppendLog:  # new, or restored from a checkpoint as a plain list
            memory = self.memory[agent] = AppendLog(memory or ())
        return memory

    def frame(self, key: int, kind: type[F]) -> F:
        """Block ``key``'s working state, a ``kind`` (read back from a checkpoint's dict on first use)."""
        frame = self.frames[key]
        if not isinstance(frame, kind):
            assert isinstance(frame, dict), f"block {key}'s frame is a {type(frame).__name__}, not a {kind.__name__}"
            frame = self.frames[key] = kind.from_state(frame)
        return frame

    def join_lines(self, name: str, key: int, lines: list[str], added: str | None = None) -> None:
        """Set variable ``name`` to ``lines`` (block ``key``'s lines) joined by newlines; ``added``:
        the one line appended since this set it last (extended, not joined again). A checkpoint
        stores the lines, not this text: it is rebuilt from them on restore (unless something else
        set the variable since)."""
        text = self.variables.get(name)
        last = self.joined.get(name)
        if added is not None and last is not None and last[0] == key and last[1] is text and text:
            text = f"{text}\n{added}"
        else:
            text = "\n".join(lines)
        self.variables[name] = text
        self.joined[name] = (key, text)

    def snapshot(self) -> dict[str, object]:
        """The working state a checkpoint stores after each step (variables must be JSON-able).
        The growing parts (step records, events, a discussion's lines, memories) are
        ``AppendLog``s, written as what each step added; a variable ``join_lines`` set is not
        stored (its lines are)."""
        joined = {name: key for name, (key, text) in self.joined.items() if self.variables.get(name) is text}
        variables = {k: v for k, v in self.variables.items() if k not in joined}
        if joined and joined != self._joined_state:
            self._joined_state = Frozen(joined)  # kept while unchanged: a commit skips the very dict it wrote
        try:
            encoded = encode(variables)
        except NotSerializable as exc:
            raise TypeError(f"checkpointing a flow needs JSON-able variables; found a {exc}") from None
        frames = {str(k): encode(v.to_state() if isinstance(v, Frame) else v) for k, v in self.frames.items()}
        state = {"variables": encoded, "previous_result": self.previous_result, "steps": self.steps,
                 "status": self.status, "error": None if self.error is None else str(self.error),
                 "frames": frames, "memory": self.memory, **self.shared_state()}
        if joined:
            state["joined"] = self._joined_state
        return state

    def restore(self, state: dict[str, object]) -> None:
        """Set the working state back to a checkpoint's ``snapshot`` (on resume)."""
        where = "flow checkpoint"
        self.variables.clear()
        self.variables.update(as_object(decode(state["variables"]), f"{where}.variables"))
        self.previous_result = state["previous_result"]
        self.steps[:] = [as_object(s, f"{where}.steps") for s in as_list(state["steps"], f"{where}.steps")]
        self.status = get_str(state, "status", where)
        error = get_opt_str(state, "error", where)
        if error is not None:
            self.error = RuntimeError(error)
        frames = decode(state["frames"])  # {"1": frame} (an older fsmchat: {"__dict__": [[1, frame]]})
        self.frames = {int(k): as_object(v, f"{where}.frames") for k, v in as_object(frames, where).items()}
        self.restore_shared(state)
        memory = state.get("memory", self.memory)
        self.memory = None if memory is None else \
            {k: AppendLog([as_str_map(m, f"{where}.memory.{k}") for m in as_list(v, f"{where}.memory")])
             for k, v in as_object(memory, f"{where}.memory").items()}
        self.joined.clear()
        joined = as_object(state.get("joined", {}), f"{where}.joined")
        for name in joined:  # a Discussion's lines
            key = get_int(joined, name, f"{where}.joined")
            stored = self.frames[key]
            lines = stored.lines if isinstance(stored, LinesFrame) else \
                LinesFrame.from_state(stored).lines if isinstance(stored, dict) else []
            self.join_lines(name, key, lines)

    def child(self) -> "FlowContext":
        """A branch context: a deep copy of the variables, the same input and previous result, and
        a lane of the stats (the branch's checkpoint stores the calls it made, the run counts them)."""
        c = FlowContext(self.input, copy.deepcopy(self.variables), self.stats.lane())
        c.previous_result = self.previous_result
        c.memory = copy.deepcopy(self.memory)  # AppendLogs stay AppendLogs
        c.transcript.max_chars = self.transcript.max_chars
        c.tool_loop.approve_all = self.tool_loop.approve_all
        c.tool_loop.share_sources(self.tool_loop)  # the run's MCP servers: started once, stopped with the run
        return c

    def __repr__(self) -> str:
        return f"FlowContext(status={self.status!r}, steps={len(self.steps)}, variables={sorted(self.variables)})"


@dataclass
class LinesFrame(Frame):
    """The part of a block's frame a variable joined from its lines is rebuilt from (``join_lines``)."""

    lines: list[str] = field(default_factory=list)


def flow_input(ctx: FlowContext) -> str:
    """The flow's input, as a step's output: a carried variable started from the task.

    Args:
        ctx: The flow's context.

    Examples:
        >>> from fsmchat import AgentFlow, Task, flow_input
        >>> def shout(ctx):
        ...     return ctx.variables["topic"].upper()
        >>> flow = AgentFlow(steps=[Task(handler=flow_input, post=False, save_as="topic"), shout])
        >>> out = flow.run("rust for all")
        >>> out["output"], out["variables"]
        ('RUST FOR ALL', {'topic': 'rust for all'})
    """
    return ctx.input


_OPS = (">=", "<=", "==", "!=", ">", "<", " contains ", " in ")


def _num(x: str) -> float | None:
    try:
        return float(x)
    except ValueError:
        return None


Operand = TypeVar("Operand", float, str)


def _compare(op: str, a: Operand, b: Operand) -> bool:
    """``a op b`` for a condition's operator (two numbers, or two words)."""
    return {"==": a == b, "!=": a != b, ">": a > b, "<": a < b, ">=": a >= b, "<=": a <= b}[op]


_OPERAND = re.compile(r"""^(\{\{\s*[\w.]+\s*\}\}|[^{}<>=!]+|'[^']*'|"[^"]*")$""")


def check_expression(expr: str, op: str | None, what: str) -> None:
    """Refuse a malformed condition when the flow is built: unbalanced ``{{ }}``, an operand
    missing, a stray operator (``=>``, ``=``), or a lone word that is not a ``{{flag}}``."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{what}: condition={expr!r} is invalid: {why}; write '{{{{var}}}} OP value' with OP in "
                           ">, >=, <, <=, ==, !=, in, contains, or a lone '{{flag}}'")

    if expr.count("{{") != expr.count("}}") or len(_VAR.findall(expr)) != expr.count("{{"):
        raise bad("unbalanced or malformed {{ }}")
    if op is None:
        if not _VAR.fullmatch(expr):
            raise bad("no operator, and not a lone {{flag}}")
        return
    left, right = (x.strip() for x in expr.split(op, 1))
    for side, operand in (("left", left), ("right", right)):
        if not operand:
            raise bad(f"the {side} operand is missing")
        if not _OPERAND.match(operand):
            raise bad(f"the {side} operand {operand!r} is not a {{{{var}}}}, a number or a word")


def compile_condition(condition: object, what: str = "condition") -> Callable[[FlowContext], bool]:
    """A callable ``(ctx) -> bool`` as is, or a string expression: ``{{var}} OP value`` with
    OP in >, >=, <, <=, ==, !=, in (substring), contains; or a lone ``{{flag}}`` (truthy; false when
    unset; a list or dict is true when not empty)."""
    if callable(condition):
        given: Callable[[FlowContext], bool] = condition
        return given
    if not isinstance(condition, str) or not condition.strip():
        raise TypeError(f"{what} must be a callable (ctx) -> bool or an expression string such as "
                        f"'{{{{score}}}} > 80', got {type(condition).__name__}")
    expr = condition.strip()
    op = next((o for o in _OPS if o in expr), None)
    check_expression(expr, op, what)

    def truthy(v: str) -> bool:
        return v.strip().lower() not in ("", "0", "false", "no", "none", "null")

    def evaluate(ctx: FlowContext) -> bool:
        if op is None:
            m = _VAR.fullmatch(expr)
            if m is not None and not m.group(2):
                try:
                    value = ctx.lookup(m.group(1))
                except KeyError:
                    return False  # an unset flag (or accumulator) is false
                if isinstance(value, (list, tuple, dict)):  # a collection is true when it is not empty
                    return bool(value)
            return truthy(ctx.render(expr))
        left, right = (ctx.render(s).strip() for s in expr.split(op, 1))
        o = op.strip()
        if o == "in":
            return left.lower() in right.lower()
        if o == "contains":
            return right.lower() in left.lower()
        ln, rn = _num(left), _num(right)
        if ln is not None and rn is not None:
            return _compare(o, ln, rn)
        if o in (">", "<", ">=", "<="):
            return False
        return _compare(o, left.strip("'\"").lower(), right.strip("'\"").lower())

    evaluate.__name__ = re.sub(r"\W+", "_", _VAR.sub(r"\1", expr)).strip("_")[:40] or "condition"
    evaluate.__doc__ = expr
    return evaluate
