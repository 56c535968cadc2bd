"""Layer 5: people in the loop.

A run that needs a person stops at a drawn state (``stop_reason="interrupted"``, checkpointed) and
says what it asks (``Pending``); ``resume(run_id, checkpoint, input=...)`` continues it with the
person's answer, in this process or another one days later. The answer is one of a small typed
vocabulary, checked against what the interrupt point allows before anything runs:

- ``Approve()``: go on as proposed;
- ``Edit(text=...)`` / ``Edit(vars={...})``: go on with the proposed message (or flow variables) changed;
- ``Reject(reason)``: refuse (each point documents its effect, in ``Pending.allowed``);
- ``Say(text)``, or a plain ``str``: the person's own message.

``Human(name)`` is a participant whose turn is such an interrupt (``Human(name, answers=[...])``
answers from a script instead, for tests and demos). ``People`` is the run's slot through which
the answer reaches the action that asked.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError, ConfigTypeError, FsmchatError, Interrupted, bad_value
from ..models import StopReason
from .respond import BidOutcome

USER = "User"  # the role a reviewer's own message is posted under (the task's role: the person running it)


# ---- the answers ----
class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.model_dump(exclude={"kind"}, exclude_defaults=True).items())
        return f"{type(self).__name__}({args})"


class Approve(_Input):
    """Go on as proposed (post the message, run the next state)."""

    kind: Literal["approve"] = "approve"


class Edit(_Input):
    """Go on with the proposal changed: ``text`` replaces the proposed message, ``vars`` updates flow
    variables (each point says which it takes)."""

    kind: Literal["edit"] = "edit"
    text: str | None = None
    vars: dict[str, Any] | None = None

    def __init__(self, text: str | None = None, vars: dict[str, Any] | None = None, **kw: Any):
        super().__init__(text=text, vars=vars, **kw)  # type: ignore[call-arg]
        if (self.text is None or not self.text.strip()) and not self.vars:
            raise ConfigError("Edit: give the new text (Edit('...')) or variables (Edit(vars={'name': value}))")


class Reject(_Input):
    """Refuse the proposal; what that does depends on the point (``Pending.allowed`` says)."""

    kind: Literal["reject"] = "reject"
    reason: str = ""

    def __init__(self, reason: str = "", **kw: Any):
        super().__init__(reason=reason, **kw)  # type: ignore[call-arg]


class Say(_Input):
    """The person's own message (a plain ``str`` means the same)."""

    kind: Literal["say"] = "say"
    text: str = Field(min_length=1)

    def __init__(self, text: str = "", **kw: Any):
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"Say: text={text!r} is invalid: the person's message, a non-empty string")
        super().__init__(text=text, **kw)  # type: ignore[call-arg]


Input = Union[Approve, Edit, Reject, Say]
INPUTS: dict[str, type[_Input]] = {"approve": Approve, "edit": Edit, "reject": Reject, "say": Say}
SHOWN = {"approve": "Approve()", "edit": "Edit(text=...)", "reject": "Reject(reason)", "say": "Say(text) or a str"}


def as_input(x: Any, owner: str = "input") -> Input:
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
            return cls(**{k: v for k, v in x.items() if k != "kind"})  # type: ignore[return-value]
        except (ValidationError, TypeError) as exc:
            raise bad_value(owner, "input", x, f"a {cls.__name__} ({exc})") from None
    raise bad_value(owner, "input", x, "Approve(), Edit(text=... or vars={...}), Reject(reason), Say(text) or a "
                    "plain str (the person's message); as JSON, a dict with kind approve|edit|reject|say",
                    type_error=not isinstance(x, dict))


# ---- what a waiting run asks ----
class Pending(BaseModel):
    """What a run that stopped at an interrupt waits for (``result.pending``).

    ``state`` is the (qualified) state it waits in; ``kind`` the interrupt point (``before``/
    ``after`` a state, ``post`` a GroupChat winner's message, ``claim`` the floor, a person's
    ``message``, a flow's ``ask``); ``prompt`` what the person is asked; ``person`` who (None: any
    reviewer); ``proposed`` what would happen without them (e.g. ``{"speaker", "content", "score"}``);
    ``allowed`` each answer this point takes and its effect here; ``edit`` what an ``Edit`` changes
    (``"text"`` or ``"vars"``)."""

    model_config = ConfigDict(extra="forbid")
    state: str = ""
    kind: str
    prompt: str
    person: str | None = None
    proposed: dict[str, Any] | None = None
    allowed: dict[str, str]
    edit: Literal["text", "vars"] | None = None

    def allowed_text(self) -> str:
        """``Approve(): post it as is; Edit(text=...): ...`` (each answer this point takes, its effect)."""
        shown = {**SHOWN, "edit": "Edit(vars={...})" if self.edit == "vars" else "Edit(text=...)"}
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


