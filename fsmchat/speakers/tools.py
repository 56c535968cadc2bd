"""Layer 10: tools an agent calls while it speaks: ``Tool``, tool sources, and their schemas.

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

A run's ``ToolLoop`` (``ctx.tool_loop``, ``fsmchat.speakers.tool_loop``) starts each source on the
first turn of an agent that carries it, asks its ``tools()`` once, and stops it when the run ends
(``ToolLoop.close``); the names of the tools each source offered are kept in the loop's
checkpointed state (``ToolLoop.offered``). How the calls run, are drawn, committed and approved:
``fsmchat.speakers.tool_loop``.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import re
import time
from typing import Any, Callable, Mapping, Protocol, get_type_hints, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic import Field as PydanticField

from .deadline import call_within
from ..errors import FsmchatError, bad_value
from ..common.masking import redact

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

    def __init__(self, message: str, *, agent: str = "", tool: str = "", arguments: object = None):
        super().__init__(message)
        self.agent, self.tool, self.arguments = agent, tool, arguments


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


def _schema_model(fn: Callable[..., object], name: str, docs: dict[str, str]) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters (hints, defaults, docstring descriptions)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"Tool {name!r}: cannot read the signature of {fn!r}: {exc}") from None
    try:
        hints = _hints(fn)
    except Exception as exc:
        raise TypeError(f"Tool {name!r}: cannot resolve the type hints of {fn!r}: {exc}") from None
    fields: dict[str, Any] = {}  # pydantic's create_model reads (type form, FieldInfo) pairs
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"Tool {name!r}: parameter {p.name!r} is *args/**kwargs; a tool's parameters must be "
                            "named (the model sends them as a JSON object)")
        if p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"Tool {name!r}: parameter {p.name!r} is positional-only; a tool's parameters are "
                            "passed by name")
        hint = hints.get(p.name, Any)  # an unannotated parameter takes any JSON value
        default = ... if p.default is p.empty else p.default
        fields[p.name] = (hint, PydanticField(default, description=docs.get(p.name) or None))
    config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)
    return create_model(f"{name}_arguments", __config__=config, **fields)


def _hints(fn: Callable[..., object]) -> dict[str, object]:
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)
    return get_type_hints(target)


def _clean_schema(schema: dict[str, object]) -> dict[str, object]:
    """The model's JSON schema without pydantic's titles (noise to a model)."""
    def strip(node: object) -> object:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "title" or not isinstance(v, str)}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    out = {k: strip(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    return out


DEFAULT_MAX_RESULT_CHARS = 50_000
_MASK_MARGIN = 512  # characters past a cut that masking reads, so a secret across the cut is masked whole
"""The most characters of one tool result a model reads, unless ``Tool(max_result_chars=...)`` says otherwise."""


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
        max_result_chars: The most characters of one result the model reads (default
            ``DEFAULT_MAX_RESULT_CHARS``, 50,000; None: no limit). A longer result is cut there, the
            cut said at its end, and the run records a ``tool_result_truncated`` event.

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

    def __init__(self, fn: Callable[..., object] | None = None, *, name: str | None = None,
                 description: str | None = None, parameters: dict[str, object] | None = None,
                 approval: bool = False, idempotent: bool = False, timeout_s: float | None = None,
                 max_result_chars: int | None = DEFAULT_MAX_RESULT_CHARS):
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
        if self._model is None:
            check_schema(parameters, f"Tool {self.name!r}")
        self.parameters = parameters
        self.approval = bool(approval)
        self.idempotent = bool(idempotent)
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                      or not timeout_s > 0):
            raise ValueError(f"Tool {self.name!r}: timeout_s={timeout_s!r} is invalid: seconds > 0, or None")
        self.timeout_s = timeout_s
        if max_result_chars is not None and (isinstance(max_result_chars, bool) or
                                             not isinstance(max_result_chars, int) or max_result_chars < 1):
            raise bad_value(f"Tool {self.name!r}", "max_result_chars", max_result_chars,
                            "a positive int (the most characters of one result the model reads), or None for no "
                            "limit", type_error=not isinstance(max_result_chars, int) or isinstance(max_result_chars, bool))
        self.max_result_chars = max_result_chars

    def for_model(self, text: str) -> tuple[str, int | None]:
        """A result as the model reads it: its secrets masked (``fsmchat.common.masking.redact``) and, past
        ``max_result_chars``, cut there with the cut said at its end; and the length it had (None:
        it was not cut). The cut is made after masking, so a secret across it is never half shown."""
        limit = self.max_result_chars
        if limit is None or len(text) <= limit:
            return redact(text), None
        kept = redact(text[:limit + _MASK_MARGIN])[:limit]
        return (kept + f"\n[truncated by fsmchat: the result had {len(text):,} characters, the first {limit:,} are "
                f"shown (Tool(max_result_chars={limit}))]", len(text))

    @classmethod
    def from_schema(cls, schema: Mapping[str, object]) -> "Tool":
        """A tool with no function from an OpenAI-format dict (``{"type": "function", "function": {...}}``
        or the bare ``{"name", "description", "parameters"}``)."""
        inner = schema.get("function")
        fn: Mapping[str, object] = inner if isinstance(inner, dict) else schema
        parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise TypeError(f"Tool {fn.get('name')!r}: parameters must be a JSON-schema dict, got "
                            f"{type(parameters).__name__}")
        return cls(None, name=str(fn.get("name") or ""), description=str(fn.get("description") or ""),
                   parameters=dict(parameters))

    @property
    def runnable(self) -> bool:
        """Whether the tool has a function to run."""
        return self.fn is not None

    def spec(self) -> dict[str, object]:
        """The tool as a model is offered it (OpenAI's function-tool format)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def check_arguments(self, raw: object) -> dict[str, object]:
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
        if self._model is None:  # a schema given as JSON (a tool source's): its common rules are checked
            problems = schema_problems(self.parameters, args)
            if problems:
                raise ToolArgumentsError(f"invalid arguments for {self.name}: {'; '.join(problems)}")
            return dict(args)
        try:
            return dict(self._model.model_validate(args))
        except ValidationError as exc:
            found = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}"
                              for e in exc.errors())
            raise ToolArgumentsError(f"invalid arguments for {self.name}: {found}") from None

    async def run(self, arguments: dict[str, object], deadline: float | None) -> str:
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
        limit, fired = deadline, "the run's deadline_s"
        if self.timeout_s is not None:
            own = time.monotonic() + self.timeout_s
            if limit is None or own < limit:
                limit, fired = own, f"its timeout (Tool(timeout_s={self.timeout_s:g}))"
        fn = self.fn

        def call(kw: dict[str, object]) -> object:
            return fn(**kw)

        if inspect.iscoroutinefunction(fn):
            async def acall(kw: dict[str, object]) -> object:
                return await fn(**kw)
            out = await call_within(acall, arguments, deadline=limit, what=f"tool {self.name!r}", limit=fired)
        else:
            out = await call_within(call, arguments, deadline=limit, what=f"tool {self.name!r}", limit=fired)
        return result_text(out)

    def __repr__(self) -> str:
        opts = "".join(f", {k}=True" for k in ("approval", "idempotent") if getattr(self, k))
        timeout = f", timeout_s={self.timeout_s}" if self.timeout_s is not None else ""
        return f"Tool({self.name!r}{'' if self.runnable else ', no function'}{opts}{timeout})"


