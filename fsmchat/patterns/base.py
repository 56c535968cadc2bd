"""Layer 15, patterns: ``Pattern``, what every pattern has in common, written once.

A pattern is configuration of the engine. It is declared by one pydantic model
(``fsmchat.patterns.declare``: ``class GroupChat(Pattern, kind="group_chat",
config=GroupChatConfig)``), compiles a ``StateGraph`` whose actions are small functions over its
typed context (``fsmchat.patterns.context``: ``ChatContext``, ``PatternState``), may build that
graph from the shared blocks (``fsmchat.patterns.blocks``), and says how many calls each speaker
can be asked for. Each run is a ``PatternRun`` (``fsmchat.patterns.runner``: start, resume,
rebuild, fingerprint, lease), as ``GraphRun`` is one run of a graph one level down. The run API
(``run``, ``arun``, ``execute``, ``aexecute``, ``resume``, ``run_batch``, ``stream``) is here.

The names pattern authors import from this module (``PatternConfig``, ``ChatContext``, ``bind``,
``speaker_states``...) are re-exported from the modules that define them.
"""
from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, AsyncIterator, Callable, ClassVar, Coroutine, Sequence, TypeVar

from pydantic import ValidationError

from ..checks import RUN_KEYWORDS, check_batch, check_hooks, check_keywords, check_run_id, check_token_hooks
from ..config.convert import PatternSpec, pattern_spec, to_config
from ..engine import batch_collector, run_sync
from ..errors import ConfigTypeError, attach_result, invalid_config
from ..graph.state_graph import StateGraph
from ..limits import Limits, add_limit_edges
from ..models import Message, RunResult, StopReason, TraceEvent, format_output, safe_text, shorten
from .progress import ProgressBar, progress_wanted
from ..speakers.compaction import add_compaction, check_drawn, check_limits, compaction_calls
from ..speakers.context import LastMessages, Summarize, counted_usage, memory_summarize, policy_of, scoped
from ..speakers.human import Human, NeedsCheckpoint
from ..speakers.images import image_part
from ..speakers.llm import shown_events
from ..speakers.tool_loop import APPROVE_ALL, add_tool_loop
from ..speakers.tools import calls_per_turn
from ..store.checkpoint import Checkpointer
from ..store.checkpoint import DEFAULT_COMMIT, check_checkpoint, check_commit, check_resume
from .blocks import PERSON_NOTE, bind, people_in, speaker_states
from .context import ChatContext, PatternState
from .declare import (ConfigField, OneParticipant, OutputType, Participants, PatternConfig, bind_arguments,
                      constructor_signature)
from .interrupts import WaitPoint, add_interrupts, chat_point, check_names, check_targets
from .runner import FailedRuns, PatternRun, fingerprint, set_pending
from .streaming import RunStream

__all__ = ["PERSON_NOTE", "ChatContext", "ConfigField", "FailedRuns", "OneParticipant", "OutputType", "Participants",
           "Pattern", "PatternConfig", "PatternRun", "PatternState", "bind", "check_image", "check_task",
           "constructor_signature", "people_in", "set_pending", "speaker_states"]

