"""The default participant handler: ack invites, and take a turn only when the hub says it is ours.

Every participant receives every text; its handler probes ``hub.can_send(channel, me)`` and calls
its model only on its own turn (once per turn), so a round-robin discussion of N agents makes
exactly one model call per text. The model sees the windowed view (``view.py``); an empty or
failed reply becomes a turn-failure event instead of a silent stall.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..models import Message
from ..speakers.agent import Agent, Turn
from ..speakers.context import ContextPolicy, LastMessages
from ..speakers.human import Human
from ..speakers.llm import CallStats
from ..speakers.speaker import Speaker
from ..speakers.tools import Tool, has_tools
from .errors import ProtocolError
from .events import EV_CHANNEL_INVITE, EV_CHANNEL_OPENED, EV_TEXT, Envelope
from .view import policy_view, texts_of

if TYPE_CHECKING:
    from .client import HubClient

CLOSE_TOOL_NAME = "close_channel"
CLOSE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": CLOSE_TOOL_NAME,
        "description": "Close this discussion channel for every participant. Call it when the discussion has "
                       "reached its goal or should not go on.",
        "parameters": {
            "type": "object",
            "properties": {"reason": {"type": "string", "description": "Why the discussion ends, in a few words."}},
            "required": ["reason"],
        },
    },
}
"""The ``close_channel(reason)`` tool the default handler offers a model (``register(..., close_tool=True)``).

The reference's agent-side close: a participant's model calls it when the discussion has
reached its goal, and the channel closes for everyone with that reason. A callable participant
closes with ``turn.variables["close_channel"](reason)`` instead.

Examples:
    >>> from fsmchat.network import CLOSE_TOOL
    >>> CLOSE_TOOL["function"]["name"], CLOSE_TOOL["function"]["parameters"]["required"]
    ('close_channel', ['reason'])
"""


@dataclass
class ReplyOutcome:
    """What one reply produced: a text (maybe empty), if the close tool was called its reason, and
    the reply's tool calls (each ``id``, ``name``, ``arguments``, ``status``, ``result``/``error``)."""

    text: str
    close_reason: str | None = None
    tool_calls: list[dict[str, object]] = field(default_factory=list)


def instruction_for(me: str, order: list[str], can_close: bool) -> str:
    others = [p for p in order if p != me]
    text = (f"You are {me} in a round-robin discussion with {', '.join(others)} (speaking order: "
            f"{' -> '.join(order)}). The discussion so far is above. It is your turn: reply with your next "
            "contribution only, without a name label.")
    if can_close:
        text += (f" If the discussion has reached its goal, call the {CLOSE_TOOL_NAME} tool with a short reason "
                 "to close the channel for everyone.")
    return text


def framing(channel_id: str, order: list[str], context: ContextPolicy | None = None) -> str:
    """The channel's context line (a system message after the agent's own system prompt); how
    older texts are shown follows the channel's ``context`` (None: folded into one line)."""
    shown = (" Every text so far is shown." if context == "full" else
             f" Only its first text and its latest {context.n} are shown; the texts between are left out."
             if isinstance(context, LastMessages) else
             " Texts older than the recent window are folded into one [summary] line.")
    return (f"Discussion channel '{channel_id}': {', '.join(order[:-1])} and {order[-1]} take turns in this "
            "order on the topic of its first text. Texts are labelled [name]: ... (a text's further lines are "
            "indented; only an unindented [name]: starts a text)." + shown)


def build_turn(me: str, order: list[str], log: list[Envelope], *, channel_id: str, turn: int,
               stats: CallStats | None, can_close: bool, context: ContextPolicy | None = None) -> Turn:
    """The request for ``me``'s turn: a channel framing (system), the view (one user message),
    then the instruction. The view follows ``context`` (``policy_view``): None is the recent
    window with older texts folded into one line, ``"full"`` every text, ``LastMessages(n)`` the
    first text and the last ``n``.

    Callables get the same ``Turn``: ``turn.history[-1]["content"]`` is the view,
    ``turn.transcript`` the texts it shows whole, as messages, and ``turn.variables`` holds
    ``channel_id``, ``participants``, ``turn``, ``view`` (lines) and, when the close tool is offered,
    ``close_channel(reason)`` (installed by ``call_speaker``).
    """
    lines, recent = policy_view(texts_of(log), context, len(order))
    variables: dict[str, object] = {"channel_id": channel_id, "participants": list(order), "turn": turn,
                                 "view": lines}
    history = [{"role": "system", "content": framing(channel_id, order, context)},
               {"role": "user", "content": "\n".join(lines)}]
    return Turn(me, [Message(role=s, content=t) for s, t in recent], instruction_for(me, order, can_close),
                stats=stats, variables=variables, history=history)