def check_input(pending: Pending, x: Any) -> Input:
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
        if need == "text" and answer.vars:
            raise InputNotAllowed(f"resume: input={answer!r} is not allowed: {where}; an Edit here replaces the "
                                  "proposed message only (no vars)")
    return answer


def request(kind: str, prompt: str, allowed: dict[str, str], *, person: str | None = None,
            proposed: dict[str, Any] | None = None, edit: str | None = None) -> dict[str, Any]:
    """The JSON-able request an interrupt point raises with (``Pending`` without its state)."""
    out: dict[str, Any] = {"kind": kind, "prompt": prompt, "allowed": allowed}
    if person is not None:
        out["person"] = person
    if proposed is not None:
        out["proposed"] = proposed
    if edit is not None:
        out["edit"] = edit
    return out


def pending_of(event: Any) -> Pending | None:
    """The ``Pending`` an interrupted run's last trace event carries (None for any other event)."""
    if event is None or event.trigger != StopReason.INTERRUPTED or event.dest is not None or \
            not isinstance(event.payload, dict):
        return None
    return Pending(state=event.state, **event.payload)


def waiting_for(saved: Any) -> Pending | None:
    """What a checkpointed run (``Saved``) waits for, when it stopped at an interrupt."""
    if saved.stop_reason != StopReason.INTERRUPTED or not saved.events:
        return None
    return pending_of(saved.events[-1])


# ---- people as participants ----
PERSON_BID = BidOutcome(0.0, "", True, "a person claims the floor instead of bidding")


class Human:
    """A person taking part. Wherever scheduled speakers take turns (RoundRobinSwarm, debates, the
    panel's experts or moderator, Discussion steps, flow steps), a ``Human``'s turn stops the run
    until their message comes (``resume(..., input="text")``). In a ``GroupChat`` a Human never bids:
    before each bid round the run asks them whether they claim the floor (their message then wins
    the turn), an fsmchat extension of the reference. ``answers`` scripts the person (their answers
    in order, then the run waits as usual), for tests and demos."""

    def __init__(self, name: str, *, answers: Sequence[Any] | None = None, description: str = ""):
        if not isinstance(name, str) or not name.strip() or len(name.splitlines()) != 1:
            raise bad_value("Human", "name", name, "the person's name, a non-empty one-line string",
                            type_error=not isinstance(name, str))
        if answers is not None and (isinstance(answers, (str, bytes)) or not isinstance(answers, (list, tuple))):
            raise bad_value("Human", "answers", answers, "a list of answers in order (a str is a message)",
                            type_error=True)
        self.name = name
        self.answers: list[Input] = [as_input(a, f"Human {name!r} answers") for a in answers or []]
        self.description = description

    async def reply(self, turn: Any) -> str:
        raise TypeError(f"Human {self.name!r} is a person: their turn is an interrupt of a checkpointed run "
                        "(the pattern asks through its context), never a call like a model's")

    async def bid(self, turn: Any) -> BidOutcome:
        """A person never bids (in a GroupChat they claim the floor at an interrupt instead)."""
        return PERSON_BID

    def __repr__(self) -> str:
        return f"Human({self.name!r}" + (f", answers={len(self.answers)}" if self.answers else "") + ")"


def is_person(x: Any) -> bool:
    return isinstance(x, Human)


@dataclass
class People:
    """The run's side of its people: the answer a resume brings (for the request it waits on) and
    how many scripted answers each ``Human`` has given. ``verdict`` is what the last interrupt
    point decided (read by its outgoing guards in the same step)."""

    answer: Input | None = None
    waiting: Pending | None = None
    used: dict[str, int] = field(default_factory=dict)
    verdict: str | None = None

    def ask(self, req: dict[str, Any], person: Human | None = None) -> Input:
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

    def to_state(self) -> dict[str, Any]:
        return {"used": dict(self.used)}

    def restore(self, state: dict[str, Any]) -> None:
        self.used.update(state.get("used", {}))


class ResumeMismatch(FsmchatError, RuntimeError):
    """A resumed run reached another interrupt point than the one its answer was for."""
