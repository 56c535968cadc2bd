"""Layer 5: tools an agent calls while it speaks, and the one speaking block every pattern uses.

A **tool** is a plain Python function (sync or async) or a ``Tool`` wrapping one with options:
``Agent(tools=[fn, Tool(fn, name=..., description=..., approval=..., idempotent=..., timeout_s=...)])``.
Its JSON schema comes from the signature, the type hints and the docstring (pydantic); the
arguments a model sends are validated against it before the function runs. A JSON-schema dict
(OpenAI's ``{"type": "function", "function": {...}}``, swarms' ``tools_list_dictionary``) is
accepted too: it is offered to the model, and a model calling it ends the run with a ``ToolError``
saying the tool has no function.

A **tool source** (an MCP server, or anything else that lists tools at run time) may stand in an
agent's ``tools`` list. It is any object with this protocol (``ToolSource``)::

    class MySource:
        name: str                               # names the source in errors and events
        async def start(self) -> None: ...      # once per run, before its first tools() call
        async def tools(self) -> list[Tool]: ... # the tools it offers this run (each with its function)
        async def stop(self) -> None: ...       # once per run, when the run ends (however it ends)

A run's ``ToolLoop`` (``ctx.tool_loop``) starts each source on the first turn of an agent that
carries it, asks its ``tools()`` once, and stops it when the run ends (``ToolLoop.close``); the
names of the tools each source offered are kept in the loop's checkpointed state
(``ToolLoop.offered``).

**Tool rounds are graph states.** ``add_tool_loop(g, state, speakers)`` draws, for a state where
an agent with tools speaks, ``state -[tool_calls]-> tools_<state> -> state`` (and a wait point
``approve_<state>`` where a person approves calls or decides on a call whose result was not
committed). The state's action is wrapped (``tool_action``): when the model answers with tool
calls, the speaking block (``ToolLoop.speak`` / ``ToolLoop.bid``) records them and ends the action
early (``ToolRound``); the step is committed; ``tools_<state>`` runs the calls (concurrently, up to
the agent's ``max_parallel_tools``, results in call order) and its step commits their results; the
state runs again and its model call carries the calls and their results (OpenAI's assistant
``tool_calls`` and ``tool`` messages with matching ids). The agent's final reply is posted with its
tool calls attached (``Message.metadata["tool_calls"]``, read typed as ``Message.tool_calls``). A
graph with no agent with tools is unchanged. Each turn makes at most ``1 + max_tool_rounds`` model
calls (``calls_per_turn``); once the rounds are used the model is asked to answer without tools.

A hub channel's agent (``fsmchat.network``) takes its tool rounds inside its reply (``Agent.reply``
runs them in place, and a direct ``agent.reply(turn)`` does the same): a channel's turn graph
advances on texts, so those rounds are not states of it.

A resumed run never calls a tool whose result was committed. A call that was asked for but whose
result was not committed when the run stopped is run again on resume only when its tool is
``idempotent=True``; otherwise the run waits at ``approve_<state>`` with the call's name and
arguments, where a person approves a re-run (``Approve``), supplies the result (``Say``) or
rejects it (``Reject``).
"""
from __future__ import annotations

import asyncio
import contextvars
import hashlib
import inspect
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, get_type_hints, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic import Field as PydanticField

from ..deadline import call_within
from ..errors import BudgetExceeded, DeadlineExceeded, FsmchatError, Interrupted
from ..graph.state_graph import StateGraph, Transition, is_awaitable, state_names
from .human import Approve, Edit, Reject, Say, request
from .respond import BidOutcome, bid_from_arguments, silent

DEFAULT_MAX_TOOL_ROUNDS = 5
"""The tool rounds one turn may take by default (``Agent.max_tool_rounds``): model calls with tool
calls before the model must answer without tools."""
DEFAULT_MAX_PARALLEL_TOOLS = 4
"""How many tool calls of one reply run at once by default (``Agent.max_parallel_tools``)."""


class ToolError(FsmchatError, RuntimeError):
    """A tool call failed in a way that ends the run.

    Raised for the agent's ``on_tool_error="stop"``, a tool with no function, or a model that
    still asks for tools after its ``max_tool_rounds``. The run ends with ``stop_reason="error"``
    and its transcript so far (``run`` raises it with the result on ``exc.fsmchat_result``).

    Args:
        message: What went wrong.
        agent: The agent whose call it was.
        tool: The tool's name.
        arguments: The arguments the model sent.

    Attributes:
        agent: The agent whose call it was.
        tool: The tool's name.
        arguments: The arguments the model sent.

    Examples:
        >>> from fsmchat import RoundRobinSwarm, ToolError
        >>> from fsmchat.testing import ScriptedModel, ToolCall
        >>> def fetch(url: str) -> str:
        ...     raise ConnectionError("no route to host")
        >>> model = ScriptedModel({"a": [ToolCall("fetch", {"url": "http://x"})]})
        >>> result = RoundRobinSwarm(agents=[model.agent("a", tools=[fetch], on_tool_error="stop")]).execute("Go.")
        >>> result.stop_reason, type(result.error).__name__, result.error.tool
        ('error', 'ToolError', 'fetch')
    """

    def __init__(self, message: str, *, agent: str = "", tool: str = "", arguments: Any = None):
        super().__init__(message)
        self.agent, self.tool, self.arguments = agent, tool, arguments


class ToolRound(FsmchatError):
    """The speaking block's signal: the model asked for tool calls, which the state's tool loop
    runs before the state is entered again (``tool_action`` catches it; it never ends a run)."""


class ToolArgumentsError(FsmchatError, ValueError):
    """A tool's arguments do not match its schema (sent back to the model as the call's result)."""