def check_schema(schema: dict[str, object], owner: str) -> None:
    """A tool's ``parameters`` is a JSON schema of an object: checked against the JSON Schema
    metaschema (draft 2020-12 unless its ``$schema`` names another; the ``jsonschema`` package),
    and its top-level ``type`` is ``"object"`` (what a model fills in is an object of arguments).
    ``ConfigError`` names the path of what is wrong and what the metaschema says.

    Examples:
        >>> check_schema({"type": "bogus"}, "Tool 'x'")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Tool 'x': parameters={'type': 'bogus'} is invalid: not a JSON schema: at type: 'bogus' is not valid under any of the given schemas (a type is one of string, integer, number, boolean, array, object, null, or a list of them)
    """
    from jsonschema import SchemaError, validators

    try:
        validators.validator_for(schema, default=validators.Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(the schema)"
        found = exc.message if len(exc.message) <= 200 else exc.message[:197] + "..."
        if exc.path and exc.path[-1] == "type":
            found += f" (a type is one of {', '.join(_JSON_TYPES)}, or a list of them)"
        raise bad_value(owner, "parameters", schema, f"not a JSON schema: at {where}: {found}") from None
    if schema.get("type", "object") != "object":
        raise bad_value(owner, "parameters", schema, f"the schema of an object of arguments ({{\"type\": "
                        f"\"object\", \"properties\": {{...}}}}); its type is {schema.get('type')!r}")


_JSON_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                            "boolean": (bool,), "array": (list,), "object": (dict,),
                                            "null": (type(None),)}


