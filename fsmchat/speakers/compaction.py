"""Layer 10, speakers: compaction as a graph state: a long conversation summarised before it outgrows the window.

``add_compaction(g, state, speakers, policy)`` draws, for a speaking state where a speaker follows
a ``Summarize`` policy (its own ``context``, or the pattern's ``policy``), ``state -[compact]->
compact_<state> -> state`` (the new edge tried first). The state's action is wrapped
(``compacting_action``): before anyone speaks it counts the conversation each such speaker would
see (its system prompt, the task, the latest summary and the messages since) against the fraction
``at`` of its model's input limit; past it, the action ends at once (its payload is
``"compact"``), ``compact_<state>`` asks the policy's ``agent`` for one summary of the messages
before the last ``keep_last`` (and of the previous summary), records it as a ``compacted`` event
of the run (so the checkpoint holds it and a resume reads it instead of asking again), and the
state runs again, its calls carrying the summary in place of the messages it covers.

A graph where no speaker follows ``Summarize`` is unchanged. Each visit of the state compacts at
most once (a compaction needs a message it has not covered), so the calls it adds are at most
the state's visits (``compaction_calls``).
"""
from __future__ import annotations

from typing import Awaitable, Callable, Protocol, Sequence, TypeVar, runtime_checkable

from ..errors import ConfigError
from ..graph.state_graph import StateGraph, Transition, state_names
from ..models import Message, Transcript
from .agent import Turn, shared_view
from .llm import CallStats
from .context import Compaction, ContextPolicy, ContextState, Summarize, count_tokens, input_limit, \
    act_under, policy_of, summary_row, view
from .providers import resolve_model
from .speaker import Speaker

C = TypeVar("C")  # a graph's context: a compaction reads its transcript, stats, events and context_state


@runtime_checkable
class Prompted(Speaker, Protocol):
    """A speaker whose prompt a compaction counts (an ``Agent``): its system prompt and model."""

    @property
    def system_prompt(self) -> str:
        """Its system prompt."""

    @property
    def model(self) -> str | None:
        """Its model's name."""

COMPACTED = "compacted"  # the event a compaction records (its summary, what it covers)

SUMMARY_INSTRUCTION = ("Summarise the conversation above for the participants who continue it: keep every "
                       "decision, open question, fact and name they need, in plain prose, as briefly as you can.")


def summarizers(speakers: Sequence[Speaker], policy: ContextPolicy | None) -> list[Summarize]:
    """The distinct ``Summarize`` policies ``speakers`` follow (their own, else ``policy``)."""
    out: list[Summarize] = []
    for s in speakers:
        p = policy_of(s, policy)
        if isinstance(p, Summarize) and not any(p is q for q in out):
            out.append(p)
    return out


def state_of(ctx: object) -> ContextState:
    """The run's ``ContextState`` on ``ctx`` (made on first use, its summary the latest
    ``compacted`` event: a resumed run reads the one its checkpoint holds)."""
    st = getattr(ctx, "context_state", None)
    if st is None:
        st = ContextState()
        for e in reversed(_events(ctx)):
            if isinstance(e, dict) and e.get("event") == COMPACTED:
                st.summary = Compaction(int(e["upto"]), str(e["summary"]), str(e["by"]))
                break
        setattr(ctx, "context_state", st)
    assert isinstance(st, ContextState)
    return st


def _events(ctx: object) -> list[object]:
    events = getattr(ctx, "events")
    assert isinstance(events, list), "a run's context has its events (RunContext.events)"
    return events


def _transcript(ctx: object) -> Transcript:
    transcript = getattr(ctx, "transcript")
    assert isinstance(transcript, Transcript), "a run's context has its transcript (RunContext.transcript)"
    return transcript