def _tool_calls(message: object) -> list[object]:
    calls = getattr(message, "tool_calls", None)
    if calls is None and isinstance(message, dict):
        calls = message.get("tool_calls")
    return list(calls or [])


def _call_name_args(call: object) -> tuple[str, str]:
    fn = getattr(call, "function", None)
    if fn is None and isinstance(call, dict):
        fn = call.get("function") or {}
    name = getattr(fn, "name", None) if not isinstance(fn, dict) else fn.get("name")
    args = getattr(fn, "arguments", None) if not isinstance(fn, dict) else fn.get("arguments")
    return str(name or ""), args if isinstance(args, str) else json.dumps(args or {})


def parse_close(message: object) -> str | None:
    """The reason of a ``close_channel`` tool call in a model message, else None."""
    for call in _tool_calls(message):
        name, raw = _call_name_args(call)
        if name != CLOSE_TOOL_NAME:
            continue
        try:
            args = json.loads(raw) if raw else {}
        except ValueError:
            args = {}
        reason = str(args.get("reason") or "").strip() if isinstance(args, dict) else ""
        return reason or "closed by agent"
    return None


Speak = Callable[[Speaker, Turn], Awaitable[tuple[str, list[dict[str, object]]]]]
"""How a reply is asked for: ``(speaker, turn) -> (text, tool calls)`` (``HubServices.speak``)."""


async def _reply_in_place(speaker: Speaker, turn: Turn) -> tuple[str, list[dict[str, object]]]:
    return str(await speaker.reply(turn)), []


async def call_speaker(speaker: Speaker, turn: Turn, close_tool: bool, speak: Speak | None = None) -> ReplyOutcome:
    """One reply through the speaker layer. ``speak`` is the channel's speaking block
    (``client.services.speak``), through which an agent with tools takes its tool rounds as the
    channel's turn graph states (each call and result committed before the next model call);
    without it a reply takes its rounds in place (``Agent.reply``). An ``Agent`` offered the close
    tool and no tools of its own is asked with ``tools=[CLOSE_TOOL]`` (``Agent.reply_message``); an
    agent with tools gets ``close_channel`` as one more of its tools; a callable closes by calling
    ``turn.variables["close_channel"](reason)``."""
    speak = speak or _reply_in_place
    closed: list[str] = []
    if close_tool:
        turn.variables[CLOSE_TOOL_NAME] = lambda reason="closed by agent": closed.append(str(reason))
    if close_tool and isinstance(speaker, Agent) and has_tools(speaker):
        def close_channel(reason: str = "closed by agent") -> str:
            closed.append(str(reason).strip() or "closed by agent")
            return "the channel will close after this reply"

        close = Tool(close_channel, name=CLOSE_TOOL_NAME, description=CLOSE_TOOL["function"]["description"],
                     parameters=CLOSE_TOOL["function"]["parameters"], idempotent=True)  # closing twice closes once
        text, calls = await speak(speaker.model_copy(update={"tools": [*speaker.tools, close]}), turn)
        done = [c for c in calls if c["name"] == CLOSE_TOOL_NAME and c["status"] == "done"]  # a resumed turn's too
        args = done[0]["arguments"] if done else None  # the close tool's, checked against its schema
        reason = str(args.get("reason") or "").strip() or "closed by agent" if isinstance(args, dict) else \
            "closed by agent" if done else None
        return ReplyOutcome((text or "").strip(), reason or (closed[0] if closed else None), calls)
    if close_tool and isinstance(speaker, Agent):
        message = await speaker.reply_message(turn, tools=[CLOSE_TOOL], tool_choice="auto")
        return ReplyOutcome((getattr(message, "content", None) or "").strip(), parse_close(message))
    text, calls = await speak(speaker, turn)
    return ReplyOutcome((text or "").strip(), closed[0] if closed else None, calls)


