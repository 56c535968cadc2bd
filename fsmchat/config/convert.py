"""Patterns and flows as data: ``pattern.to_config()`` returns a JSON-able pydantic model and
``from_config(cfg)`` rebuilds the pattern from it (in this process or on a Ray worker).

A config holds the roster (agents with their model and non-secret litellm options), the limits,
the output type and every step of a flow, each with a ``kind`` discriminator. Callables
(callable participants, ``until``/``select``/conditions, ``Task`` handlers, a ``FunctionModel``'s
function) travel as ``"module:qualname"`` import paths, so only module-level functions can be
shipped; a lambda or a closure makes ``to_config()`` raise a ``TypeError`` naming it. Secrets
(every litellm option ``is_secret`` names: ``api_key``, tokens, passwords) are never written:
workers read them from their environment, as litellm does.

Kinds register themselves (``fsmchat.config.kinds``): a pattern's config form is derived from its one
model (``class GroupChat(Pattern, kind="group_chat", config=GroupChatConfig)`` registers
``GroupChat.Spec`` in ``PATTERN_KINDS``), a flow step kind registers its spec in ``STEP_KINDS``, the
testing kit its scripted models in ``MODEL_KINDS``. This module imports no pattern: the first
lookup of a kind imports ``fsmchat.patterns`` and ``fsmchat.flow`` (``fsmchat.testing`` for a
scripted model), which register the built-in kinds; a kind of your own is known once the module
defining it is imported.

``from_config`` imports only what the caller trusts (``fsmchat.trust``): fsmchat's own modules,
the module prefixes in ``allow=[...]``, or anything with ``trusted=True`` (a function of a script
run as ``__main__`` travels as ``path/to/script.py:name``, which needs it). A kind registered
outside fsmchat is built only when its module is allowed. Ray workers rebuild the driver's own
config with ``trusted=True`` (see ``fsmchat.patterns.distributed``).

The single values of a config (a function by its import path, options without their secrets, a
tool's entry, JSON data) are written and read by ``fsmchat.config.values``.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, ClassVar, Iterable, Iterator, Literal, Mapping, Optional, Protocol, Union

from pydantic import (BaseModel, ConfigDict, Field, PlainValidator, SerializerFunctionWrapHandler, SkipValidation,
                      ValidationError,
                      create_model, model_serializer)
from pydantic.fields import FieldInfo

from ..checks import Number
from .values import (callable_ref, function_tool, is_function_tool, is_mcp_server, jsonable, opt_ref,
                            strip_secrets, tool_entry)
from ..errors import ConfigError, bad_value
from .kinds import Kinds, owner_module
from ..limits import Limits
from ..speakers.agent import Agent, CallableSpeaker, Speaker, Turn
from ..speakers.context import LastMessages, Summarize
from ..speakers.handoff import Handoff
from ..speakers.human import Human
from ..speakers.llm import DEFAULT_MAX_RETRY_WAIT, DEFAULT_RETRIES, DEFAULT_TIMEOUT
from ..speakers.mcp import MCPServer
from ..speakers.tools import DEFAULT_MAX_PARALLEL_TOOLS, DEFAULT_MAX_TOOL_ROUNDS
from ..trust import BUILTIN_PREFIXES, Trust, UntrustedReference, within

CONFIG_VERSION = 1

# the registries, filled by the modules defining the kinds (imported on a registry's first lookup)
PATTERN_KINDS: Kinds[PatternSpec] = Kinds("pattern", loaders=("fsmchat.patterns", "fsmchat.flow"))
STEP_KINDS: Kinds[BaseModel] = Kinds("flow step", loaders=("fsmchat.flow",))
MODEL_KINDS: Kinds[BaseModel] = Kinds("model", loaders=("fsmchat.testing",))
# a model provider's prefix ("fsmchat-scripted") -> (model id, agent name) -> the live model's spec
MODEL_SOURCES: dict[str, Callable[[str, str], BaseModel]] = {}


def validate_step(value: object) -> BaseModel:
    """A flow step's data form: the spec of a step kind (``STEP_KINDS``), or of a pattern kind (a
    pattern run as a flow step, ``AgentFlow(steps=[GroupChat(...), ...])``)."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    if isinstance(kind, str) and kind not in STEP_KINDS:
        if kind not in PATTERN_KINDS:
            raise ConfigError(f"flow step kind={kind!r} is invalid: one of {STEP_KINDS.known()}, or a pattern's kind "
                              f"(a pattern run as a step): {PATTERN_KINDS.known()}")
        return PATTERN_KINDS.validate(value)
    return STEP_KINDS.validate(value)