def visible_tokens(speaker: Prompted, rows: Sequence[Message], policy: Summarize, summary: Compaction | None,
                   head: int = 1) -> int:
    """The tokens of the conversation ``speaker`` would see (its system prompt, the task, the
    summary, the messages since): what a compaction is decided on. ``head`` is 1 where the
    first row is the task, kept ahead of the summary; 0 where there is none (a flow's transcript)."""
    messages: list[dict[str, object]] = [{"role": "system", "content": speaker.system_prompt}] \
        if speaker.system_prompt.strip() else []
    shown = view(rows, policy, summary) if head else rows if summary is None else [summary_row(summary), *rows[summary.upto:]]
    messages += shared_view(speaker.name, shown)
    return count_tokens(resolve_model(speaker.model), messages)


def due(ctx: object, speakers: Sequence[Speaker], policy: ContextPolicy | None, head: int = 1) -> Summarize | None:
    """The ``Summarize`` whose compaction must run before the state speaks, or None: a speaker
    following it would see more than ``at`` of its input limit, and there are messages to fold."""
    st = state_of(ctx)
    rows = _transcript(ctx).view()
    start = st.summary.upto if st.summary is not None else head
    for s in speakers:
        p = policy_of(s, policy)
        if not isinstance(p, Summarize) or len(rows) - p.keep_last <= start:
            continue
        limit = input_limit(s)
        if limit is not None and isinstance(s, Prompted) and visible_tokens(s, rows, p, st.summary, head) > \
                p.at * limit[0]:
            return p
    return None


def compacting_action(action: Callable[[C], object], speakers: Sequence[Speaker],
                      policy: ContextPolicy | None, head: int = 1) -> Callable[[C], Awaitable[object]]:
    """``action`` as a state with a compaction: it ends at once (payload ``"compact"``) when a
    compaction is due; otherwise its calls read the pattern's policy and the run's summary."""

    async def speaking(ctx: C) -> object:
        st = state_of(ctx)
        st.policy = policy
        st.due = due(ctx, speakers, policy, head)
        if st.due is not None:
            return "compact"
        return await act_under(st, action, ctx)

    speaking.__name__ = getattr(action, "__name__", "speak")
    speaking.__doc__ = getattr(action, "__doc__", None)
    return speaking


def compaction_due(ctx: object) -> bool:
    """the conversation nears the input limit"""
    st = getattr(ctx, "context_state", None)
    return isinstance(st, ContextState) and st.due is not None


def make_compact(state: str, speakers: Sequence[Speaker], policy: ContextPolicy | None,
                 head: int = 1) -> Callable[[object], Awaitable[dict[str, object]]]:
    async def compact(ctx: object) -> dict[str, object]:
        """summarise the older messages (one model call)"""
        st = state_of(ctx)
        p = st.due or due(ctx, speakers, policy, head) or summarizers(speakers, policy)[0]  # a resume re-decides
        transcript = _transcript(ctx)
        rows = transcript.view()
        start = st.summary.upto if st.summary is not None else head
        cut = max(start, len(rows) - p.keep_last)
        shown = [*rows[:head], *([] if st.summary is None else [summary_row(st.summary)]), *rows[start:cut]]
        writer = p.agent
        stats = getattr(ctx, "stats", None)
        stats = stats if isinstance(stats, CallStats) else None
        text = transcript.admit(writer.name, await writer.reply(Turn(writer.name, shown, SUMMARY_INSTRUCTION,
                                                                     stats=stats)))
        st.summary, st.due = Compaction(cut, text, writer.name), None
        record = {"event": COMPACTED, "state": state, "by": writer.name, "covers": [start + 1, cut],
                  "upto": cut, "summary": text}
        _events(ctx).append(record)
        return {"by": writer.name, "covers": [start + 1, cut]}

    return compact


