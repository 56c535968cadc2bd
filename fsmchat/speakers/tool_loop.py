"""Layer 10: the one speaking block every pattern uses, and tool rounds as graph states.

Every place an agent produces a message (round robin, debate and panel turns, ``Discussion``
turns, flow agent steps, GroupChat bids, hub replies) asks through the run's ``ToolLoop``
(``ctx.tool_loop.speak`` / ``.bid``). Without tools that is the speaker's own ``reply``/``bid``.

**Tool rounds are graph states.** ``add_tool_loop(g, state, speakers)`` draws, for a state where
an agent with tools speaks, ``state -[tool_calls]-> tools_<state> -> state`` and a wait point
``tools_<state> -[needs_person]-> approve_<state> -> tools_<state>`` (where a person approves a
call, or decides on a call whose result was not committed). The state's action is wrapped
(``tool_action``): when the model answers with tool calls, the speaking block records them and
ends the action early (``ToolRound``); the step is committed; ``tools_<state>`` runs the calls
(concurrently, up to the agent's ``max_parallel_tools``, results in call order) and its step
commits their results; the state runs again and its model call carries the calls and their
results (OpenAI's assistant ``tool_calls`` and ``tool`` messages with matching ids). The agent's
final reply is posted with its tool calls attached (``Message.metadata["tool_calls"]``, read typed
as ``Message.tool_calls``). A graph with no agent with tools is unchanged. Each turn makes at most
``1 + max_tool_rounds`` model calls (``fsmchat.speakers.tools.calls_per_turn``); once the rounds
are used the model is asked to answer without tools.

A hub channel (``fsmchat.network``) draws the same states and actions (``events=True``); its agent
speaks through ``tool_action`` and the channel steps the states, committing each step to its log.
A direct ``agent.reply(turn)`` takes its rounds in place on its run's tool sources (``direct_loop``).

A resumed run never calls a tool whose result was committed. A call that was asked for but whose
result was not committed when the run stopped is run again on resume only when its tool is
``idempotent=True``; otherwise the run waits at ``approve_<state>`` with the call's name and
arguments, where a person approves a re-run (``Approve``), supplies the result (``Say``) or
rejects it (``Reject``).
"""
from __future__ import annotations

import asyncio
import contextvars
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncGenerator, Awaitable, Callable, Mapping, Sequence, TypeVar

from ..checks import as_object, as_opt_list, as_opt_object, get_int, get_str
from ..engine import mark_effects_pending
from ..errors import BudgetExceeded, DeadlineExceeded, FsmchatError, Interrupted
from ..graph.state_graph import StateGraph, Transition, is_awaitable, state_names
from ..common.masking import redact, redact_chain
from . import llm
from .handoff import HandoffCall, find_handoff, handoffs_of
from .human import USER, Approve, Edit, People, Reject, Say, tool_call_request
from .respond import BidOutcome, bid_from_arguments, silent
from .speaker import Speaker, ToolSpeaker, tooled
from .tools import DEFAULT_MAX_PARALLEL_TOOLS, CallParts, Tool, ToolArgumentsError, ToolError, ToolSource, calls_of, \
    changed_tools, has_tools, is_schema_dict, json_bidder_with_tools, needs_approval, tool_digest

if TYPE_CHECKING:  # the turn a speaker is given is the agent module's (which imports this one)
    from ..checks import JsonValue
    from .agent import Turn


C = TypeVar("C")  # a graph's context: the tool loop's states read its tool_loop, events, stats and people


