"""Layer 6, shared: what every pattern has in common, written once.

A pattern is configuration of the engine: it validates its config, compiles a ``StateGraph``
whose actions are small functions over a ``ChatContext``, and inherits the API
(``run``, ``arun``, ``execute``, ``aexecute``, ``run_batch``, ``stream``) from ``Pattern``.

A pattern is declared once, by one pydantic model (a ``PatternConfig``): ``class GroupChat(Pattern,
kind="group_chat", config=GroupChatConfig)``. The model's fields, in order, are the constructor's
parameters; it validates them (a bad value is a ``ConfigError`` naming the field); the pattern's
attributes (``chat.max_loops``) read and write them; and ``to_config``/``from_config`` derive the
pattern's config form from it (``fsmchat.config.pattern_spec``), registered under ``kind``.
A run's working state is a typed ``PatternState`` on the context (checkpointed as "scratch").
Also shared: private memories and the run's image on ``ChatContext`` (``ask_private``), and
``speaker_states`` / ``bind`` for graphs that draw one state per speaker.
"""
from __future__ import annotations

import asyncio
import copy
import difflib
import functools
import hashlib
import json
from abc import ABC, abstractmethod
import inspect
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, AsyncIterator, Callable, ClassVar, Collection, Coroutine, Literal, Sequence, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from .. import distributed
from ..checkpoint import (RUN_META, Checkpointer, CheckpointMismatch, Lease, Recorder, check_checkpoint, check_resume,
                          decode, encode_fields, new_run_id)
from ..config import PatternSpec, pattern_spec, to_config
from ..statelog import AppendLog
from ..engine import batch_collector, run_graph, run_sync
from ..limits import Limits, add_limit_edges, start_clock
from ..checks import RUN_KEYWORDS, check_batch, check_hooks, check_keywords, check_run_id, check_token_hooks
from ..errors import ConfigTypeError, attach_result, invalid_config, redact, result_of, run_finished
from ..graph.render import drawing_data
from ..graph.state_graph import StateGraph, state_names
from ..progress import ProgressBar, progress_wanted
from ..models import (MAX_MESSAGE_CHARS, Message, RunResult, StopReason, TraceEvent, check_output_type,
                      format_output, safe_text, shorten)
from ..speakers.agent import SEED_ROLE, Speaker, Turn, mask_secrets
from ..speakers.human import (Human, NeedsCheckpoint, NotWaiting, Say, check_input, pending_of, request,
                              waiting_for)
from ..speakers.compaction import add_compaction, check_drawn, check_limits, compaction_calls
from ..speakers.images import image_part
from ..speakers.llm import TOKENS, load_litellm, shown_events
from ..speakers.tool_loop import APPROVE_ALL, add_tool_loop, loop_of
from ..speakers.tools import calls_per_turn
from .run_context import RunContext
from .interrupts import WaitPoint, add_interrupts, chat_point, check_names, check_targets
from .streaming import RunStream

T = TypeVar("T")


@dataclass
class PatternState:
    """A pattern's typed working state between steps (``GroupChatState``: the bids, the winner...).

    A pattern subclasses it as a dataclass and gives it to its context (``ChatContext.state``).
    Every field is checkpointed after each step, as the snapshot's ``"scratch"`` (a value that is
    not JSON-able is left out); a resume restores the fields the snapshot has.

    Examples:
        >>> from dataclasses import dataclass, field
        >>> from fsmchat.patterns import PatternState
        >>> @dataclass
        ... class TallyState(PatternState):
        ...     votes: list[str] = field(default_factory=list)
        ...     winner: str | None = None
        >>> TallyState(votes=["yes"]).snapshot()
        {'votes': ['yes'], 'winner': None}
        >>> state = TallyState()
        >>> state.restore({"votes": ["yes", "no"]})
        >>> state
        TallyState(votes=['yes', 'no'], winner=None)
    """

    def snapshot(self) -> dict[str, Any]:
        """Every field as JSON-able data (what a checkpoint stores as ``"scratch"``)."""
        return encode_fields({f.name: getattr(self, f.name) for f in fields(self)})

    def restore(self, scratch: dict[str, Any]) -> None:
        """Set the fields a ``snapshot`` holds (on resume); other keys are ignored."""
        names = {f.name for f in fields(self)}
        for name, value in decode(scratch).items():
            if name in names:
                setattr(self, name, value)


