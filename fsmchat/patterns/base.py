"""Layer 15, patterns: ``Pattern``, what every pattern has in common, written once.

A pattern is configuration of the engine. It is declared by one pydantic model
(``fsmchat.patterns.declare``: ``class GroupChat(Pattern, kind="group_chat",
config=GroupChatConfig)``), compiles a ``StateGraph`` whose actions are small functions over its
typed context (``fsmchat.patterns.context``: ``ChatContext``, ``PatternState``), may build that
graph from the shared blocks (``fsmchat.patterns.blocks``), and says how many calls each speaker
can be asked for. It runs nothing itself: the run API (``run``, ``arun``, ``execute``,
``aexecute``, ``resume``, ``run_batch``, ``stream``...) is written once on the run object,
``PatternRun`` (``fsmchat.patterns.runner``: the argument checks, start, resume, rebuild,
fingerprint, lease), as ``GraphRun`` is one run of a graph one level down; each of its spellings
is a ``RunMethod`` attribute here, so ``pattern.run(task)`` is ``PatternRun(pattern).run(task)``.

The names pattern authors import from this module (``PatternConfig``, ``ChatContext``, ``bind``,
``speaker_states``...) are re-exported from the modules that define them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Sequence

from pydantic import ValidationError

from ..config.convert import PatternSpec, pattern_spec, to_config
from ..errors import invalid_config
from ..graph.state_graph import StateGraph
from ..limits import Limits, add_limit_edges
from ..models import RunResult, StopReason, format_output, shorten
from ..speakers.compaction import add_compaction, check_drawn, check_limits, compaction_calls
from ..speakers.context import LastMessages, Summarize, counted_usage, memory_summarize, policy_of, scoped
from ..speakers.images import image_part
from ..speakers.llm import shown_events
from ..speakers.tool_loop import APPROVE_ALL, add_tool_loop
from .blocks import PERSON_NOTE, bind, people_in, speaker_states
from .context import ChatContext, PatternState
from .declare import (ConfigField, OneParticipant, OutputType, Participants, PatternConfig, bind_arguments,
                      constructor_signature)
from .interrupts import WaitPoint, add_interrupts, chat_point, check_names, check_targets
from .runner import FailedRuns, PatternRun, RunMethod, set_pending

__all__ = ["PERSON_NOTE", "ChatContext", "ConfigField", "FailedRuns", "OneParticipant", "OutputType", "Participants",
           "Pattern", "PatternConfig", "PatternRun", "PatternState", "bind", "check_image", "check_task",
           "constructor_signature", "people_in", "set_pending", "speaker_states"]


def check_task(task: Any, what: str) -> str:
    if not isinstance(task, str) or not task.strip():
        raise ValueError(f"{what}.run(task): task must be a non-empty string, got {task!r}")
    return task


def check_image(img: str | None, what: str) -> list[str]:
    """``img`` as the run's image list, refused before any call when it cannot be sent."""
    if img is None:
        return []
    if not isinstance(img, str) or not img:
        raise ValueError(f"{what}: img must be a URL, a data URL or a local image path, got {img!r}")
    try:
        image_part(img)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    return [img]


