"""``SelectorGroupChat`` (AutoGen AgentChat): a model picks who speaks next, as a state graph.

    seed -> select -> <speaker> -> after_<speaker> -> <who may follow it> -> ...
    <speaker> -> stop [until | livelock | max_turns]

One state per participant, and after each one an ``after_<name>`` state where the selector picks
who follows: its edges are exactly the allowed pairs (``allowed``, less the speaker itself unless
``allow_repeat``), so the drawing is the ``allowed`` graph and every run's path is a path in it.

The selector is an ``Agent`` asked with a forced ``select_speaker`` tool whose ``speaker`` is an
enum of the candidates (``fsmchat.speakers.selector``), or a plain function of the messages
(AutoGen's ``selector_func``) returning a name, or None for the fallback. A reply that names no
candidate is asked again, up to ``max_selector_attempts`` calls, an event each
(``selector_retry``); then the fallback picks the first candidate in turn order after the latest
speaker (``selector_fallback``). With one candidate left no call is made. ``candidates``
(AutoGen's ``candidate_func``) narrows the candidates of a turn.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Callable, Sequence

from pydantic import AfterValidator, Field, model_validator

from ..checks import Count, check_agents
from ..config.convert import ContextField, FunctionField, OneParticipant, Speakers
from ..engine import mark_replayable
from ..errors import ConfigError
from ..graph.state_graph import StateGraph, state_names
from ..models import StopReason
from ..speakers.agent import Agent, Speaker, Turn, check_roster
from ..speakers.context import check_context
from ..speakers.human import Human
from ..speakers.selector import (DEFAULT_SELECTOR_PROMPT, parse_pick, retry_instruction, select_spec,
                                 selector_instruction)
from .base import ChatContext, OutputType, Pattern, PatternConfig, PatternState, bind, people_in, speaker_states
from .next_speaker import AllowedField, check_allowed, livelocked, named_guard, renamed, turns_used, until_met


class SelectionError(ConfigError):
    """A ``selector`` or ``candidates`` function named a speaker that may not speak now.

    The run stops with ``"error"`` (the transcript so far is kept); the message names the
    function's answer and the candidates allowed at that point.

    Examples:
        >>> from fsmchat import SelectorGroupChat
        >>> def a(turn):
        ...     return "one"
        >>> def b(turn):
        ...     return "two"
        >>> def c(turn):
        ...     return "three"
        >>> r = SelectorGroupChat([a, b, c], selector=lambda messages: "a", start="a").execute("Go.")
        >>> type(r.error).__name__, r.stop_reason
        ('SelectionError', 'error')
    """


Selector = Callable[..., object]
"""A selector function (AutoGen's ``selector_func``): the messages -> the next speaker's name, or None."""


def selector_roster(agents: object) -> list[Speaker]:
    """At least two participants, unique names."""
    if not check_agents(agents, "SelectorGroupChat") or not isinstance(agents, (list, tuple)) or len(agents) < 2:
        raise ConfigError("SelectorGroupChat needs at least two participants")
    return check_roster(agents, "SelectorGroupChat")


class SelectorConfig(PatternConfig):
    """SelectorGroupChat's parameters, declared once: validated before any model call.

    Attributes:
        participants: Who may speak (agents, functions, people), at least two.
        selector: Who picks: an ``Agent`` (asked with a forced ``select_speaker`` tool), a function
            ``fn(messages) -> name | None`` (AutoGen's ``selector_func``; None: the fallback), or None
            for ``Agent("selector")`` on the default model (offline without a key).
        selector_prompt: The selector's instruction; ``{roles}``, ``{participants}`` and ``{history}``
            are filled in (AutoGen's placeholders).
        allowed: Who may follow whom: ``{name: [names]}`` or a networkx ``DiGraph``; None: anyone.
        allow_repeat: Whether a speaker may speak twice in a row (AutoGen's ``allow_repeated_speaker``).
        candidates: ``fn(messages) -> [names]``: narrows a turn's candidates (AutoGen's ``candidate_func``).
        max_selector_attempts: Selector calls per pick before the fallback.
        start: Who speaks first (None: the selector picks among everyone).
        until: ``fn(messages) -> bool``, checked after each turn: True stops with ``"until"``.
        max_turns: The most turns (replies) of a run.
        livelock_repeats: Stop with ``"livelock"`` when a cycle of speakers says the same texts this
            many times in a row (None: never).
        output_type: The output's format (default ``"final"``, the last message).
        verbose: Print each posted message.
        context: The speakers' context policy (``fsmchat.speakers.context``).
        name: The chat's name.
        description: What it is for.

    Examples:
        >>> from fsmchat import Agent
        >>> from fsmchat.patterns import SelectorConfig
        >>> cfg = SelectorConfig(participants=[Agent("planner"), Agent("coder")])
        >>> cfg.max_turns, cfg.max_selector_attempts, cfg.allow_repeat, cfg.follows()
        (10, 3, False, {'planner': ['coder'], 'coder': ['planner']})
    """

    participants: Annotated[Speakers, AfterValidator(selector_roster)] = Field(None, validate_default=True,
                                                                               title="participant")
    selector: OneParticipant = None
    selector_prompt: str = DEFAULT_SELECTOR_PROMPT
    allowed: AllowedField = None
    allow_repeat: bool = Field(False, strict=True)
    candidates: FunctionField = None
    max_selector_attempts: Annotated[int, Count(1, "selector calls per pick before the fallback")] = 3
    start: str | None = None
    until: FunctionField = None
    max_turns: Annotated[int, Count(1, "the most replies of a run")] = 10
    livelock_repeats: Annotated[int | None, Count(2, "times a cycle repeats its texts before the chat stops; "
                                                     "None: never")] = 3
    output_type: OutputType = "final"
    verbose: bool = False
    context: Annotated[ContextField, AfterValidator(lambda v: check_context(v, "SelectorGroupChat"))] = Field(
        None, description="the speakers' context policy (fsmchat.speakers.context)")
    name: str = "SelectorGroupChat"
    description: str = "A model picks who speaks next."

    @model_validator(mode="after")
    def _check(self) -> "SelectorConfig":
        names = [a.name for a in self.participants]
        sel = self.selector
        if isinstance(sel, Human) or (sel is not None and not isinstance(sel, Agent) and not callable(sel)):
            raise ConfigError(f"SelectorGroupChat: selector={sel!r} is invalid: an Agent (asked with a forced "
                              "select_speaker tool), a function fn(messages) -> name, or None for Agent('selector')")
        if isinstance(sel, Agent) and sel.tools:
            raise ConfigError(f"SelectorGroupChat: the selector {sel.name!r} has tools; a selector is offered only "
                              "select_speaker, so give it none")
        for key in ("candidates", "until"):
            fn = getattr(self, key)
            if fn is not None and not callable(fn):
                raise ConfigError(f"SelectorGroupChat: {key}={fn!r} is invalid: a function of the messages")
        if self.start is not None and self.start not in names:
            raise ConfigError(f"SelectorGroupChat: start={self.start!r} is not a participant (participants: "
                              f"{', '.join(map(repr, names))})")
        check_allowed(self.allowed, names, "SelectorGroupChat", start=self.start, allow_repeat=self.allow_repeat)
        return self

    def follows(self) -> dict[str, list[str]]:
        """Who may follow each speaker, in roster order (``allowed``, less itself unless ``allow_repeat``)."""
        names = [a.name for a in self.participants]
        given = check_allowed(self.allowed, names, "SelectorGroupChat", start=self.start,
                              allow_repeat=self.allow_repeat)
        if given is not None:
            return given
        return {a: [b for b in names if b != a or self.allow_repeat] for a in names}

    def picker(self) -> Agent | Selector:
        """The selector as it runs: the given one, or ``Agent("selector")``."""
        sel = self.selector
        if sel is None:
            return Agent("selector")
        if not isinstance(sel, Agent) and not callable(sel):  # _check refuses it: an Agent or a function
            raise ConfigError(f"SelectorGroupChat: selector={sel!r} is invalid: an Agent (asked with a forced "
                              "select_speaker tool), a function fn(messages) -> name, or None for Agent('selector')")
        return sel


@dataclass
class SelectorState(PatternState):
    """The chat's working state: who spoke last and who was picked next (roster indexes).

    Attributes:
        last: The latest speaker (None before the first reply).
        next: The speaker the latest pick chose (None once it has spoken).

    Examples:
        >>> from fsmchat.patterns import SelectorState
        >>> SelectorState(last=0, next=2).snapshot()
        {'last': 0, 'next': 2}
    """

    last: int | None = None
    next: int | None = None


@dataclass
class SelectorContext(ChatContext):
    """A SelectorGroupChat run's context: its config, working state, selector and allowed pairs.

    Attributes:
        config: The chat's validated parameters.
        state: Who spoke last, who was picked.
        selector: The selector (an ``Agent`` or a function).
        follows: Who may follow each speaker (``SelectorConfig.follows``).

    Examples:
        >>> from fsmchat import SelectorGroupChat
        >>> def a(turn):
        ...     return "one"
        >>> def b(turn):
        ...     return "two"
        >>> seen = []
        >>> _ = SelectorGroupChat([a, b], selector=lambda m: None, start="a", max_turns=2).execute(
        ...     "Go.", on_start=[seen.append])
        >>> type(seen[0]).__name__, seen[0].follows
        ('SelectorContext', {'a': ['b'], 'b': ['a']})
    """

    config: SelectorConfig = field(kw_only=True)
    state: SelectorState = field(default_factory=SelectorState)
    selector: Agent | Selector | None = None
    follows: dict[str, list[str]] = field(default_factory=dict)


# ---- actions ----
def post_task(ctx: ChatContext) -> None:
    """post the task as message 1"""
    ctx.seed()


def in_turn(ctx: SelectorContext, prev: int | None) -> list[str]:
    """The candidates after speaker ``prev`` (None: the opening pick), in turn order after it:
    who may follow it, narrowed by ``candidates``."""
    names = ctx.names
    pool = names if prev is None else ctx.follows[names[prev]]
    start = 0 if prev is None else prev + 1
    ordered = [n for n in names[start:] + names[:start] if n in pool]
    fn = ctx.config.candidates
    if fn is None:
        return ordered
    chosen = fn(ctx.transcript.messages)
    if not isinstance(chosen, (list, tuple)) or not all(isinstance(n, str) for n in chosen):
        raise SelectionError(f"SelectorGroupChat: candidates must return a list of names, got {chosen!r}")
    strangers = [n for n in chosen if n not in names]
    if strangers:
        raise SelectionError(f"SelectorGroupChat: candidates returned {strangers[0]!r}, who is not a participant "
                             f"(participants: {', '.join(map(repr, names))})")
    narrowed = [n for n in ordered if n in chosen]
    if not narrowed:
        after = f"after {names[prev]!r}" if prev is not None else "first"
        raise SelectionError(f"SelectorGroupChat: no candidate may speak {after}: candidates returned {chosen!r}, "
                             f"and the allowed ones are {ordered!r}")
    return narrowed


async def select_next(ctx: SelectorContext, prev: int | None) -> dict[str, object]:
    """the selector picks the next speaker among the allowed candidates"""
    mark_replayable()  # a pick does nothing outside the run: asked again after a crash, committed with the turn
    pool = in_turn(ctx, prev)
    name, by = await pick(ctx, pool)
    ctx.state.next = ctx.names.index(name)
    out: dict[str, object] = {"speaker": name, "by": by, "candidates": pool}
    ctx.events.append({"event": "selected", "turn": ctx.turn, **out})
    return out


async def pick(ctx: SelectorContext, pool: list[str]) -> tuple[str, str]:
    """(the pick, how it was made): the only candidate; the function's answer; the model's, asked
    up to max_selector_attempts times; else the first candidate (the fallback)."""
    if len(pool) == 1:
        return pool[0], "only_candidate"
    sel = ctx.selector
    if sel is None:
        raise TypeError("SelectorGroupChat: the run's context has no selector")
    if not isinstance(sel, Agent):
        chosen = sel(ctx.transcript.messages)
        if chosen is None:
            return pool[0], "fallback"
        if not isinstance(chosen, str) or chosen not in pool:
            raise SelectionError(f"SelectorGroupChat: selector returned {chosen!r}, which may not speak now "
                                 f"(candidates: {', '.join(map(repr, pool))}); return one of them, or None")
        return chosen, "function"
    spec = select_spec(pool)
    base = instruction(ctx, pool)
    ask = base
    for attempt in range(1, ctx.config.max_selector_attempts + 1):
        message = await sel.choose(Turn(sel.name, [] if "{history}" in ctx.config.selector_prompt
                                        else ctx.transcript.view(), ask, "reply", ctx.stats), spec)
        chosen, reason = parse_pick(message, pool)
        if chosen is not None:
            return chosen, "selector"
        ctx.events.append({"event": "selector_retry", "turn": ctx.turn, "attempt": attempt, "reason": reason})
        ask = retry_instruction(base, reason, pool)
    ctx.events.append({"event": "selector_fallback", "turn": ctx.turn, "speaker": pool[0],
                       "attempts": ctx.config.max_selector_attempts})
    return pool[0], "fallback"


def instruction(ctx: SelectorContext, pool: Sequence[str]) -> str:
    """The selector's prompt for this pick (its placeholders filled)."""
    by_name = {s.name: s for s in ctx.speakers}
    roles = [(n, role_of(by_name[n])) for n in pool]
    history = "\n".join(f"{m.role}: {m.content}" for m in ctx.transcript.messages)
    return selector_instruction(ctx.config.selector_prompt, roles, history)


def role_of(speaker: object) -> str:
    """What a candidate does, for the selector: its description, else its system prompt's first line."""
    text = getattr(speaker, "description", "") or getattr(speaker, "system_prompt", "") or ""
    return text.strip().splitlines()[0][:200] if text.strip() else ""


async def take_turn(ctx: SelectorContext, i: int) -> str:
    """the picked speaker replies to the conversation"""
    speaker = ctx.speakers[i]
    reply = await ctx.ask(speaker, f"You are {speaker.name}. Continue the conversation above with your reply.")
    ctx.post(speaker.name, reply)
    ctx.state.last, ctx.state.next = i, None
    ctx.turn += 1
    return speaker.name


def compile_selector(follows: dict[str, list[str]], *, start: str | None = None, until: bool = False,
                     people: Sequence[str] = (), description: str = "") -> StateGraph:
    """SelectorGroupChat's graph over a known roster, one edge per allowed pair.

    A state per speaker, and after each an ``after_<speaker>`` pick state whose edges go to
    who may follow it.

    Args:
        follows: Who may follow each speaker, the roster's order (``SelectorConfig.follows``).
        start: Who opens (None: a ``select`` state picks among everyone).
        until: Draw the ``until`` exit.
        people: The ``Human`` participants' names (their states wait for their message).
        description: What the diagram says the graph is.

    Examples:
        >>> from fsmchat.patterns.selector import compile_selector
        >>> g = compile_selector({"planner": ["coder"], "coder": ["planner", "tester"], "tester": ["planner"]})
        >>> [(t.source, t.dest) for t in g.transitions if t.source.startswith("after_")]
        [('after_planner', 'coder'), ('after_coder', 'planner'), ('after_coder', 'tester'), ('after_tester', 'planner')]
    """
    names = list(follows)
    g = StateGraph("selector_group_chat", context=SelectorContext, description=description)
    g.state("seed", post_task)
    reserved = ["select", "stop", *(f"after_{n}" for n in names)]
    states = speaker_states(g, names, take_turn, "{name} replies", reserved=reserved, people=people)
    picks = state_names([f"after_{n}" for n in names], reserved=[*g.states, "select", "stop"])
    index = {n: i for i, n in enumerate(names)}
    if start is None:
        g.state("select", bind(select_next, None), "the selector picks who opens")
        g.edge("seed", "select")
        for n in names:
            g.edge("select", states[index[n]], when=named_guard(picked, index[n]), label=n)
    else:
        g.edge("seed", states[index[start]])
    for i, n in enumerate(names):
        g.state(picks[i], bind(select_next, i), f"the selector picks who follows {n}")
    g.final("stop")
    for i, n in enumerate(names):
        if until:
            g.edge(states[i], "stop", when=until_met, label=StopReason.UNTIL)
        g.edge(states[i], "stop", when=livelocked, label=StopReason.LIVELOCK)
        g.edge(states[i], "stop", when=turns_used, label=StopReason.MAX_TURNS)
        g.edge(states[i], picks[i])
        for follower in follows[n]:
            g.edge(picks[i], states[index[follower]], when=named_guard(picked, index[follower]), label=follower)
    return g


def picked(ctx: SelectorContext, i: int) -> bool:
    """the selector picked this speaker"""
    return ctx.state.next == i


class SelectorGroupChat(Pattern, kind="selector_group_chat", config=SelectorConfig):
    """A group chat where a model (or a function) picks who speaks next: AutoGen's ``SelectorGroupChat``.

    After each reply the selector is asked, with a forced ``select_speaker`` tool whose ``speaker``
    is an enum of the candidates allowed now, who speaks next; the picked participant replies to the
    shared conversation. ``allowed`` says who may follow whom (drawn: one edge per pair),
    ``allow_repeat`` whether a speaker may follow itself, ``candidates`` narrows a turn's
    candidates. A pick that names no candidate is asked again (``max_selector_attempts`` calls in
    all), then the first candidate in turn order speaks (``selector_fallback`` event). A run stops
    on ``until`` (``"until"``), a repeated cycle (``"livelock"``) or ``max_turns`` replies
    (``"max_turns"``). Model calls: at most ``max_turns`` per participant and ``max_turns x
    max_selector_attempts`` for the selector (``max_calls``). AutoGen's spellings are accepted:
    ``allow_repeated_speaker``, ``candidate_func``, ``selector_func``.

    Args:
        *args: The fields of ``SelectorConfig`` by position (``participants``, ``selector``, ...).
        **kwargs: The fields by name, or by AutoGen's spellings.
        interrupt_before: States where the run stops for a person before entering them.
        interrupt_after: States where the run stops for a person after leaving them.

    Examples:
        >>> from fsmchat import SelectorGroupChat
        >>> def planner(turn):
        ...     return "Plan: write it, then test it."
        >>> def coder(turn):
        ...     return "Code written."
        >>> def tester(turn):
        ...     return "Tests pass."
        >>> def who(messages):
        ...     return {"planner": "coder", "coder": "tester"}.get(messages[-1].role)
        >>> chat = SelectorGroupChat([planner, coder, tester], selector=who, start="planner", max_turns=4)
        >>> result = chat.execute("Add a health check.")
        >>> [m.role for m in result.transcript], result.stop_reason
        (['User', 'planner', 'coder', 'tester', 'planner'], 'max_turns')
    """

    config: SelectorConfig

    ALIASES = {"allow_repeated_speaker": "allow_repeat", "candidate_func": "candidates",
               "selector_func": "selector"}

    def __init__(self, *args: object, interrupt_before: Sequence[str] | None = None,
                 interrupt_after: Sequence[str] | None = None, **kwargs: object) -> None:
        super().__init__(*args, interrupt_before=interrupt_before, interrupt_after=interrupt_after,
                         **renamed(kwargs, self.ALIASES, "SelectorGroupChat"))

    def _calls_by_speaker(self) -> list[tuple[Speaker, int]]:
        """Each participant at most max_turns replies; an Agent selector max_turns x max_selector_attempts."""
        cfg = self.config
        calls: list[tuple[Speaker, int]] = [(a, cfg.max_turns) for a in cfg.participants]
        sel = self._selector()
        if isinstance(sel, Agent):
            calls.append((sel, cfg.max_turns * cfg.max_selector_attempts))
        return calls

    def _compile(self) -> StateGraph:
        cfg = self.config
        return compile_selector(cfg.follows(), start=cfg.start, until=cfg.until is not None,
                                people=sorted(people_in(cfg.participants)), description=cfg.description)

    def _speaking_states(self, g: StateGraph) -> list[tuple[str, list[Speaker]]]:
        agents = self.config.participants
        states = state_names([a.name for a in agents], reserved=["seed", "select", "stop"], fallback="speaker")
        return [(state, [a]) for state, a in zip(states, agents)]

    def _context(self, task: str) -> SelectorContext:
        cfg = self.config
        return SelectorContext(task, list(cfg.participants), config=cfg, selector=self._selector(),
                               follows=cfg.follows())

    def _selector(self) -> Agent | Selector:
        sel = self.config.picker()
        if self.config.selector is None:  # the same default agent every run (its calls are counted under its name)
            sel = self.__dict__.setdefault("_default_selector", sel)
        return sel


def example_graph() -> StateGraph:
    """SelectorGroupChat's graph for the gallery: a planner, a coder and a tester."""
    return compile_selector({"planner": ["coder", "tester"], "coder": ["planner", "tester"],
                             "tester": ["planner", "coder"]},
                            description="SelectorGroupChat: after each reply the selector picks who speaks next")


__all__ = ["SelectionError", "SelectorConfig", "SelectorContext", "SelectorGroupChat", "SelectorState",
           "compile_selector"]
