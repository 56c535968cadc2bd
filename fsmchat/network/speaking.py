"""A channel's speaking block: its agents' replies, their streamed deltas and their tool rounds.

Each ``ChannelRuntime`` holds one ``ChannelSpeaking`` (``runtime.speaking``). A reply goes through
the run's speaking block (``ToolLoop.speak``); an agent with tools takes its tool rounds through the
channel's turn graph, each call and each result committed to the channel's log before the model is
asked again, and a call that needs a person waits until ``hub.decide_tool_call``.
"""
from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..engine import STEP
from ..speakers.llm import TOKENS
from ..speakers.tool_loop import CallRecord, ToolLoop, ToolRound, approval_request, decide_call
from ..speakers.tools import has_tools
from .errors import ProtocolError
from .events import EV_TOOL_CALLS, EV_TOOL_DECISION, EV_TOOL_RESULT, Envelope
from .graphs import ChannelContext


class _Events:
    """Where ``ToolLoop.run_exchange`` records its ``tool_error`` events (told to the listeners)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []


class ChannelSpeaking:
    """One channel's speaking block (``hub.runtime(channel_id).speaking``).

    Args:
        ctx: The channel's context (its ``turns`` run is the turn graph the tool rounds step).
        emit: Records an envelope in the channel's log (``ChannelRuntime``'s one way in).
        save: Writes the channel's state to the store.
        notify: Tells the hub's listeners a happening of the channel.
        tokens: The hub's token sink now, or None when no one listens.
        sources: The hub's ``ToolLoop`` whose tool sources (MCP servers) every channel shares.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         return hub.runtime(channel.channel_id).speaking.waiting_call()
        >>> asyncio.run(main()) is None
        True
    """

    def __init__(self, ctx: ChannelContext, *, emit: Callable[..., Envelope], save: Callable[[], None],
                 notify: Callable[..., Any], tokens: Callable[[], Callable[[Any], None] | None],
                 sources: ToolLoop | None = None):
        self.ctx = ctx
        self._emit, self._save, self._notify, self._tokens = emit, save, notify, tokens
        self.tool_loop = ctx.tool_loop = ToolLoop()  # the speaking block of this channel's agents with tools
        if sources is not None:
            self.tool_loop.share_sources(sources)
        self._decision: tuple[str, Any, CallRecord, asyncio.Future[str]] | None = None  # a call waiting for a person

    @property
    def _turns(self) -> Any:
        return self.ctx.turns

    @contextmanager
    def streaming(self) -> Iterator[None]:
        """While a reply is asked for in this channel: its deltas go to the hub's token listeners
        (``hub.on_token``; none listening, the call asks for no stream), each named by the channel
        and its turn state (``step`` ``"discussion-1|awaiting_bob"``)."""
        sink = TOKENS.set(self._tokens())
        step = STEP.set(f"{self.ctx.channel_id}|{self._turns.state}")
        try:
            yield
        finally:
            STEP.reset(step)
            TOKENS.reset(sink)

    async def speak(self, agent_id: str, speaker: Any, turn: Any) -> tuple[str, list[dict[str, Any]]]:
        """``speaker``'s reply to ``turn`` on ``agent_id``'s turn, through the run's speaking block
        (``ToolLoop.speak``): (the text, its tool calls). Without tools it is ``speaker.reply(turn)``.

        With tools, each model answer with tool calls is committed to the channel's log
        (``EV_TOOL_CALLS``) and the turn graph moves to ``tools_awaiting_<p>``; a call that needs
        approval waits at ``approve_awaiting_<p>`` until ``hub.decide_tool_call``; the calls run
        (concurrently, results in call order), each result is committed (``EV_TOOL_RESULT``) and the
        graph moves back before the model is asked again.

        The reply's deltas go to the hub's token listeners (``streaming``); only the final
        reply's text streams, the tool calls are assembled whole.

        Raises:
            ToolError: A tool failed under ``on_tool_error="stop"``, a tool source failed, or the
                model still asked for tools after ``max_tool_rounds``.
        """
        with self.streaming():
            return await self._speak(agent_id, speaker, turn)

    async def _speak(self, agent_id: str, speaker: Any, turn: Any) -> tuple[str, list[dict[str, Any]]]:
        if not has_tools(speaker):
            return str(await speaker.reply(turn)), []
        loop = self.tool_loop
        try:
            while True:
                loop.active = True
                try:
                    text = await loop.speak(speaker, turn)
                    break
                except ToolRound:
                    pass
                finally:
                    loop.active = False
                ex = loop.exchanges[speaker.name]
                pending = ex.pending()
                self._step_turns("tool_calls", EV_TOOL_CALLS, agent_id,
                                 {"speaker": agent_id, "calls": [c.entry() for c in pending]})
                for _, rec in loop.awaiting():
                    await self._wait_decision(agent_id, speaker, rec)
                errors: Any = _Events()
                try:
                    await loop.run_exchange(ex, speaker, None, errors)
                finally:
                    for rec in pending:
                        if rec.resolved:
                            self._emit(EV_TOOL_RESULT, sender=agent_id, audience=(),
                                       data={"speaker": agent_id, **rec.entry()})
                    self._save()
                    for ev in errors.events:
                        self._notify("tool_error", agent_id, data=ev)
                self._step_turns("results", None, agent_id, None)
            return text, loop.entries(speaker.name)
        finally:
            loop.exchanges.pop(speaker.name, None)

    def _step_turns(self, label: str, event_type: str | None, agent_id: str, data: dict[str, Any] | None) -> None:
        """Commit ``event_type`` (when given) to the log, then move the turn graph by ``label``."""
        if self._turns.finished:
            raise ProtocolError(f"channel '{self.ctx.channel_id}' is {self.ctx.state}: {agent_id}'s tool round ends")
        if event_type is not None:
            self._emit(event_type, sender=agent_id, audience=(), data=data)
        self._turns.fire(label, data)
        self._save()

    async def _wait_decision(self, agent_id: str, speaker: Any, rec: CallRecord) -> None:
        """Wait at ``approve_awaiting_<p>`` for ``hub.decide_tool_call`` on ``rec``."""
        self._step_turns("needs_person", None, agent_id, None)
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._decision = (agent_id, speaker, rec, done)
        req = approval_request(agent_id, rec)
        self._notify("tool_approval", agent_id, data={"prompt": req["prompt"], "allowed": req["allowed"],
                                                      **req["proposed"]})
        try:
            await done
        finally:
            self._decision = None

    def waiting_call(self) -> dict[str, Any] | None:
        """The tool call waiting for a person's decision (speaker, tool, arguments, call_id,
        prompt, allowed), None when none waits."""
        if self._decision is None:
            return None
        agent_id, _, rec, _ = self._decision
        req = approval_request(agent_id, rec)
        return {"prompt": req["prompt"], "allowed": req["allowed"], **req["proposed"]}

    async def decide(self, answer: Any) -> Envelope:
        """A person's decision on the waiting tool call: ``Approve()``, ``Edit(arguments={...})``
        (checked against the tool's schema), ``Say(text)`` (the call's result, not run) or
        ``Reject(reason)``. Committed to the log (``EV_TOOL_DECISION``) before the call runs.

        Raises:
            ProtocolError: No tool call waits in this channel.
            ToolArgumentsError: Edited arguments the tool's schema refuses (the call still waits).
        """
        if self._decision is None or self._decision[3].done():
            raise ProtocolError(f"channel '{self.ctx.channel_id}': no tool call waits for a decision")
        agent_id, speaker, rec, done = self._decision
        await decide_call(self.tool_loop, speaker, rec, answer)
        env = self._emit(EV_TOOL_DECISION, sender=agent_id, audience=(),
                         data={"speaker": agent_id, "call_id": rec.id, "tool": rec.name, "decision": answer.kind,
                               "arguments": rec.arguments})
        self._turns.fire("decided", {"call_id": rec.id, "decision": answer.kind})
        self._save()
        done.set_result(answer.kind)
        return env
