"""A channel's speaking block: its agents' replies, their streamed deltas and their tool rounds.

Each ``ChannelRuntime`` holds one ``ChannelSpeaking`` (``runtime.speaking``). A reply goes through
the speaking block every pattern uses (``tool_action`` over ``ToolLoop.speak``). An agent with
tools takes its tool rounds as the channel's turn graph states, drawn and run as every pattern's
(``add_tool_loop``): the channel steps ``awaiting_<p> -[tool_calls]-> tools_awaiting_<p>`` (whose
action runs the calls) ``-> awaiting_<p>``, through ``approve_awaiting_<p>`` (whose action applies
a person's decision) when a call waits. Each step is committed to the channel's log before the
next: the calls (``EV_TOOL_CALLS``) before they run, each decision (``EV_TOOL_DECISION``) before
the call runs, each result (``EV_TOOL_RESULT``) before the model is asked again. A channel resumed
from its store (``hub.resume_channel``) rebuilds its agent's turn in progress from those envelopes
(``restore``), with the patterns' rule: a call with a committed result never runs again; one asked
for without a committed result is run again only when its tool is ``idempotent``, else a person
decides.
"""
from __future__ import annotations

import asyncio
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Mapping, Sequence

from ..engine import STEP
from ..errors import NoTransitionError
from ..checks import as_object, get_str
from ..speakers.agent import Turn
from ..speakers.human import Approve, Edit, Input, Reject, Say
from ..speakers.llm import TOKENS
from ..speakers.speaker import Speaker, ToolSpeaker
from ..speakers.tool_loop import CallRecord, Exchange, ToolLoop, approval_request, decide_call, tool_action, \
    tool_calls
from ..speakers.tools import has_tools
from .errors import ProtocolError
from .events import EV_TEXT, EV_TOOL_CALLS, EV_TOOL_DECISION, EV_TOOL_RESULT, Envelope
from .graphs import ChannelContext, turn_state_names


