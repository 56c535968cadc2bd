"""Patterns and flows as data: ``pattern.to_config()`` returns a JSON-able pydantic model and
``from_config(cfg)`` rebuilds the pattern from it (in this process or on a Ray worker).

A config holds the roster (agents with their model and non-secret litellm options), the limits,
the output type and every step of a flow, each with a ``kind`` discriminator. Callables
(callable participants, ``until``/``select``/conditions, ``Task`` handlers, a ``FunctionModel``'s
function) travel as ``"module:qualname"`` import paths, so only module-level functions can be
shipped; a lambda or a closure makes ``to_config()`` raise a ``TypeError`` naming it. Secrets
(every litellm option ``is_secret`` names: ``api_key``, tokens, passwords) are never written:
workers read them from their environment, as litellm does.

``from_config`` imports only what the caller trusts (``fsmchat.trust``): fsmchat's own modules,
the module prefixes in ``allow=[...]``, or anything with ``trusted=True`` (a function of a script
run as ``__main__`` travels as ``path/to/script.py:name``, which needs it). Ray workers rebuild the
driver's own config with ``trusted=True`` (see ``fsmchat.distributed``).
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import re
import sys
from typing import Annotated, Any, Iterator, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .errors import bad_value
from .limits import Limits
from .speakers.llm import DEFAULT_RETRIES, DEFAULT_TIMEOUT
from .trust import Trust

CONFIG_VERSION = 1


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # schemas built on first use: cheap import


# ---- participants ----
class AgentSpec(_Spec):
    """An ``Agent``: its fields plus ``litellm`` (extra keyword options, secrets dropped)."""

    kind: Literal["agent"] = "agent"
    name: str
    system_prompt: str = ""
    model: str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_mode: Literal["native", "json"] | None = None
    timeout: float | None = DEFAULT_TIMEOUT
    num_retries: int = DEFAULT_RETRIES
    max_loops: int | None = None
    persistent_memory: bool | None = None
    output_type: str | None = None
    litellm: dict[str, Any] = Field(default_factory=dict)
    agent_class: str | None = None  # "module:qualname" of an Agent subclass


class CallableSpec(_Spec):
    """A callable participant or step, by import path (``name``: the speaker name if it differs)."""

    kind: Literal["callable"] = "callable"
    ref: str
    name: str | None = None


class HumanSpec(_Spec):
    """A ``Human`` participant (a person); ``answers`` are its scripted answers, as data
    (``{"kind": "say", "text": ...}``)."""

    kind: Literal["human"] = "human"
    name: str
    answers: list[dict[str, Any]] = Field(default_factory=list)
    description: str = ""


class TaskSpec(_Spec):
    """A flow ``Task`` with its error policy."""

    kind: Literal["task"] = "task"
    handler: str | None = None
    agent: AgentSpec | None = None
    name: str | None = None
    action: str | None = None
    on_error: Literal["stop", "continue", "retry"] = "stop"
    max_retries: int = 0
    should_run: str | None = None
    retry_delay: float = 0.1
    post: bool = True
    save_as: str | None = None
    append_to: str | None = None
    person: HumanSpec | None = None


Participant = Annotated[Union[AgentSpec, CallableSpec, HumanSpec], Field(discriminator="kind")]


# ---- flow steps ----
class DiscussionSpec(_Spec):
    kind: Literal["discussion"] = "discussion"
    agents: list[Annotated[Union[AgentSpec, CallableSpec, TaskSpec, HumanSpec], Field(discriminator="kind")]]
    rounds: int = 3
    until: str | None = None
    select: str | None = None
    name: str = "discussion"


class LoopSpec(_Spec):
    kind: Literal["loop"] = "loop"
    steps: list["Step"]
    over: str | list[Any] = "items"  # a variable's name, or a literal list
    var_name: str = "item"
    parallel: bool = False
    name: str = "loop"
    max_items: int | None = Field(default=None, ge=0)


class ParallelSpec(_Spec):
    kind: Literal["parallel"] = "parallel"
    steps: list["Step"]
    name: str = "parallel"
    max_concurrency: int | None = Field(default=None, ge=1)


class RouteSpec(_Spec):
    kind: Literal["route"] = "route"
    routes: dict[str, list["Step"]]
    default: list["Step"] = Field(default_factory=list)
    name: str = "route"
    on: str | None = None


class IfSpec(_Spec):
    """``condition`` is an import path, ``expression`` a condition string such as ``"{{x}} > 1"``."""

    kind: Literal["if"] = "if"
    condition: str | None = None
    expression: str | None = None
    then_steps: list["Step"]
    else_steps: list["Step"] = Field(default_factory=list)
    name: str = "if"


class RepeatSpec(_Spec):
    kind: Literal["repeat"] = "repeat"
    steps: list["Step"]
    until: str | None = None
    until_expression: str | None = None
    max_iterations: int = 10
    name: str = "repeat"


Step = Annotated[Union[AgentSpec, CallableSpec, HumanSpec, TaskSpec, DiscussionSpec, LoopSpec, ParallelSpec,
                       RouteSpec, IfSpec, RepeatSpec], Field(discriminator="kind")]


# ---- scripted models (fsmchat.testing) ----
class ScriptItemSpec(_Spec):
    """One scripted answer: text, bid, tool_call, fail, delay (then another item), empty, callable."""

    kind: Literal["text", "bid", "tool_call", "fail", "delay", "empty", "callable"]
    text: str | None = None
    score: float | None = None
    message: str | None = None
    name: str | None = None
    arguments: Any = None
    status: int | None = None
    retry_after: float | None = None
    seconds: float | None = None
    then: "ScriptItemSpec | None" = None
    ref: str | None = None


class ScriptedModelSpec(_Spec):
    """A ``ScriptedModel`` (``kind="scripted"``) or ``FunctionModel`` (``kind="function"``), rebuilt
    under the same ``id`` so the agents' ``model`` strings resolve on the worker."""

    kind: Literal["scripted", "function"] = "function"
    id: str
    scripts: dict[str, list[ScriptItemSpec]] = Field(default_factory=dict)
    fn: str | None = None


