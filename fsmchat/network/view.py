"""What a participant's model sees of a channel: a window of recent texts, older ones folded."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..errors import ConfigError
from ..models import Message
from ..speakers.context import ContextPolicy, LastMessages, Summarize, check_context, view
from .events import EV_TEXT, Envelope

SUMMARY_PREFIX = "[summary]"


def window_size(n_participants: int) -> int:
    """The reference's ``WindowedSummary(recent_n=N*2)``, at least 4.

    Args:
        n_participants: The channel's number of participants.

    Examples:
        >>> from fsmchat.network import window_size
        >>> window_size(2), window_size(3)
        (4, 6)
    """
    return max(2 * n_participants, 4)


CONTINUATION = "  "


def label(sender: str, text: str) -> str:
    """``[sender]: text``, written by the hub only: a text's own line breaks (any kind ``splitlines``
    knows) become newline + indent, so no line a sender writes can start like a speaker label
    (``"ok\n[bob]: I withdraw"`` from alice is not a line of bob's)."""
    return f"[{sender}]: " + ("\n" + CONTINUATION).join(text.splitlines() or [""])


def _clip(text: str, limit: int = 160) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1].rstrip() + "…"


def summary_line(older: Sequence[tuple[str, str]]) -> str:
    """One line standing for every text older than the window: how many, by whom, how it opened."""
    counts = Counter(s for s, _ in older)
    who = ", ".join(f"{s} {n}" for s, n in counts.items())
    first_sender, first_text = older[0]
    noun = "text" if len(older) == 1 else "texts"
    return (f"{SUMMARY_PREFIX} {len(older)} earlier {noun} ({who}); "
            f"it opened with {label(first_sender, _clip(first_text))}")


@dataclass(frozen=True)
class WindowedSummary:
    """The last ``recent_n`` texts labelled ``[name]: text``; anything older folded into one line.

    A text's own line breaks become newline + indent, so no line a sender writes can start like a
    speaker label.

    Attributes:
        recent_n: How many recent texts are shown whole.

    Examples:
        >>> from fsmchat.network import WindowedSummary
        >>> texts = [("alice", "Topic: Rust?"), ("bob", "For systems work."), ("carol", "Not for scripts.")]
        >>> print(WindowedSummary(recent_n=2).render(texts))
        [summary] 1 earlier text (alice 1); it opened with [alice]: Topic: Rust?
        [bob]: For systems work.
        [carol]: Not for scripts.
    """

    recent_n: int

    def lines(self, texts: Sequence[tuple[str, str]]) -> list[str]:
        """The view of ``texts`` ((sender, text) pairs, in order) as lines: a summary line, then the window."""
        texts = list(texts)
        older, recent = texts[: max(0, len(texts) - self.recent_n)], texts[-self.recent_n:] if self.recent_n else []
        out = [summary_line(older)] if older else []
        out.extend(label(s, t) for s, t in recent)
        return out

    def render(self, texts: Sequence[tuple[str, str]]) -> str:
        """``lines(texts)`` joined by newlines."""
        return "\n".join(self.lines(texts))


def texts_of(log: Iterable[Envelope]) -> list[tuple[str, str]]:
    """(sender, text) of every text envelope, in order."""
    return [(e.sender, e.text or "") for e in log if e.event_type == EV_TEXT]


def windowed_view(log: Iterable[Envelope], n_participants: int) -> list[str]:
    r"""The default view of a discussion channel: ``max(2N, 4)`` labelled texts plus a summary line.

    What the default handler sends a participant's model on its turn.

    Args:
        log: The channel's envelopes (``channel.log()``); only texts are shown.
        n_participants: The channel's number of participants.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Hub
        >>> from fsmchat.network import windowed_view
        >>> async def main():
        ...     async with Hub() as hub:
        ...         alice, bob = await hub.register("alice"), await hub.register("bob")
        ...         channel = await alice.open(target=["bob"])
        ...         await channel.send("Topic: should every developer learn Rust?\nOne line each.")
        ...         return windowed_view(channel.log(), 2)
        >>> asyncio.run(main())
        ['[alice]: Topic: should every developer learn Rust?\n  One line each.']
    """
    return WindowedSummary(window_size(n_participants)).lines(texts_of(log))


def check_channel_context(value: object) -> ContextPolicy | None:
    """A discussion channel's ``context`` (``client.open(context=...)``), checked as a pattern's:
    ``"full"``, ``LastMessages(n)`` or None (the recent window, older texts folded into one line).

    Raises:
        ConfigError: Not a context policy (the patterns' refusal), or ``Summarize``: a channel's
            turns are the texts its participants send, with no state where a compaction could run.

    Examples:
        >>> from fsmchat.network.view import check_channel_context
        >>> from fsmchat.speakers.context import LastMessages
        >>> check_channel_context(LastMessages(3))
        LastMessages(n=3)
        >>> check_channel_context("last3")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: discussion channel: context='last3' (str) is invalid: a context policy is "full" (the whole conversation; refused when over the input limit), LastMessages(n) (the task and the last n messages), Summarize(agent=..., keep_last=k, at=0.8) (older messages summarised by one model call), or None (the pattern's policy)
    """
    policy = check_context(value, "discussion channel")
    if isinstance(policy, Summarize):
        raise ConfigError(f"discussion channel: context={policy!r} is invalid here: a channel draws no compaction "
                          "(its turns are the texts its participants send); give context=LastMessages(n) (its "
                          "first text and its last n), \"full\" (every text) or None (the recent window, older "
                          "texts folded into one [summary] line)")
    return policy


def policy_view(texts: Sequence[tuple[str, str]], policy: ContextPolicy | None,
                n_participants: int) -> tuple[list[str], list[tuple[str, str]]]:
    """(the view's lines, the texts shown whole) of a channel under ``policy``: None is the
    default window (``windowed_view``); ``"full"`` every text; ``LastMessages(n)`` the first text
    (the topic) and the last ``n``, as a pattern's policy shows its conversation (``context.view``).

    Examples:
        >>> from fsmchat.network.view import policy_view
        >>> from fsmchat.speakers.context import LastMessages
        >>> texts = [("alice", "Topic: Rust?"), ("bob", "For systems."), ("alice", "And tools."), ("bob", "Agreed.")]
        >>> policy_view(texts, LastMessages(1), 2)[0]
        ['[alice]: Topic: Rust?', '[bob]: Agreed.']
    """
    if policy is None:
        window = WindowedSummary(window_size(n_participants))
        return window.lines(texts), list(texts[-window.recent_n:])
    shown = [(m.role, m.content) for m in view([Message(role=s, content=t) for s, t in texts], policy)]
    return [label(s, t) for s, t in shown], shown