# field types whose values are validated by their kind: a flow step, a model
AnyStep = Annotated[Any, PlainValidator(validate_step)]
AnyModel = Annotated[Any, PlainValidator(MODEL_KINDS.validate)]


class Ref:
    """Marks a spec field holding an import reference (``"module:qualname"``): ``references``
    yields it, so ``from_config`` checks it against the caller's trust before loading anything."""


REF = Ref()


class ConfigSpec(BaseModel):
    """Base of every data form: strict about unknown fields; ``owner`` names the kind in the
    words loading uses (``"Task 'h' handler"``)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # schemas built on first use: cheap import
    owner: ClassVar[str] = ""

    def ref_label(self, field: str) -> str:
        name = getattr(self, "name", None)
        return f"{self.owner} {name!r} {field}" if self.owner else field

    def references(self) -> Iterator[tuple[str, str]]:
        """Every import reference this spec (and what it holds) loads, with where it is."""
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if any(isinstance(m, Ref) for m in field.metadata):
                if isinstance(value, str) and value:
                    yield value, self.ref_label(name)
            else:
                yield from references(value)


def without_later_defaults(out: dict[str, object], later: Mapping[str, object]) -> dict[str, object]:
    """``out`` (a config's dumped fields) without the fields added after version 1 that hold the
    value that leaves them out (``later``): a config written before them reads back equal.

    Args:
        out: The dumped fields (changed in place).
        later: Each later field -> the value that leaves it out.

    Returns:
        ``out``.

    Examples:
        >>> without_later_defaults({"name": "chat", "context": None}, {"context": None})
        {'name': 'chat'}
    """
    for name, default in later.items():
        if name in out and out[name] == default:
            del out[name]
    return out


# ---- participants ----
LATER_PATTERN_FIELDS: dict[str, object] = {"context": None}
"""A pattern's config fields added after version 1, with the value that leaves them out of a config."""
LATER_AGENT_FIELDS: dict[str, object] = {"max_retry_wait_s": DEFAULT_MAX_RETRY_WAIT, "transport": "auto",
                                      "max_tool_rounds": DEFAULT_MAX_TOOL_ROUNDS,
                                      "max_parallel_tools": DEFAULT_MAX_PARALLEL_TOOLS, "on_tool_error": "return",
                                      "share_tool_results": False, "context": None, "max_input_tokens": None,
                                      "handoffs": []}


class AgentSpec(ConfigSpec):
    """An ``Agent``: its fields plus ``litellm`` (extra keyword options, secrets dropped)."""

    owner: ClassVar[str] = "agent"
    kind: Literal["agent"] = "agent"
    name: str
    system_prompt: str = ""
    model: str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_mode: Literal["native", "json"] | None = None
    timeout: float | None = DEFAULT_TIMEOUT
    num_retries: int = DEFAULT_RETRIES
    max_retry_wait_s: float = DEFAULT_MAX_RETRY_WAIT
    transport: Literal["auto", "fast", "litellm"] = "auto"
    max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS
    max_parallel_tools: int = DEFAULT_MAX_PARALLEL_TOOLS
    on_tool_error: Literal["return", "stop"] = "return"
    share_tool_results: bool = False
    max_loops: int | None = None
    persistent_memory: bool | None = None
    output_type: str | None = None
    litellm: dict[str, Any] = Field(default_factory=dict)
    agent_class: Annotated[str | None, REF] = None  # "module:qualname" of an Agent subclass
    context: "ContextSpec | None" = None
    max_input_tokens: int | None = None
    handoffs: list["HandoffSpec"] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Fields added after version 1 are written only when set: a config written before them
        reads back equal."""
        return without_later_defaults(handler(self), LATER_AGENT_FIELDS)

    def references(self) -> Iterator[tuple[str, str]]:
        yield from super().references()
        for t in filter(is_function_tool, self.tools):  # a tool's function, checked like every reference
            yield str(t.get("ref") or ""), self.tool_label(t)
        for h in self.handoffs:
            if h.input_filter:
                yield h.input_filter, f"agent {self.name!r} handoff to {h.target!r} input_filter"

    def tool_label(self, entry: Mapping[str, object]) -> str:
        return f"agent {self.name!r} tool {str(entry.get('ref') or '').rpartition(':')[2]!r}"

    def build(self, r: ConfigReader) -> Agent:
        cls = r.trust.subclass(self.agent_class, f"agent {self.name!r} agent_class", Agent) \
            if self.agent_class else Agent
        tools = [MCPServer.from_config(t) if is_mcp_server(t) else  # trust checked first
                 function_tool(r.trust, t, self.tool_label(t)) if is_function_tool(t) else t for t in self.tools]
        return cls(self.name, system_prompt=self.system_prompt, model=self.model, tools=tools,
                   tool_mode=self.tool_mode, timeout=self.timeout, num_retries=self.num_retries,
                   max_retry_wait_s=self.max_retry_wait_s, transport=self.transport,
                   max_tool_rounds=self.max_tool_rounds, max_parallel_tools=self.max_parallel_tools,
                   on_tool_error=self.on_tool_error, share_tool_results=self.share_tool_results, max_loops=self.max_loops,
                   persistent_memory=self.persistent_memory, output_type=self.output_type,
                   **({"context": self.context.build(r)} if self.context is not None else {}),
                   **({"max_input_tokens": self.max_input_tokens} if self.max_input_tokens is not None else {}),
                   **({"handoffs": [h.build(r, self.name) for h in self.handoffs]} if self.handoffs else {}),
                   **self.litellm)


class HandoffSpec(BaseModel):
    """One of an agent's handoffs: its target, description and input filter (by import path)."""

    model_config = ConfigDict(extra="forbid")
    target: str
    description: str = ""
    input_filter: str | None = None

    def build(self, r: "ConfigReader", agent: str) -> Handoff:
        return Handoff(self.target, self.description,
                       r.fn(self.input_filter, f"agent {agent!r} handoff to {self.target!r} input_filter"))


class ContextSpec(ConfigSpec):
    """A context policy (``fsmchat.speakers.context``): ``"full"``, ``"last_messages"`` (``n``) or
    ``"summarize"`` (its writing ``agent``, ``keep_last``, ``at``)."""

    owner: ClassVar[str] = "context"
    policy: Literal["full", "last_messages", "summarize"]
    n: int | None = None
    agent: AgentSpec | None = None
    keep_last: int | None = None
    at: float | None = None

    def build(self, r: ConfigReader) -> LastMessages | Summarize | str:
        if self.policy == "last_messages":
            return LastMessages(self.n)
        if self.policy == "summarize":
            if self.agent is None:
                raise ConfigError("context: policy 'summarize' needs its agent (the Agent that writes the summary)")
            kw = {k: v for k, v in (("keep_last", self.keep_last), ("at", self.at)) if v is not None}
            return Summarize(agent=self.agent.build(r), **kw)
        return "full"


def context_spec(w: "ConfigWriter", policy: object, what: str = "context") -> ContextSpec:
    """A context policy in its config form."""
    if isinstance(policy, LastMessages):
        return ContextSpec(policy="last_messages", n=policy.n)
    if isinstance(policy, Summarize):
        return ContextSpec(policy="summarize", agent=w.agent(policy.agent), keep_last=policy.keep_last, at=policy.at)
    return ContextSpec(policy="full")




class CallableSpec(ConfigSpec):
    """A callable participant or step, by import path (``name``: the speaker name if it differs)."""

    kind: Literal["callable"] = "callable"
    ref: Annotated[str, REF]
    name: str | None = None

    def ref_label(self, field: str) -> str:
        return "participant"

    def build(self, r: ConfigReader) -> CallableSpeaker | Callable[..., object]:
        fn = r.trust.callable(self.ref, "participant")
        return CallableSpeaker(fn, self.name) if self.name else fn


class HumanSpec(ConfigSpec):
    """A ``Human`` participant (a person); ``answers`` are its scripted answers, as data
    (``{"kind": "say", "text": ...}``)."""

    kind: Literal["human"] = "human"
    name: str
    answers: list[dict[str, Any]] = Field(default_factory=list)
    description: str = ""

    def build(self, r: ConfigReader) -> Human:
        return Human(self.name, answers=self.answers, description=self.description)


Participant = Annotated[Union[AgentSpec, CallableSpec, HumanSpec], Field(discriminator="kind")]
for _participant in (AgentSpec, CallableSpec, HumanSpec):  # each is a flow step too
    STEP_KINDS.register(_participant)


# ---- pattern fields that hold live objects: how each travels ----
@dataclass(frozen=True)
class Travels:
    """Marks a pattern config field that holds live objects (agents, flow steps): ``data`` is its
    type in the config form, ``dump(writer, value, what)`` writes it, ``load(reader, data)``
    rebuilds it. Every other field travels as it is."""

    data: object  # a type form: the field's type in the config form
    dump: Callable[[ConfigWriter, Any, str], Any]
    load: Callable[[ConfigReader, Any], Any]


def travels(field: FieldInfo) -> Travels | None:
    return next((m for m in field.metadata if isinstance(m, Travels)), None)


class Builds(Protocol):
    """A spec that builds its live object (``spec.build(reader)``): a participant's, a step's."""

    def build(self, r: ConfigReader) -> object: ...


def _dump_participants(w: ConfigWriter, value: Iterable[object], what: str) -> list[AgentSpec | HumanSpec | CallableSpec]:
    return [w.participant(x, what) for x in value]


def _load_built(r: ConfigReader, data: Builds | list[Builds]) -> object:
    return [x.build(r) for x in data] if isinstance(data, list) else data.build(r)


def _dump_agents(w: ConfigWriter, value: Iterable[Agent], what: str) -> list[AgentSpec]:
    return [w.agent(a) for a in value]


def _dump_steps(w: ConfigWriter, value: Iterable[object], what: str) -> list[object]:
    return w.steps(value)


def _load_context(r: ConfigReader, data: ContextSpec) -> object:
    return data.build(r)


ContextField = Annotated[Any, Travels(ContextSpec, context_spec, _load_context)]
"""The type of a pattern's context policy field: written as a ``ContextSpec``."""


def _dump_function(w: ConfigWriter, value: object, what: str) -> str | None:
    return opt_ref(value, what)


def _load_function(r: ConfigReader, data: str | None) -> object:
    return r.fn(data, "function")


FunctionField = Annotated[Any, Travels(Annotated[Optional[str], REF], _dump_function, _load_function)]
"""The type of a pattern field holding a plain function (``until``, ``candidates``): written as its
import path, rebuilt through the reader's trust."""


def _load_data(r: ConfigReader, data: object) -> object:
    return json.loads(json.dumps(data))


ParticipantLike = Union[Speaker, Callable[[Turn], object]]
"""A participant as a pattern takes it: a ``Speaker`` (an ``Agent``, a ``Human``, a ``CallableSpeaker``,
anything with ``name``, ``reply`` and ``bid``) or a function of the ``Turn`` (sync or async)."""

# The roster fields are typed for type checkers and left unchecked by pydantic (``SkipValidation``):
# each pattern checks its roster itself (``AfterValidator``), with errors that name the pattern.
Participants = Annotated[Optional[list[ParticipantLike]], SkipValidation,
                         Travels(list[Participant], _dump_participants, _load_built)]
"""The type of a pattern's roster field: agents, callables and people, live in the pattern.

In the pattern's config form (``to_config``) each participant is written as its spec (an
``Agent`` with its model and non-secret options, a callable by import path, a ``Human``), and
``from_config`` rebuilds them; a pattern of your own declares its roster with it.

Examples:
    >>> from pydantic import Field
    >>> from fsmchat import Agent, GroupChat, Human
    >>> from fsmchat.patterns import Participants, PatternConfig
    >>> class DuetConfig(PatternConfig):
    ...     agents: Participants = Field(None, title="agent")
    >>> DuetConfig(agents=[Agent("Pro"), Agent("Con")]).agents[1].name
    'Con'
    >>> cfg = GroupChat(agents=[Agent("Pro"), Agent("Con"), Human("host")]).to_config()
    >>> [(a.kind, a.name) for a in cfg.agents]
    [('agent', 'Pro'), ('agent', 'Con'), ('human', 'host')]
"""
Speakers = Annotated[list[Speaker], SkipValidation, Travels(list[Participant], _dump_participants, _load_built)]
"""The type of a roster field that its pattern checks into speakers: ``Participants`` as it travels,
``list[Speaker]`` as it is read, for a field declared ``Annotated[Speakers, AfterValidator(check)]``
where ``check`` returns ``check_roster(...)`` (and refuses None)."""
OneParticipant = Annotated[Optional[ParticipantLike], SkipValidation,
                           Travels(Participant, lambda w, v, what: w.participant(v, what), _load_built)]
"""The type of a field holding one participant (a moderator, a judge): an agent, a callable or a person.

It travels in the pattern's config form as that participant's spec, as ``Participants`` does for a
roster. Without a default the field is required: a pattern built without it is refused at once
(a ``ConfigError`` naming the field), before any run.

Examples:
    >>> from pydantic import Field
    >>> from fsmchat import Agent
    >>> from fsmchat.patterns import OneParticipant, Participants, PatternConfig
    >>> class HostedConfig(PatternConfig):
    ...     agents: Participants = Field(None, title="agent")
    ...     moderator: OneParticipant
    >>> HostedConfig(agents=[Agent("Pro")], moderator=Agent("Host")).moderator.name
    'Host'
    >>> HostedConfig(agents=[Agent("Pro")])
    Traceback (most recent call last):
    ...
    fsmchat.errors.ConfigError: HostedConfig: moderator is missing: it is required
"""
AgentRoster = Annotated[Any, Travels(list[AgentSpec], _dump_agents, _load_built)]
FlowSteps = Annotated[Any, Travels(list[AnyStep], _dump_steps, lambda r, d: r.steps(d))]
JsonData = Annotated[Any, Travels(dict[str, Any], lambda w, v, what: jsonable(v, what), _load_data)]


# ---- patterns ----
class PatternSpec(ConfigSpec):
    """What every pattern's config form holds besides its own fields. A pattern's form is derived
    from its config model (``pattern_spec``): same field names and defaults, live objects in
    their data form."""

    pattern_type: ClassVar[Any] = None  # the pattern class the kind builds
    kind: str
    version: int = CONFIG_VERSION
    limits: Limits | None = None
    factory: str | None = None
    pattern_class: Annotated[str | None, REF] = None  # "module:qualname" of a subclass of the built-in pattern
    models: list[AnyModel] = Field(default_factory=list)
    interrupt_before: list[str] = Field(default_factory=list)  # states where the run waits for a person
    interrupt_after: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Pattern fields added after version 1 are written only when set (``LATER_PATTERN_FIELDS``):
        a config written before them reads back equal."""
        return without_later_defaults(handler(self), LATER_PATTERN_FIELDS)

    def build(self, r: ConfigReader) -> Any:
        """The pattern (of ``pattern_class`` when it names a subclass), built from the fields."""
        base = self.pattern_type
        cls = r.trust.subclass(self.pattern_class, "pattern_class", base) if self.pattern_class else base
        values = {}
        for name, field in base.Config.model_fields.items():
            value, t = getattr(self, name), travels(field)
            values[name] = t.load(r, value) if t is not None and value is not None else value
        return cls(**values)


def pattern_spec(pattern: Any, kind: str) -> type[PatternSpec]:
    """Derive and register the config form of ``pattern`` (a Pattern subclass with a ``Config``
    model) under ``kind``: its fields in the model's order, with their defaults and descriptions,
    a ``Travels`` field typed by its data form. Validation stays the model's: a config is checked
    by it when the pattern is built."""
    config = pattern.Config
    fields: dict[str, Any] = {"kind": (Literal[kind], kind)}
    for name, f in config.model_fields.items():
        t = travels(f)
        data = f.annotation if t is None else (Optional[t.data] if f.default is None else t.data)
        rules = [m for m in f.metadata if isinstance(m, Number)]
        if t is None and rules:  # a number keeps its rule: a config is held to it as the constructor is
            data = Annotated.__class_getitem__((data, *rules))  # type: ignore[attr-defined]  # Annotated[data, *rules]
        info = Field(default_factory=f.default_factory, description=f.description) if f.default_factory \
            else Field(f.default, description=f.description)
        fields[name] = (data, info)
    spec = create_model(config.__name__.removesuffix("Config") + "Spec", __base__=PatternSpec,
                        __module__=pattern.__module__, **fields)
    spec.__qualname__ = f"{pattern.__qualname__}.Spec"
    spec.__doc__ = f"The config form of ``{pattern.__name__}`` (kind {kind!r}), derived from ``{config.__name__}``."
    spec.pattern_type = pattern
    PATTERN_KINDS.register(spec)
    return spec


@PATTERN_KINDS.register
class FactorySpec(PatternSpec):
    """Any other pattern, rebuilt by calling its ``factory`` ("module:attr")."""

    kind: Literal["factory"] = "factory"

    def build(self, r: ConfigReader) -> Any:
        return r.trust.pattern(self.factory or "", "factory")


# ---- to_config ----
class ConfigWriter:
    """Walks a pattern into its config form, collecting the scripted models its agents use. A
    flow step kind writes itself (``step.to_spec(writer)``)."""

    def __init__(self) -> None:
        self.models: dict[str, BaseModel] = {}

    def agent(self, a: Agent) -> AgentSpec:
        extra = strip_secrets(dict(a.model_extra or {}))
        tools = [tool_entry(t, f"agent {a.name!r}") for t in a.tools]
        spec = AgentSpec(name=a.name, system_prompt=a.system_prompt, model=a.model, tools=jsonable(tools, "tools"),
                         tool_mode=a.tool_mode, timeout=a.timeout, num_retries=a.num_retries,
                         max_retry_wait_s=a.max_retry_wait_s, transport=a.transport,
                         max_tool_rounds=a.max_tool_rounds, max_parallel_tools=a.max_parallel_tools,
                         on_tool_error=a.on_tool_error, share_tool_results=a.share_tool_results, max_loops=a.max_loops,
                         persistent_memory=a.persistent_memory, output_type=a.output_type,
                         litellm=jsonable(extra, f"agent {a.name!r}'s litellm options"),
                         agent_class=None if type(a) is Agent else callable_ref(type(a), f"agent {a.name!r}"),
                         context=context_spec(self, a.context) if a.context is not None else None,
                         max_input_tokens=a.max_input_tokens,
                         handoffs=[HandoffSpec(target=h.target, description=h.description,
                                               input_filter=opt_ref(h.input_filter, f"agent {a.name!r} handoff"))
                                   for h in a.handoffs])
        self.model(a.model, a.name)
        return spec

    def model(self, model: str | None, agent: str) -> None:
        """Collect the model ``agent`` uses when a registered source ships it as data (a scripted model)."""
        provider, _, mid = (model or "").partition("/")
        source = MODEL_SOURCES.get(provider)
        if source is not None and mid and mid not in self.models:
            self.models[mid] = source(mid, agent)

    def participant(self, x: object, what: str) -> AgentSpec | HumanSpec | CallableSpec:
        if isinstance(x, Agent):
            return self.agent(x)
        if isinstance(x, Human):
            return human_spec(x)
        if isinstance(x, CallableSpeaker):
            fn_name = getattr(x.fn, "name", None) or getattr(x.fn, "__name__", None)
            return CallableSpec(ref=callable_ref(x.fn, f"{what} {x.name!r}"),
                                name=None if x.name == fn_name else x.name)
        if callable(x) and not hasattr(x, "reply"):
            return CallableSpec(ref=callable_ref(x, what))
        raise TypeError(f"{what}: a {type(x).__name__} participant has no config form; use an Agent or a "
                        "module-level function")

    def step(self, s: object) -> object:
        """A flow step's config form: a step kind of the flow (``Task``, ``Discussion``, ``loop``...)
        writes itself; an Agent, a Human or a function is a participant."""
        to_spec = getattr(s, "to_spec", None)
        if to_spec is not None and not isinstance(s, type):
            return to_spec(self)
        return self.participant(s, "flow step")

    def steps(self, steps: object) -> list[object]:
        if not isinstance(steps, Iterable):  # a flow's steps field, which the flow validated
            raise TypeError(f"'{type(steps).__name__}' object is not iterable")
        return [self.step(s) for s in steps]

    @staticmethod
    def condition(fn: object, what: str) -> tuple[str | None, str | None]:
        """A compiled expression (``compile_condition``'s ``evaluate``) travels as its text."""
        if getattr(fn, "__qualname__", "") == "compile_condition.<locals>.evaluate" and fn.__doc__:
            return None, fn.__doc__
        return callable_ref(fn, what), None


def human_spec(h: Human) -> HumanSpec:
    return HumanSpec(name=h.name, answers=[a.model_dump() for a in h.answers], description=h.description)


def to_config(pattern: Any) -> PatternSpec:
    """The pattern as a JSON-able config: its kind's ``Spec`` (e.g. ``GroupChat.Spec``).

    The roster, limits, output type and every flow step are written as data; callables travel as
    ``"module:qualname"`` import paths, and secrets (``api_key``, tokens) are left out. A pattern
    of no registered kind travels by its ``factory`` ("module:attr") when set. ``pattern.to_config()``
    is the same.

    Args:
        pattern: A pattern or flow.

    Returns:
        The config model (``model_dump(mode="json")`` or ``model_dump_json()`` for its data).

    Raises:
        TypeError: A lambda or closure in it (no import path), or a pattern with no config form.

    Examples:
        >>> from fsmchat import Agent, GroupChat
        >>> from fsmchat.config import to_config
        >>> chat = GroupChat(agents=[Agent("Pro", system_prompt="Argue for the motion."),
        ...                          Agent("Con", system_prompt="Argue against the motion.")], max_loops=6)
        >>> cfg = to_config(chat)
        >>> cfg.kind, cfg.max_loops, [a.name for a in cfg.agents]
        ('group_chat', 6, ['Pro', 'Con'])
        >>> cfg == chat.to_config()
        True
    """
    w = ConfigWriter()
    spec = pattern_config(pattern, w)
    spec.models = list(w.models.values())
    return spec


def pattern_config(pattern: Any, w: ConfigWriter) -> PatternSpec:
    """The pattern's config form, written with ``w`` (which collects the scripted models its agents
    use: ``to_config`` stores them with the outermost config, so a pattern run as a flow step
    ships them once, with its flow)."""
    who = type(pattern).__name__
    common: dict[str, Any] = {"limits": pattern.limits, "factory": pattern.factory,
                              "interrupt_before": list(pattern.interrupt_before),
                              "interrupt_after": list(pattern.interrupt_after)}
    spec_type: type[PatternSpec] | None = getattr(type(pattern), "Spec", None)
    spec: PatternSpec
    if spec_type is not None:
        base = spec_type.pattern_type
        if type(pattern) is not base:
            common["pattern_class"] = callable_ref(type(pattern), f"{who} (a subclass of {base.__name__})")
        values = {}
        for name, field in base.Config.model_fields.items():
            value, t = getattr(pattern.config, name), travels(field)
            values[name] = t.dump(w, value, f"{who} {field.title or name}") if t is not None and value is not None \
                else value
        spec = spec_type(**values, **common)
    elif pattern.factory:
        spec = FactorySpec(**common)
    else:
        raise TypeError(f"{who} has no config form: it is not a built-in pattern; set pattern.factory = "
                        "'module:attr' (a zero-argument function returning the pattern) to ship it by import path")
    return spec


# ---- from_config ----
def parse_config(cfg: object) -> PatternSpec:
    """A pattern config from a config model, a dict or a JSON string; anything else is a
    ``ConfigError`` listing the valid kinds (no pydantic dump)."""
    if isinstance(cfg, PatternSpec):
        return cfg
    try:
        data = json.loads(cfg) if isinstance(cfg, (str, bytes)) else cfg
        kind = data.get("kind") if isinstance(data, dict) else None
        if not isinstance(kind, str) or kind not in PATTERN_KINDS:
            detail = f"kind={kind!r} is none of them" if isinstance(data, dict) else "not a dict"
        else:
            return PATTERN_KINDS.validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        detail = f"{'.'.join(str(x) for x in first['loc']) or 'config'}: {first['msg']}"
    except ValueError as exc:  # not JSON
        detail = str(exc)
    what = ("a config from pattern.to_config() (a model, a dict or its JSON) whose kind is one of "
            f"{PATTERN_KINDS.known()}")
    raise bad_value("from_config", "cfg", cfg, f"{what} ({detail})")


def from_config(cfg: object, *, allow: object = (), trusted: bool = False) -> Any:
    """Rebuild a pattern or flow from ``to_config()``'s output (a model, a dict or JSON).

    Only code under fsmchat's own modules and the ``allow`` prefixes is imported (``fsmchat.trust``);
    a refused reference raises ``UntrustedReference`` before anything of it is imported. The kinds
    are looked up in the registries (``fsmchat.config.kinds``): the built-in ones load with fsmchat's own
    modules, a kind of your own must have been registered (its module imported) and be allowed
    like a reference.

    Args:
        cfg: The config: the model ``to_config()`` returned, its dict or its JSON text.
        allow: Module prefixes whose code the config may import (callables, factories, kinds).
        trusted: Load any reference, file paths included.

    Returns:
        The rebuilt pattern or flow.

    Raises:
        ConfigError: Not a config, or of no known kind.
        UntrustedReference: A reference outside fsmchat and ``allow``.
        ValueError: A config version this fsmchat does not read.

    Examples:
        >>> from fsmchat import Agent, GroupChat, from_config
        >>> chat = GroupChat(agents=[Agent("Pro"), Agent("Con")], max_loops=6)
        >>> again = from_config(chat.to_config().model_dump_json())
        >>> type(again).__name__, again.max_loops, [a.name for a in again.agents]
        ('GroupChat', 6, ['Pro', 'Con'])
        >>> from_config({"kind": "round_robin", "agents": [{"kind": "callable", "ref": "os:system"}]})
        Traceback (most recent call last):
        ...
        fsmchat.trust.UntrustedReference: participant: refused 'os:system': module 'os' is not allowed ...
    """
    trust = Trust.of(allow, trusted)
    spec = parse_config(cfg)
    if spec.version != CONFIG_VERSION:
        raise ValueError(f"config version {spec.version} is not supported (this fsmchat reads {CONFIG_VERSION})")
    return ConfigReader(trust).pattern(spec)


class ConfigReader:
    """Rebuilds a pattern from its spec, loading every reference through the caller's ``Trust``;
    each spec builds itself (``spec.build(reader)``)."""

    def __init__(self, trust: Trust):
        self.trust = trust

    def fn(self, ref: str | None, what: str) -> Any:  # a loaded function, for a field of its own callable type
        return None if ref is None else self.trust.callable(ref, what)

    def check(self, spec: object) -> None:
        """Refuse the whole config before anything of it is built: a kind registered by a module the
        caller does not allow, or any reference the trust refuses."""
        for node in specs_in(spec):
            module = owner_module(type(node))
            if "kind" in type(node).model_fields and not any(within(module, p) for p in BUILTIN_PREFIXES) \
                    and not self.trust.allows(module):
                raise UntrustedReference(f"{module}:{type(node).__qualname__}", f"kind {getattr(node, 'kind')!r}",
                                         f"it is registered by module {module!r}, which is not allowed (allowed: "
                                         f"{list(self.trust.prefixes)}); pass allow=[{module!r}] if you trust its code")
        for ref, what in references(spec):
            self.trust.check(ref, what)
        for node in specs_in(spec):  # an MCP server starts a process: only trusted configs hold one
            if isinstance(node, AgentSpec):
                for t in filter(is_mcp_server, node.tools):
                    where = f"command {t.get('command')!r}" if t.get("command") else f"url {t.get('url')!r}"
                    self.trust.process(f"MCP server {t.get('name')!r} ({where})", f"agent {node.name!r} tools")

    def pattern(self, spec: PatternSpec) -> Any:
        # every reference is checked before any is imported: a refusal leaves nothing half-loaded
        if isinstance(spec, FactorySpec):
            if not spec.factory:
                raise ValueError("a factory config needs factory='module:attr'")
            self.trust.factory(spec.factory, "factory")
        self.check(spec)
        for m in spec.models:
            m.build(self)
        pattern = spec.build(self)
        if isinstance(spec, FactorySpec):
            return pattern
        if spec.interrupt_before or spec.interrupt_after:
            pattern.set_interrupts(spec.interrupt_before, spec.interrupt_after)
        if spec.limits is not None:
            pattern.with_limits(spec.limits)
        pattern.factory = spec.factory
        return pattern

    def steps(self, specs: Iterable[Builds]) -> list[object]:
        """The flow steps of ``specs``; a pattern's spec (a pattern run as a step) is built as
        ``from_config`` builds a pattern (its interrupts, limits and factory applied)."""
        return [self.pattern(s) if isinstance(s, PatternSpec) else s.build(self) for s in specs]


def _held(value: object) -> list[object]:
    """What a config value holds: a model's field values, a dict's values, a list's items."""
    if isinstance(value, BaseModel):
        return [getattr(value, name) for name in type(value).model_fields]
    if isinstance(value, dict):
        return list(value.values())
    return value if isinstance(value, list) else []


def specs_in(value: object) -> Iterator[BaseModel]:
    """Every spec model in a config, depth first (the config itself first)."""
    if isinstance(value, BaseModel):
        yield value
    for v in _held(value):
        yield from specs_in(v)


def references(spec: object) -> Iterator[tuple[str, str]]:
    """Every import reference a config loads, with where it is (a pattern's stored ``factory`` is
    only loaded by ``resume``, which checks it then; a factory config's is checked by ``from_config``)."""
    if isinstance(spec, ConfigSpec):
        yield from spec.references()
        return
    for v in _held(spec):
        yield from references(v)


def config_digest(cfg: object) -> str:
    """A stable hash of a config; scripted model ids (a per-process counter) are replaced by their
    position, so the same batch gets the same digest in a new process. Keys are sorted: the order
    a pattern's model declares its fields in does not change it."""
    spec = parse_config(cfg)
    text = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    for i, m in enumerate(spec.models):
        text = re.sub(rf"(?<=[\"/]){re.escape(m.id)}(?=\")", f"model-{i}", text)
    return hashlib.sha256(text.encode()).hexdigest()


def __getattr__(name: str) -> Any:
    """The config forms by their earlier names (``GroupChatSpec``, ``FlowSpec``, ``LoopSpec``,
    ``ScriptedModelSpec``...) and ``KINDS``, found in the registries (which load fsmchat's kinds)."""
    if name == "KINDS":
        return tuple(PATTERN_KINDS.known())
    if name.endswith("Spec"):
        for registry in (PATTERN_KINDS, STEP_KINDS, MODEL_KINDS):
            for kind in registry.known():
                spec = registry.spec(kind)
                if spec.__name__ == name:
                    return spec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