# ---- patterns ----
class _PatternSpec(_Spec):
    kind: str
    version: int = CONFIG_VERSION
    limits: Limits | None = None
    factory: str | None = None
    pattern_class: str | None = None  # "module:qualname" of a subclass of the built-in pattern
    models: list[ScriptedModelSpec] = Field(default_factory=list)
    interrupt_before: list[str] = Field(default_factory=list)  # states where the run waits for a person
    interrupt_after: list[str] = Field(default_factory=list)


class GroupChatSpec(_PatternSpec):
    kind: Literal["group_chat"] = "group_chat"
    name: str = "dynamic-groupchat"
    description: str = ""
    agents: list[Participant]
    max_loops: int = 20
    threshold: float = 0.5
    recency_penalty: float = 0.3
    recency_window: int = 1
    idle_timeout: float = 8.0
    output_type: str = "str-all-except-first"
    auto_equip: bool = True
    verbose: bool = False
    context_window: int | None = None


class RoundRobinSpec(_PatternSpec):
    kind: Literal["round_robin"] = "round_robin"
    name: str = "RoundRobinSwarm"
    description: str = ""
    agents: list[Participant]
    max_loops: int = 1
    output_type: str = "final"
    verbose: bool = False


class DebateSpec(_PatternSpec):
    """``OneOnOneDebate`` (and ``one_on_one_debate``'s form: ``send_intros=False``)."""

    kind: Literal["one_on_one_debate"] = "one_on_one_debate"
    agents: list[Participant]
    max_loops: int = 1
    img: str | None = None
    output_type: str = "str-all-except-first"
    send_intros: bool = True
    verbose: bool = False


class PanelSpec(_PatternSpec):
    kind: Literal["expert_panel"] = "expert_panel"
    agents: list[Participant]
    moderator: Participant
    max_rounds: int = 3
    output_type: str = "str-all-except-first"
    verbose: bool = False


class FlowSpec(_PatternSpec):
    kind: Literal["flow"] = "flow"
    name: str = "flow"
    steps: list[Step]
    variables: dict[str, Any] = Field(default_factory=dict)
    agents: list[AgentSpec] | None = None
    verbose: bool = False
    memory: bool = False
    output_type: str | None = None


class FactorySpec(_PatternSpec):
    """Any other pattern, rebuilt by calling its ``factory`` ("module:attr")."""

    kind: Literal["factory"] = "factory"