def add_compaction(g: StateGraph[C], state: str, speakers: Sequence[Speaker], policy: ContextPolicy | None,
                   head: int = 1) -> StateGraph[C]:
    """Draw the compaction of ``state``, where ``speakers`` speak under the pattern's ``policy``:
    ``state -[compact]-> compact_<state> -> state`` (the new edge tried first). Nothing changes
    when no speaker follows ``Summarize``. ``head``: 1 where the transcript's first row is the
    task (kept, never summarised), 0 where it has none (a flow's). Returns the graph.

    Raises:
        ConfigError: Speakers of one state follow different ``Summarize`` policies (a run keeps
            one summary of its conversation).
    """
    found = summarizers(speakers, policy)
    if not found:
        return g
    if len(found) > 1:
        raise ConfigError(f"state {state!r}: its speakers follow {len(found)} different Summarize policies "
                          f"({', '.join(map(repr, found))}); a run keeps one summary of its conversation, so give "
                          "them one Summarize object (or set it once on the pattern: context=Summarize(...))")
    s = g.states[state]
    assert s.action is not None, f"state {state!r} speaks but has no action"
    s.action = compacting_action(s.action, speakers, policy, head)
    (name,) = state_names([f"compact_{state}"], reserved=g.states)
    g.state(name, make_compact(state, speakers, policy, head), f"{found[0].agent.name}: summarise the older messages")
    first = next((i for i, t in enumerate(g.transitions) if t.source == state), len(g.transitions))
    g.transitions.insert(first, Transition(state, name, compaction_due, "compact", first))
    g.edge(name, state)
    for i, t in enumerate(g.transitions):
        t.order = i
    return g.changed()


def compaction_calls(states: Sequence[tuple[str, Sequence[Speaker]]], calls: Sequence[tuple[object, int]],
                     policy: ContextPolicy | None) -> list[tuple[Speaker, int]]:
    """(summary writer, the most compactions of a run) for each speaking state with a compaction:
    one per visit at most, and a state is visited at most as often as its busiest speaker is asked."""
    asked = {id(s): n for s, n in calls}
    out: list[tuple[Speaker, int]] = []
    for _state, speakers in states:
        found = summarizers(speakers, policy)
        if found:
            out.append((found[0].agent, max((asked.get(id(s), 0) for s in speakers), default=0)))
    return out


def check_limits(states: Sequence[tuple[str, Sequence[Speaker]]], policy: ContextPolicy | None, owner: str) -> None:
    """Refuse, before any model call, a ``Summarize`` speaker whose model's input limit is unknown."""
    for _state, speakers in states:
        for s in speakers:
            if isinstance(policy_of(s, policy), Summarize) and input_limit(s) is None:
                raise ConfigError(f"{owner}: agent {s.name!r} follows Summarize, which compacts at a fraction of "
                                  f"its model's input limit, but {resolve_model(getattr(s, 'model', None))!r} has "
                                  f"none in litellm's model map: give the agent one "
                                  f"(Agent({s.name!r}, max_input_tokens=N))")


def check_drawn(states: Sequence[tuple[str, Sequence[Speaker]]], calls: Sequence[tuple[object, int]],
                policy: ContextPolicy | None, owner: str) -> None:
    """Refuse, before any model call, a speaker that follows ``Summarize`` where no compaction is
    drawn for it (a flow's ``Task`` step, whose prompt carries no conversation to compact)."""
    drawn = {id(s) for _state, speakers in states for s in speakers}
    for s, _n in calls:
        if id(s) not in drawn and isinstance(getattr(s, "context", None), Summarize):
            raise ConfigError(f"{owner}: agent {getattr(s, 'name', s)!r} follows Summarize, but {owner} draws no "
                              "compaction for it (compaction is drawn in the speaking states of GroupChat and "
                              "RoundRobinSwarm, and in a flow's Discussion turns; OneOnOneDebate's and "
                              "ExpertPanelDiscussion's speakers answer from private memories, which it does "
                              "not shorten; a flow's Task step sends one prompt, no conversation to "
                              "compact); give it context=LastMessages(n) here, or run its conversation as a "
                              "Discussion or one of those patterns")