def schema_problems(schema: Mapping[str, object], value: object, where: str = "") -> list[str]:
    """What ``value`` breaks of the JSON-schema rules a tool's parameters commonly use: ``type``,
    ``enum``, ``required``, ``properties``, ``additionalProperties: false`` and ``items`` (nested).

    Examples:
        >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
        ...           "additionalProperties": False}
        >>> schema_problems(schema, {"n": "2", "m": 1})
        ['n: expected integer, got str', 'm: not a parameter (allowed: n)']
        >>> schema_problems(schema, {"n": 2})
        []
    """
    out: list[str] = []
    label = where or "(arguments)"
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        allowed = tuple(t for n in names for t in _JSON_TYPES.get(str(n), (object,)))
        is_bool = isinstance(value, bool)
        if not isinstance(value, allowed) or (is_bool and "boolean" not in names):
            return [f"{label}: expected {' or '.join(map(str, names))}, got {type(value).__name__}"]
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        out.append(f"{label}: {value!r} is not one of {enum!r}")
    if isinstance(value, dict):
        found, required = schema.get("properties"), schema.get("required")
        props = found if isinstance(found, dict) else {}
        for key in required if isinstance(required, list) else []:
            if key not in value:
                out.append(f"{where + '.' if where else ''}{key}: required")
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if key in props:
                out += schema_problems(props[key], item, path)
            elif schema.get("additionalProperties") is False:
                out.append(f"{path}: not a parameter (allowed: {', '.join(props) or 'none'})")
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        for i, item in enumerate(value):
            out += schema_problems(items, item, f"{label}[{i}]")
    return out


def result_text(out: object) -> str:
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


def as_tool_entry(x: object) -> object:
    """An ``Agent(tools=[...])`` entry as stored: a ``Tool``, a JSON-schema dict, or a ``ToolSource``;
    a plain function becomes ``Tool(fn)``.

    Raises:
        TypeError: Anything else (says what is allowed).
    """
    if isinstance(x, (Tool, dict)) or isinstance(x, ToolSource):
        return x
    if callable(x):
        return Tool(x)
    raise TypeError(f"a tool is a function, a Tool(fn, ...), a JSON-schema dict or a tool source "
                    f"(async start/tools/stop), got {type(x).__name__}")


CallParts = tuple[str, str, object]  # a tool call of a model's message: (id, name, raw arguments)


def calls_of(message: object) -> list[CallParts]:
    """(id, name, raw arguments) of each tool call of a model's message."""
    out: list[CallParts] = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        fn = getattr(call, "function", None)
        if fn is None and isinstance(call, dict):
            fn_d = call.get("function") or {}
            name, raw, cid = fn_d.get("name"), fn_d.get("arguments"), call.get("id")
        else:
            name, raw, cid = getattr(fn, "name", None), getattr(fn, "arguments", None), getattr(call, "id", None)
        out.append((str(cid or f"call_{i + 1}"), str(name or ""), raw if raw is not None else "{}"))
    return out


def is_schema_dict(x: object, name: str) -> bool:
    return isinstance(x, dict) and ((x.get("function") or {}).get("name") == name if "function" in x
                                    else x.get("name") == name)


def has_tools(speaker: object) -> bool:
    """Whether ``speaker`` carries tools it can run (functions or tool sources): its turns get a tool loop."""
    return any(isinstance(t, Tool) and t.runnable or (not isinstance(t, (Tool, dict)) and isinstance(t, ToolSource))
               for t in getattr(speaker, "tools", None) or ())


def json_bidder_with_tools(name: str, why: str) -> ToolError:
    """The error for a GroupChat bidder with tools that would bid in JSON mode: a JSON-mode bid is
    the model's text (``response_format``), which cannot call a tool, so its tools would never run."""
    return ToolError(f"GroupChat: agent {name!r} has tools but bids in JSON mode ({why}): a JSON-mode bid is the "
                     "model's text, which cannot call tools, so they would never run. Use tool_mode='native' (the "
                     "default: its tools and respond are offered as function calls) with a model that supports "
                     "tools, or give the agent no tools", agent=name)


def needs_approval(speaker: object) -> bool:
    """Whether some tool of ``speaker`` asks a person before each call."""
    return any(isinstance(t, Tool) and t.approval for t in getattr(speaker, "tools", None) or ())


def calls_per_turn(speaker: object) -> int:
    """The most model calls one turn of ``speaker`` makes: 1, plus ``max_tool_rounds`` with tools."""
    if has_tools(speaker):
        return 1 + int(getattr(speaker, "max_tool_rounds", DEFAULT_MAX_TOOL_ROUNDS))
    return 1