@runtime_checkable
class ToolSource(Protocol):
    """Anything that offers tools at run time, such as an MCP server.

    An entry of ``Agent(tools=[...])`` may be a tool source. A run starts it before the first
    turn of an agent carrying it, lists its tools once, and stops it when the run ends, however
    it ends.

    Attributes:
        name: Names the source in errors and events.

    Examples:
        >>> from fsmchat import Tool, ToolSource
        >>> class Clock:
        ...     name = "clock"
        ...     async def start(self): pass
        ...     async def tools(self): return [Tool(lambda: "12:00", name="now", description="The time.")]
        ...     async def stop(self): pass
        >>> isinstance(Clock(), ToolSource)
        True
    """

    name: str

    async def start(self) -> None:
        """Get ready (start a process, open a connection): once per run, before ``tools``."""

    async def tools(self) -> list["Tool"]:
        """The tools this source offers this run, each with its function."""
        return []

    async def stop(self) -> None:
        """Release what ``start`` took: once per run, when the run ends."""


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """A docstring's summary (its first paragraph) and its Google-style ``Args:`` descriptions.

    Examples:
        >>> parse_docstring('''Add two numbers.
        ...
        ...     Args:
        ...         a: The first.
        ...         b (int): The second,
        ...             on two lines.
        ...     ''')
        ('Add two numbers.', {'a': 'The first.', 'b': 'The second, on two lines.'})
    """
    text = inspect.cleandoc(doc or "")
    lines = text.splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line) or _SECTION.match(line):
            break
        summary.append(line.strip())
    args: dict[str, str] = {}
    current: str | None = None
    inside = False
    indent = 0
    for line in lines:
        if _ARGS_HEADER.match(line):
            inside, current = True, None
            continue
        if not inside:
            continue
        if line.strip() and _SECTION.match(line) and (len(line) - len(line.lstrip())) == 0:
            break
        m = _ARG_LINE.match(line)
        depth = len(line) - len(line.lstrip())
        if m and (current is None or depth <= indent):
            current, indent = m.group(1).lstrip("*"), depth
            args[current] = m.group(3).strip()
        elif current is not None and line.strip():
            args[current] = (args[current] + " " + line.strip()).strip()
    return " ".join(summary), args