class Pattern(ABC):
    """Base of every conversation pattern: its declaration, and the run API over it.

    A pattern declares its one model and its kind in its class line, ``class GroupChat(Pattern,
    kind="group_chat", config=GroupChatConfig)``: the constructor takes the model's fields (in
    order, or by name) plus ``interrupt_before``/``interrupt_after``, the fields become attributes,
    and the kind's config form (``GroupChat.Spec``) is derived and registered for ``to_config`` /
    ``from_config``. A subclass without ``kind=`` is the same kind (it travels as ``pattern_class``).

    A pattern supplies three methods, all abstract: ``_compile`` (its ``StateGraph``), ``_context``
    (a fresh context per run) and ``_calls_by_speaker`` (the worst case per speaker: ``max_calls``,
    budgets and a checkpoint's fingerprint read it). The base class does the rest: it sets the
    run's roster (``ctx.stats.roster``: every speaker of ``_calls_by_speaker``, whose credentials
    are checked before the run's first request) when ``_context`` leaves it unset, and each run is
    a ``fsmchat.patterns.runner.PatternRun`` (the argument checks, start, resume, rebuild,
    fingerprint, lease); ``run``, ``execute``, ``stream``, ``run_batch``, checkpoints, limits and
    people in the loop come with this class, as attributes that hand the call to a ``PatternRun``.
    A pattern that checks its roster when given overrides ``__init__`` (after ``super().__init__``).

    Args:
        *args: The config model's fields by position.
        **kwargs: The config model's fields by name (an unknown name is a ``ConfigTypeError``).
        interrupt_before: States where the run stops for a person before entering them.
        interrupt_after: States where the run stops for a person after leaving them.

    Examples:
        >>> from dataclasses import dataclass, field
        >>> from pydantic import Field
        >>> from fsmchat import ChatContext, Pattern, StateGraph
        >>> from fsmchat.patterns import Participants, PatternConfig
        >>> from fsmchat.speakers import check_roster
        >>> class RelayConfig(PatternConfig):
        ...     agents: Participants = Field(None, title="agent")
        ...     rounds: int = Field(2, ge=1)
        >>> @dataclass
        ... class RelayContext(ChatContext):
        ...     config: RelayConfig = field(kw_only=True)
        >>> async def relay(ctx: RelayContext) -> None:
        ...     '''every agent adds a line, in order'''
        ...     for s in ctx.speakers:
        ...         ctx.post(s.name, await ctx.ask(s, "Add one line."))
        ...     ctx.turn += 1
        >>> def rounds_left(ctx: RelayContext) -> bool:
        ...     return ctx.turn < ctx.config.rounds
        >>> class Relay(Pattern, config=RelayConfig):
        ...     def _compile(self):
        ...         g = StateGraph("relay", context=RelayContext)
        ...         g.state("seed", RelayContext.seed).state("relay", relay).final("stop", reason="rounds")
        ...         return g.edge("seed", "relay").edge("relay", "relay", when=rounds_left).edge("relay", "stop")
        ...     def _context(self, task):
        ...         return RelayContext(task, check_roster(self.config.agents, "Relay"), config=self.config)
        ...     def _calls_by_speaker(self):
        ...         return [(a, self.config.rounds) for a in self.config.agents]
        >>> def poet(turn):
        ...     return f"Line {len(turn.transcript)}."
        >>> relay_chat = Relay([poet], rounds=3)
        >>> result = relay_chat.execute("Write a poem.")
        >>> result.stop_reason, result.path, relay_chat.run("Write a poem.")
        ('rounds', ['seed', 'relay', 'relay', 'relay', 'stop'], 'Line 3.')
        >>> relay_chat.rounds = 0
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Relay: rounds=0 is invalid: input should be greater than or equal to 1
    """

    Config: ClassVar[type[PatternConfig] | None] = None  # the one model (None: a pattern with no options)
    Spec: ClassVar[type[PatternSpec] | None] = None  # its config form, derived from Config
    kind: ClassVar[str | None] = None  # the kind it is registered under
    config: Any
    output_type: str = "final"
    verbose: bool = False
    name: str = "pattern"
    limits: Limits | None = None
    factory: str | None = None  # "module:attr" that rebuilds this pattern (stored with checkpoints)
    interrupt_before: tuple[str, ...] = ()  # states a person approves entering (wait states drawn before them)
    interrupt_after: tuple[str, ...] = ()  # states a person reviews once left
    approve_tools: bool = False  # interrupt_before=["tools"]: every tool call waits for a person
    # its speakers answer from private memories (``ChatContext.ask_private``): no Summarize (``_check_context``)
    speaks_from_memory: ClassVar[bool] = False
    _graph: StateGraph | None = None
    _compiled_for: PatternConfig | None = None  # the config ``_graph`` was compiled from (a field set makes a new one)

    # ---- the run API: written once, on the run object (``pattern.run`` is ``PatternRun(pattern).run``) ----
    run = RunMethod(PatternRun.run)
    """Run once (sync) and return the output per ``output_type`` (``PatternRun.run``)."""
    arun = RunMethod(PatternRun.arun)
    """Run once in async code and return the output (``PatternRun.arun``)."""
    execute = RunMethod(PatternRun.execute)
    """Run once (sync) and return the ``RunResult`` (``PatternRun.execute``)."""
    aexecute = RunMethod(PatternRun.aexecute)
    """Run once in async code and return the ``RunResult``; the run's keywords (``PatternRun.aexecute``)."""
    resume = RunMethod(PatternRun.resume)
    """Continue a checkpointed run (sync; ``input``: a waiting run's answer) (``PatternRun.resume``)."""
    aresume = RunMethod(PatternRun.aresume)
    """Continue a checkpointed run in async code (``PatternRun.aresume``)."""
    stream = RunMethod(PatternRun.stream)
    """The run's events and messages as they happen, then the ``RunResult`` (``PatternRun.stream``)."""
    astream = RunMethod(PatternRun.astream)
    """``stream(task)`` as an async iterator (``PatternRun.astream``)."""
    run_batch = RunMethod(PatternRun.run_batch)
    """One independent run per task, concurrently; results in task order (``PatternRun.run_batch``)."""
    arun_batch = RunMethod(PatternRun.arun_batch)
    """``run_batch`` in async code (``PatternRun.arun_batch``)."""
    preflight = RunMethod(PatternRun.preflight)
    """Refuse a batch before any model call (``PatternRun.preflight``)."""
    check_task = RunMethod(PatternRun.check_task)
    """Refuse a task before a run starts, with the error a run of it would raise (``PatternRun.check_task``)."""
    max_calls = RunMethod(PatternRun.max_calls)
    """The most model calls one run can make, worst case (``PatternRun.max_calls``)."""

    # ---- what a pattern supplies ----
    @abstractmethod
    def _compile(self) -> StateGraph:
        """The pattern's graph (validated by ``graph``)."""

    @abstractmethod
    def _context(self, task: str) -> Any:
        """A fresh context for one run of ``task`` (its roster is set by ``new_context``)."""

    @abstractmethod
    def _calls_by_speaker(self) -> list[tuple[Any, int]]:
        """(speaker, the most calls it can be asked for in one run) for each participant, in order."""

    def _validate(self) -> None:
        """Checks of the whole pattern once its model is valid (a pattern whose roster may be set
        later checks it here when given, and again when it runs)."""

    def _check_run(self, task: Any) -> None:
        """Run-time checks of the task and the roster (before any model call)."""
        check_task(task, type(self).__name__)

    def check(self, task: Any, *, checkpointed: bool | None = None) -> None:
        """Refuse what this declaration cannot run, before any model call (the run object calls it).

        Args:
            task: The task a run would start from (its kind; a flow's variables).
            checkpointed: Whether the run is checkpointed; None checks the task alone (a batch's
                ``preflight``, ``check_task``), else the context policies too and, when True, what
                a checkpoint needs (a flow's variables must be JSON-able).

        Examples:
            >>> from fsmchat import RoundRobinSwarm
            >>> def echo(turn):
            ...     return "ok"
            >>> RoundRobinSwarm(agents=[echo]).check("")
            Traceback (most recent call last):
            ...
            ValueError: RoundRobinSwarm.run(task): task must be a non-empty string, got ''
        """
        self._check_run(task)
        if checkpointed is not None:
            self._check_context()
        if checkpointed:
            self._check_checkpointed()

    # ---- the declaration, as the run (and a flow's PatternStep) reads it ----
    def __init_subclass__(cls, kind: str | None = None, config: type[PatternConfig] | None = None,
                          **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if config is not None:
            cls.Config = config
            for name in config.model_fields:
                if name not in cls.__dict__:
                    setattr(cls, name, ConfigField(name))
            setattr(cls, "__signature__", constructor_signature(config))  # what inspect.signature(cls) shows
        if kind is not None:
            if cls.Config is None:
                raise TypeError(f"{cls.__name__}: kind={kind!r} needs config= (the pattern's model)")
            cls.kind = kind
            cls.Spec = pattern_spec(cls, kind)

    def __init__(self, *args: Any, interrupt_before: Sequence[str] | None = None,
                 interrupt_after: Sequence[str] | None = None, **kwargs: Any) -> None:
        """The model's fields, in order or by name (see the class's signature); ``interrupt_before``/
        ``interrupt_after`` name states where the run stops for a person (it then needs a checkpoint)."""
        owner, model = type(self).__name__, type(self).Config
        if model is None:
            if args or kwargs:
                raise TypeError(f"{owner}() takes no arguments: it declares no config model")
        else:
            self.config = model.make(owner, **bind_arguments(owner, list(model.model_fields), args, kwargs))
        self._validate()
        self.set_interrupts(interrupt_before, interrupt_after)

    def new_context(self, task: str) -> Any:
        """A fresh context for one run of ``task``, which is checked first as ``run`` checks it; its
        roster is every speaker of ``calls_by_speaker`` unless ``_context`` set one."""
        self._check_run(task)
        ctx = self._context(task)
        if ctx.stats.roster is None:  # the speakers whose credentials the run's first request checks
            ctx.stats.roster = list({id(s): s for s, _n in self._calls_by_speaker()}.values())
        return ctx

    def output_of(self, ctx: Any) -> Any:
        """The output of the run whose context is ``ctx``, formatted per ``output_type``."""
        return format_output(ctx.transcript.messages, self.output_type)

    def calls_by_speaker(self) -> list[tuple[Any, int]]:
        """(speaker, the most calls it can be asked for in one run) for each participant, in order,
        then each summary writer of a ``Summarize`` policy with its most compactions."""
        calls = self._calls_by_speaker()
        try:
            states = self._speaking_states(self.graph)
        except (ValueError, TypeError):  # no roster yet: no speaking state, so no compaction
            return calls
        return calls + compaction_calls(states, calls, self.context_policy)

    def fill_result(self, result: RunResult) -> RunResult:
        """Fill a run's ``result`` from its context when the run ends: transcript, calls, usage,
        events and the output per ``output_type`` (a flow fills its own dict)."""
        ctx: ChatContext = result.context
        if ctx.stats.limit_hit and result.stop_reason == StopReason.BUDGET:
            ctx.events.append({"event": "budget", "limit": ctx.stats.limit_hit})
        result.transcript = ctx.transcript.messages
        result.calls = ctx.stats.calls
        result.usage = counted_usage(dict(ctx.stats.usage), ctx.events)
        result.events = shown_events(ctx.events, ctx.stats)
        result.output = self.output_of(ctx)
        return result

    @property
    def graph(self) -> StateGraph:
        """The pattern's validated ``StateGraph`` (compiled on first use, again after a change):
        the graph that runs, renders and bounds the run."""
        config = getattr(self, "config", None)
        if self._graph is None or self._compiled_for is not config:
            token = APPROVE_ALL.set(self.approve_tools)  # a flow's steps draw their tool loops as it compiles
            try:
                g = self._compile()
            finally:
                APPROVE_ALL.reset(token)
            policy = self.context_policy
            for state, speakers in self._speaking_states(g):
                add_tool_loop(g, state, speakers, approve_all=self.approve_tools)
                add_compaction(g, state, speakers, policy)
                s = g.states[state]
                if isinstance(policy, LastMessages) and s.action is not None:  # its calls read it (``context.fit``)
                    s.action = scoped(s.action, policy)
            if self.interrupt_before or self.interrupt_after:
                add_interrupts(g, self.interrupt_before, self.interrupt_after, self._wait_point, type(self).__name__)
            if self.limits is not None:
                add_limit_edges(g, self.limits)
            g.flatten()  # validated (once), and its flat form made for the engine and ``waits_for_people``
            self._graph, self._compiled_for = g, config
        return self._graph

    def _speaking_states(self, g: StateGraph) -> list[tuple[str, list[Any]]]:
        """(state, who may speak in it) for each state of ``g`` where an agent produces a message:
        each gets its tool loop drawn when a speaker has tools (``add_tool_loop``) and its
        compaction when a speaker follows ``Summarize`` (``add_compaction``)."""
        return []

    @property
    def context_policy(self) -> Any:
        """The pattern's context policy (its config's ``context``; None: each agent's own, else
        ``"full"``): ``fsmchat.speakers.context``."""
        return getattr(getattr(self, "config", None), "context", None)

    # ---- people in the loop ----
    def set_interrupts(self, before: Any, after: Any) -> None:
        """Store ``interrupt_before``/``interrupt_after`` (state names), refusing unknown names now
        when the graph can be built (a pattern still missing its roster is checked when it runs).
        ``"tools"`` in ``interrupt_before`` makes every tool call wait for a person's approval."""
        owner = type(self).__name__
        before = check_names(before, "interrupt_before", owner)
        self.approve_tools = "tools" in before
        self.interrupt_before = tuple(n for n in before if n != "tools")
        self.interrupt_after = check_names(after, "interrupt_after", owner)
        self._graph = None
        if self.interrupt_before or self.interrupt_after:
            try:
                base = self._compile()
            except (ValueError, TypeError):
                return
            check_targets(base, self.interrupt_before, self.interrupt_after, owner)

    def _wait_point(self, where: str, qualified: str, level: StateGraph) -> WaitPoint:
        """The wait state for ``interrupt_before``/``interrupt_after`` of ``qualified`` (a pattern
        may give a state its own point, as GroupChat does for ``post``)."""
        return chat_point(where, qualified, level)

    @property
    def waits_for_people(self) -> list[str]:
        """The states where a run may stop for a person (interrupts, Human participants)."""
        return [s.name for s in self.graph.flatten().states.values() if s.waits]

    def _check_context(self) -> None:
        """A ``Summarize`` speaker's model must have a known input limit, and a pattern whose
        speakers answer from private memories (``speaks_from_memory``) takes no ``Summarize``:
        refused before any call."""
        try:
            states = self._speaking_states(self.graph)
        except (ValueError, TypeError):
            return
        if self.speaks_from_memory:
            for _state, speakers in states:
                for s in speakers:
                    if isinstance(policy_of(s, self.context_policy), Summarize):
                        raise memory_summarize(type(self).__name__, f"agent {s.name!r}'s context={s.context!r}")
        check_limits(states, self.context_policy, type(self).__name__)
        try:
            calls = self._calls_by_speaker()
        except TypeError:  # a pattern that reports no bound
            return
        check_drawn(states, calls, self.context_policy, type(self).__name__)

    def _check_checkpointed(self) -> None:
        """Checks of a checkpointed run, before any model call (a flow's variables must be JSON-able)."""

    # ---- display ----
    def _repr_fields(self) -> list[str]:
        """What ``repr`` shows between the parentheses (a pattern adds its own)."""
        try:
            names = list(dict.fromkeys(getattr(s, "name", type(s).__name__) for s, _n in self._calls_by_speaker()))
        except TypeError:
            names = []
        shown = names[:8] + ([f"+{len(names) - 8} more"] if len(names) > 8 else [])
        return [f"speakers={shown!r}"] if names else []

    def __repr__(self) -> str:
        parts = [f"name={shorten(str(self.name), 40)!r}", *self._repr_fields()]
        try:
            g = self.graph
            parts.append(f"graph={g.name!r}: {len(g.flatten().states)} states")
        except Exception as exc:  # a repr never raises: say why there is no graph
            parts.append(f"graph=<{type(exc).__name__}>")
        if self.limits is not None:
            parts.append("limits=" + ", ".join(f"{k}={v}" for k, v in
                                                self.limits.model_dump(exclude_defaults=True).items()))
        return f"{type(self).__name__}({', '.join(parts)})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """Jupyter shows a pattern as its graph (SVG; Mermaid text when Graphviz is missing)."""
        return {**self.graph._repr_mimebundle_(include, exclude), "text/plain": repr(self)}

    def with_limits(self, limits: Limits | None = None, **kw: Any) -> "Pattern":
        """Set budgets/deadline (``max_tokens``, ``max_cost_usd``, ``max_model_calls``,
        ``max_tool_calls``, ``deadline_s``, ``price_per_1k_tokens``, ``refuse_over_bound``); the graph gains the
        ``over_budget``/``past_deadline`` exits. Returns the pattern."""
        try:
            self.limits = limits if limits is not None else Limits(**kw)
        except ValidationError as exc:
            raise invalid_config(f"{type(self).__name__}.with_limits", exc) from None
        self._graph = None
        return self

    def to_config(self) -> Any:
        """This pattern as a JSON-able pydantic model (``fsmchat.config``); ``from_config`` rebuilds it.
        Secrets are left out; a lambda or closure anywhere raises ``TypeError``."""
        return to_config(self)