class ToolRound(FsmchatError):
    """The speaking block's signal: the model asked for tool calls, which the state's tool loop
    runs before the state is entered again (``tool_action`` catches it; it never ends a run)."""


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
    arguments: object  # the validated dict, or the model's raw text when it was not valid
    status: str = "asked"
    result: str | None = None
    error: str | None = None
    duration_s: float | None = None
    reason: str = ""  # why it waits for a person: "approval" | "rerun"

    @property
    def resolved(self) -> bool:
        return self.status in ("done", "error", "rejected")

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments, "status": self.status,
                "result": self.result, "error": self.error, "duration_s": self.duration_s, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> "CallRecord":
        took, result, error = d.get("duration_s"), d.get("result"), d.get("error")
        return cls(str(d["id"]), str(d["name"]), d.get("arguments"), str(d.get("status") or "asked"),
                   None if result is None else str(result), None if error is None else str(error),
                   float(took) if isinstance(took, (int, float)) else None, str(d.get("reason") or ""))

    def entry(self) -> dict[str, object]:
        """What the posted message carries (``Message.metadata["tool_calls"]``)."""
        known = {"result": self.result, "error": self.error,
                 "duration_s": None if self.duration_s is None else round(self.duration_s, 6)}
        return {"id": self.id, "name": self.name, "arguments": self.arguments, "status": self.status,
                **{k: v for k, v in known.items() if v is not None}}


@dataclass
class Exchange:
    """One speaker's turn in progress: the tool rounds so far (wire messages and call records)
    and, once it has one, the answer (kept until the state's action completes)."""

    speaker: str
    rounds: int = 0
    messages: list[dict[str, JsonValue]] = field(default_factory=list)  # assistant tool_calls + tool results, in order
    calls: list[CallRecord] = field(default_factory=list)  # every call of the turn, in order
    answer: str | BidOutcome | None = None
    answered: bool = False
    marks: list[str] = field(default_factory=list)  # what the state's action already did with the answer
    share: bool = False  # the speaker shares its tool calls with the others (Agent.share_tool_results)

    def pending(self) -> list[CallRecord]:
        return [c for c in self.calls if not c.resolved]

    def to_dict(self) -> dict[str, object]:
        answer: object = self.answer
        if isinstance(answer, BidOutcome):
            answer = {"score": answer.score, "message": answer.message, "bid": True}
        return {"speaker": self.speaker, "rounds": self.rounds, "messages": list(self.messages),
                "calls": [c.to_dict() for c in self.calls], "answer": answer, "answered": self.answered,
                "marks": list(self.marks), "share": self.share}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> "Exchange":
        saved = d.get("answer")  # a reply's text, or a bid as a dict
        answer: str | BidOutcome | None = None if saved is None else str(saved)
        if isinstance(saved, dict) and saved.get("bid"):
            answer = bid_from_arguments({"score": saved["score"], "message": saved["message"]})
        items = {k: as_opt_list(d.get(k), f"exchange.{k}") for k in ("messages", "calls", "marks")}
        return cls(get_str(d, "speaker", "exchange"), get_int(d, "rounds", "exchange", 0),
                   [as_object(m, "exchange.messages") for m in items["messages"]],
                   [CallRecord.from_dict(as_object(c, "exchange.calls")) for c in items["calls"]], answer,
                   bool(d.get("answered")), [str(m) for m in items["marks"]], bool(d.get("share")))

    def tool_messages(self) -> list[dict[str, JsonValue]]:
        """The wire messages of the rounds so far, results filled in (one ``tool`` message per call)."""
        out: list[dict[str, JsonValue]] = []
        by_id = {c.id: c for c in self.calls}
        for m in self.messages:
            out.append(m)
            calls = m.get("tool_calls") if m.get("role") == "assistant" else None
            for call in calls if isinstance(calls, list) else ():
                rec = by_id.get(str(call["id"])) if isinstance(call, dict) else None
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


def note_offline_unmatched(speaker: ToolSpeaker, turn: Turn, tools: Sequence[Tool]) -> None:
    """The offline model answered a turn it was offered ``tools`` in without calling one (none of
    their words matched what it was asked): an ``offline_no_tool_call`` event (``agent``,
    ``tools``: their names, ``request``: the first words of what was asked), which ``fsmchat run``
    shows under the message. A real model choosing not to call a tool is no event."""
    events = getattr(getattr(turn, "stats", None), "events", None)
    if events is None or not tools or not hasattr(speaker, "model") or \
            not llm.resolve_model(speaker.model).startswith(llm.OFFLINE_PROVIDER + "/"):
        return
    history = getattr(turn, "history", None) or []
    asked = next((str(m.get("content") or "") for m in history if m.get("role") == "user"), None) or \
        next((m.content for m in turn.transcript if m.role == USER), None) or turn.instruction
    words = str(asked).split()
    events.append({"event": "offline_no_tool_call", "agent": speaker.name, "tools": [t.name for t in tools],
                   "request": " ".join(words[:REQUEST_WORDS]) + ("..." if len(words) > REQUEST_WORDS else "")})