T = TypeVar("T")


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
    a ``fsmchat.patterns.runner.PatternRun`` (start, resume, rebuild, fingerprint, lease);
    ``run``, ``execute``, ``stream``, ``run_batch``, checkpoints, limits and people in the loop
    come with this class.

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
    _last_partial: RunResult | None = None  # a cancelled run's result, kept for the KeyboardInterrupt

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
        """Run-time checks (before any model call)."""
        check_task(task, type(self).__name__)

    def _output_rows(self, ctx: ChatContext) -> list[Message]:
        return ctx.transcript.messages

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
        return format_output(self._output_rows(ctx), self.output_type)

    def calls_by_speaker(self) -> list[tuple[Any, int]]:
        """(speaker, the most calls it can be asked for in one run) for each participant, in order,
        then each summary writer of a ``Summarize`` policy with its most compactions."""
        calls = self._calls_by_speaker()
        return calls + self._compaction_calls(calls)

    def _compaction_calls(self, calls: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        """(summary writer, most compactions) of the speaking states with a compaction."""
        try:
            states = self._speaking_states(self.graph)
        except (ValueError, TypeError):  # no roster yet: no speaking state
            return []
        return compaction_calls(states, calls, self.context_policy)

    def fingerprint(self) -> dict[str, Any]:
        """What a checkpoint stores to recognise this pattern on resume: the kind, the graph's
        structure (a hash of its states and edges, branches included), the speakers and their
        models, the limits and the output type."""
        return fingerprint(self)

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
        if self._graph is None:
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
            self._graph = g.validate()
        return self._graph

    def forget_graph(self) -> None:
        """Drop the compiled graph (a config field changed): ``graph`` compiles it again on next use."""
        self._graph = None

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

    def _check_waits(self, checkpoint: Checkpointer | None) -> None:
        """A run that may wait for a person must be checkpointed: refused now, before any call."""
        if checkpoint is None:
            waits = self.waits_for_people
            if waits:
                name = type(self).__name__
                raise NeedsCheckpoint(f"{name}: checkpoint=None is invalid: this {name} waits for a person at "
                                      f"{', '.join(waits)} (the run stops there until resumed with their answer), "
                                      "so it must be checkpointed: pass checkpoint=SqliteCheckpointer('runs.db') "
                                      "(MemoryCheckpointer() in tests, where fsmchat.testing.answer() answers)")

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

    def max_calls(self, *, requests: bool = False) -> int:
        """The most model calls one run can make (worst case, from the pattern's limits); with
        ``requests=True`` the most HTTP requests, each model-backed agent's own ``num_retries``
        included (``max_model_calls`` caps requests). A turn of an agent with tools counts
        ``1 + max_tool_rounds`` calls (``fsmchat.speakers.tools.calls_per_turn``)."""
        return sum(n * calls_per_turn(s) * (1 + (getattr(s, "num_retries", 0) if requests and hasattr(s, "model") else 0))
                   for s, n in self.calls_by_speaker() if not isinstance(s, Human))

    @property
    def _max_message_chars(self) -> int:
        return PatternRun(self).max_message_chars

    def _admit_task(self, task: str) -> tuple[str, int]:
        """The task as it enters the run (lone surrogates repaired, so it can be stored; how many),
        refused when longer than ``max_message_chars``: a message cap never cuts the user's own task."""
        task, repaired = safe_text(task)
        if len(task) > self._max_message_chars:
            raise ValueError(f"{type(self).__name__}.run(task): the task has {len(task)} characters, over "
                             f"max_message_chars={self._max_message_chars}; shorten it or raise the cap with "
                             f"with_limits(max_message_chars=...)")
        return task, repaired

    def check_task(self, task: Any) -> tuple[str, int]:
        """Refuse ``task`` before a run starts, with the error a run of it would raise.

        The checks ``aexecute`` makes of the task before anything runs (one code path): a task of
        the pattern's kind (a non-empty string; a flow's ``_check_run`` also checks its declared
        variables) and no longer than ``max_message_chars`` (a message cap never cuts the user's own
        task). ``fsmchat serve`` calls it before it accepts a run, so a refused task is 422, never
        a 202 whose run then fails.

        Args:
            task: The task a run would start from.

        Returns:
            (the task as it enters the run, with lone surrogates repaired so it can be stored; how
            many were repaired).

        Raises:
            ValueError: The task is empty, not a string (a flow's is a ``TypeError``), or longer
                than ``max_message_chars``.

        Examples:
            >>> from fsmchat import RoundRobinSwarm
            >>> def echo(turn):
            ...     return "ok"
            >>> swarm = RoundRobinSwarm(agents=[echo]).with_limits(max_message_chars=50)
            >>> swarm.check_task("Plan the launch.")
            ('Plan the launch.', 0)
            >>> swarm.check_task("x" * 60)
            Traceback (most recent call last):
            ...
            ValueError: RoundRobinSwarm.run(task): the task has 60 characters, over max_message_chars=50; shorten it or raise the cap with with_limits(max_message_chars=...)
        """
        self._check_run(task)
        return self._admit_task(task)

    def _check_limits(self) -> None:
        lim = self.limits
        if lim is not None and lim.refuse_over_bound and lim.max_model_calls is not None:
            worst = self.max_calls()
            if worst > lim.max_model_calls:
                raise ValueError(f"{type(self).__name__}: a run can make up to {worst} model calls, over "
                                 f"max_model_calls={lim.max_model_calls}; raise the budget or lower the limits "
                                 "(refuse_over_bound=True refuses such runs up front)")

    async def aexecute(self, task: str, *, observers: Sequence[Any] = (), on_message: Sequence[Any] = (),
                       checkpoint: Checkpointer | None = None, run_id: str | None = None,
                       on_start: Sequence[Any] = (), on_token: Any = None, commit: str = DEFAULT_COMMIT) -> RunResult:
        """Run once and return the ``RunResult`` (path, trace, stop reason, transcript, calls).
        With ``checkpoint=`` every step is committed under ``run_id`` (a new id if None); the run
        holds the id's lease meanwhile, so a concurrent run of the same id gets ``RunInProgress``.
        ``commit`` says how (``"turn"``: a step that posted nothing and only did work that can be
        done again rides along with the next step's commit, so a GroupChat turn is one commit;
        ``"step"``: every step is its own commit); it is kept with the run, so its resumes and forks
        commit the same way.
        ``observers`` get each ``TraceEvent``, ``on_message`` each posted ``Message``, ``on_start``
        the run's context before its first step (a live display reads ``ctx.stats`` from it),
        ``on_token`` (a callable or a list of them) each ``TokenDelta`` of a reply and each
        ``BidDelta`` of a GroupChat bid's message as the model writes it, and a ``StreamRetry`` when a
        shown stream is asked again (the replies and bids then stream)."""
        owner = type(self).__name__
        check_checkpoint(checkpoint, owner)
        check_commit(commit, owner, "checkpoint" if checkpoint is None else None)
        check_run_id(run_id, owner)
        observers, on_message, on_start = (check_hooks(observers, owner, "observers"),
                                           check_hooks(on_message, owner, "on_message"),
                                           check_hooks(on_start, owner, "on_start"))
        tokens = check_token_hooks(on_token, owner)
        task, repaired = self.check_task(task)
        self._check_waits(checkpoint)
        self._check_context()
        if checkpoint is not None:
            self._check_checkpointed()
        self._check_limits()
        run = PatternRun(self, checkpoint, run_id, on_cancel=self._keep_partial, on_token=tokens, commit=commit)
        return await run.start(task, repaired, observers, on_message, on_start)

    async def aresume(self, run_id: str, checkpoint: Checkpointer, *, input: Any = None,
                      observers: Sequence[Any] = (), on_message: Sequence[Any] = (),
                      on_start: Sequence[Any] = (), on_token: Any = None) -> RunResult:
        """Continue a checkpointed run from its last committed state; a finished run's result is
        rebuilt from the checkpoint without calling any model. A run waiting for a person
        (``stop_reason="interrupted"``) continues with ``input``, their answer (``Approve()``,
        ``Edit(...)``, ``Reject(reason)``, ``Say(text)`` or a plain str), checked against what its
        interrupt point allows (``result.pending.allowed``; ``InputNotAllowed`` otherwise); without
        ``input`` its waiting result is returned and nothing runs. Refused, before anything is
        written, when the run was checkpointed by another pattern (``CheckpointMismatch``), is
        running elsewhere (``RunInProgress``), or got ``input`` without waiting (``NotWaiting``)."""
        owner = f"{type(self).__name__}.resume"
        check_resume(run_id, checkpoint, owner)
        observers, on_message, on_start = (check_hooks(observers, owner, "observers"),
                                           check_hooks(on_message, owner, "on_message"),
                                           check_hooks(on_start, owner, "on_start"))
        tokens = check_token_hooks(on_token, owner)
        run = PatternRun(self, checkpoint, run_id, on_cancel=self._keep_partial, on_token=tokens)
        return await run.resume(input, observers, on_message, on_start)

    def resume(self, run_id: str, checkpoint: Checkpointer, *, input: Any = None) -> RunResult:
        """Synchronous ``aresume`` (``input``: a waiting run's answer)."""
        return self._sync(lambda: self.aresume(run_id, checkpoint, input=input))

    def _keep_partial(self, partial: RunResult) -> None:
        self._last_partial = partial

    def _sync(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``run_sync``, keeping the transcript so far on a Ctrl-C (KeyboardInterrupt)."""
        self._last_partial = None
        try:
            return run_sync(make)
        except KeyboardInterrupt as exc:
            if self._last_partial is not None:
                attach_result(exc, self._last_partial)
            raise

    def execute(self, task: str, **kw: Any) -> RunResult:
        """Run once (sync) and return the ``RunResult``; the keywords are ``aexecute``'s."""
        check_keywords(kw, RUN_KEYWORDS, f"{type(self).__name__}.execute")
        return self._sync(lambda: self.aexecute(task, **kw))

    async def arun(self, task: str, **kw: Any) -> Any:
        """Run once; return the output per ``output_type``. A failure is re-raised with the run's
        result (transcript so far) as ``exc.fsmchat_result``."""
        check_keywords(kw, RUN_KEYWORDS, f"{type(self).__name__}.arun")
        result = await self.aexecute(task, **kw)
        if result.error is not None:
            raise attach_result(result.error, result)
        return result.output

    def run(self, task: str, *args: Any, **kwargs: Any) -> Any:
        """Run once (sync); the keywords are ``aexecute``'s (``checkpoint=``, ``run_id=``, ...), checked
        like the constructor's (an unknown one is a ``ConfigTypeError``: ``chekpoint=`` gets "did you
        mean checkpoint?"). Positional arguments swarms forwards to each agent's ``run()`` have
        no meaning here and are ignored."""
        check_keywords(kwargs, RUN_KEYWORDS, f"{type(self).__name__}.run")
        return self._sync(lambda: self.arun(task, **kwargs))

    def preflight(self, tasks: Sequence[Any], *, credentials: bool = True) -> None:
        """Refuse a batch before any model call: each task (the checks ``run`` makes), the limits
        (a worst-case bound over ``max_model_calls``) and, with ``credentials``, the model keys the
        runs need (checked once, on the first task's context). ``fsmchat.patterns.distributed`` calls it."""
        for t in tasks:
            self._check_run(t)
        self._check_limits()
        if credentials and tasks:
            self.new_context(tasks[0]).stats.preflight()

    async def arun_batch(self, tasks: Sequence[str], max_concurrency: int = 16, *,
                         progress: bool | None = False) -> list[Any]:
        """``run_batch`` in async code (``progress``: as there, but off unless asked for)."""
        tasks = check_batch(tasks, max_concurrency, type(self).__name__)
        for t in tasks:
            self._check_run(t)
        if tasks:  # missing keys: one error for the whole batch, before any run starts
            self.new_context(tasks[0]).stats.preflight()
        gate = asyncio.Semaphore(max_concurrency)
        bar = ProgressBar(len(tasks), progress, f"{type(self).__name__} batch")

        async def one(t: str) -> Any:
            async with gate:
                try:
                    out = await self.arun(t)
                except BaseException:
                    bar.add(0, 1)
                    raise
                bar.add(1, 0)
                return out

        try:
            with batch_collector(len(tasks)):
                return list(await asyncio.gather(*(one(t) for t in tasks)))
        finally:
            bar.close()

    def run_batch(self, tasks: Sequence[str], max_concurrency: int = 16, *, executor: str = "local",
                  address: str | None = None, max_concurrency_per_worker: int | None = None,
                  checkpoint_dir: Any = None, progress: bool | None = None, commit: str = DEFAULT_COMMIT,
                  **options: Any) -> list[Any]:
        """One independent run per task, run concurrently (bounded); results in task order.

        ``progress``: a progress bar on stderr (done/total, failed, elapsed, ETA); by default shown
        when stderr is a terminal, ``progress=False`` hides it, ``True`` forces it.
        ``executor="ray"`` shards the tasks over Ray workers (``address=None`` starts a local Ray,
        ``"auto"``/``"ray://host:10001"`` joins a cluster), each running ``max_concurrency_per_worker``
        at once; a failed task's slot holds a ``TaskFailure`` instead of losing the batch. With
        ``checkpoint_dir`` every run is checkpointed (``commit``: how, as for ``aexecute``) and a
        re-run skips the finished ones. More options (``workers``, ``on_progress``, ...):
        ``fsmchat.patterns.distributed.execute_batch``."""
        tasks = check_batch(tasks, max_concurrency, type(self).__name__)
        check_commit(commit, f"{type(self).__name__}.run_batch", "checkpoint_dir" if checkpoint_dir is None else None)
        show = progress_wanted(progress)
        if executor == "local" and checkpoint_dir is None and address is None and not options:
            return self._sync(lambda: self.arun_batch(list(tasks), max_concurrency, progress=show))
        from . import distributed  # checkpointed and Ray batches only: a plain run never loads them

        return distributed.run_batch(self, tasks, executor=executor, address=address, checkpoint_dir=checkpoint_dir,
                                     max_concurrency_per_worker=max_concurrency_per_worker or max_concurrency,
                                     progress=show, commit=commit, **options)

    def to_config(self) -> Any:
        """This pattern as a JSON-able pydantic model (``fsmchat.config``); ``from_config`` rebuilds it.
        Secrets are left out; a lambda or closure anywhere raises ``TypeError``."""
        return to_config(self)

    def stream(self, task: str, *, tokens: bool = False) -> RunStream:
        """The run's trace events and posted messages as they happen, then the final ``RunResult``:
        ``async for item in pattern.stream(task)`` in async code, ``for item in pattern.stream(task)``
        in a script (the run then goes on its own event loop in a worker thread). Leaving the loop
        early cancels the run. With ``tokens=True`` the replies stream: each reply's ``TokenDelta``s
        come before its ``Message`` (and a ``StreamRetry`` when a shown stream is asked again). A
        GroupChat's bids stream too: each bidder's message as ``BidDelta``s while its ``respond``
        call's arguments arrive, before the round closes (the round is decided by the whole bids)."""
        if not isinstance(tokens, bool):
            raise ConfigTypeError(f"{type(self).__name__}.stream: tokens={tokens!r} is invalid: True (the replies' "
                                  "token deltas too) or False (trace events and messages only)")
        return RunStream(lambda sink: self.aexecute(task, observers=[sink], on_message=[sink],
                                                    on_token=sink if tokens else None),
                         f"{type(self).__name__}.stream")

    def astream(self, task: str, *, tokens: bool = False) -> AsyncIterator[Any]:
        """``stream(task)`` as an async iterator (LangGraph's ``astream`` spelling)."""
        return aiter(self.stream(task, tokens=tokens))
