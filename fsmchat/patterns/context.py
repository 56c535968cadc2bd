"""Layer 15, patterns: the typed context a pattern's actions and guards read and write, one per run.

``ChatContext`` holds the task, the speakers, the shared ``Transcript``, the ``CallStats`` and the
pattern's typed working state (a ``PatternState``, checkpointed as "scratch"); its actions ask
speakers (``ask``, ``ask_private``, ``hear``) and post their replies (``post``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from ..models import SEED_ROLE, Message
from ..speakers.agent import Speaker, Turn
from ..speakers.human import Human, Say, request
from ..store.checkpoint import decode, encode_fields
from ..store.statelog import AppendLog
from .run_context import RunContext


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

    def snapshot(self) -> dict[str, object]:
        """Every field as JSON-able data (what a checkpoint stores as ``"scratch"``)."""
        return encode_fields({f.name: getattr(self, f.name) for f in fields(self)})

    def restore(self, scratch: dict[str, object]) -> None:
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
    memory: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # private memories, by name

    @property
    def names(self) -> list[str]:
        """The speakers' names, in roster order."""
        return [s.name for s in self.speakers]

    def post(self, role: str, content: str, **metadata: object) -> Message:
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

    def snapshot(self) -> dict[str, object]:
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