REQUEST_WORDS = 8  # the words of the request an offline_no_tool_call event keeps


class ToolLoop:
    """A run's tool state (``ctx.tool_loop``): each speaker's turn in progress, the tool sources
    started this run, the tool calls made. The speaking block (``speak``, ``bid``) is here."""

    def __init__(self) -> None:
        self.exchanges: dict[str, Exchange] = {}
        self.active = False  # a state with a tool loop is running its action
        self.approve_all = False  # interrupt_before=["tools"]: every call waits for a person
        self.offered: dict[str, list[str]] = {}  # each tool source's tool names this run
        self.digests: dict[str, dict[str, str]] = {}  # each tool source's {tool: tool_digest}, checked on resume
        self._sources: dict[int, tuple[ToolSource, list[Tool] | None]] = {}  # started sources, their tools
        # (None: not listed yet)
        self._starting: asyncio.Lock | None = None  # made in the run's loop on first use
        self.used = False
        self.last: dict[str, list[dict[str, object]]] = {}  # the tool calls of the last state's answered turns
        self.handoffs: dict[str, HandoffCall] = {}  # a turn that ended in a handoff, by speaker (the pattern pops it)
        self.speakers: dict[str, ToolSpeaker] = {}  # who spoke each turn in progress (its tools run the calls)
        self.ask: Callable[[dict[str, object]], Awaitable[object]] | None = None  # how a person decides
        # (None: ctx.people)

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
    async def tools_of(self, speaker: Speaker) -> list[Tool]:
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

    async def _start_source(self, t: ToolSource, speaker: Speaker) -> None:
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

    async def check_sources(self, speakers: Sequence[Speaker]) -> None:
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
    async def speak(self, speaker: Speaker, turn: Turn) -> str:
        """``speaker``'s reply to ``turn``: the one path of every reply. Without tools it is
        ``speaker.reply(turn)``. With tools, inside a state drawn with its tool loop, a reply with
        tool calls records them and raises ``ToolRound`` (the loop runs them, the state runs again);
        outside one (a direct call) the calls are run inline until the model answers."""
        if not tooled(speaker):
            if self.active:
                return str(await self._cached(speaker, lambda: speaker.reply(turn)))
            return str(await speaker.reply(turn))
        self.used = True
        if not self.active:
            return await self._inline(speaker, turn)
        ex = self.exchanges.setdefault(speaker.name, Exchange(speaker.name))
        ex.share = bool(getattr(speaker, "share_tool_results", False))
        self.speakers[speaker.name] = speaker
        if ex.answered:
            return str(ex.answer)
        if ex.pending():
            raise ToolRound(f"{speaker.name}: tool calls pending")
        tools = await self.tools_of(speaker)
        final = ex.rounds >= speaker.max_tool_rounds
        message = await speaker.tool_message(turn, ex.tool_messages(), offered(speaker, tools), final=final)
        calls = calls_of(message)
        text = (getattr(message, "content", None) or "").strip()
        handed = self._handoff(speaker, calls, text)
        if handed is not None:
            ex.answer, ex.answered = handed, True
            return handed
        if calls and not final:
            self._record(ex, speaker, tools, message, calls)
            raise ToolRound(f"{speaker.name}: {len(calls)} tool call(s)")
        if calls and not text:
            raise ToolError(f"agent {speaker.name!r} still asked for tools ({', '.join(n for _, n, _ in calls)}) "
                            f"after max_tool_rounds={speaker.max_tool_rounds}; raise max_tool_rounds or tell it to "
                            "answer", agent=speaker.name, tool=calls[0][1], arguments=calls[0][2])
        if not calls and not final and not ex.rounds:
            note_offline_unmatched(speaker, turn, tools)
        ex.answer, ex.answered = text, True
        return text

    async def bid(self, speaker: Speaker, turn: Turn) -> BidOutcome:
        """``speaker``'s bid: ``speaker.bid(turn)`` without tools; with tools, the model is offered
        its tools and ``respond`` (it must call one: ``tool_choice="required"``); tool calls are a
        tool round, a ``respond`` call is the bid; once ``max_tool_rounds`` are used ``respond`` is forced.
        A bidder with tools whose bids would go in JSON mode (the model's text, which cannot call
        tools) is a ``ToolError`` before its model call, never a bid without its tools."""
        if not (has_tools(speaker) and hasattr(speaker, "tool_message") and tooled(speaker)):
            out = await (self._cached(speaker, lambda: speaker.bid(turn)) if self.active else speaker.bid(turn))
            assert isinstance(out, BidOutcome)
            return out
        if getattr(speaker, "resolved_tool_mode", "native") != "native":
            raise json_bidder_with_tools(speaker.name, f"its model {getattr(speaker, 'model', None)!r} refused tools "
                                         "earlier in this process" if speaker.tool_mode is None
                                         else f"tool_mode={speaker.tool_mode!r}")
        self.used = True
        ex = self.exchanges.setdefault(speaker.name, Exchange(speaker.name))
        self.speakers[speaker.name] = speaker
        if ex.answered:
            assert isinstance(ex.answer, BidOutcome)
            return ex.answer
        if ex.pending():
            raise ToolRound(f"{speaker.name}: tool calls pending")
        tools = await self.tools_of(speaker)
        final = ex.rounds >= speaker.max_tool_rounds
        message = await speaker.tool_message(turn, ex.tool_messages(), [t.spec() for t in tools], final=final,
                                             bid=True)
        calls = calls_of(message)
        respond = [c for c in calls if c[1] == "respond"]
        if respond:
            outcome = bid_from_arguments(respond[0][2])
            if len(calls) == 1 and not final and not ex.rounds:
                note_offline_unmatched(speaker, turn, tools)
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

    async def _cached(self, speaker: Speaker,
                      ask: Callable[[], Awaitable[str | BidOutcome]]) -> str | BidOutcome | None:
        """A speaker without tools in a state with a tool loop: its answer is kept until the
        state's action completes, so entering the state again after a tool round asks it once."""
        ex = self.exchanges.get(speaker.name)
        if ex is not None and ex.answered:
            return ex.answer
        answer = await ask()
        ex = self.exchanges[speaker.name] = Exchange(speaker.name, answer=answer, answered=True)
        return answer

    async def _inline(self, speaker: ToolSpeaker, turn: Turn) -> str:
        """A direct call (no tool loop drawn): run the tool rounds in place, then return the reply."""
        ex = Exchange(speaker.name)
        tools = await self.tools_of(speaker)
        while True:
            final = ex.rounds >= speaker.max_tool_rounds
            message = await speaker.tool_message(turn, ex.tool_messages(), offered(speaker, tools), final=final)
            calls = calls_of(message)
            text = (getattr(message, "content", None) or "").strip()
            handed = self._handoff(speaker, calls, text)
            if handed is not None:
                return handed
            if not calls or final:
                if calls and not text:
                    raise ToolError(f"agent {speaker.name!r} still asked for tools after max_tool_rounds="
                                    f"{speaker.max_tool_rounds}", agent=speaker.name, tool=calls[0][1])
                return text
            self._record(ex, speaker, tools, message, calls)
            self._refuse_waiting(ex, speaker)
            await self.run_exchange(ex, speaker, turn.stats, None)

    def _handoff(self, speaker: Speaker, calls: list[CallParts], text: str) -> str | None:
        """A reply that calls a ``transfer_to_<name>`` tool ends the turn in a handoff: it is kept
        for the pattern (``handoffs``) and the reply's text is returned (its own text, else the
        handoff's message, else "Transferred to <name>."); other calls of that reply do not run."""
        call = find_handoff(speaker, calls)
        if call is None:
            return None
        self.handoffs[speaker.name] = call
        return text or call.message or f"Transferred to {call.target}."

    @staticmethod
    def _refuse_waiting(ex: Exchange, speaker: Speaker) -> None:
        """A direct call cannot stop for a person: a call that needs approval is a ``ToolError``."""
        for rec in ex.pending():
            if rec.status == "awaiting":
                raise ToolError(f"tool {rec.name!r} of {speaker.name!r} needs a person's approval, which a direct "
                                "call cannot ask for: run the agent in a pattern with a checkpoint",
                                agent=speaker.name, tool=rec.name, arguments=rec.arguments)

    def _record(self, ex: Exchange, speaker: Speaker, tools: list[Tool], message: object,
                calls: list[CallParts]) -> None:
        """Remember a reply's tool calls (the assistant message as the wire will carry it back)."""
        ex.rounds += 1
        seen = {c.id for c in ex.calls}
        wire: list[JsonValue] = []
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

    async def run_exchange(self, ex: Exchange, speaker: Speaker, stats: llm.CallStats | None, ctx: object) -> None:
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
        run = stats.run if stats is not None else None
        cap = run.max_tool_calls if run is not None else None
        if stats is not None and run is not None and cap is not None and run.tool_calls + len(runnable) > cap:
            stats.refuse_tools_over_cap()
            raise BudgetExceeded(f"max_tool_calls={cap} reached after {run.tool_calls} tool call(s): "
                                 f"{speaker.name}'s {len(runnable)} call(s) ({', '.join(c.name for c in runnable)}) "
                                 "were not run")
        gate = asyncio.Semaphore(max(1, int(getattr(speaker, "max_parallel_tools", DEFAULT_MAX_PARALLEL_TOOLS))))
        deadline = stats.deadline if stats is not None else None
        events = getattr(ctx, "events") if ctx is not None else None
        on_error = getattr(speaker, "on_tool_error", "return")
        raised: dict[str, Exception] = {}  # a failed call's exception: the cause of the run's ToolError
        cut: dict[str, int | None] = {}  # a result's length when it was cut to the tool's max_result_chars

        async def masked_run(tool: Tool, args: dict[str, object], call_id: str) -> str:
            # the one place a tool's text enters the run: its secrets masked (and a long result
            # cut) before a trace hook, the model, the transcript or a store sees it
            try:
                out = await tool.run(args, deadline)
            except Exception as exc:
                redact_chain(exc)
                raise
            text, cut[call_id] = tool.for_model(out)
            return text

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
                        stats.count_tools()
                    hook = TOOL_HOOK.get()
                    if hook is None:
                        rec.result = await masked_run(tool, args, rec.id)
                    else:
                        rec.result = await hook(lambda: masked_run(tool, args, rec.id), speaker.name, rec.name,
                                                rec.id, args)
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
                    rec.error = redact(rec.error) if rec.error else rec.error

        await asyncio.gather(*(one(c) for c in runnable))
        for rec in runnable:
            if cut.get(rec.id) is not None and isinstance(events, list):
                events.append({"event": "tool_result_truncated", "agent": speaker.name, "tool": rec.name,
                                   "call_id": rec.id, "chars": cut[rec.id], "kept": tools[rec.name].max_result_chars})
            if rec.status == "error":
                if isinstance(events, list):
                    events.append({"event": "tool_error", "agent": speaker.name, "tool": rec.name,
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
        self.speakers.clear()

    def entries(self, speaker: str) -> list[dict[str, object]]:
        """The tool calls of ``speaker``'s answered turn, for its posted message."""
        ex = self.exchanges.get(speaker)
        return [c.entry() for c in ex.calls] if ex is not None else []

    def shares(self, speaker: str) -> bool:
        """Whether ``speaker``'s turn in progress shares its tool calls with the others."""
        ex = self.exchanges.get(speaker)
        return ex is not None and ex.share

    # ---- checkpoint ----
    def snapshot(self) -> dict[str, object]:
        """The loop's state as plain data (a checkpoint stores it with the context)."""
        return {"exchanges": {k: ex.to_dict() for k, ex in self.exchanges.items()},
                "offered": {k: list(v) for k, v in self.offered.items()}, "last": dict(self.last),
                "digests": {k: dict(v) for k, v in self.digests.items()}}

    def restore(self, state: Mapping[str, object]) -> None:
        """Set the loop back to a ``snapshot``. A call that may run without asking (asked or
        approved) but has no result may have run when the run stopped: it becomes ``uncertain``."""
        part = {k: as_opt_object(state.get(k), f"tool loop {k}") for k in ("exchanges", "offered", "digests", "last")}
        self.exchanges = {k: Exchange.from_dict(as_object(v, "tool loop exchange"))
                          for k, v in part["exchanges"].items()}
        self.offered = {k: [str(x) for x in as_opt_list(v, "tool loop offered")] for k, v in part["offered"].items()}
        self.digests = {k: {n: str(x) for n, x in as_opt_object(v, "tool loop digests").items()}
                        for k, v in part["digests"].items()}
        self.last = {k: [dict(as_object(e, "tool loop last").items()) for e in as_opt_list(v, "tool loop last")]
                     for k, v in part["last"].items()}
        for ex in self.exchanges.values():
            for c in ex.calls:
                if c.status in ("asked", "approved"):
                    c.status = "uncertain"
        self.used = bool(self.exchanges) or self.used


# ---- the graph block ----
def offered(speaker: Speaker, tools: Sequence[Tool]) -> list[dict[str, object]]:
    """The tool specs a turn of ``speaker`` offers: its tools, then a ``transfer_to_<name>`` per handoff."""
    return [t.spec() for t in tools] + [h.spec() for h in handoffs_of(speaker)]


def loop_of(ctx: object) -> ToolLoop:
    """The run's ``ToolLoop`` on ``ctx`` (made on first use)."""
    loop = getattr(ctx, "tool_loop", None)
    if isinstance(loop, ToolLoop):
        return loop
    loop = ToolLoop()
    setattr(ctx, "tool_loop", loop)
    return loop


def tool_action(action: Callable[[C], object]) -> Callable[[C], Awaitable[object]]:
    """``action`` as the speaking state of a tool loop: its speaking block records tool calls and
    ends it early (the step's payload is then ``"tool_calls"``, and the step says its effects are
    pending: a durable run commits the calls before they run); once it completes, the turns in
    progress are over."""

    async def speaking(ctx: C) -> object:
        loop = loop_of(ctx)
        loop.active = True
        try:
            out = action(ctx)
            if is_awaitable(out):
                out = await out
        except ToolRound:
            mark_effects_pending()  # the calls it asked for are committed before they run
            return "tool_calls"
        finally:
            loop.active = False
        loop.finish()
        return out

    speaking.__name__ = getattr(action, "__name__", "speak")
    speaking.__doc__ = getattr(action, "__doc__", None)
    return speaking


def tool_calls(ctx: object) -> bool:
    """the model asked for tool calls"""
    loop = getattr(ctx, "tool_loop", None)
    return isinstance(loop, ToolLoop) and loop.unresolved()


def needs_person(ctx: object) -> bool:
    """a tool call waits for a person"""
    loop = getattr(ctx, "tool_loop", None)
    return isinstance(loop, ToolLoop) and bool(loop.awaiting())


def make_decide(speakers: Sequence[Speaker]) -> Callable[[object], Awaitable[dict[str, str]]]:
    by_name = {s.name: s for s in speakers}

    async def decide_tool_calls(ctx: object) -> dict[str, str]:
        """a person approves, edits or rejects a waiting tool call"""
        loop = loop_of(ctx)
        speaker, rec = loop.awaiting()[0]
        req = approval_request(speaker, rec)
        if loop.ask is None:
            people = getattr(ctx, "people")
            assert isinstance(people, People), "a run's context has its people (RunContext.people)"
            answer: object = people.ask(req)
        else:
            answer = await loop.ask(req)  # a hub: hub.decide_tool_call
        try:
            kind = await decide_call(loop, loop.speakers.get(speaker) or by_name[speaker], rec, answer)
        except ToolArgumentsError as exc:  # the run keeps waiting, saying why
            raise Interrupted({**req, "prompt": f"{req['prompt']} (the edited arguments were refused: {exc})"}) \
                from None
        events = getattr(ctx, "events")
        if isinstance(events, list):
            events.append({"event": "tool_decision", "agent": speaker, "tool": rec.name, "call_id": rec.id,
                           "decision": kind})
        return {"call_id": rec.id, "decision": kind}

    return decide_tool_calls


def approval_request(speaker: str, rec: CallRecord) -> dict[str, Any]:
    """The request a person answers for a call waiting for them (``fsmchat.speakers.human.request``):
    its prompt names the speaker, the tool and the arguments; ``allowed`` says what may be answered."""
    return tool_call_request(speaker, rec.name, rec.arguments, rec.id, rerun=rec.reason == "rerun")


async def decide_call(loop: ToolLoop, speaker: Speaker, rec: CallRecord, answer: object) -> str:
    """Apply a person's ``answer`` to the waiting call ``rec`` of ``speaker``: ``Approve`` (run it),
    ``Edit(arguments=...)`` (run it with those, checked against the tool's schema), ``Say(text)``
    (its result, not run) or ``Reject(reason)`` (the reason is its result). Returns the answer's kind.

    Raises:
        ToolArgumentsError: Edited arguments the tool's schema refuses (the call still waits).
        TypeError: An answer of another kind.
    """
    if isinstance(answer, Approve):
        rec.status = "approved"
    elif isinstance(answer, Edit):
        tools = {t.name: t for t in await loop.tools_of(speaker)}
        tool = tools.get(rec.name)
        rec.arguments = tool.check_arguments(answer.arguments) if tool is not None else answer.arguments
        rec.status = "approved"
    elif isinstance(answer, Say):
        rec.status, rec.result, rec.duration_s = "done", answer.text, 0.0
    elif isinstance(answer, Reject):
        rec.status, rec.result = "rejected", answer.reason or "a person rejected this call"
    else:
        raise TypeError(f"a decision on tool call {rec.name!r} is Approve(), Edit(arguments={{...}}), Say(text) or "
                        f"Reject(reason), got {type(answer).__name__} {answer!r}")
    return answer.kind


def make_run_tools(speakers: Sequence[Speaker]) -> Callable[[object], Awaitable[list[dict[str, object]]]]:
    by_name = {s.name: s for s in speakers}

    async def run_tools(ctx: object) -> list[dict[str, object]]:
        """run the requested tool calls, concurrently; results in call order"""
        loop = loop_of(ctx)
        done: list[dict[str, object]] = []  # the step's payload: each call it resolved (the trace, stream())
        for ex in list(loop.exchanges.values()):
            pending = ex.pending()
            if pending:  # with the tools of the speaker that spoke (a hub's may carry close_channel)
                speaker = loop.speakers.get(ex.speaker) or by_name[ex.speaker]
                stats = getattr(ctx, "stats", None)
                await loop.run_exchange(ex, speaker, stats if isinstance(stats, llm.CallStats) else None, ctx)
                done += [{"agent": ex.speaker, **c.entry()} for c in pending if c.resolved]
        return done

    return run_tools


ToolHook = Callable[[Callable[[], Awaitable[str]], str, str, str, dict[str, object]], Awaitable[str]]
TOOL_HOOK: contextvars.ContextVar[ToolHook | None] = contextvars.ContextVar("fsmchat_tool_hook", default=None)
"""Around each tool call of the runs in this context: ``hook(run, agent, tool, call_id, arguments)``
awaits ``run()`` (the call) and returns its result (``fsmchat.otel`` makes a span of it)."""

RUN_TOOLS: contextvars.ContextVar[ToolLoop | None] = contextvars.ContextVar("fsmchat_run_tools", default=None)
"""The tool sources of the run this code runs in (a hub sets its own in its clients' handlers)."""
_EVENT_LOOPS: dict[asyncio.AbstractEventLoop, tuple[ToolLoop, AsyncGenerator[None, None]]] = {}


async def direct_loop() -> ToolLoop:
    """A direct reply's ``ToolLoop``: a turn of its own on the tool sources of its run (``RUN_TOOLS``),
    else of its event loop, started on first use and stopped as the loop ends (``asyncio.run``)."""
    loop, shared, ev = ToolLoop(), RUN_TOOLS.get(), asyncio.get_running_loop()
    if shared is None and ev not in _EVENT_LOOPS:
        _EVENT_LOOPS[ev] = (ToolLoop(), keeper := _until_shutdown(ev))
        await keeper.__anext__()  # first iterated here: the loop's shutdown_asyncgens closes it
    loop.share_sources(shared or _EVENT_LOOPS[ev][0])
    return loop


async def _until_shutdown(ev: asyncio.AbstractEventLoop) -> AsyncGenerator[None, None]:
    """Keeps event loop ``ev``'s tool sources until the loop shuts down, then stops them."""
    try:
        yield
    finally:
        await _EVENT_LOOPS.pop(ev)[0].close()


APPROVE_ALL: contextvars.ContextVar[bool] = contextvars.ContextVar("fsmchat_approve_all_tools", default=False)
"""While a pattern with ``interrupt_before=["tools"]`` compiles, every tool loop's wait point waits
(a flow's steps draw their loops while it compiles, without the pattern at hand)."""


def add_tool_loop(g: StateGraph[C], state: str, speakers: Sequence[Speaker], *, approve_all: bool = False,
                  events: bool = False, exits: Sequence[tuple[str, Callable[[C], bool], str]] = ()) -> StateGraph[C]:
    """Draw the tool loop of ``state``, where ``speakers`` speak: ``state -[tool_calls]-> tools_<state>
    -> state`` (the new edge tried first) and its wait point ``tools_<state> -[needs_person]->
    approve_<state> -> tools_<state>`` (a person approves a call, or decides on one whose result
    was not committed). Nothing changes when no speaker has tools it can run. Returns the graph.

    Args:
        g: The graph holding ``state``.
        state: The speaking state (its action is wrapped by ``tool_action``; a step of it that asked
            for tool calls is committed before the tools run, never carried into a later commit).
        speakers: Who may speak in it.
        approve_all: Every call waits for a person (``interrupt_before=["tools"]``).
        events: ``g`` is event-driven (a hub channel's turns): ``state`` has no action (its agent
            speaks in its handler) and the channel steps ``tool_calls`` and the added states.
        exits: (destination, guard, label) edges tried first from each added state (a channel may
            end while a tool runs).
    """
    with_tools = [s for s in speakers if has_tools(s)]
    if not with_tools:
        return g
    approve_all = approve_all or APPROVE_ALL.get()
    s = g.states[state]
    if not events:  # an event-driven graph's agent speaks outside it (in its handler, through tool_action)
        assert s.action is not None, f"state {state!r} speaks but has no action"
        s.action = tool_action(s.action)
    tools_state, wait_state = state_names([f"tools_{state}", f"approve_{state}"], reserved=g.states)
    g.state(tools_state, make_run_tools(with_tools), f"{', '.join(x.name for x in with_tools)}: run the tool calls")
    g.state(wait_state, make_decide(with_tools), "a person decides on a tool call",
            waits=approve_all or any(needs_approval(x) for x in with_tools))
    first = next((i for i, t in enumerate(g.transitions) if t.source == state), len(g.transitions))
    g.transitions.insert(first, Transition(state, tools_state, tool_calls, "tool_calls", first))
    for dest, guard, label in exits:
        g.edge(tools_state, dest, when=guard, label=label)
    g.edge(tools_state, wait_state, when=needs_person, label="needs_person")
    g.edge(tools_state, state)
    for dest, guard, label in exits:
        g.edge(wait_state, dest, when=guard, label=label)
    g.edge(wait_state, tools_state)
    for i, t in enumerate(g.transitions):
        t.order = i
    return g.changed()