class DefaultHandler:
    """Acks (or rejects) invites; on a text, takes its turn if ``can_send`` says so, at most once per turn.

    Every participant receives every text; the handler probes ``hub.can_send(channel, me)`` and
    calls its model only on its own turn, so a round-robin discussion of N agents makes exactly
    one model call per text. ``hub.register`` gives each client one unless ``handler=`` is passed.

    Args:
        accept_invites: True, False, or ``fn(envelope) -> bool``.
        close_tool: Offer the model a ``close_channel(reason)`` tool (AG2's agent-side
            close); a callable gets ``turn.variables["close_channel"]``.

    Examples:
        >>> import asyncio
        >>> from fsmchat import EV_TEXT, Hub
        >>> def alice(turn):
        ...     return "Rust everywhere!"
        >>> def bob(turn):
        ...     turn.variables["close_channel"]("we agree")
        ...     return "Agreed."
        >>> async def main():
        ...     async with Hub() as hub:
        ...         a = await hub.register(alice)
        ...         await hub.register(bob, close_tool=True)  # its DefaultHandler(close_tool=True)
        ...         channel = await a.open(target=["bob"])
        ...         await channel.send("Topic: should every developer learn Rust?")
        ...         await hub.drain()
        ...         return channel.state, channel.close_reason, [e.sender for e in channel.log() if e.event_type == EV_TEXT]
        >>> asyncio.run(main())
        ('closed', 'we agree', ['alice', 'bob'])
    """

    def __init__(self, accept_invites: bool | Callable[[Envelope], bool] = True, close_tool: bool = False):
        self.accept_invites = accept_invites
        self.close_tool = close_tool
        self._attempted: dict[str, int] = {}  # channel -> turn_count of our last attempt

    async def __call__(self, client: "HubClient", envelope: Envelope) -> None:
        if envelope.event_type == EV_CHANNEL_INVITE:
            ok = self.accept_invites(envelope) if callable(self.accept_invites) else bool(self.accept_invites)
            channel = client.channel(envelope.channel_id)
            await (channel.ack() if ok else channel.reject())
        elif envelope.event_type == EV_TEXT or (envelope.event_type == EV_CHANNEL_OPENED and
                                                 isinstance(client.speaker, Human)):
            await self.on_text(client, envelope)

    async def on_text(self, client: "HubClient", envelope: Envelope) -> None:
        """Take ``client``'s turn if the channel expects it and it has not tried this turn yet: call
        the model on the windowed view, send the reply (or report a failed turn), close if asked."""
        hub, svc, cid, me = client.hub, client.services, envelope.channel_id, client.agent_id
        if client.speaker is None:
            return
        if isinstance(client.speaker, Human):  # a person: tell the listeners it is their turn, call nothing
            turn_no = hub.adapter_state(cid).turn_count
            if hub.can_send(cid, me) and self._attempted.get(cid) != turn_no:
                self._attempted[cid] = turn_no
                svc.notify("person_turn", cid, data={"turn": turn_no})
            return
        svc.count(cid, "deliveries")
        turn_no = hub.adapter_state(cid).turn_count
        if not hub.can_send(cid, me) or self._attempted.get(cid) == turn_no:
            svc.count(cid, "skipped_deliveries")
            svc.notify("skipped", cid, envelope=envelope)
            return
        self._attempted[cid] = turn_no
        channel = client.channel(cid)
        speaker = client.speaker
        own = getattr(speaker, "context", None)  # an agent's own policy takes precedence, as in a pattern
        policy = own if own == "full" or isinstance(own, LastMessages) else hub.runtime(cid).ctx.context
        turn = build_turn(me, hub.adapter_state(cid).participant_order, hub.read_log(cid), channel_id=cid,
                          turn=turn_no, stats=svc.call_stats(cid), can_close=self.close_tool, context=policy)
        svc.count(cid, "model_calls")
        svc.notify("model_call", cid, data={"turn": turn_no})

        async def speak(who: Speaker, t: Turn) -> tuple[str, list[dict[str, object]]]:
            return await svc.speak(cid, who, t)

        with svc.streaming(cid):  # the task's context: the close tool's reply streams too
            task = asyncio.create_task(call_speaker(speaker, turn, self.close_tool, speak),
                                       name=f"fsmchat-turn-{cid}-{me}")
        try:
            outcome = await svc.track_turn(cid, task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the model call failed: report it, never stall silently
            svc.fail_turn(cid, f"{type(exc).__name__}: {exc}", turn_no)
            return
        if outcome is None:  # the channel ended while the model was thinking; the call was cancelled
            svc.count(cid, "wasted_calls")
            svc.notify("wasted_call", cid, data={"turn": turn_no, "why": "cancelled"})
            return
        if outcome.text:
            try:
                await channel.send(outcome.text, data={"tool_calls": outcome.tool_calls} if outcome.tool_calls else None)
                svc.count(cid, "replies")
            except ProtocolError as exc:
                svc.count(cid, "wasted_calls")
                svc.notify("wasted_call", cid, error=exc, data={"turn": turn_no})
        elif outcome.close_reason is None:
            svc.fail_turn(cid, "empty reply", turn_no)
        if outcome.close_reason is not None:
            await channel.close(outcome.close_reason)