@dataclass
class _Waiting:
    """A call waiting at ``approve_awaiting_<p>`` for ``hub.decide_tool_call``."""

    agent_id: str
    speaker: ToolSpeaker | None
    rec: CallRecord
    answer: "asyncio.Future[Input]"  # the person's answer, handed to the state's action
    committed: "asyncio.Future[Envelope] | None" = None  # the decision's envelope, once committed


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
                 notify: Callable[..., object], tokens: Callable[[], Callable[[object], None] | None],
                 sources: ToolLoop | None = None):
        self.ctx = ctx
        self._emit, self._save, self._notify, self._tokens = emit, save, notify, tokens
        self.tool_loop = ctx.tool_loop = ToolLoop()  # the speaking block of this channel's agents with tools
        if sources is not None:
            self.tool_loop.share_sources(sources)
        self.tool_loop.ask = self._ask  # a person decides through hub.decide_tool_call
        self._state_of = dict(zip(ctx.order, turn_state_names(ctx.order)))
        self._asked: set[str] = set()  # call ids whose EV_TOOL_CALLS is in the log
        self._results: set[str] = set()  # call ids whose EV_TOOL_RESULT is in the log
        self._agent = ""  # who takes the tool round in progress
        self._waiting: _Waiting | None = None

    @contextmanager
    def streaming(self) -> Iterator[None]:
        """While a reply is asked for in this channel: its deltas go to the hub's token listeners
        (``hub.on_token``; none listening, the call asks for no stream), each named by the channel
        and its turn state (``step`` ``"discussion-1|awaiting_bob"``)."""
        sink = TOKENS.set(self._tokens())
        assert self.ctx.turns is not None
        step = STEP.set(f"{self.ctx.channel_id}|{self.ctx.turns.state}")
        try:
            yield
        finally:
            STEP.reset(step)
            TOKENS.reset(sink)

    async def speak(self, agent_id: str, speaker: Speaker, turn: Turn) -> tuple[str, list[dict[str, object]]]:
        """``speaker``'s reply to ``turn`` on ``agent_id``'s turn, through the speaking block every
        pattern uses: (the text, its tool calls). Without tools it is ``speaker.reply(turn)``.

        With tools, a model answer with tool calls ends the speaking early (``tool_action``); the
        calls are committed to the channel's log (``EV_TOOL_CALLS``) and the channel steps its turn
        graph: ``tools_awaiting_<p>`` runs them (concurrently, results in call order), a call that
        needs a person waits at ``approve_awaiting_<p>`` until ``hub.decide_tool_call``, each result
        is committed (``EV_TOOL_RESULT``) and the graph is back at ``awaiting_<p>`` before the model
        is asked again.

        The reply's deltas go to the hub's token listeners (``streaming``); only the final
        reply's text streams, the tool calls are assembled whole.

        Raises:
            ToolError: A tool failed under ``on_tool_error="stop"``, a tool source failed, or the
                model still asked for tools after ``max_tool_rounds``.
            ProtocolError: The model asked for tools while it was not ``agent_id``'s turn, or the
                channel ended during the tool round.
        """
        with self.streaming():
            if not has_tools(speaker):
                return str(await speaker.reply(turn)), []
            loop = self.tool_loop
            speaking = tool_action(lambda ctx: loop.speak(speaker, turn))  # a pattern's speaking state's action
            try:
                while True:
                    text = await speaking(self.ctx)
                    if not tool_calls(self.ctx):
                        return str(text), loop.last.get(speaker.name, [])
                    await self._tool_round(agent_id, loop.exchanges[speaker.name])
            finally:
                loop.exchanges.pop(speaker.name, None)
                loop.speakers.pop(speaker.name, None)
                self._asked.clear()  # a turn's call ids are its own (models reuse them across turns)
                self._results.clear()

    async def _tool_round(self, agent_id: str, ex: Exchange) -> None:
        """Commit the calls the model just asked for (``EV_TOOL_CALLS``), then step the turn graph from
        ``awaiting_<p>`` through its tool states until it is back there, committing each step (a
        decision, the results) before the next."""
        turns, home = self.ctx.turns, self._state_of[agent_id]
        assert turns is not None
        if turns.finished or turns.state != home:
            raise ProtocolError(f"channel '{self.ctx.channel_id}': {agent_id}'s model asked for tool calls, which "
                                f"run on its own turn ({home}); the channel is at {turns.state}")
        new = [c for c in ex.calls if c.id not in self._asked]
        if new:
            self._emit(EV_TOOL_CALLS, sender=agent_id, audience=(),
                       data={"speaker": agent_id, "calls": [c.entry() for c in new], "message": ex.messages[-1]})
            self._asked.update(c.id for c in new)
        self._agent = agent_id
        await turns.step("tool_calls")
        self._save()
        while turns.state != home:
            try:
                await turns.step()
            except NoTransitionError:
                if not turns.finished:
                    raise
                raise ProtocolError(f"channel '{self.ctx.channel_id}' is {self.ctx.state}: "
                                    f"{self._agent}'s tool round ends") from None
            finally:
                if self._waiting is not None and self._waiting.answer.done():
                    self._commit_decision(self._waiting)
                self._commit_results()
                self._save()

    def _commit_results(self) -> None:
        """Each call resolved and not committed yet: its ``EV_TOOL_RESULT``; then the step's events."""
        for ex in list(self.tool_loop.exchanges.values()):
            for rec in ex.calls:
                if rec.resolved and rec.id not in self._results:
                    self._emit(EV_TOOL_RESULT, sender=self._agent, audience=(),
                               data={"speaker": self._agent, **rec.entry()})
                    self._results.add(rec.id)
        events, self.ctx.events[:] = list(self.ctx.events), []
        for ev in events:  # tool_error, tool_result_truncated, tool_decision
            self._notify(str(ev["event"]), self._agent, data=ev)

    def _commit_decision(self, waiting: _Waiting) -> None:
        """``approve_awaiting_<p>`` applied a person's answer: its ``EV_TOOL_DECISION`` (what the call
        runs with, or its result when it does not run), handed to ``decide``'s caller."""
        self._waiting, rec = None, waiting.rec
        if waiting.answer.cancelled() or waiting.answer.exception() is not None:
            return
        data = {"speaker": waiting.agent_id, "call_id": rec.id, "tool": rec.name,
                "decision": waiting.answer.result().kind, "arguments": rec.arguments,
                **({"result": rec.result} if rec.result is not None else {})}
        env = self._emit(EV_TOOL_DECISION, sender=waiting.agent_id, audience=(), data=data)
        if waiting.committed is not None and not waiting.committed.done():
            waiting.committed.set_result(env)

    # ---- a person's decision ----
    async def _ask(self, req: dict[str, object]) -> Input:
        """``approve_awaiting_<p>``'s way to ask a person: tell the listeners (``tool_approval``) and
        wait for ``hub.decide_tool_call``'s answer."""
        proposed = as_object(req["proposed"], "tool approval request.proposed")  # approval_request's
        speaker, call_id = get_str(proposed, "speaker", "proposed"), get_str(proposed, "call_id", "proposed")
        loop = self.tool_loop
        rec = next(c for c in loop.exchanges[speaker].calls if c.id == call_id)
        answer: asyncio.Future[Input] = asyncio.get_running_loop().create_future()
        self._waiting = _Waiting(self._agent, loop.speakers.get(speaker), rec, answer)
        self._notify("tool_approval", self._agent, data=self._shown(self._waiting))
        return await answer

    @staticmethod
    def _shown(waiting: _Waiting) -> dict[str, object]:
        req = approval_request(waiting.agent_id, waiting.rec)
        return {"prompt": req["prompt"], "allowed": req["allowed"], **req["proposed"]}

    def waiting_call(self) -> dict[str, object] | None:
        """The tool call waiting for a person's decision (speaker, tool, arguments, call_id,
        prompt, allowed), None when none waits."""
        waiting = self._waiting
        return None if waiting is None or waiting.answer.done() else self._shown(waiting)

    async def decide(self, answer: object) -> Envelope:
        """A person's decision on the waiting tool call: ``Approve()``, ``Edit(arguments={...})``
        (checked against the tool's schema), ``Say(text)`` (the call's result, not run) or
        ``Reject(reason)``. ``approve_awaiting_<p>``'s action applies it; it is committed to the log
        (``EV_TOOL_DECISION``) before the call runs, and that envelope is returned.

        Raises:
            ProtocolError: No tool call waits in this channel.
            ToolArgumentsError: Edited arguments the tool's schema refuses (the call still waits).
        """
        waiting = self._waiting
        if waiting is None or waiting.answer.done():
            raise ProtocolError(f"channel '{self.ctx.channel_id}': no tool call waits for a decision")
        assert waiting.speaker is not None  # ToolLoop.speak set it with the exchange the call is of
        await decide_call(self.tool_loop, waiting.speaker, replace(waiting.rec), answer)  # refused: still waits
        assert isinstance(answer, (Approve, Edit, Reject, Say))  # decide_call refused any other kind
        waiting.committed = asyncio.get_running_loop().create_future()
        waiting.answer.set_result(answer)
        return await waiting.committed

    def end(self) -> None:
        """The channel ended: a call waiting for a person is not decided (its reply fails)."""
        waiting = self._waiting
        if waiting is not None and not waiting.answer.done():
            waiting.answer.set_exception(ProtocolError(
                f"channel '{self.ctx.channel_id}' is {self.ctx.state}: {waiting.agent_id}'s call "
                f"{waiting.rec.name} waited for a person"))
        if waiting is not None and waiting.committed is not None and not waiting.committed.done():
            waiting.committed.set_exception(ProtocolError(f"channel '{self.ctx.channel_id}' is {self.ctx.state}"))

    # ---- a resumed channel ----
    def restore(self, agent_id: str, name: str, log: Sequence[Envelope], digests: Mapping[str, object]) -> None:
        """Rebuild ``agent_id``'s turn in progress (its speaker is named ``name``) from the log: the
        tool envelopes it committed since the last text (its calls, decisions and results). A call
        asked for without a committed result may have run: it is run again only when its tool is
        idempotent, else a person decides (``ToolLoop.restore``'s rule, a pattern's on resume).
        ``digests`` are the tools each source offered, refused on resume when they changed."""
        since = next((i + 1 for i in range(len(log) - 1, -1, -1) if log[i].event_type == EV_TEXT), 0)
        ex, by_id = Exchange(name), {}
        for env in log[since:]:
            d = env.data
            if env.sender != agent_id:
                continue
            if env.event_type == EV_TOOL_CALLS:
                ex.rounds += 1
                ex.messages.append(dict(d["message"]))
                for c in d["calls"]:
                    rec = by_id[c["id"]] = CallRecord(c["id"], c["name"], c["arguments"], c["status"],
                                                      reason="approval" if c["status"] == "awaiting" else "")
                    ex.calls.append(rec)
                    self._asked.add(rec.id)
            elif env.event_type == EV_TOOL_DECISION:
                rec = by_id[d["call_id"]]
                rec.arguments, rec.result = d["arguments"], d.get("result")
                rec.status = {"say": "done", "reject": "rejected"}.get(d["decision"], "approved")
            elif env.event_type == EV_TOOL_RESULT:
                rec = by_id[d["id"]]
                rec.status, rec.result, rec.error, rec.duration_s = d["status"], d.get("result"), d.get("error"), \
                    d.get("duration_s")
                self._results.add(rec.id)
        if ex.calls:
            self.tool_loop.restore({"exchanges": {name: ex.to_dict()}, "digests": dict(digests)})
            self._agent = agent_id