def _schema_model(fn: Callable[..., Any], name: str, docs: dict[str, str]) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters (hints, defaults, docstring descriptions)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"Tool {name!r}: cannot read the signature of {fn!r}: {exc}") from None
    try:
        hints = _hints(fn)
    except Exception as exc:
        raise TypeError(f"Tool {name!r}: cannot resolve the type hints of {fn!r}: {exc}") from None
    fields: dict[str, Any] = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"Tool {name!r}: parameter {p.name!r} is *args/**kwargs; a tool's parameters must be "
                            "named (the model sends them as a JSON object)")
        if p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"Tool {name!r}: parameter {p.name!r} is positional-only; a tool's parameters are "
                            "passed by name")
        hint = hints.get(p.name, Any)
        default = ... if p.default is p.empty else p.default
        fields[p.name] = (hint, PydanticField(default, description=docs.get(p.name) or None))
    config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)
    return create_model(f"{name}_arguments", __config__=config, **fields)


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)
    return get_type_hints(target)


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The model's JSON schema without pydantic's titles (noise to a model)."""
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "title" or not isinstance(v, str)}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    out = strip(schema)
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    return dict(out)


class Tool:
    """A function an agent may call while it speaks, with its schema and its options.

    Args:
        fn: The function, sync or async; its keyword parameters are the tool's arguments.
        name: The tool's name (default: the function's ``__name__``): letters, digits, ``_`` and ``-``.
        description: What it does (default: the docstring's summary).
        parameters: A JSON schema of the arguments (default: derived from the signature, the type
            hints and the docstring's ``Args:`` section). Without ``fn`` the tool has no function.
        approval: A person approves each call before it runs (the run waits; it needs a checkpoint).
        idempotent: Running the call twice does no harm: a call whose result was not committed when
            the run stopped is run again on resume without asking.
        timeout_s: Seconds one call may take (None: only the run's deadline bounds it); a call that
            takes longer is an error result.

    Raises:
        TypeError: ``fn`` is not callable, has ``*args``/``**kwargs`` or hints pydantic cannot read.
        ValueError: A bad name or timeout.

    Examples:
        >>> from fsmchat.speakers.tools import Tool
        >>> def add(a: int, b: int = 1) -> int:
        ...     '''Add two integers.
        ...
        ...     Args:
        ...         a: The first.
        ...         b: The second.
        ...     '''
        ...     return a + b
        >>> t = Tool(add, idempotent=True)
        >>> t.spec()["function"]["name"], t.spec()["function"]["description"]
        ('add', 'Add two integers.')
        >>> t.spec()["function"]["parameters"]["required"], t.check_arguments('{"a": "2"}')
        (['a'], {'a': 2, 'b': 1})
    """

    def __init__(self, fn: Callable[..., Any] | None = None, *, name: str | None = None,
                 description: str | None = None, parameters: dict[str, Any] | None = None,
                 approval: bool = False, idempotent: bool = False, timeout_s: float | None = None):
        if fn is not None and not callable(fn):
            raise TypeError(f"Tool: fn={fn!r} is not callable; pass a function (sync or async)")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or ""
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ValueError(f"Tool: name={self.name!r} is invalid: 1-64 letters, digits, '_' or '-' "
                             "(what a model calls the tool by)")
        summary, docs = parse_docstring(getattr(fn, "__doc__", None) if fn is not None else None)
        self.description = description if description is not None else summary
        self._model: type[BaseModel] | None = None
        if parameters is None:
            if fn is None:
                raise TypeError(f"Tool {self.name!r}: give fn (a function) or parameters (a JSON schema)")
            self._model = _schema_model(fn, self.name, docs)
            parameters = _clean_schema(self._model.model_json_schema())
        if not isinstance(parameters, dict):
            raise TypeError(f"Tool {self.name!r}: parameters must be a JSON-schema dict, got {type(parameters).__name__}")
        self.parameters = parameters
        self.approval = bool(approval)
        self.idempotent = bool(idempotent)
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                      or not timeout_s > 0):
            raise ValueError(f"Tool {self.name!r}: timeout_s={timeout_s!r} is invalid: seconds > 0, or None")
        self.timeout_s = timeout_s

    @classmethod
    def from_schema(cls, schema: dict[str, Any]) -> "Tool":
        """A tool with no function from an OpenAI-format dict (``{"type": "function", "function": {...}}``
        or the bare ``{"name", "description", "parameters"}``)."""
        inner = schema.get("function")
        fn: dict[str, Any] = inner if isinstance(inner, dict) else schema
        return cls(None, name=str(fn.get("name") or ""), description=str(fn.get("description") or ""),
                   parameters=dict(fn.get("parameters") or {"type": "object", "properties": {}}))

    @property
    def runnable(self) -> bool:
        """Whether the tool has a function to run."""
        return self.fn is not None

    def spec(self) -> dict[str, Any]:
        """The tool as a model is offered it (OpenAI's function-tool format)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def check_arguments(self, raw: Any) -> dict[str, Any]:
        """The arguments a model sent (a JSON text or a dict), validated and converted.

        Raises:
            ToolArgumentsError: Not a JSON object, or not what the schema allows (says what).
        """
        args = raw
        if isinstance(raw, str):
            try:
                args = json.loads(raw) if raw.strip() else {}
            except ValueError as exc:
                raise ToolArgumentsError(f"arguments are not JSON: {exc}") from None
        if not isinstance(args, dict):
            raise ToolArgumentsError(f"arguments must be a JSON object, got {type(args).__name__}")
        if self._model is None:
            return dict(args)
        try:
            return dict(self._model.model_validate(args))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}"
                                 for e in exc.errors())
            raise ToolArgumentsError(f"invalid arguments for {self.name}: {problems}") from None

    async def run(self, arguments: dict[str, Any], deadline: float | None) -> str:
        """Call the function with ``arguments`` (validated) under ``deadline`` and the tool's
        ``timeout_s``; the result as text for the model (a str as it is, anything else as JSON).

        Raises:
            ToolError: The tool has no function.
            DeadlineExceeded: The run's deadline or the tool's timeout passed.
        """
        if self.fn is None:
            raise ToolError(f"tool {self.name!r} has no function: it was given as a JSON schema only, so fsmchat "
                            "cannot run it; pass the function (Agent(tools=[fn]) or Tool(fn, ...))", tool=self.name,
                            arguments=arguments)
        limit = deadline
        if self.timeout_s is not None:
            own = time.monotonic() + self.timeout_s
            limit = own if limit is None else min(limit, own)
        fn = self.fn

        def call(kw: dict[str, Any]) -> Any:
            return fn(**kw)

        if inspect.iscoroutinefunction(fn):
            async def acall(kw: dict[str, Any]) -> Any:
                return await fn(**kw)
            out = await call_within(acall, arguments, deadline=limit, what=f"tool {self.name!r}")
        else:
            out = await call_within(call, arguments, deadline=limit, what=f"tool {self.name!r}")
        return result_text(out)

    def __repr__(self) -> str:
        opts = "".join(f", {k}=True" for k in ("approval", "idempotent") if getattr(self, k))
        timeout = f", timeout_s={self.timeout_s}" if self.timeout_s is not None else ""
        return f"Tool({self.name!r}{'' if self.runnable else ', no function'}{opts}{timeout})"


def result_text(out: Any) -> str:
    """A tool's return value as the text a model reads."""
    if isinstance(out, str):
        return out
    if isinstance(out, BaseModel):
        return out.model_dump_json()
    try:
        return json.dumps(out, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(out)


def tool_digest(tool: Tool) -> str:
    """A short hash of what a model is offered of ``tool`` (name, description, schema)."""
    text = json.dumps(tool.spec(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def changed_tools(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between two ``{tool name: tool_digest}`` maps, one phrase per tool, by name:
    ``"'lookup' changed"``, ``"'fail' removed"``, ``"'search' added"``."""
    out = []
    for name in sorted(set(before) | set(now)):
        if name not in now:
            out.append(f"{name!r} removed")
        elif name not in before:
            out.append(f"{name!r} added")
        elif before[name] != now[name]:
            out.append(f"{name!r} changed")
    return out


def as_tool_entry(x: Any) -> Any:
    """An ``Agent(tools=[...])`` entry as stored: a ``Tool``, a JSON-schema dict, or a ``ToolSource``;
    a plain function becomes ``Tool(fn)``.

    Raises:
        TypeError: Anything else (says what is allowed).
    """
    if isinstance(x, (Tool, dict)):
        return x
    if isinstance(x, ToolSource):
        return x
    if callable(x):
        return Tool(x)
    raise TypeError(f"a tool is a function, a Tool(fn, ...), a JSON-schema dict or a tool source "
                    f"(async start/tools/stop), got {type(x).__name__}")


def is_schema_dict(x: Any, name: str) -> bool:
    return isinstance(x, dict) and ((x.get("function") or {}).get("name") == name if "function" in x
                                    else x.get("name") == name)


def has_tools(speaker: Any) -> bool:
    """Whether ``speaker`` carries tools it can run (functions or tool sources): its turns get a tool loop."""
    return any(isinstance(t, Tool) and t.runnable or (not isinstance(t, (Tool, dict)) and isinstance(t, ToolSource))
               for t in getattr(speaker, "tools", None) or ())


def needs_approval(speaker: Any) -> bool:
    """Whether some tool of ``speaker`` asks a person before each call."""
    return any(isinstance(t, Tool) and t.approval for t in getattr(speaker, "tools", None) or ())


def calls_per_turn(speaker: Any) -> int:
    """The most model calls one turn of ``speaker`` makes: 1, plus ``max_tool_rounds`` with tools."""
    if has_tools(speaker):
        return 1 + int(getattr(speaker, "max_tool_rounds", DEFAULT_MAX_TOOL_ROUNDS))
    return 1


# ---- records ----
@dataclass
class CallRecord:
    """One tool call of a turn, as the checkpoint stores it.

    ``status``: ``asked`` (the model asked; not run), ``approved`` (a person approved it, or it
    needs no approval once asked), ``awaiting`` (waits for a person), ``uncertain`` (it may have
    run when the run stopped; its result was not committed), ``done``, ``error``, ``rejected``.
    """

    id: str
    name: str
    arguments: Any  # the validated dict, or the model's raw text when it was not valid
    status: str = "asked"
    result: str | None = None
    error: str | None = None
    duration_s: float | None = None
    reason: str = ""  # why it waits for a person: "approval" | "rerun"

    @property
    def resolved(self) -> bool:
        return self.status in ("done", "error", "rejected")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments, "status": self.status,
                "result": self.result, "error": self.error, "duration_s": self.duration_s, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CallRecord":
        return cls(str(d["id"]), str(d["name"]), d.get("arguments"), str(d.get("status") or "asked"), d.get("result"),
                   d.get("error"), d.get("duration_s"), d.get("reason") or "")

    def entry(self) -> dict[str, Any]:
        """What the posted message carries (``Message.metadata["tool_calls"]``)."""
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments, "status": self.status}
        if self.result is not None:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        if self.duration_s is not None:
            out["duration_s"] = round(self.duration_s, 6)
        return out


@dataclass
class Exchange:
    """One speaker's turn in progress: the tool rounds so far (wire messages and call records)
    and, once it has one, the answer (kept until the state's action completes)."""

    speaker: str
    rounds: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)  # assistant tool_calls + tool results, in order
    calls: list[CallRecord] = field(default_factory=list)  # every call of the turn, in order
    answer: Any = None
    answered: bool = False
    marks: list[str] = field(default_factory=list)  # what the state's action already did with the answer
    share: bool = False  # the speaker shares its tool calls with the others (Agent.share_tool_results)

    def pending(self) -> list[CallRecord]:
        return [c for c in self.calls if not c.resolved]

    def to_dict(self) -> dict[str, Any]:
        answer = self.answer
        if isinstance(answer, BidOutcome):
            answer = {"score": answer.score, "message": answer.message, "bid": True}
        return {"speaker": self.speaker, "rounds": self.rounds, "messages": list(self.messages),
                "calls": [c.to_dict() for c in self.calls], "answer": answer, "answered": self.answered,
                "marks": list(self.marks), "share": self.share}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Exchange":
        answer = d.get("answer")
        if isinstance(answer, dict) and answer.get("bid"):
            answer = bid_from_arguments({"score": answer["score"], "message": answer["message"]})
        return cls(d["speaker"], int(d.get("rounds", 0)), list(d.get("messages") or []),
                   [CallRecord.from_dict(c) for c in d.get("calls") or []], answer, bool(d.get("answered")),
                   list(d.get("marks") or []), bool(d.get("share")))

    def tool_messages(self) -> list[dict[str, Any]]:
        """The wire messages of the rounds so far, results filled in (one ``tool`` message per call)."""
        out: list[dict[str, Any]] = []
        by_id = {c.id: c for c in self.calls}
        for m in self.messages:
            out.append(m)
            if m.get("role") == "assistant":
                for call in m.get("tool_calls") or []:
                    rec = by_id.get(call["id"])
                    if rec is not None:
                        out.append({"role": "tool", "tool_call_id": rec.id, "content": call_result(rec)})
        return out


def call_result(rec: CallRecord) -> str:
    """What the model reads as a call's result."""
    if rec.status == "done":
        return rec.result or ""
    if rec.status == "rejected":
        return f"rejected: {rec.result or rec.error or 'a person rejected this call'}"
    return f"error: {rec.error or 'the call failed'}"


def _calls_of(message: Any) -> list[tuple[str, str, Any]]:
    """(id, name, raw arguments) of each tool call of a model's message."""
    out = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        fn = getattr(call, "function", None)
        if fn is None and isinstance(call, dict):
            fn_d = call.get("function") or {}
            name, raw, cid = fn_d.get("name"), fn_d.get("arguments"), call.get("id")
        else:
            name, raw, cid = getattr(fn, "name", None), getattr(fn, "arguments", None), getattr(call, "id", None)
        out.append((str(cid or f"call_{i + 1}"), str(name or ""), raw if raw is not None else "{}"))
    return out


class ToolLoop:
    """A run's tool state (``ctx.tool_loop``): each speaker's turn in progress, the tool sources
    started this run, the tool calls made. The speaking block (``speak``, ``bid``) is here."""

    def __init__(self) -> None:
        self.exchanges: dict[str, Exchange] = {}
        self.active = False  # a state with a tool loop is running its action
        self.approve_all = False  # interrupt_before=["tools"]: every call waits for a person
        self.offered: dict[str, list[str]] = {}  # each tool source's tool names this run
        self.digests: dict[str, dict[str, str]] = {}  # each tool source's {tool: tool_digest}, checked on resume
        self._sources: dict[int, tuple[Any, list[Tool] | None]] = {}  # started sources, their tools (None: unlisted)
        self._starting: asyncio.Lock | None = None  # made in the run's loop on first use
        self.used = False
        self.last: dict[str, list[dict[str, Any]]] = {}  # the tool calls of the last state's answered turns

    def once(self, speaker: str, mark: str) -> bool:
        """Whether the state's action does ``mark`` with ``speaker``'s answer for the first time
        (an action entered again after a tool round must not, e.g., remember a reply twice)."""
        ex = self.exchanges.get(speaker)
        if ex is None or not self.active:
            return True
        if mark in ex.marks:
            return False
        ex.marks.append(mark)
        return True

    # ---- tools of a speaker ----
    async def tools_of(self, speaker: Any) -> list[Tool]:
        """The speaker's tools this run: its functions and schema dicts, and each source's tools
        (the source started on first use)."""
        out: list[Tool] = []
        for t in getattr(speaker, "tools", None) or ():
            if isinstance(t, Tool):
                out.append(t)
            elif isinstance(t, dict):
                if not is_schema_dict(t, "respond"):
                    out.append(Tool.from_schema(t))
            elif isinstance(t, ToolSource):
                if self._sources.get(id(t), (t, None))[1] is None:  # concurrent turns (bids) wait for the first
                    self._starting = self._starting or asyncio.Lock()
                    async with self._starting:
                        await self._start_source(t, speaker)
                out.extend(self._sources[id(t)][1] or ())
        return out

    async def _start_source(self, t: Any, speaker: Any) -> None:
        """Start tool source ``t`` once and list its tools (unless a concurrent turn just did),
        refusing tools that differ from those the run's checkpoint offered."""
        if id(t) not in self._sources:
            await t.start()
            self._sources[id(t)] = (t, None)  # started: ``close`` stops it, whatever the listing does
        elif self._sources[id(t)][1] is not None:
            return
        listed = list(await t.tools())
        key = str(getattr(t, "name", type(t).__name__))
        now, before = {x.name: tool_digest(x) for x in listed}, self.digests.get(key)
        if before is not None and now != before:
            raise ToolError(f"tool source {key!r} offers other tools than when this run was checkpointed "
                            f"({', '.join(changed_tools(before, now))}); the run does not resume against "
                            "them: restore the source's tools, or start a new run",
                            agent=str(getattr(speaker, "name", "")))
        self._sources[id(t)] = (t, listed)
        self.offered[key], self.digests[key] = [x.name for x in listed], now

    def share_sources(self, parent: "ToolLoop") -> None:
        """Make this (a branch run's) loop use ``parent``'s tool sources: each is started once per
        run, whichever branch asks first, and stopped when the parent run ends (``close``)."""
        parent._starting = parent._starting or asyncio.Lock()
        self._sources, self._starting = parent._sources, parent._starting
        self.offered, self.digests = parent.offered, parent.digests

    async def check_sources(self, speakers: Sequence[Any]) -> None:
        """A resumed run: start each tool source its checkpoint offered tools of, and refuse
        (``ToolError``) a source whose tools changed, before any model call (``tools_of`` checks)."""
        for speaker in speakers:
            sources = [t for t in getattr(speaker, "tools", None) or () if not isinstance(t, (Tool, dict))
                       and isinstance(t, ToolSource)]
            if any(str(getattr(t, "name", type(t).__name__)) in self.digests for t in sources):
                await self.tools_of(speaker)

    async def close(self) -> None:
        """Stop every tool source this run started (in the order they started)."""
        sources, self._sources = list(self._sources.values()), {}
        errors: list[BaseException] = []
        for source, _ in sources:
            try:
                await source.stop()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    # ---- the speaking block ----
    async def speak(self, speaker: Any, turn: Any) -> str:
        """``speaker``'s reply to ``turn``: the one path of every reply. Without tools it is
        ``speaker.reply(turn)``. With tools, inside a state drawn with its tool loop, a reply with
        tool calls records them and raises ``ToolRound`` (the loop runs them, the state runs again);
        outside one (a direct call) the calls are run inline until the model answers."""
        if not has_tools(speaker):
            if self.active:
                return str(await self._cached(speaker, lambda: speaker.reply(turn)))
            return str(await speaker.reply(turn))
        self.used = True
        if not self.active:
            return await self._inline(speaker, turn)
        ex = self.exchanges.setdefault(speaker.name, Exchange(speaker.name))
        ex.share = bool(getattr(speaker, "share_tool_results", False))
        if ex.answered:
            return str(ex.answer)
        if ex.pending():
            raise ToolRound(f"{speaker.name}: tool calls pending")
        tools = await self.tools_of(speaker)
        final = ex.rounds >= speaker.max_tool_rounds
        message = await speaker.tool_message(turn, ex.tool_messages(), [t.spec() for t in tools], final=final)
        calls = _calls_of(message)
        text = (getattr(message, "content", None) or "").strip()
        if calls and not final:
            self._record(ex, speaker, tools, message, calls)
            raise ToolRound(f"{speaker.name}: {len(calls)} tool call(s)")
        if calls and not text:
            raise ToolError(f"agent {speaker.name!r} still asked for tools ({', '.join(n for _, n, _ in calls)}) "
                            f"after max_tool_rounds={speaker.max_tool_rounds}; raise max_tool_rounds or tell it to "
                            "answer", agent=speaker.name, tool=calls[0][1], arguments=calls[0][2])
        ex.answer, ex.answered = text, True
        return text

    async def bid(self, speaker: Any, turn: Any) -> BidOutcome:
        """``speaker``'s bid: ``speaker.bid(turn)`` without tools; with tools, the model is offered
        its tools and ``respond`` (it must call one: ``tool_choice="required"``); tool calls are a
        tool round, a ``respond`` call is the bid; once ``max_tool_rounds`` are used ``respond`` is forced."""
        if not has_tools(speaker) or not hasattr(speaker, "tool_message") or \
                getattr(speaker, "resolved_tool_mode", "native") != "native":
            if self.active:
                cached: BidOutcome = await self._cached(speaker, lambda: speaker.bid(turn))
                return cached
            out: BidOutcome = await speaker.bid(turn)
            return out
        self.used = True
        ex = self.exchanges.setdefault(speaker.name, Exchange(speaker.name))
        if ex.answered:
            assert isinstance(ex.answer, BidOutcome)
            return ex.answer
        if ex.pending():
            raise ToolRound(f"{speaker.name}: tool calls pending")
        tools = await self.tools_of(speaker)
        final = ex.rounds >= speaker.max_tool_rounds
        message = await speaker.tool_message(turn, ex.tool_messages(), [t.spec() for t in tools], final=final,
                                             bid=True)
        calls = _calls_of(message)
        respond = [c for c in calls if c[1] == "respond"]
        if respond:
            outcome = bid_from_arguments(respond[0][2])
        elif calls and not final:
            self._record(ex, speaker, tools, message, calls)
            if not self.active:  # a direct call (no tool loop drawn): the rounds run in place
                self._refuse_waiting(ex, speaker)
                await self.run_exchange(ex, speaker, turn.stats, None)
                return await self.bid(speaker, turn)
            raise ToolRound(f"{speaker.name}: {len(calls)} tool call(s)")
        else:
            outcome = silent("no respond call" + (f" (tool calls {[n for _, n, _ in calls]} after max_tool_rounds)"
                                                  if calls else " (plain text instead of respond)"))
        ex.answer, ex.answered = outcome, True
        return outcome

    async def _cached(self, speaker: Any, ask: Callable[[], Any]) -> Any:
        """A speaker without tools in a state with a tool loop: its answer is kept until the
        state's action completes, so entering the state again after a tool round asks it once."""
        ex = self.exchanges.get(speaker.name)
        if ex is not None and ex.answered:
            return ex.answer
        answer = await ask()
        ex = self.exchanges[speaker.name] = Exchange(speaker.name, answer=answer, answered=True)
        return answer

    async def _inline(self, speaker: Any, turn: Any) -> str:
        """A direct call (no tool loop drawn): run the tool rounds in place, then return the reply."""
        ex = Exchange(speaker.name)
        tools = await self.tools_of(speaker)
        while True:
            final = ex.rounds >= speaker.max_tool_rounds
            message = await speaker.tool_message(turn, ex.tool_messages(), [t.spec() for t in tools], final=final)
            calls = _calls_of(message)
            text = (getattr(message, "content", None) or "").strip()
            if not calls or final:
                if calls and not text:
                    raise ToolError(f"agent {speaker.name!r} still asked for tools after max_tool_rounds="
                                    f"{speaker.max_tool_rounds}", agent=speaker.name, tool=calls[0][1])
                return text
            self._record(ex, speaker, tools, message, calls)
            self._refuse_waiting(ex, speaker)
            await self.run_exchange(ex, speaker, turn.stats, None)

    @staticmethod
    def _refuse_waiting(ex: Exchange, speaker: Any) -> None:
        """A direct call cannot stop for a person: a call that needs approval is a ``ToolError``."""
        for rec in ex.pending():
            if rec.status == "awaiting":
                raise ToolError(f"tool {rec.name!r} of {speaker.name!r} needs a person's approval, which a direct "
                                "call cannot ask for: run the agent in a pattern with a checkpoint",
                                agent=speaker.name, tool=rec.name, arguments=rec.arguments)

    def _record(self, ex: Exchange, speaker: Any, tools: list[Tool], message: Any,
                calls: list[tuple[str, str, Any]]) -> None:
        """Remember a reply's tool calls (the assistant message as the wire will carry it back)."""
        ex.rounds += 1
        seen = {c.id for c in ex.calls}
        wire = []
        by_name = {t.name: t for t in tools}
        for cid, name, raw in calls:
            if cid in seen:  # a model reusing an id across rounds: made unique, the wire keeps them matched
                cid = f"{cid}_{ex.rounds}"
            seen.add(cid)
            tool = by_name.get(name)
            rec = CallRecord(cid, name, raw)
            if tool is not None and tool.runnable:
                try:
                    rec.arguments = tool.check_arguments(raw)
                except ToolArgumentsError:
                    pass  # run_exchange reports it as the call's error
                if tool.approval or self.approve_all:
                    rec.status, rec.reason = "awaiting", "approval"
            ex.calls.append(rec)
            wire.append({"id": cid, "type": "function",
                         "function": {"name": name, "arguments": raw if isinstance(raw, str) else json.dumps(raw)}})
        ex.messages.append({"role": "assistant", "content": getattr(message, "content", None) or None,
                            "tool_calls": wire})

    # ---- running calls ----
    def unresolved(self) -> bool:
        """Some turn has tool calls without results."""
        return any(ex.pending() for ex in self.exchanges.values())

    def awaiting(self) -> list[tuple[str, CallRecord]]:
        """(speaker, call) for each call that waits for a person."""
        return [(ex.speaker, c) for ex in self.exchanges.values() for c in ex.calls if c.status == "awaiting"]

    async def run_exchange(self, ex: Exchange, speaker: Any, stats: Any, ctx: Any) -> None:
        """Run ``ex``'s calls that may run (not waiting for a person), at most
        ``speaker.max_parallel_tools`` at once; results are recorded in call order."""
        tools = {t.name: t for t in await self.tools_of(speaker)}
        runnable = [c for c in ex.pending() if c.status != "awaiting"]
        for c in runnable:
            if c.status == "uncertain" and not (tools.get(c.name) is not None and tools[c.name].idempotent):
                c.status, c.reason = "awaiting", "rerun"
        runnable = [c for c in runnable if c.status != "awaiting"]
        if not runnable:
            return
        cap = getattr(stats, "max_tool_calls", None)
        if cap is not None and stats.tool_calls + len(runnable) > cap:
            stats.tool_over_cap, stats.limit_hit = True, "max_tool_calls"
            raise BudgetExceeded(f"max_tool_calls={cap} reached after {stats.tool_calls} tool call(s): "
                                 f"{speaker.name}'s {len(runnable)} call(s) ({', '.join(c.name for c in runnable)}) "
                                 "were not run")
        gate = asyncio.Semaphore(max(1, int(getattr(speaker, "max_parallel_tools", DEFAULT_MAX_PARALLEL_TOOLS))))
        deadline = getattr(stats, "deadline", None)
        on_error = getattr(speaker, "on_tool_error", "return")
        raised: dict[str, Exception] = {}  # a failed call's exception: the cause of the run's ToolError

        async def one(rec: CallRecord) -> None:
            tool = tools.get(rec.name)
            started = time.monotonic()
            async with gate:
                try:
                    if tool is None:
                        known = ", ".join(sorted(tools)) or "none"
                        raise ToolArgumentsError(f"unknown tool {rec.name!r}; the tools are: {known}")
                    args = tool.check_arguments(rec.arguments)
                    rec.arguments = args
                    if stats is not None:
                        stats.tool_calls += 1
                    rec.result = await tool.run(args, deadline)
                    rec.status = "done"
                except DeadlineExceeded as exc:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise  # the run's deadline: the run takes its past_deadline edge
                    rec.status, rec.error = "error", f"timed out: {exc}"
                except ToolArgumentsError as exc:
                    rec.status, rec.error = "error", str(exc)
                except ToolError:
                    raise
                except (asyncio.CancelledError, Interrupted):
                    raise
                except Exception as exc:
                    rec.status, rec.error = "error", f"{type(exc).__name__}: {exc}"
                    raised[rec.id] = exc
                finally:
                    rec.duration_s = time.monotonic() - started

        await asyncio.gather(*(one(c) for c in runnable))
        for rec in runnable:
            if rec.status == "error":
                if ctx is not None:
                    ctx.events.append({"event": "tool_error", "agent": speaker.name, "tool": rec.name,
                                       "call_id": rec.id, "error": rec.error})
                if on_error == "stop":
                    raise ToolError(f"tool {rec.name!r} of agent {speaker.name!r} failed: {rec.error}",
                                    agent=speaker.name, tool=rec.name, arguments=rec.arguments) \
                        from raised.get(rec.id)

    # ---- ends of a state ----
    def finish(self) -> None:
        """The state's action completed: its turns in progress are over (their tool calls stay
        readable in ``last`` until the next state with a tool loop completes)."""
        self.last = {k: [c.entry() for c in ex.calls] for k, ex in self.exchanges.items() if ex.calls}
        self.exchanges.clear()

    def entries(self, speaker: str) -> list[dict[str, Any]]:
        """The tool calls of ``speaker``'s answered turn, for its posted message."""
        ex = self.exchanges.get(speaker)
        return [c.entry() for c in ex.calls] if ex is not None else []

    def shares(self, speaker: str) -> bool:
        """Whether ``speaker``'s turn in progress shares its tool calls with the others."""
        ex = self.exchanges.get(speaker)
        return ex is not None and ex.share

    # ---- checkpoint ----
    def snapshot(self) -> dict[str, Any]:
        """The loop's state as plain data (a checkpoint stores it with the context)."""
        return {"exchanges": {k: ex.to_dict() for k, ex in self.exchanges.items()},
                "offered": {k: list(v) for k, v in self.offered.items()}, "last": dict(self.last),
                "digests": {k: dict(v) for k, v in self.digests.items()}}

    def restore(self, state: dict[str, Any]) -> None:
        """Set the loop back to a ``snapshot``. A call that may run without asking (asked or
        approved) but has no result may have run when the run stopped: it becomes ``uncertain``."""
        self.exchanges = {k: Exchange.from_dict(v) for k, v in (state.get("exchanges") or {}).items()}
        self.offered = {k: list(v) for k, v in (state.get("offered") or {}).items()}
        self.digests = {k: dict(v) for k, v in (state.get("digests") or {}).items()}
        self.last = dict(state.get("last") or {})
        for ex in self.exchanges.values():
            for c in ex.calls:
                if c.status in ("asked", "approved"):
                    c.status = "uncertain"
        self.used = bool(self.exchanges) or self.used


# ---- the graph block ----
def loop_of(ctx: Any) -> ToolLoop:
    """The run's ``ToolLoop`` on ``ctx`` (made on first use)."""
    loop = getattr(ctx, "tool_loop", None)
    if loop is None:
        loop = ToolLoop()
        ctx.tool_loop = loop
    return loop


def tool_action(action: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``action`` as the speaking state of a tool loop: its speaking block records tool calls and
    ends it early (the step's payload is then ``"tool_calls"``); once it completes, the turns in
    progress are over."""

    async def speaking(ctx: Any) -> Any:
        loop = loop_of(ctx)
        loop.active = True
        try:
            out = action(ctx)
            if is_awaitable(out):
                out = await out
        except ToolRound:
            return "tool_calls"
        finally:
            loop.active = False
        loop.finish()
        return out

    speaking.__name__ = getattr(action, "__name__", "speak")
    speaking.__doc__ = getattr(action, "__doc__", None)
    return speaking


def tool_calls(ctx: Any) -> bool:
    """the model asked for tool calls"""
    loop = getattr(ctx, "tool_loop", None)
    return loop is not None and loop.unresolved()


def needs_person(ctx: Any) -> bool:
    """a tool call waits for a person"""
    loop = getattr(ctx, "tool_loop", None)
    return loop is not None and bool(loop.awaiting())


APPROVAL_ALLOWED = {"approve": "run the call as proposed",
                    "edit": "run it with these arguments instead (checked against the tool's schema)",
                    "reject": "do not run it; the reason goes to the model as the call's result"}
RERUN_ALLOWED = {"approve": "run the call again (it may have run once already)",
                 "say": "do not run it; your text is the call's result",
                 "reject": "do not run it; the reason goes to the model as the call's result"}


def make_decide(speakers: Sequence[Any]) -> Callable[[Any], Any]:
    by_name = {s.name: s for s in speakers}

    async def decide_tool_calls(ctx: Any) -> dict[str, Any]:
        """a person approves, edits or rejects a waiting tool call"""
        loop = loop_of(ctx)
        speaker, rec = loop.awaiting()[0]
        rerun = rec.reason == "rerun"
        prompt = (f"{speaker}'s call {rec.name}({_args_text(rec.arguments)}) may have run before the run stopped "
                  "(its result was not saved): run it again?" if rerun else
                  f"{speaker} asks to call {rec.name}({_args_text(rec.arguments)}): run it?")
        proposed = {"speaker": speaker, "tool": rec.name, "arguments": rec.arguments, "call_id": rec.id}
        req = request("tool_call", prompt, RERUN_ALLOWED if rerun else APPROVAL_ALLOWED, person=None,
                      proposed=proposed, edit=None if rerun else "arguments")
        answer = ctx.people.ask(req)
        if isinstance(answer, Approve):
            rec.status = "approved"
        elif isinstance(answer, Edit):
            tools = {t.name: t for t in await loop.tools_of(by_name[speaker])}
            tool = tools.get(rec.name)
            try:
                rec.arguments = tool.check_arguments(answer.arguments) if tool is not None else answer.arguments
            except ToolArgumentsError as exc:  # the run keeps waiting, saying why
                raise Interrupted({**req, "prompt": f"{prompt} (the edited arguments were refused: {exc})"}) from None
            rec.status = "approved"
        elif isinstance(answer, Say):
            rec.status, rec.result, rec.duration_s = "done", answer.text, 0.0
        else:
            assert isinstance(answer, Reject)
            rec.status, rec.result = "rejected", answer.reason or "a person rejected this call"
        ctx.events.append({"event": "tool_decision", "agent": speaker, "tool": rec.name, "call_id": rec.id,
                           "decision": answer.kind})
        return {"call_id": rec.id, "decision": answer.kind}

    return decide_tool_calls


def _args_text(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return str(arguments)


def make_run_tools(speakers: Sequence[Any]) -> Callable[[Any], Any]:
    by_name = {s.name: s for s in speakers}

    async def run_tools(ctx: Any) -> list[dict[str, Any]]:
        """run the requested tool calls, concurrently; results in call order"""
        loop = loop_of(ctx)
        done: list[dict[str, Any]] = []  # the step's payload: each call it resolved (the trace, stream())
        for ex in list(loop.exchanges.values()):
            pending = ex.pending()
            if pending:
                await loop.run_exchange(ex, by_name[ex.speaker], getattr(ctx, "stats", None), ctx)
                done += [{"agent": ex.speaker, **c.entry()} for c in pending if c.resolved]
        return done

    return run_tools


APPROVE_ALL: contextvars.ContextVar[bool] = contextvars.ContextVar("fsmchat_approve_all_tools", default=False)
"""While a pattern with ``interrupt_before=["tools"]`` compiles, every tool loop's wait point waits
(a flow's steps draw their loops while it compiles, without the pattern at hand)."""


def add_tool_loop(g: StateGraph, state: str, speakers: Sequence[Any], *, approve_all: bool = False) -> StateGraph:
    """Draw the tool loop of ``state``, where ``speakers`` speak: ``state -[tool_calls]-> tools_<state>
    -> state`` (the new edge tried first) and its wait point ``tools_<state> -[needs_person]->
    approve_<state> -> tools_<state>`` (a person approves a call, or decides on one whose result
    was not committed). Nothing changes when no speaker has tools it can run. Returns the graph.

    Args:
        g: The graph holding ``state``.
        state: The speaking state (its action is wrapped by ``tool_action``; its step is committed
            before the tools run, so it is never held back).
        speakers: Who may speak in it.
        approve_all: Every call waits for a person (``interrupt_before=["tools"]``).
    """
    tooled = [s for s in speakers if has_tools(s)]
    if not tooled:
        return g
    approve_all = approve_all or APPROVE_ALL.get()
    s = g.states[state]
    assert s.action is not None, f"state {state!r} speaks but has no action"
    s.action = tool_action(s.action)
    s.hold = s.pure = False  # the calls it asked for are committed before they run
    tools_state, wait_state = state_names([f"tools_{state}", f"approve_{state}"], reserved=g.states)
    g.state(tools_state, make_run_tools(tooled), f"{', '.join(x.name for x in tooled)}: run the tool calls")
    g.state(wait_state, make_decide(tooled), "a person decides on a tool call",
            waits=approve_all or any(needs_approval(x) for x in tooled))
    first = next((i for i, t in enumerate(g.transitions) if t.source == state), len(g.transitions))
    g.transitions.insert(first, Transition(state, tools_state, tool_calls, "tool_calls", first))
    g.edge(tools_state, wait_state, when=needs_person, label="needs_person")
    g.edge(tools_state, state)
    g.edge(wait_state, tools_state)
    for i, t in enumerate(g.transitions):
        t.order = i
    return g.changed()