PatternSpec = Annotated[Union[GroupChatSpec, RoundRobinSpec, DebateSpec, PanelSpec, FlowSpec, FactorySpec],
                        Field(discriminator="kind")]



@functools.cache
def _pattern_spec() -> TypeAdapter[Any]:
    return TypeAdapter(PatternSpec)


# ---- callables by import path ----
def callable_ref(fn: Any, what: str) -> str:
    """``"module:qualname"`` of a module-level function (or class), else a ``TypeError`` saying why."""
    label = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    if not callable(fn):
        raise TypeError(f"{what}: {fn!r} is not callable")
    qualname = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if not (inspect.isfunction(fn) or inspect.isclass(fn) or inspect.isbuiltin(fn)) or not qualname or not module:
        raise TypeError(f"{what}: {label} ({type(fn).__name__}) cannot be shipped in a config: only module-level "
                        "functions travel, by import path; wrap it in a function defined at module level")
    if "<lambda>" in qualname:
        raise TypeError(f"{what}: {label} is a lambda, which cannot be shipped in a config (it has no import "
                        "path); define it as a function at module level")
    if "<locals>" in qualname:
        raise TypeError(f"{what}: {label} is defined inside a function (a closure), which cannot be shipped in "
                        "a config (it has no import path); define it at module level and pass state as data")
    if module == "__main__":
        main = sys.modules.get("__main__")
        path = getattr(main, "__file__", None)
        if not path or _resolve(main, qualname) is not fn:
            raise TypeError(f"{what}: {label} lives in an interactive __main__ and has no import path; "
                            "define it in a module")
        return f"{path}:{qualname}"
    try:
        found = _resolve(importlib.import_module(module), qualname)
    except Exception:
        found = None
    if found is not fn:
        raise TypeError(f"{what}: {label} is not reachable as {module}:{qualname} (was it renamed, decorated "
                        "or replaced?); only module-level functions can be shipped in a config")
    return f"{module}:{qualname}"