@dataclass
class ChatContext(RunContext):
    """The typed context a pattern's actions and guards read and write, one per run.

    A pattern subclasses it with its ``config`` (its validated model) and its ``state`` (a
    ``PatternState``); actions ask speakers (``ask``, ``ask_private``) and post their replies
    (``post``). What a flow's context has too (transcript, stats, events, people, tool loop) is
    its base, ``RunContext``.

    Attributes:
        task: The run's task.
        speakers: The participants, in roster order.
        transcript: The shared conversation (append-only).
        stats: Model calls, usage and the run's limits.
        events: Notable facts of the run (invalid bids, repaired texts...), in order.
        turn: The turn counter the pattern keeps.
        state: The pattern's typed working state.
        images: Images attached to every call of the run (``img``).
        memory: Each speaker's private memory (``ask_private``), by name.
        people: The answers of people in the loop.
        tool_loop: The agents' tool calls in progress and the run's tool sources (the speaking
            block ``ask`` goes through: ``fsmchat.speakers.tools``).

    Examples:
        >>> import asyncio
        >>> from fsmchat import ChatContext
        >>> from fsmchat.speakers import as_speaker
        >>> def analyst(turn):
        ...     return f"Noted: {turn.last.content}"
        >>> ctx = ChatContext("Plan the launch.", [as_speaker(analyst)])
        >>> ctx.seed().content
        'Plan the launch.'
        >>> reply = asyncio.run(ctx.ask(ctx.speakers[0], "Your view?"))
        >>> ctx.post("analyst", reply).content, ctx.names, len(ctx.transcript)
        ('Noted: Plan the launch.', ['analyst'], 2)
    """

    task: str
    speakers: list[Speaker]
    turn: int = 0
    state: PatternState = field(default_factory=PatternState)  # the pattern's working state
    images: list[str] = field(default_factory=list)  # attached to every call of the run (``img``)
    memory: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # private memories, by name

    @property
    def names(self) -> list[str]:
        """The speakers' names, in roster order."""
        return [s.name for s in self.speakers]

    def post(self, role: str, content: str, **metadata: Any) -> Message:
        """Append a message to the transcript (its listeners are told) and return it. A reply that
        took tool rounds carries its calls (``metadata["tool_calls"]``, ``Message.tool_calls``)."""
        if self.tool_loop.exchanges and "tool_calls" not in metadata:
            entries = self.tool_loop.entries(role)
            if entries:
                metadata["tool_calls"] = entries
                if self.tool_loop.shares(role):
                    metadata["share_tool_calls"] = True
        return self.transcript.post(role, content, **metadata)

    def seed(self) -> Message:
        """Post the task as message 1 (role ``"User"``)."""
        return self.post(SEED_ROLE, self.task)

    def turn_for(self, speaker: Speaker, instruction: str, kind: Literal["reply", "bid"] = "reply", **kw: Any) -> Turn:
        """The ``Turn`` ``speaker`` is asked with: the shared conversation, ``instruction``, the run's images."""
        if self.images:
            kw.setdefault("images", list(self.images))
        return Turn(speaker.name, self.transcript.view(), instruction, kind, self.stats, **kw)

    async def ask(self, speaker: Speaker, instruction: str, **kw: Any) -> str:
        """One reply from ``speaker`` on the shared conversation plus ``instruction``, repaired and
        capped as the transcript would (so a private memory holds what the transcript holds). A
        ``Human``'s reply is their answer: the run stops here until it comes (``hear``)."""
        if isinstance(speaker, Human):
            return self.transcript.admit(speaker.name, self.hear(speaker, instruction))
        return self.transcript.admit(speaker.name, await self.tool_loop.speak(speaker, self.turn_for(speaker, instruction,
                                                                                                   **kw)))

    def hear(self, person: Human, prompt: str) -> str:
        """``person``'s message for their turn: the answer a resume brought or a scripted one;
        otherwise the run stops here (``Interrupted``, stop reason "interrupted") until it comes."""
        last = self.transcript[-1] if len(self.transcript) else None
        proposed = {"last": {"role": last.role, "content": last.content}} if last is not None else None
        answer = self.people.ask(request("message", prompt, {"say": f"post it as {person.name}'s message"},
                                         person=person.name, proposed=proposed), person)
        assert isinstance(answer, Say), f"a message request admits only Say, got {answer!r}"  # check_input saw to it
        return answer.text

    def snapshot(self) -> dict[str, Any]:
        """The working state a checkpoint stores after each step (the transcript goes as deltas)."""
        return {"turn": self.turn, "scratch": self.state.snapshot(), "memory": self.memory, **self.shared_state()}

    def restore(self, state: dict[str, Any]) -> None:
        """Set the working state back to a checkpoint's ``snapshot`` (on resume)."""
        self.turn = state["turn"]
        self.state.restore(state["scratch"])
        self.memory.update({k: AppendLog(v) for k, v in state["memory"].items()})
        self.restore_shared(state)

    async def ask_private(self, speaker: Speaker, prompt: str, **kw: Any) -> str:
        """One reply from ``speaker`` on its private memory (instead of the shared conversation)
        plus ``prompt``; the prompt (as ``user``) and the reply (as ``assistant``) are then
        remembered, as text: an image rides on the current call only. Memories live in the
        context, so each run starts with empty ones."""
        memory = self.memory.get(speaker.name)
        if type(memory) is not AppendLog:  # a checkpoint writes what each turn added to it
            memory = self.memory[speaker.name] = AppendLog(memory or ())
        reply = await self.ask(speaker, prompt, history=list(memory), **kw)
        if self.tool_loop.once(speaker.name, "memory"):  # once, when a tool round entered the state again
            memory += [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
        return reply


def set_pending(result: RunResult) -> None:
    """``result.pending``: what an interrupted run waits for (its last event's request)."""
    if result.stop_reason == StopReason.INTERRUPTED and result.trace:
        result.pending = pending_of(result.trace[-1])


def token_sink(hooks: Sequence[Any]) -> Callable[[Any], None]:
    """One callable handing each token item to every hook, in order."""
    def sink(item: Any) -> None:
        for hook in hooks:
            hook(item)

    return sink


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


# ---- configs: a pattern is declared once, by one model ----
OutputType = Annotated[str, AfterValidator(check_output_type)]


class PatternConfig(BaseModel):
    """Base of every pattern's one model: its fields are the pattern's parameters and attributes.

    The fields, in order, are the pattern's constructor parameters and its attributes; a bad
    value is a ``ConfigError`` naming the field (``"GroupChat: max_loops=0 is invalid: input
    should be greater than or equal to 1"``), whether passed to the pattern, set on it later
    (``chat.max_loops = 0``) or given to the model itself. A field holding live objects says how
    it travels in a config (``fsmchat.config.Participants``, ``FlowSteps``...). Unknown fields are
    refused.

    Examples:
        >>> from pydantic import Field
        >>> from fsmchat.patterns import PatternConfig
        >>> class RelayConfig(PatternConfig):
        ...     rounds: int = Field(2, ge=1)
        >>> RelayConfig(rounds=3).rounds
        3
        >>> RelayConfig.make("Relay", rounds=0)
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Relay: rounds=0 is invalid: input should be greater than or equal to 1
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    def __init__(self, owner: str | None = None, /, **values: Any) -> None:
        """Validate ``values``; a bad one is refused in ``owner``'s name.

        Args:
            owner: Whose name a refusal is given in (the model's by default).
            **values: The fields.
        """
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise invalid_config(owner or type(self).__name__, exc) from None

    @classmethod
    def make(cls, owner: str, **values: Any) -> Any:
        """The model of ``values``, a bad one refused in ``owner``'s name (``"GroupChat: ..."``)."""
        return cls(owner, **values)

    def __setattr__(self, name: str, value: Any) -> None:
        self.assign(type(self).__name__, name, value)

    def assign(self, owner: str, name: str, value: Any) -> None:
        """Set a field, validated as at construction (refused in ``owner``'s name)."""
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise invalid_config(owner, exc) from None


class ConfigField:
    """A pattern attribute that is a field of its model: read from ``pattern.config`` and written
    to it (validated; the graph is compiled again on next use)."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj.config, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.config.assign(type(obj).__name__, self.name, value)
        obj._graph = None


def constructor_signature(config: type[PatternConfig]) -> inspect.Signature:
    """The pattern's signature as ``help()`` and IDEs show it: the model's fields in order, then
    the keyword-only ``interrupt_before``/``interrupt_after``."""
    params = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=f.annotation,
                                default=inspect.Parameter.empty if f.is_required() else f.default)
              for name, f in config.model_fields.items()]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
               for name in ("interrupt_before", "interrupt_after")]
    return inspect.Signature(params)


def people_in(speakers: Sequence[Any]) -> set[str]:
    """The names of the ``Human`` participants among ``speakers``."""
    return {s.name for s in speakers if isinstance(s, Human)}


# ---- graph building blocks shared by the patterns ----
def bind(fn: Callable[..., Any], *args: Any) -> Callable[[Any], Any]:
    """``fn(ctx, *args)`` as a one-argument state action (name and docstring kept), so one
    small function serves a state per speaker: ``g.state("Analyst", bind(take_turn, 0))``."""
    if inspect.iscoroutinefunction(fn):
        async def async_action(ctx: Any) -> Any:
            return await fn(ctx, *args)
        return functools.update_wrapper(async_action, fn)

    def action(ctx: Any) -> Any:
        return fn(ctx, *args)
    return functools.update_wrapper(action, fn)


PERSON_NOTE = " (a person: waits for their message)"


def speaker_states(g: StateGraph, names: Sequence[str], action: Callable[..., Any],
                   description: str = "{name}'s turn", reserved: Sequence[str] = (),
                   people: Collection[str] = ()) -> list[str]:
    """Declare one state per speaker, in roster order, whose action is ``action(ctx, i)``; returns
    the state names. State names avoid the graph's states so far and ``reserved`` (states declared
    later). The states of ``people`` (``Human`` names) are drawn as waiting for a person."""
    states = state_names(names, reserved=[*g.states, *reserved], fallback="speaker")
    for i, (state, name) in enumerate(zip(states, names)):
        person = name in people
        g.state(state, bind(action, i), description.format(name=name) + (PERSON_NOTE if person else ""),
                waits=person)
    return states


class Pattern(ABC):
    """Base of every conversation pattern: the compiled graph and the run API.

    A pattern declares its one model and its kind in its class line, ``class GroupChat(Pattern,
    kind="group_chat", config=GroupChatConfig)``: the constructor takes the model's fields (in
    order, or by name) plus ``interrupt_before``/``interrupt_after``, the fields become attributes,
    and the kind's config form (``GroupChat.Spec``) is derived and registered for ``to_config`` /
    ``from_config``. A subclass without ``kind=`` is the same kind (it travels as ``pattern_class``).
    A pattern supplies ``_compile`` (its ``StateGraph``), ``_context`` (a fresh context per run)
    and ``_calls_by_speaker`` (the worst case per speaker: ``max_calls`` and a checkpoint's
    fingerprint read it); ``run``, ``execute``, ``stream``, ``run_batch``, checkpoints, limits
    and people in the loop come with this class.

    Args:
        *args: The config model's fields by position.
        **kwargs: The config model's fields by name (an unknown name is a ``ConfigTypeError``).
        interrupt_before: States where the run stops for a person before entering them.
        interrupt_after: States where the run stops for a person after leaving them.

    Examples:
        >>> from dataclasses import dataclass, field
        >>> from pydantic import Field
        >>> from fsmchat import ChatContext, Pattern, StateGraph
        >>> from fsmchat.patterns import PatternConfig
        >>> from fsmchat.speakers import check_roster
        >>> class RelayConfig(PatternConfig):
        ...     agents: list = Field(None, title="agent")  # Participants, for a roster that travels in a config
        ...     rounds: int = Field(2, ge=1)
        >>> @dataclass
        ... class RelayContext(ChatContext):
        ...     config: RelayConfig = field(kw_only=True)
        >>> async def relay(ctx):
        ...     '''every agent adds a line, in order'''
        ...     for s in ctx.speakers:
        ...         ctx.post(s.name, await ctx.ask(s, "Add one line."))
        ...     ctx.turn += 1
        >>> def rounds_left(ctx):
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
    _graph: StateGraph | None = None

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
            names = list(model.model_fields)
            if len(args) > len(names):
                raise TypeError(f"{owner}() takes at most {len(names)} positional arguments ({len(args)} given)")
            for name, value in zip(names, args):
                if name in kwargs:
                    raise TypeError(f"{owner}() got multiple values for argument {name!r}")
                kwargs[name] = value
            for name in kwargs:
                if name not in model.model_fields:
                    close = difflib.get_close_matches(name, names, n=1)
                    raise ConfigTypeError(f"{owner}() got an unexpected keyword argument {name!r}"
                                          + (f"; did you mean {close[0]}?" if close else "")
                                          + f" (its options: {', '.join(names)})")
            self.config = model.make(owner, **kwargs)
        self._validate()
        self.set_interrupts(interrupt_before, interrupt_after)

    def _validate(self) -> None:
        """Checks of the whole pattern once its model is valid (a pattern whose roster may be set
        later checks it here when given, and again when it runs)."""

    # ---- what a pattern supplies ----
    @abstractmethod
    def _compile(self) -> StateGraph:
        """The pattern's graph (validated by ``graph``)."""

    @abstractmethod
    def _context(self, task: str) -> Any:
        """A fresh context for one run of ``task``."""

    def _check_run(self, task: Any) -> None:
        """Run-time checks (before any model call)."""
        check_task(task, type(self).__name__)

    def _output_rows(self, ctx: ChatContext) -> list[Message]:
        return ctx.transcript.messages

    # ---- for what runs this pattern's graph inside another (a flow's PatternStep) ----
    def new_context(self, task: str) -> Any:
        """A fresh context for one run of ``task``, which is checked first as ``run`` checks it."""
        self._check_run(task)
        return self._context(task)

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

    # ---- shared ----
    limits: Limits | None = None
    factory: str | None = None  # "module:attr" that rebuilds this pattern (stored with checkpoints)
    interrupt_before: tuple[str, ...] = ()  # states a person approves entering (wait states drawn before them)
    interrupt_after: tuple[str, ...] = ()  # states a person reviews once left
    approve_tools: bool = False  # interrupt_before=["tools"]: every tool call waits for a person
    _started_as: dict[str, Any] | None = None  # a run-limits copy's fingerprint: the pattern that started the run

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
            for state, speakers in self._speaking_states(g):
                add_tool_loop(g, state, speakers, approve_all=self.approve_tools)
                add_compaction(g, state, speakers, self.context_policy)
            if self.interrupt_before or self.interrupt_after:
                add_interrupts(g, self.interrupt_before, self.interrupt_after, self._wait_point, type(self).__name__)
            if self.limits is not None:
                add_limit_edges(g, self.limits)
            self._graph = g.validate()
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
        """A ``Summarize`` speaker's model must have a known input limit: refused before any call."""
        try:
            states = self._speaking_states(self.graph)
        except (ValueError, TypeError):
            return
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

    def _calls_by_speaker(self) -> list[tuple[Any, int]]:
        """(speaker, most calls it can be asked for in one run), the source of ``max_calls``."""
        raise TypeError(f"{type(self).__name__} does not report a worst-case call bound")

    @property
    def _max_message_chars(self) -> int:
        return self.limits.max_message_chars if self.limits is not None else MAX_MESSAGE_CHARS

    def _admit_task(self, task: str) -> tuple[str, int]:
        """The task as it enters the run (lone surrogates repaired, so it can be stored; how many),
        refused when longer than ``max_message_chars``: a message cap never cuts the user's own task."""
        task, repaired = safe_text(task)
        if len(task) > self._max_message_chars:
            raise ValueError(f"{type(self).__name__}.run(task): the task has {len(task)} characters, over "
                             f"max_message_chars={self._max_message_chars}; shorten it or raise the cap with "
                             f"with_limits(max_message_chars=...)")
        return task, repaired

    def _check_limits(self) -> None:
        lim = self.limits
        if lim is not None and lim.refuse_over_bound and lim.max_model_calls is not None:
            worst = self.max_calls()
            if worst > lim.max_model_calls:
                raise ValueError(f"{type(self).__name__}: a run can make up to {worst} model calls, over "
                                 f"max_model_calls={lim.max_model_calls}; raise the budget or lower the limits "
                                 "(refuse_over_bound=True refuses such runs up front)")

    def _finish(self, result: RunResult) -> RunResult:
        ctx: ChatContext = result.context
        if ctx.stats.limit_hit and result.stop_reason == StopReason.BUDGET:
            ctx.events.append({"event": "budget", "limit": ctx.stats.limit_hit})
        result.transcript = ctx.transcript.messages
        result.calls = ctx.stats.calls
        result.usage = dict(ctx.stats.usage)
        result.events = shown_events(ctx.events, ctx.stats)
        result.output = self.output_of(ctx)
        set_pending(result)
        run_finished(result)
        return result

    def _print_post(self, msg: Message) -> None:
        from rich.console import Console
        from rich.panel import Panel

        score = msg.metadata.get("score")
        title = msg.role + (f"  (bid {score:.2f})" if isinstance(score, (int, float)) else "")
        Console().print(Panel(msg.content, title=title, title_align="left"))

    async def _drive(self, ctx: Any, observers: Sequence[Any], on_message: Sequence[Any],
                     checkpoint: Checkpointer | None, run_id: str | None, meta: dict[str, Any] | None,
                     saved: Any = None, lease: Lease | None = None, on_start: Sequence[Any] = (),
                     on_token: Sequence[Any] = ()) -> RunResult:
        """Run the graph on ``ctx`` (fresh, or restored from ``saved``), committing to ``checkpoint``
        under ``lease`` (the caller's hold on the run; released when the run ends); ``on_token``
        gets each streamed reply's deltas (``fsmchat.speakers.llm.TOKENS``)."""
        graph = self.graph
        sink = TOKENS.set(token_sink(on_token) if on_token else TOKENS.get())  # a nested run streams to its parent's
        try:  # the lease is given back however this ends, a refused start (an id already used) included
            await load_litellm(ctx.stats.roster)  # before the clock: the import is not the run's time
            start_clock(self.limits, ctx.stats)
            loop = loop_of(ctx)
            loop.approve_all = self.approve_tools
            if saved is not None:  # a resume: tool sources whose tools changed are refused before any model call
                await loop.check_sources([s for s, _ in self._calls_by_speaker()])
            ctx.transcript.max_chars = self._max_message_chars
            for hook in on_start:
                hook(ctx)
            for listener in on_message:
                ctx.transcript.listen(listener)
            if self.verbose:
                ctx.transcript.listen(self._print_post)
            recorder = None
            if checkpoint is not None:
                assert run_id is not None and lease is not None
                recorder = Recorder(checkpoint, run_id, ctx.transcript, ctx.snapshot, len(ctx.transcript), lease)
                if saved is None:
                    recorder.start(meta or {})
                ctx.stats.before_request = lease.check  # no request is sent once another owner took the run
            history = [e for e in saved.events if e.dest is not None] if saved is not None else None
            start = history[-1].dest if history else None
            result = await run_graph(graph, ctx, observers=observers, recorder=recorder, start=start,
                                     history=history)
        except asyncio.CancelledError as exc:
            partial = result_of(exc)
            if partial is not None:
                partial.run_id = run_id
                self._finish(partial)
                self._last_partial = partial
            raise
        finally:
            try:
                await loop_of(ctx).close()  # the run's tool sources stop however it ends
            finally:
                TOKENS.reset(sink)
                if lease is not None:
                    lease.release()
        result.run_id = run_id
        return self._finish(result)

    async def aexecute(self, task: str, *, observers: Sequence[Any] = (), on_message: Sequence[Any] = (),
                       checkpoint: Checkpointer | None = None, run_id: str | None = None,
                       on_start: Sequence[Any] = (), on_token: Any = None) -> RunResult:
        """Run once and return the ``RunResult`` (path, trace, stop reason, transcript, calls).
        With ``checkpoint=`` every step is committed under ``run_id`` (a new id if None); the run
        holds the id's lease meanwhile, so a concurrent run of the same id gets ``RunInProgress``.
        ``observers`` get each ``TraceEvent``, ``on_message`` each posted ``Message``, ``on_start``
        the run's context before its first step (a live display reads ``ctx.stats`` from it),
        ``on_token`` (a callable or a list of them) each ``TokenDelta`` of a reply as the model
        writes it, and a ``StreamRetry`` when a shown stream is asked again (the replies then stream)."""
        owner = type(self).__name__
        check_checkpoint(checkpoint, owner)
        check_run_id(run_id, owner)
        observers, on_message, on_start = (check_hooks(observers, owner, "observers"),
                                           check_hooks(on_message, owner, "on_message"),
                                           check_hooks(on_start, owner, "on_start"))
        tokens = check_token_hooks(on_token, owner)
        self._check_run(task)
        self._check_waits(checkpoint)
        self._check_context()
        if checkpoint is not None:
            self._check_checkpointed()
        self._check_limits()
        task, repaired = self._admit_task(task)
        lease = None
        if checkpoint is not None:
            run_id = run_id or new_run_id()
            lease = Lease(checkpoint, run_id)
        meta = None
        try:
            if checkpoint is not None:  # what a resume checks and the viewer shows; a plain run needs none of it
                meta = {"pattern": type(self).__name__, "name": self.name, "task": task, "factory": self.factory,
                        "fingerprint": self.fingerprint(), **self._viewer_meta(), **(RUN_META.get() or {})}
            ctx = self._context(task)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        if repaired:
            ctx.events.append({"event": "text_repaired", "role": "task", "replaced": repaired})
        return await self._drive(ctx, observers, on_message, checkpoint, run_id, meta, lease=lease, on_start=on_start,
                                 on_token=tokens)

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
        saved = checkpoint.load(run_id)
        self._check_fingerprint(run_id, saved.meta)
        forked = self._with_run_limits(saved.meta)
        if forked is not None:  # a fork changed the run's limits: a copy of this pattern runs with them
            return await forked.aresume(run_id, checkpoint, observers=observers, on_message=on_message,
                                        on_start=on_start, on_token=tokens, input=input)
        answer = self._answer_for(run_id, saved, input)
        if saved.finished or (saved.stop_reason == StopReason.INTERRUPTED and answer is None):
            return self._rebuild(run_id, saved)
        lease = Lease(checkpoint, run_id)
        try:
            saved = checkpoint.load(run_id)  # under the lease: what the last owner committed
            if saved.finished:
                lease.release()
                return self._rebuild(run_id, saved)
            answer = self._answer_for(run_id, saved, input)
            ctx = self._restored(saved)
            if answer is not None:
                ctx.people.give(*answer)
        except BaseException:
            lease.release()
            raise
        return await self._drive(ctx, observers, on_message, checkpoint, run_id, None, saved, lease, on_start, tokens)

    def _answer_for(self, run_id: str, saved: Any, input: Any) -> Any:
        """(what the run waits for, the checked answer), None without ``input``; ``NotWaiting`` for
        an answer to a run that waits for nobody."""
        pending = waiting_for(saved)
        if pending is None and saved.stop_reason is None and saved.events:  # cut between its interrupt's commit
            pending = pending_of(saved.events[-1])  # and its end: it waits all the same
        if input is None:
            return None
        if pending is None:
            raise NotWaiting(f"{type(self).__name__}.resume: input={input!r} was given, but run {run_id!r} does not "
                             f"wait for a person (stop reason {saved.stop_reason!r}); resume it without input")
        return pending, check_input(pending, input)

    def _viewer_meta(self) -> dict[str, Any]:
        """What a checkpoint keeps at run start for the run viewer (``fsmchat ui``, ``fsmchat report``):
        the graph as drawing data, and the config (``to_config``: secrets left out) or why there is none."""
        out: dict[str, Any] = {"graph": drawing_data(self.graph.drawing())}
        try:
            out["config"] = mask_secrets(self.to_config().model_dump(mode="json"))  # header values too
        except Exception as exc:  # a lambda, a closure, a speaker with no config: the run goes on without it
            out["config_missing"] = redact(f"{type(exc).__name__}: {exc}")
        return out

    def _restored(self, saved: Any) -> Any:
        ctx = self._context(saved.meta["task"])
        ctx.transcript.restore(saved.messages)
        if saved.state is not None:
            ctx.restore(saved.state)
        return ctx

    def _rebuild(self, run_id: str, saved: Any) -> RunResult:
        ctx = self._restored(saved)
        # the path as it was walked: a step an interruption cut (dest None, then run again on the
        # resume) is not part of it; the final state's record is
        last = len(saved.events) - 1
        trace = [e for i, e in enumerate(saved.events) if e.dest is not None or i == last]
        result = RunResult([e.state for e in trace], trace, saved.stop_reason or StopReason.DONE, ctx,
                           graph=self.graph)
        result.run_id = run_id
        return self._finish(result)

    def fingerprint(self) -> dict[str, Any]:
        """What a checkpoint stores to recognise this pattern on resume: the kind, the graph's
        structure (a hash of its states and edges, branches included), the speakers and their
        models, the limits and the output type."""
        flat = self.graph.flatten()
        shape: list[Any] = []
        todo = [("", flat)]
        while todo:
            prefix, f = todo.pop()
            shape.append([prefix, sorted(f.states), sorted((t.source, t.dest, t.label) for t in f.transitions)])
            todo += [(f"{prefix}{s.name}|{i}.", b.flatten()) for s in f.states.values()
                     for i, b in enumerate(s.branches, 1)]
        digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]
        speakers = [[getattr(s, "name", repr(s)), getattr(s, "model", None)] for s, _n in self._calls_by_speaker()]
        return {"pattern": type(self).__name__, "graph": digest, "speakers": speakers,
                "limits": self.limits.model_dump(mode="json") if self.limits is not None else None,
                "output_type": self.output_type}

    def _with_run_limits(self, meta: dict[str, Any]) -> "Pattern | None":
        """A copy of this pattern with the limits ``fsmchat.fork(edit={"limits": ...})`` stored with
        the run (None: the run has none, or this pattern already has them). The copy is checked
        against the run as the pattern that started it."""
        limits = meta.get("limits")
        if limits is None or (self.limits is not None and self.limits.model_dump(mode="json") == limits):
            return None
        if not isinstance(limits, dict):
            raise CheckpointMismatch(f"the run's stored limits {limits!r} are not a dict of Limits fields")
        twin = copy.copy(self)
        twin._started_as = self.fingerprint()
        return twin.with_limits(Limits(**limits))

    def _check_fingerprint(self, run_id: str, meta: dict[str, Any]) -> None:
        stored = meta.get("fingerprint")
        if stored is None:  # checkpointed before fingerprints existed
            return
        now = json.loads(json.dumps(self._started_as or self.fingerprint()))
        diffs = [f"{k}: stored {stored.get(k)!r}, now {now.get(k)!r}" for k in now if stored.get(k) != now.get(k)]
        if diffs:
            raise CheckpointMismatch(f"run {run_id!r} was checkpointed by a different {meta.get('pattern', 'pattern')} "
                                     f"than the {type(self).__name__} resuming it; " + "; ".join(diffs) +
                                     ". Resume it with the pattern that started it (nothing was written)")

    def resume(self, run_id: str, checkpoint: Checkpointer, *, input: Any = None) -> RunResult:
        """Synchronous ``aresume`` (``input``: a waiting run's answer)."""
        return self._sync(lambda: self.aresume(run_id, checkpoint, input=input))

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
        mean checkpoint?"). Positional arguments the reference forwards to each agent's ``run()`` have
        no meaning here and are ignored."""
        check_keywords(kwargs, RUN_KEYWORDS, f"{type(self).__name__}.run")
        return self._sync(lambda: self.arun(task, **kwargs))

    def preflight(self, tasks: Sequence[Any], *, credentials: bool = True) -> None:
        """Refuse a batch before any model call: each task (the checks ``run`` makes), the limits
        (a worst-case bound over ``max_model_calls``) and, with ``credentials``, the model keys the
        runs need (checked once, on the first task's context). ``fsmchat.distributed`` calls it."""
        for t in tasks:
            self._check_run(t)
        self._check_limits()
        if credentials and tasks:
            self._context(tasks[0]).stats.preflight()

    async def arun_batch(self, tasks: Sequence[str], max_concurrency: int = 16, *,
                         progress: bool | None = False) -> list[Any]:
        """``run_batch`` in async code (``progress``: as there, but off unless asked for)."""
        tasks = check_batch(tasks, max_concurrency, type(self).__name__)
        for t in tasks:
            self._check_run(t)
        if tasks:  # missing keys: one error for the whole batch, before any run starts
            self._context(tasks[0]).stats.preflight()
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
                  checkpoint_dir: Any = None, progress: bool | None = None, **options: Any) -> list[Any]:
        """One independent run per task, run concurrently (bounded); results in task order.

        ``progress``: a progress bar on stderr (done/total, failed, elapsed, ETA); by default shown
        when stderr is a terminal, ``progress=False`` hides it, ``True`` forces it.
        ``executor="ray"`` shards the tasks over Ray workers (``address=None`` starts a local Ray,
        ``"auto"``/``"ray://host:10001"`` joins a cluster), each running ``max_concurrency_per_worker``
        at once; a failed task's slot holds a ``TaskFailure`` instead of losing the batch. With
        ``checkpoint_dir`` every run is checkpointed and a re-run skips the finished ones. More
        options (``workers``, ``on_progress``, ...): ``fsmchat.distributed.execute_batch``."""
        tasks = check_batch(tasks, max_concurrency, type(self).__name__)
        show = progress_wanted(progress)
        if executor == "local" and checkpoint_dir is None and address is None and not options:
            return self._sync(lambda: self.arun_batch(list(tasks), max_concurrency, progress=show))
        return distributed.run_batch(self, tasks, executor=executor, address=address, checkpoint_dir=checkpoint_dir,
                                     max_concurrency_per_worker=max_concurrency_per_worker or max_concurrency,
                                     progress=show, **options)

    def to_config(self) -> Any:
        """This pattern as a JSON-able pydantic model (``fsmchat.config``); ``from_config`` rebuilds it.
        Secrets are left out; a lambda or closure anywhere raises ``TypeError``."""
        return to_config(self)

    def stream(self, task: str, *, tokens: bool = False) -> RunStream:
        """The run's trace events and posted messages as they happen, then the final ``RunResult``:
        ``async for item in pattern.stream(task)`` in async code, ``for item in pattern.stream(task)``
        in a script (the run then goes on its own event loop in a worker thread). Leaving the loop
        early cancels the run. With ``tokens=True`` the replies stream: each reply's ``TokenDelta``s
        come before its ``Message`` (and a ``StreamRetry`` when a shown stream is asked again)."""
        if not isinstance(tokens, bool):
            raise ConfigTypeError(f"{type(self).__name__}.stream: tokens={tokens!r} is invalid: True (the replies' "
                                  "token deltas too) or False (trace events and messages only)")
        return RunStream(lambda sink: self.aexecute(task, observers=[sink], on_message=[sink],
                                                    on_token=sink if tokens else None),
                         f"{type(self).__name__}.stream")

    def astream(self, task: str, *, tokens: bool = False) -> AsyncIterator[Any]:
        """``stream(task)`` as an async iterator (LangGraph's ``astream`` spelling)."""
        return aiter(self.stream(task, tokens=tokens))
