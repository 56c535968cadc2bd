"""Budgets and deadlines as stop transitions: ``max_tokens``, ``max_cost_usd``,
``max_model_calls``, ``max_tool_calls`` and ``deadline_s``. ``add_limit_edges`` gives every non-final state a first,
guarded way out (``[over_budget] -> over_budget``, ``[past_deadline] -> past_deadline``) in every
nested level, so the run stops at the next state boundary and the diagram shows it."""
from __future__ import annotations

import time
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from .checks import Amount, Count
from .errors import invalid_config
from .models import MAX_MESSAGE_CHARS, StopReason
from .graph.state_graph import StateGraph, Transition


PRICE = Amount(ge=0, meaning="US dollars per 1,000 prompt or completion tokens")


class Limits(BaseModel):
    """Per-run budgets and deadline, drawn as stop edges (``over_budget``, ``past_deadline``).

    Set them with ``pattern.with_limits(...)``: every non-final state gains a first, guarded way
    out, so a run stops at the next state boundary with ``stop_reason="budget"`` or
    ``"deadline"`` and the transcript so far.

    Args:
        **data: The fields below, by keyword.

    Attributes:
        max_tokens: The most tokens (prompt and completion) of the run.
        max_cost_usd: The most the run's model calls may cost, in US dollars.
        max_model_calls: The most requests (retries included); a request that would cross it is
            not sent.
        max_tool_calls: The most tool calls the run's agents may make; a reply whose calls would
            cross it runs none of them and the run stops with ``"budget"``.
        deadline_s: Seconds the run may take; a call still running then is cut.
        price_per_1k_tokens: ``(prompt, completion)`` prices for models litellm cannot price.
        max_message_chars: The most characters one message keeps (longer ones are cut, with an event).
        refuse_over_bound: Refuse, before any call, a run whose worst case exceeds ``max_model_calls``.

    Raises:
        ConfigError: A field is out of bounds (the message names it).
        ConfigTypeError: A number is a bool, a string or (for a count) a float.

    Examples:
        >>> from fsmchat import Agent, Limits, RoundRobinSwarm
        >>> chat = RoundRobinSwarm(agents=[Agent("A"), Agent("B")], max_loops=3).with_limits(max_model_calls=2)
        >>> result = chat.execute("Ship it?")
        >>> result.stop_reason, result.calls, result.path
        ('budget', 2, ['seed', 'A', 'B', 'A', 'over_budget'])
        >>> Limits(max_model_calls=0)
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Limits: max_model_calls=0 is invalid: an int >= 1 or None (the most requests of the run, retries included)
        >>> Limits(deadline_s="30")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigTypeError: Limits: deadline_s='30' is invalid: a finite number > 0 or None (seconds the run may take), not a str
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    # each number by the one rule (fsmchat.checks.Number): a bool or a numeric string is refused, never taken as 1 or 5
    max_tokens: Annotated[int | None, Count(1, "the most tokens of the run, prompt and completion")] = None
    max_cost_usd: Annotated[float | None, Amount(gt=0, meaning="US dollars the run's model calls may cost")] = None
    max_model_calls: Annotated[int | None, Count(1, "the most requests of the run, retries included")] = None
    max_tool_calls: Annotated[int | None, Count(0, "the most tool calls of the run")] = None
    deadline_s: Annotated[float | None, Amount(gt=0, meaning="seconds the run may take")] = None
    price_per_1k_tokens: tuple[Annotated[float, PRICE], Annotated[float, PRICE]] | None = None
    max_message_chars: Annotated[int, Count(1, "the most characters one message keeps; longer ones are cut, "
                                              "with an event")] = MAX_MESSAGE_CHARS
    refuse_over_bound: bool = Field(False, strict=True)  # refuse a run whose worst-case calls exceed max_model_calls

    def __init__(self, **data: object):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_config("Limits", exc) from None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """``max_tool_calls`` is written only when set: configs and checkpoints written before it
        existed read back equal."""
        out: dict[str, object] = handler(self)
        if out.get("max_tool_calls") is None:
            out.pop("max_tool_calls", None)
        return out

    @property
    def has_budget(self) -> bool:
        """Whether a token, cost, call or tool-call budget is set."""
        return any(v is not None for v in (self.max_tokens, self.max_cost_usd, self.max_model_calls,
                                           self.max_tool_calls))


class RunStats(Protocol):
    """What the limits read and set of a run's counts (``fsmchat.speakers.llm.CallStats``, which
    sits above this layer)."""

    attempts: int
    over_cap: bool
    usage: dict[str, int]
    cost_usd: float
    limit_hit: str | None
    deadline: float | None  # time.monotonic() by which the run must end
    price: tuple[float, float] | None
    max_requests: int | None
    max_tool_calls: int | None


def over(limits: Limits, stats: RunStats) -> str | None:
    """Which budget ``stats`` has reached, if any. ``max_model_calls`` counts requests (retries
    included) and is a hard cap: it is reached when a request, or a GroupChat bid round, was refused
    because it would cross the cap (so a round that fits completes and its post is kept). Tokens
    and cost stop at the first state boundary after they are crossed."""
    if limits.max_model_calls is not None and (stats.attempts > limits.max_model_calls or stats.over_cap):
        return "max_model_calls"
    if limits.max_tool_calls is not None and getattr(stats, "tool_over_cap", False):
        return "max_tool_calls"
    if limits.max_tokens is not None and stats.usage.get("total_tokens", 0) >= limits.max_tokens:
        return "max_tokens"
    if limits.max_cost_usd is not None and stats.cost_usd >= limits.max_cost_usd:
        return "max_cost_usd"
    return None


def add_limit_edges(graph: StateGraph, limits: Limits) -> StateGraph:
    """Insert the budget/deadline exits into ``graph`` and its subgraphs (in place); returns it."""
    # a guard is given the graph's context (``Callable[[object], bool]``): here a pattern's RunContext
    def over_budget(ctx: Any) -> bool:
        """a budget is spent"""
        stats = ctx.stats.run  # a branch's stats are a lane of the run's: the budget is the run's
        which = over(limits, stats)
        if which is not None:
            stats.limit_hit = which
        return which is not None

    def past_deadline(ctx: Any) -> bool:
        """deadline_s has passed"""
        deadline = ctx.stats.run.deadline
        return deadline is not None and time.monotonic() >= deadline

    done: set[int] = set()

    def transform(g: StateGraph) -> None:
        guards = ([("over_budget", over_budget, StopReason.BUDGET)] if limits.has_budget else []) + \
                 ([("past_deadline", past_deadline, StopReason.DEADLINE)] if limits.deadline_s is not None else [])
        if not guards or id(g) in done:  # a graph nested in two places is transformed once
            return
        done.add(id(g))
        for s in list(g.states.values()):
            if s.subgraph is not None:
                transform(s.subgraph)
            for branch in s.branches:  # fork states' sub-runs (parallel, loop(parallel=True)) too
                transform(branch)
        new: list[Transition] = []
        for name, s in g.states.items():
            if s.final:
                continue
            new += [Transition(name, final, guard, final) for final, guard, _ in guards]
            new += [t for t in g.transitions if t.source == name]
        for final, _, reason in guards:
            g.final(final, f"stop: {reason}", reason=reason)
        g.transitions = [Transition(t.source, t.dest, t.guard, t.label, i) for i, t in enumerate(new)]
        g.changed()

    transform(graph)
    return graph


def start_clock(limits: Limits | None, stats: RunStats) -> None:
    if limits is not None:
        stats.price = limits.price_per_1k_tokens
        stats.max_requests = limits.max_model_calls  # a hard cap: acomplete never sends past it
        stats.max_tool_calls = limits.max_tool_calls  # a hard cap: no tool call runs past it
        if limits.deadline_s is not None:
            stats.deadline = time.monotonic() + limits.deadline_s