def _resolve(obj: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def _opt_ref(fn: Any, what: str) -> str | None:
    return None if fn is None else callable_ref(fn, what)


# ---- secrets ----
def secret_option(name: str) -> bool:
    """Whether a litellm option names a credential (``is_secret``: ``api_key``, ``Authorization``,
    ``access_token``...; token *counts* such as ``max_tokens`` are options a worker needs)."""
    from .speakers.agent import is_secret

    return is_secret(name)


def strip_secrets(value: Any) -> Any:
    """``value`` without any secret-named entry (at any depth of nested dicts)."""
    if isinstance(value, dict):
        return {k: strip_secrets(v) for k, v in value.items() if not (isinstance(k, str) and secret_option(k))}
    if isinstance(value, (list, tuple)):
        return [strip_secrets(v) for v in value]
    return value


def _jsonable(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-able to go in a config: {exc}") from None


# ---- to_config ----
class _Writer:
    """Walks a pattern, collecting the scripted models its agents use."""

    def __init__(self) -> None:
        self.models: dict[str, ScriptedModelSpec] = {}

    def agent(self, a: Any) -> AgentSpec:
        from .speakers.agent import Agent

        extra = strip_secrets(dict(a.model_extra or {}))
        spec = AgentSpec(name=a.name, system_prompt=a.system_prompt, model=a.model, tools=_jsonable(a.tools, "tools"),
                         tool_mode=a.tool_mode, timeout=a.timeout, num_retries=a.num_retries, max_loops=a.max_loops,
                         persistent_memory=a.persistent_memory, output_type=a.output_type,
                         litellm=_jsonable(extra, f"agent {a.name!r}'s litellm options"),
                         agent_class=None if type(a) is Agent else callable_ref(type(a), f"agent {a.name!r}"))
        self.model(a.model, a.name)
        return spec

    def model(self, model: str | None, agent: str) -> None:
        from .testing import SCRIPTED_PROVIDER, _Provider

        if not model or not model.startswith(SCRIPTED_PROVIDER + "/"):
            return
        mid = model.partition("/")[2]
        if mid in self.models:
            return
        inst = _Provider._instances.get(mid)
        if inst is None:
            raise TypeError(f"agent {agent!r} uses scripted model {model!r}, which is closed; keep the "
                            "ScriptedModel/FunctionModel open while converting to a config")
        self.models[mid] = scripted_model_spec(inst)

    def participant(self, x: Any, what: str) -> Any:
        from .speakers.agent import Agent, CallableSpeaker
        from .speakers.human import Human

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

    def task(self, t: Any) -> TaskSpec:
        agent = self.agent(t.agent) if t.agent is not None else None
        return TaskSpec(handler=_opt_ref(t.handler, f"Task {t.name!r} handler"), agent=agent, name=t.name,
                        action=t.action, on_error=t.on_error, max_retries=t.max_retries,
                        should_run=_opt_ref(t.should_run, f"Task {t.name!r} should_run"), retry_delay=t.retry_delay,
                        post=t.post, save_as=t.save_as, append_to=t.append_to,
                        person=human_spec(t.person) if t.person is not None else None)

    def step(self, s: Any) -> Any:
        from .flow.steps import Block, Discussion, If, Loop, Parallel, Repeat, Route, Task
        from .speakers.agent import Agent
        from .speakers.human import Human

        if isinstance(s, Agent):
            return self.agent(s)
        if isinstance(s, Human):
            return human_spec(s)
        if isinstance(s, Task):
            return self.task(s)
        if isinstance(s, Discussion):
            members = [self.task(a) if isinstance(a, Task) else self.participant(a, f"Discussion {s.name!r} speaker")
                       for a in s.agents]
            return DiscussionSpec(agents=members, rounds=s.rounds, name=s.name,
                                  until=_opt_ref(s.until, f"Discussion {s.name!r} until"),
                                  select=_opt_ref(s.select, f"Discussion {s.name!r} select"))
        if isinstance(s, Loop):
            over = s.over if isinstance(s.over, str) else _jsonable(s.over, f"loop {s.name!r} over")
            return LoopSpec(steps=self.steps(s.steps), over=over, var_name=s.var_name, parallel=s.parallel,
                            name=s.name, max_items=s.max_items)
        if isinstance(s, Parallel):
            return ParallelSpec(steps=self.steps(s.steps), name=s.name, max_concurrency=s.max_concurrency)
        if isinstance(s, Route):
            return RouteSpec(routes={k: self.steps(v) for k, v in s.routes.items()}, default=self.steps(s.default),
                             name=s.name, on=s.on)
        if isinstance(s, If):
            cond, expr = self.condition(s.condition, f"if_ {s.name!r} condition")
            return IfSpec(condition=cond, expression=expr, then_steps=self.steps(s.then_steps),
                          else_steps=self.steps(s.else_steps), name=s.name)
        if isinstance(s, Repeat):
            until, expr = self.condition(s.until, f"repeat {s.name!r} until") if s.until is not None else (None, None)
            return RepeatSpec(steps=self.steps(s.steps), until=until, until_expression=expr,
                              max_iterations=s.max_iterations, name=s.name)
        if isinstance(s, Block):
            raise TypeError(f"step {s.name!r}: a {type(s).__name__} has no config form")
        return CallableSpec(ref=callable_ref(s, "flow step"))

    def steps(self, steps: Any) -> list[Any]:
        return [self.step(s) for s in steps]

    @staticmethod
    def condition(fn: Any, what: str) -> tuple[str | None, str | None]:
        """A compiled expression (``compile_condition``'s ``evaluate``) travels as its text."""
        if getattr(fn, "__qualname__", "") == "compile_condition.<locals>.evaluate" and fn.__doc__:
            return None, fn.__doc__
        return callable_ref(fn, what), None


def human_spec(h: Any) -> HumanSpec:
    return HumanSpec(name=h.name, answers=[a.model_dump() for a in h.answers], description=h.description)


def scripted_model_spec(model: Any) -> ScriptedModelSpec:
    """The config form of a ``ScriptedModel``/``FunctionModel`` (its scripts and function as data)."""
    from .testing import FunctionModel

    kind = "function" if isinstance(model, FunctionModel) else "scripted"
    scripts = {agent: [_item_spec(x, f"ScriptedModel {model.id!r} script of {agent!r}") for x in items]
               for agent, items in model.scripts.items()}
    return ScriptedModelSpec(kind=kind, id=model.id, scripts=scripts,
                             fn=_opt_ref(model.fn, f"{type(model).__name__} {model.id!r} fn"))


def _item_spec(x: Any, what: str) -> ScriptItemSpec:
    from .models import Bid
    from .testing import Delay, Empty, Fail, ToolCall

    if isinstance(x, str):
        return ScriptItemSpec(kind="text", text=x)
    if isinstance(x, Bid):
        return ScriptItemSpec(kind="bid", score=x.score, message=x.message)
    if isinstance(x, ToolCall):
        return ScriptItemSpec(kind="tool_call", name=x.name, arguments=_jsonable(x.arguments, what))
    if isinstance(x, Fail):
        return ScriptItemSpec(kind="fail", status=x.status, message=x.message, retry_after=x.retry_after)
    if isinstance(x, Delay):
        return ScriptItemSpec(kind="delay", seconds=x.seconds, then=_item_spec(x.then, what))
    if isinstance(x, Empty):
        return ScriptItemSpec(kind="empty")
    if callable(x):
        return ScriptItemSpec(kind="callable", ref=callable_ref(x, what))
    raise TypeError(f"{what}: a {type(x).__name__} item has no config form")


def to_config(pattern: Any) -> Any:
    """The pattern as a JSON-able config (``GroupChatSpec``, ``FlowSpec``, ...); see the module doc."""
    from .flow.flow import AgentFlow
    from .patterns.debate import OneOnOneDebate
    from .patterns.group_chat import GroupChat
    from .patterns.panel import ExpertPanelDiscussion
    from .patterns.round_robin import RoundRobinSwarm

    w = _Writer()
    who = type(pattern).__name__
    common: dict[str, Any] = {"limits": pattern.limits, "factory": pattern.factory,
                              "interrupt_before": list(pattern.interrupt_before),
                              "interrupt_after": list(pattern.interrupt_after)}
    base = next((c for c in (GroupChat, RoundRobinSwarm, OneOnOneDebate, ExpertPanelDiscussion, AgentFlow)
                 if isinstance(pattern, c)), None)
    if base is not None and type(pattern) is not base:
        common["pattern_class"] = callable_ref(type(pattern), f"{who} (a subclass of {base.__name__})")
    spec: Any
    if isinstance(pattern, GroupChat):
        c = pattern.config
        spec = GroupChatSpec(name=pattern.name, description=pattern.description,
                             agents=[w.participant(a, f"{who} agent") for a in pattern.agents],
                             max_loops=c.max_loops, threshold=c.threshold, recency_penalty=c.recency_penalty,
                             recency_window=c.recency_window, idle_timeout=c.idle_timeout, output_type=c.output_type,
                             auto_equip=c.auto_equip, verbose=c.verbose, context_window=c.context_window,
                             **common)
    elif isinstance(pattern, RoundRobinSwarm):
        c = pattern.config
        spec = RoundRobinSpec(name=pattern.name, description=pattern.description,
                              agents=[w.participant(a, f"{who} agent") for a in pattern.agents],
                              max_loops=c.max_loops, output_type=c.output_type, verbose=c.verbose, **common)
    elif isinstance(pattern, OneOnOneDebate):
        c = pattern.config
        spec = DebateSpec(agents=[w.participant(a, f"{who} agent") for a in (pattern.agents or [])],
                          max_loops=c.max_loops, img=pattern.img, output_type=c.output_type,
                          send_intros=c.send_intros, verbose=c.verbose, **common)
    elif isinstance(pattern, ExpertPanelDiscussion):
        c = pattern.config
        experts, moderator = pattern._roster()
        spec = PanelSpec(agents=[w.participant(a, f"{who} expert") for a in experts],
                         moderator=w.participant(moderator, f"{who} moderator"), max_rounds=c.max_rounds,
                         output_type=c.output_type, verbose=c.verbose, **common)
    elif isinstance(pattern, AgentFlow):
        spec = FlowSpec(name=pattern.name, steps=w.steps(pattern.steps),
                        variables=_jsonable(pattern.variables, f"AgentFlow {pattern.name!r} variables"),
                        agents=[w.agent(a) for a in pattern.agents] if pattern.agents is not None else None,
                        verbose=pattern.verbose, memory=pattern.memory, output_type=pattern.output_type, **common)
    elif pattern.factory:
        spec = FactorySpec(**common)
    else:
        raise TypeError(f"{who} has no config form: it is not a built-in pattern; set pattern.factory = "
                        "'module:attr' (a zero-argument function returning the pattern) to ship it by import path")
    spec.models = list(w.models.values())
    return spec


# ---- from_config ----
KINDS = tuple(spec.model_fields["kind"].default for spec in
              (GroupChatSpec, RoundRobinSpec, DebateSpec, PanelSpec, FlowSpec, FactorySpec))


def parse_config(cfg: Any) -> Any:
    """A pattern config from a config model, a dict or a JSON string; anything else is a
    ``ConfigError`` listing the valid kinds (no pydantic dump)."""
    if isinstance(cfg, BaseModel):
        return cfg
    try:
        if isinstance(cfg, (str, bytes)):
            return _pattern_spec().validate_json(cfg)
        return _pattern_spec().validate_python(cfg)
    except ValidationError as exc:
        what = f"a config from pattern.to_config() (a model, a dict or its JSON) whose kind is one of {list(KINDS)}"
        first = exc.errors()[0]
        detail = f"{'.'.join(str(x) for x in first['loc']) or 'config'}: {first['msg']}"
        raise bad_value("from_config", "cfg", cfg, f"{what} ({detail})") from None


def from_config(cfg: Any, *, allow: Any = (), trusted: bool = False) -> Any:
    """Rebuild a pattern or flow from ``to_config()``'s output (a model, a dict or JSON).

    Only code under fsmchat's own modules and the ``allow`` prefixes is imported (``fsmchat.trust``);
    ``trusted=True`` loads any reference, file paths included. A refused reference raises
    ``UntrustedReference`` before anything of it is imported."""
    trust = Trust.of(allow, trusted)
    spec = parse_config(cfg)
    if spec.version != CONFIG_VERSION:
        raise ValueError(f"config version {spec.version} is not supported (this fsmchat reads {CONFIG_VERSION})")
    return _Reader(trust).pattern(spec)


class _Reader:
    """Rebuilds a pattern from its spec, loading every reference through the caller's ``Trust``."""

    def __init__(self, trust: Trust):
        self.trust = trust

    def fn(self, ref: str | None, what: str) -> Any:
        return None if ref is None else self.trust.callable(ref, what)

    def pattern(self, spec: Any) -> Any:
        # every reference is checked before any is imported: a refusal leaves nothing half-loaded
        if isinstance(spec, FactorySpec):
            if not spec.factory:
                raise ValueError("a factory config needs factory='module:attr'")
            self.trust.check(spec.factory, "factory")
        for ref, what in references(spec):
            self.trust.check(ref, what)
        for m in spec.models:
            self.model(m)
        if isinstance(spec, FactorySpec):
            return self.trust.pattern(spec.factory, "factory")
        pattern = self.build(spec)
        if spec.interrupt_before or spec.interrupt_after:
            pattern._set_interrupts(spec.interrupt_before, spec.interrupt_after)
        if spec.limits is not None:
            pattern.with_limits(spec.limits)
        pattern.factory = spec.factory
        return pattern

    def cls(self, spec: Any, default: type) -> Any:
        return self.trust.subclass(spec.pattern_class, "pattern_class", default) if spec.pattern_class else default

    def build(self, spec: Any) -> Any:
        from .flow.flow import AgentFlow
        from .patterns.debate import OneOnOneDebate
        from .patterns.group_chat import GroupChat
        from .patterns.panel import ExpertPanelDiscussion
        from .patterns.round_robin import RoundRobinSwarm

        if isinstance(spec, GroupChatSpec):
            return self.cls(spec, GroupChat)(
                name=spec.name, description=spec.description, agents=[self.participant(a) for a in spec.agents],
                max_loops=spec.max_loops, threshold=spec.threshold, recency_penalty=spec.recency_penalty,
                recency_window=spec.recency_window, idle_timeout=spec.idle_timeout, output_type=spec.output_type,
                auto_equip=spec.auto_equip, verbose=spec.verbose, context_window=spec.context_window)
        if isinstance(spec, RoundRobinSpec):
            return self.cls(spec, RoundRobinSwarm)(
                name=spec.name, description=spec.description, agents=[self.participant(a) for a in spec.agents],
                verbose=spec.verbose, max_loops=spec.max_loops, output_type=spec.output_type)
        if isinstance(spec, DebateSpec):
            return self.cls(spec, OneOnOneDebate)(
                max_loops=spec.max_loops, agents=[self.participant(a) for a in spec.agents], img=spec.img,
                output_type=spec.output_type, send_intros=spec.send_intros, verbose=spec.verbose)
        if isinstance(spec, PanelSpec):
            return self.cls(spec, ExpertPanelDiscussion)(
                max_rounds=spec.max_rounds, agents=[self.participant(a) for a in spec.agents],
                moderator=self.participant(spec.moderator), output_type=spec.output_type, verbose=spec.verbose)
        assert isinstance(spec, FlowSpec)
        return self.cls(spec, AgentFlow)(
            steps=[self.step(s) for s in spec.steps], variables=dict(spec.variables), name=spec.name,
            agents=[self.agent(a) for a in spec.agents] if spec.agents is not None else None, verbose=spec.verbose,
            memory=spec.memory, output_type=spec.output_type)

    def agent(self, spec: AgentSpec) -> Any:
        from .speakers.agent import Agent

        cls = self.trust.subclass(spec.agent_class, f"agent {spec.name!r} agent_class", Agent) \
            if spec.agent_class else Agent
        return cls(spec.name, system_prompt=spec.system_prompt, model=spec.model, tools=spec.tools,
                   tool_mode=spec.tool_mode, timeout=spec.timeout, num_retries=spec.num_retries,
                   max_loops=spec.max_loops, persistent_memory=spec.persistent_memory, output_type=spec.output_type,
                   **spec.litellm)

    def participant(self, spec: Any) -> Any:
        from .speakers.agent import CallableSpeaker
        from .speakers.human import Human

        if isinstance(spec, AgentSpec):
            return self.agent(spec)
        if isinstance(spec, HumanSpec):
            return Human(spec.name, answers=spec.answers, description=spec.description)
        fn = self.trust.callable(spec.ref, "participant")
        return CallableSpeaker(fn, spec.name) if spec.name else fn

    def task(self, spec: TaskSpec) -> Any:
        from .flow.steps import Task

        return Task(handler=self.fn(spec.handler, f"Task {spec.name!r} handler"),
                    agent=self.agent(spec.agent) if spec.agent is not None else None, name=spec.name,
                    action=spec.action, on_error=spec.on_error, max_retries=spec.max_retries,
                    should_run=self.fn(spec.should_run, f"Task {spec.name!r} should_run"),
                    retry_delay=spec.retry_delay, post=spec.post, save_as=spec.save_as, append_to=spec.append_to,
                    person=self.participant(spec.person) if spec.person is not None else None)

    def step(self, spec: Any) -> Any:
        from .flow.steps import Discussion, if_, loop, parallel, repeat, route

        steps = lambda specs: [self.step(s) for s in specs]  # noqa: E731
        if isinstance(spec, (AgentSpec, CallableSpec, HumanSpec)):
            return self.participant(spec)
        if isinstance(spec, TaskSpec):
            return self.task(spec)
        if isinstance(spec, DiscussionSpec):
            members = [self.task(a) if isinstance(a, TaskSpec) else self.participant(a) for a in spec.agents]
            return Discussion(members, rounds=spec.rounds, name=spec.name,
                              until=self.fn(spec.until, f"Discussion {spec.name!r} until"),
                              select=self.fn(spec.select, f"Discussion {spec.name!r} select"))
        if isinstance(spec, LoopSpec):
            return loop(steps=steps(spec.steps), over=spec.over, var_name=spec.var_name, parallel=spec.parallel,
                        name=spec.name, max_items=spec.max_items)
        if isinstance(spec, ParallelSpec):
            return parallel(steps(spec.steps), name=spec.name, max_concurrency=spec.max_concurrency)
        if isinstance(spec, RouteSpec):
            return route({k: steps(v) for k, v in spec.routes.items()}, default=steps(spec.default) or None,
                         name=spec.name, on=spec.on)
        if isinstance(spec, IfSpec):
            cond = spec.expression if spec.expression is not None else \
                self.trust.callable(spec.condition or "", f"if_ {spec.name!r} condition")
            return if_(cond, steps(spec.then_steps), steps(spec.else_steps) or None, name=spec.name)
        assert isinstance(spec, RepeatSpec)
        until = spec.until_expression if spec.until_expression is not None else \
            self.fn(spec.until, f"repeat {spec.name!r} until")
        return repeat(steps(spec.steps), until=until, max_iterations=spec.max_iterations, name=spec.name)

    def item(self, s: ScriptItemSpec, what: str) -> Any:
        from .models import Bid
        from .testing import Delay, Empty, Fail, ToolCall

        if s.kind == "text":
            return s.text or ""
        if s.kind == "bid":
            return Bid(s.score or 0.0, s.message or "")
        if s.kind == "tool_call":
            return ToolCall(s.name or "", s.arguments)
        if s.kind == "fail":
            return Fail(s.status or 500, s.message or "scripted failure", s.retry_after)
        if s.kind == "delay":
            return Delay(s.seconds or 0.0, self.item(s.then, what) if s.then is not None else "")
        if s.kind == "empty":
            return Empty()
        return self.trust.callable(s.ref or "", what)

    def model(self, spec: ScriptedModelSpec) -> Any:
        """The model for ``spec`` under its id: the live instance when it is the same model, else a new one."""
        from .testing import FunctionModel, ScriptedModel, _Provider

        live = _Provider._instances.get(spec.id)
        if live is not None and scripted_model_spec(live) == spec:
            return live
        what = f"scripted model {spec.id!r}"
        scripts = {agent: [self.item(x, f"{what} script of {agent!r}") for x in items]
                   for agent, items in spec.scripts.items()}
        fn = self.fn(spec.fn, f"{what} fn")
        if spec.kind == "function" and fn is not None and not scripts:
            return FunctionModel(fn, id=spec.id)
        return ScriptedModel(scripts, fn=fn, id=spec.id)


def build_scripted_model(spec: ScriptedModelSpec, *, allow: Any = (), trusted: bool = False) -> Any:
    """A ``ScriptedModel``/``FunctionModel`` from its config form (references checked as in ``from_config``)."""
    trust = Trust.of(allow, trusted, owner="ScriptedModel.from_config")
    for ref, what in _model_refs(spec):
        trust.check(ref, what)
    return _Reader(trust).model(spec)


def _model_refs(spec: ScriptedModelSpec) -> Iterator[tuple[str, str]]:
    what = f"scripted model {spec.id!r}"
    if spec.fn:
        yield spec.fn, f"{what} fn"
    for agent, items in spec.scripts.items():
        for x in items:
            while x is not None:
                if x.ref:
                    yield x.ref, f"{what} script of {agent!r}"
                x = x.then


_REF_FIELDS = ("ref", "handler", "should_run", "until", "select", "condition", "agent_class", "pattern_class", "fn")


_OWNERS = {"agent": "agent", "task": "Task", "discussion": "Discussion", "if": "if_", "repeat": "repeat"}


def _ref_label(spec: Any, field: str) -> str:
    """Where a reference is, in the words loading uses: ``participant``, ``Task 'h' handler``..."""
    if isinstance(spec, CallableSpec):
        return "participant"
    owner = _OWNERS.get(getattr(spec, "kind", ""))
    return f"{owner} {spec.name!r} {field}" if owner else field


def references(spec: Any) -> Iterator[tuple[str, str]]:
    """Every import reference a config loads, with where it is (a pattern's stored ``factory`` is
    only loaded by ``resume``, which checks it then; a factory config's is checked by ``from_config``)."""
    if isinstance(spec, ScriptedModelSpec):
        yield from _model_refs(spec)
    elif isinstance(spec, BaseModel):
        for field in type(spec).model_fields:
            value = getattr(spec, field)
            if field in _REF_FIELDS and isinstance(value, str) and value:
                yield value, _ref_label(spec, field)
            else:
                yield from references(value)
    elif isinstance(spec, dict):
        for v in spec.values():
            yield from references(v)
    elif isinstance(spec, list):
        for v in spec:
            yield from references(v)


def config_digest(cfg: Any) -> str:
    """A stable hash of a config; scripted model ids (a per-process counter) are replaced by their
    position, so the same batch gets the same digest in a new process."""
    spec = parse_config(cfg)
    text = spec.model_dump_json()
    for i, m in enumerate(spec.models):
        text = re.sub(rf"(?<=[\"/]){re.escape(m.id)}(?=\")", f"model-{i}", text)
    return hashlib.sha256(text.encode()).hexdigest()
