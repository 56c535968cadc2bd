"""Layer 10: people in the loop.

A run that needs a person stops at a drawn state (``stop_reason="interrupted"``, checkpointed) and
says what it asks (``Pending``); ``resume(run_id, checkpoint, input=...)`` continues it with the
person's answer, in this process or another one days later. The answer is one of a small typed
vocabulary, checked against what the interrupt point allows before anything runs:

- ``Approve()``: go on as proposed;
- ``Edit(text=...)`` / ``Edit(vars={...})`` / ``Edit(arguments={...})``: go on with the proposed
  message (flow variables, a tool call's arguments) changed;
- ``Reject(reason)``: refuse (each point documents its effect, in ``Pending.allowed``);
- ``Say(text)``, or a plain ``str``: the person's own message.

``Human(name)`` is a participant whose turn is such an interrupt (``Human(name, answers=[...])``
answers from a script instead, for tests and demos). ``People`` is the run's slot through which
the answer reaches the action that asked.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..checks import as_opt_object, get_int
from ..errors import ConfigError, ConfigTypeError, FsmchatError, Interrupted, bad_value
from ..models import StopReason, TraceEvent
from .respond import BidOutcome

if TYPE_CHECKING:
    from ..store.protocol import Saved

USER = "User"  # the role a reviewer's own message is posted under (the task's role: the person running it)


# ---- the answers ----
class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.model_dump(exclude={"kind"}, exclude_defaults=True).items())
        return f"{type(self).__name__}({args})"


class Approve(_Input):
    """A person's answer to a waiting run: go on as proposed (post the message, run the next state).

    Attributes:
        kind: ``"approve"`` (how the answer travels as JSON).

    Examples:
        >>> from fsmchat import Approve
        >>> Approve()
        Approve()

        ``result = chat.resume(run_id, store, input=Approve())`` goes on (see ``Pending``).
    """

    kind: Literal["approve"] = "approve"


class Edit(_Input):
    """A person's answer to a waiting run: go on with the proposal changed.

    Each interrupt point says which it takes (``Pending.edit``): ``text`` replaces the proposed
    message, ``vars`` updates a flow's variables, ``arguments`` replaces a waiting tool call's
    arguments (validated against the tool's schema).

    Args:
        text: The message to post instead of the proposed one.
        vars: Flow variables to set.
        arguments: A tool call's arguments to run it with instead.
        **kw: ``kind`` (as JSON answers carry it).

    Attributes:
        kind: ``"edit"``.

    Raises:
        ConfigError: None of ``text``, ``vars`` and ``arguments`` was given.

    Examples:
        >>> from fsmchat import Edit
        >>> Edit("Ship Friday only with a rollback plan.")
        Edit(text='Ship Friday only with a rollback plan.')
        >>> Edit(vars={"topic": "dogs"})
        Edit(vars={'topic': 'dogs'})
        >>> Edit(arguments={"amount": 5})
        Edit(arguments={'amount': 5})
    """

    kind: Literal["edit"] = "edit"
    text: str | None = None
    vars: dict[str, Any] | None = None
    arguments: dict[str, Any] | None = None

    def __init__(self, text: str | None = None, vars: dict[str, object] | None = None,
                 arguments: dict[str, object] | None = None, **kw: object):
        super().__init__(text=text, vars=vars, arguments=arguments, **kw)  # type: ignore[call-arg]  # the plugin types super() as _Input
        if (self.text is None or not self.text.strip()) and not self.vars and self.arguments is None:
            raise ConfigError("Edit: give the new text (Edit('...')), variables (Edit(vars={'name': value})) or a "
                              "tool call's arguments (Edit(arguments={...}))")


class Reject(_Input):
    """A person's answer to a waiting run: refuse the proposal.

    What that does depends on the point (``Pending.allowed`` says): a GroupChat drops the turn, a
    flow step takes its ``rejected`` edge.

    Args:
        reason: Why (kept in the run's events).
        **kw: ``kind`` (as JSON answers carry it).

    Attributes:
        kind: ``"reject"``.

    Examples:
        >>> from fsmchat import Reject
        >>> Reject("we said that already")
        Reject(reason='we said that already')
    """

    kind: Literal["reject"] = "reject"
    reason: str = ""

    def __init__(self, reason: str = "", **kw: object):
        super().__init__(reason=reason, **kw)  # type: ignore[call-arg]  # the plugin types super() as _Input


class Say(_Input):
    """A person's answer to a waiting run: their own message (a plain ``str`` means the same).

    Args:
        text: The message, non-empty.
        **kw: ``kind`` (as JSON answers carry it).

    Attributes:
        kind: ``"say"``.

    Raises:
        ConfigError: ``text`` is empty.

    Examples:
        >>> from fsmchat import Say
        >>> Say("Ship it.")
        Say(text='Ship it.')
    """

    kind: Literal["say"] = "say"
    text: str = Field(min_length=1)

    def __init__(self, text: str = "", **kw: object):
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"Say: text={text!r} is invalid: the person's message, a non-empty string")
        super().__init__(text=text, **kw)  # type: ignore[call-arg]  # the plugin types super() as _Input


Input = Union[Approve, Edit, Reject, Say]
INPUTS: dict[str, type[Input]] = {"approve": Approve, "edit": Edit, "reject": Reject, "say": Say}
SHOWN = {"approve": "Approve()", "edit": "Edit(text=...)", "reject": "Reject(reason)", "say": "Say(text) or a str"}


def as_input(x: object, owner: str = "input") -> Input:
    """``x`` as an answer: an ``Approve``/``Edit``/``Reject``/``Say``, a plain str (``Say``), or a
    dict with a ``kind`` (``{"kind": "edit", "text": "..."}``, how answers travel as JSON)."""
    if isinstance(x, (Approve, Edit, Reject, Say)):
        return x
    if isinstance(x, str):
        if not x.strip():
            raise bad_value(owner, "input", x, "a non-empty message (or Approve(), Edit(...), Reject(reason))")
        return Say(x)
    if isinstance(x, dict) and x.get("kind") in INPUTS:
        cls = INPUTS[x["kind"]]
        try:
            return cls(**{k: v for k, v in x.items() if k != "kind"})
        except (ValidationError, TypeError) as exc:
            raise bad_value(owner, "input", x, f"a {cls.__name__} ({exc})") from None
    raise bad_value(owner, "input", x, "Approve(), Edit(text=... or vars={...}), Reject(reason), Say(text) or a "
                    "plain str (the person's message); as JSON, a dict with kind approve|edit|reject|say",
                    type_error=not isinstance(x, dict))


# ---- what a waiting run asks ----
class Pending(BaseModel):
    """What a run that stopped at an interrupt waits for (``result.pending``).

    The run has ended with ``stop_reason="interrupted"``, every step checkpointed; resume it with
    the person's answer (``pattern.resume(run_id, store, input=...)``).

    Attributes:
        state: The (qualified) state the run waits in.
        kind: The interrupt point: ``before``/``after`` a state, ``post`` a GroupChat winner's
            message, ``claim`` the floor, a person's ``message``, a flow's ``ask``.
        prompt: What the person is asked.
        person: Who is asked (None: any reviewer).
        proposed: What would happen without them (e.g. ``{"speaker", "content", "score"}``).
        allowed: Each answer this point takes (``approve``, ``edit``, ``reject``, ``say``) and its
            effect here.
        edit: What an ``Edit`` changes here: ``"text"`` or ``"vars"``.

    Examples:
        >>> from fsmchat import Human, MemoryCheckpointer, RoundRobinSwarm
        >>> def dev(turn):
        ...     return "Tests are green."
        >>> chat, store = RoundRobinSwarm(agents=[dev, Human("Lead")]), MemoryCheckpointer()
        >>> result = chat.execute("Ready to ship?", checkpoint=store, run_id="release")
        >>> p = result.pending
        >>> result.stop_reason, p.state, p.kind, p.person, list(p.allowed)
        ('interrupted', 'Lead', 'message', 'Lead', ['say'])
        >>> result = chat.resume("release", store, input="Ship it.")
        >>> result.stop_reason, [m.content for m in result.transcript]
        ('max_loops', ['Ready to ship?', 'Tests are green.', 'Ship it.'])
    """

    model_config = ConfigDict(extra="forbid")
    state: str = ""
    kind: str
    prompt: str
    person: str | None = None
    proposed: dict[str, Any] | None = None
    allowed: dict[str, str]
    edit: Literal["text", "vars", "arguments"] | None = None

    def allowed_text(self) -> str:
        """Return each answer this point takes and its effect, as one line of text.

        For example ``Approve(): post the winner's message as is; Edit(text=...): ...``.
        """
        shown = {**SHOWN, "edit": {"vars": "Edit(vars={...})", "arguments": "Edit(arguments={...})"}.get(
            self.edit or "", "Edit(text=...)")}
        return "; ".join(f"{shown[k]}: {effect}" for k, effect in self.allowed.items())

    def __str__(self) -> str:
        who = f" ({self.person})" if self.person else ""
        shown = ""
        if self.proposed and "content" in self.proposed:
            shown = f" proposed {self.proposed.get('speaker', '')}: {self.proposed['content']!r}"
        return f"{self.kind} at {self.state}{who}: {self.prompt}{shown}; allowed: {self.allowed_text()}"


class InputNotAllowed(ConfigError):
    """The answer given to a waiting run is not one its interrupt point takes; nothing was run."""


class NotWaiting(FsmchatError, ValueError):
    """``input=`` was given to a run that does not wait for a person; nothing was run."""


class NeedsCheckpoint(ConfigTypeError):
    """A pattern that can wait for a person was run without a checkpoint (before any model call)."""


def check_input(pending: Pending, x: object) -> Input:
    """``x`` as an answer this point takes, else ``InputNotAllowed`` listing what it takes."""
    where = f"the run waits at {pending.state or pending.kind} ({pending.kind}"
    where += f", for {pending.person})" if pending.person else ")"
    answer = as_input(x, "resume")
    if answer.kind not in pending.allowed:
        raise InputNotAllowed(f"resume: input={answer!r} is not allowed: {where}; allowed here: "
                              f"{pending.allowed_text()}")
    if isinstance(answer, Edit):
        need = pending.edit
        if need == "text" and not answer.text:
            raise InputNotAllowed(f"resume: input={answer!r} is not allowed: {where}; an Edit here replaces the "
                                  "proposed message: Edit(text='...')")
        if need == "vars" and (not answer.vars or answer.text is not None):
            raise InputNotAllowed(f"resume: input={answer!r} is not allowed: {where}; an Edit here sets "
                                  "variables: Edit(vars={'name': value})")
        if need == "arguments" and (answer.arguments is None or answer.text is not None or answer.vars):
            raise InputNotAllowed(f"resume: input={answer!r} is not allowed: {where}; an Edit here replaces the "
                                  "tool call's arguments: Edit(arguments={...})")
        if need != "arguments" and answer.arguments is not None:
            raise InputNotAllowed(f"resume: input={answer!r} is not allowed: {where}; only a waiting tool call takes "
                                  "Edit(arguments=...)")
        if need == "text" and answer.vars:
            raise InputNotAllowed(f"resume: input={answer!r} is not allowed: {where}; an Edit here replaces the "
                                  "proposed message only (no vars)")
    return answer


def request(kind: str, prompt: str, allowed: dict[str, str], *, person: str | None = None,
            proposed: Mapping[str, object] | None = None, edit: str | None = None) -> dict[str, object]:
    """The JSON-able request an interrupt point raises with (``Pending`` without its state)."""
    out: dict[str, object] = {"kind": kind, "prompt": prompt, "allowed": allowed}
    if person is not None:
        out["person"] = person
    if proposed is not None:
        out["proposed"] = proposed
    if edit is not None:
        out["edit"] = edit
    return out


APPROVAL_ALLOWED = {"approve": "run the call as proposed",
                    "edit": "run it with these arguments instead (checked against the tool's schema)",
                    "reject": "do not run it; the reason goes to the model as the call's result"}
RERUN_ALLOWED = {"approve": "run the call again (it may have run once already)",
                 "say": "do not run it; your text is the call's result",
                 "reject": "do not run it; the reason goes to the model as the call's result"}


def tool_call_request(speaker: str, tool: str, arguments: object, call_id: str, *, rerun: bool) -> dict[str, Any]:
    """The request a person answers for ``speaker``'s tool call waiting for them (``request``):
    approve, edit or reject a call asked for, or (``rerun``) decide on one that may have run before
    the run stopped. Its prompt names the speaker, the tool and the arguments."""
    shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items()) if isinstance(arguments, dict) else str(arguments)
    prompt = (f"{speaker}'s call {tool}({shown}) may have run before the run stopped (its result was not saved): "
              "run it again?" if rerun else f"{speaker} asks to call {tool}({shown}): run it?")
    proposed: dict[str, object] = {"speaker": speaker, "tool": tool, "arguments": arguments, "call_id": call_id}
    return request("tool_call", prompt, RERUN_ALLOWED if rerun else APPROVAL_ALLOWED, person=None,
                   proposed=proposed, edit=None if rerun else "arguments")


def pending_of(event: TraceEvent | None) -> Pending | None:
    """The ``Pending`` an interrupted run's last trace event carries (None for any other event)."""
    if event is None or event.trigger != StopReason.INTERRUPTED or event.dest is not None or \
            not isinstance(event.payload, dict):
        return None
    return Pending(state=event.state, **event.payload)


def waiting_for(saved: Saved) -> Pending | None:
    """What a checkpointed run (``Saved``) waits for, when it stopped at an interrupt."""
    if saved.stop_reason != StopReason.INTERRUPTED or not saved.events:
        return None
    return pending_of(saved.events[-1])


# ---- people as participants ----
PERSON_BID = BidOutcome(0.0, "", True, "a person claims the floor instead of bidding")


class Human:
    """A person taking part in a conversation.

    Wherever scheduled speakers take turns (RoundRobinSwarm, debates, the panel's experts or
    moderator, Discussion steps, flow steps), a ``Human``'s turn stops the run until their message
    comes (``resume(..., input="text")``). In a ``GroupChat`` a Human never bids: before each bid
    round the run asks them whether they claim the floor (their message then wins the turn), an
    fsmchat extension of the libraries it follows (swarms, PraisonAI, AG2). A run with a person needs a checkpoint.

    Args:
        name: The person's name (one line); their messages' role.
        answers: Scripted answers, in order (a str is a message), for tests and demos; once they
            run out the run waits as usual.
        description: What the person is there for.

    Raises:
        ConfigError: The name is empty or spans lines.
        ConfigTypeError: ``answers`` is not a list or tuple.

    Examples:
        >>> from fsmchat import Human, MemoryCheckpointer, RoundRobinSwarm
        >>> def dev(turn):
        ...     return "Tests are green."
        >>> chat = RoundRobinSwarm(agents=[dev, Human("Lead", answers=["Ship it."])])
        >>> result = chat.execute("Ready to ship?", checkpoint=MemoryCheckpointer())
        >>> [(m.role, m.content) for m in result.transcript]
        [('User', 'Ready to ship?'), ('dev', 'Tests are green.'), ('Lead', 'Ship it.')]
    """

    def __init__(self, name: str, *, answers: Sequence[object] | None = None, description: str = ""):
        if not isinstance(name, str) or not name.strip() or len(name.splitlines()) != 1:
            raise bad_value("Human", "name", name, "the person's name, a non-empty one-line string",
                            type_error=not isinstance(name, str))
        if answers is not None and (isinstance(answers, (str, bytes)) or not isinstance(answers, (list, tuple))):
            raise bad_value("Human", "answers", answers, "a list of answers in order (a str is a message)",
                            type_error=True)
        self.name = name
        self.answers: list[Input] = [as_input(a, f"Human {name!r} answers") for a in answers or []]
        self.description = description

    async def reply(self, turn: object) -> str:
        """Refuse: a person's turn is an interrupt of a checkpointed run, not a call.

        Args:
            turn: The turn a pattern would ask about.

        Raises:
            TypeError: Always; patterns ask a person through their run's context.
        """
        raise TypeError(f"Human {self.name!r} is a person: their turn is an interrupt of a checkpointed run "
                        "(the pattern asks through its context), never a call like a model's")

    async def bid(self, turn: object) -> BidOutcome:
        """Return a silent bid: a person never bids (in a GroupChat they claim the floor instead).

        Args:
            turn: The bid turn.
        """
        return PERSON_BID

    def __repr__(self) -> str:
        return f"Human({self.name!r}" + (f", answers={len(self.answers)}" if self.answers else "") + ")"


@dataclass
class People:
    """The run's side of its people: the answer a resume brings (for the request it waits on) and
    how many scripted answers each ``Human`` has given. ``verdict`` is what the last interrupt
    point decided (read by its outgoing guards in the same step)."""

    answer: Input | None = None
    waiting: Pending | None = None
    used: dict[str, int] = field(default_factory=dict)
    verdict: str | None = None

    def ask(self, req: dict[str, object], person: Human | None = None) -> Input:
        """The answer to ``req``: the one this resume brought, else the person's next scripted
        one, else the run stops here (``Interrupted``) until someone answers."""
        if self.answer is not None:
            waiting = self.waiting
            if waiting is not None and (waiting.kind, waiting.person) != (req["kind"], req.get("person")):
                raise ResumeMismatch(f"the resumed run asked {req['kind']!r}" +
                                     (f" of {req['person']!r}" if req.get("person") else "") +
                                     f" before reaching the point it waited at ({waiting}); the pattern "
                                     "changed between the runs, or a step before it is not deterministic")
            answer, self.answer, self.waiting = self.answer, None, None
            return answer
        if person is not None and self.used.get(person.name, 0) < len(person.answers):
            k = self.used.get(person.name, 0)
            self.used[person.name] = k + 1
            return check_input(Pending(**req), person.answers[k])
        raise Interrupted(req)

    def give(self, pending: Pending, answer: Input) -> None:
        self.waiting, self.answer = pending, answer

    def to_state(self) -> dict[str, object]:
        return {"used": dict(self.used)}

    def restore(self, state: Mapping[str, object]) -> None:
        used = as_opt_object(state.get("used"), "people")
        self.used.update({str(k): get_int(used, k, "people.used") for k in used})


class ResumeMismatch(FsmchatError, RuntimeError):
    """A resumed run reached another interrupt point than the one its answer was for."""
