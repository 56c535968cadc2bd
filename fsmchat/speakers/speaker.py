"""Layer 10, speakers: what the patterns, the tool loop and ``ChatContext.ask`` call on a participant.

``Speaker`` is every participant (an ``Agent``, a ``CallableSpeaker``, a ``Human``, or anything of
your own with a ``name``, a ``reply`` and a ``bid``); ``ToolSpeaker`` is one whose turns may call
tools or hand the floor on (an ``Agent``): the tool loop asks it for each model call of a turn
(``tool_message``) and bounds the turn by its ``max_tool_rounds``. ``tooled`` says which a
speaker is, as the tool loop decides it, and narrows the type to match. The signatures of the
speaking block take these, so strict typing goes from a pattern's roster to the model call.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol, TypeGuard, runtime_checkable

from .handoff import handoffs_of
from .respond import BidOutcome
from .tools import has_tools

if TYPE_CHECKING:  # the turn a speaker is given is the agent module's (which imports this one)
    from ..checks import JsonValue
    from .agent import Turn


@runtime_checkable
class Speaker(Protocol):
    """What the engine and the patterns call on a participant.

    An ``Agent``, a ``CallableSpeaker``, a ``Human``, or anything of your own with these: its
    ``name`` (its transcript role), a reply to a turn, and a bid (GroupChat).

    Examples:
        >>> from fsmchat import Agent
        >>> from fsmchat.speakers.speaker import Speaker
        >>> isinstance(Agent("Critic"), Speaker), isinstance("Critic", Speaker)
        (True, False)
    """

    @property
    def name(self) -> str:
        """The participant's name: its role in the transcript."""

    async def reply(self, turn: Turn) -> str:
        """The participant's message for ``turn``.

        Args:
            turn: Its name, the conversation and the instruction.
        """

    async def bid(self, turn: Turn) -> BidOutcome:
        """How much the participant wants the floor next, and what it would say (GroupChat).

        Args:
            turn: Its name, the conversation and the bidding instruction.
        """


class ToolSpeaker(Speaker, Protocol):
    """A participant whose turns may call tools or hand the floor on: an ``Agent``.

    The tool loop asks it for each model call of a turn (``tool_message``), runs at most
    ``max_parallel_tools`` of a reply's calls at once, and gives it at most ``max_tool_rounds``
    rounds before it must answer.

    Examples:
        >>> from fsmchat import Agent
        >>> from fsmchat.speakers.speaker import tooled
        >>> def search(query: str) -> str:
        ...     '''Search the web.'''
        ...     return "nothing"
        >>> tooled(Agent("Scout", tools=[search])), tooled(Agent("Critic"))
        (True, False)
    """

    @property
    def model(self) -> str | None:
        """Its model's name (None: ``FSMCHAT_MODEL`` or the offline model)."""

    @property
    def max_tool_rounds(self) -> int:
        """Model calls with tool calls one turn may take before the model must answer."""

    @property
    def max_parallel_tools(self) -> int:
        """How many tool calls of one reply run at once."""

    @property
    def tool_mode(self) -> Literal["native", "json"] | None:
        """How its bids go on the wire (None: as its model allows)."""

    async def tool_message(self, turn: Turn, exchange: list[dict[str, JsonValue]], specs: list[dict[str, object]], *,
                           final: bool, bid: bool = False) -> object:
        """One model call of a turn with tools: the model's message, with its tool calls if any.

        Args:
            turn: The turn.
            exchange: The tool rounds so far (assistant ``tool_calls`` and ``tool`` results).
            specs: The tools offered, as the wire spells them.
            final: The last round: no more tool calls (a bid: ``respond`` forced).
            bid: A GroupChat bid (a tool or ``respond`` must be called).
        """


def tooled(speaker: Speaker) -> TypeGuard[ToolSpeaker]:
    """Whether ``speaker``'s turns go through the tool loop: it carries tools it can run, or handoffs.

    Args:
        speaker: A participant.

    Examples:
        >>> from fsmchat import Agent
        >>> from fsmchat.speakers.speaker import tooled
        >>> tooled(Agent("Critic")), tooled(Agent("Lead", handoffs=[Agent("Coder")]))
        (False, True)
    """
    return has_tools(speaker) or bool(handoffs_of(speaker))
