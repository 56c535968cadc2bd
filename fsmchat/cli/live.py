"""Layer 18: one run shown as it happens (``fsmchat run``).

Each message is printed the moment it is posted; below them a status line (the current state,
turn, model calls, tokens, cost, elapsed time) redraws a few times a second, so it keeps moving
while a model thinks. The status line is rich's ``Live`` display on stderr, drawn only when stderr
is a terminal; messages go to stdout (as panels on a terminal, as plain ``role: text`` lines
otherwise, flushed one by one so a pipe sees each as it happens).

A GroupChat turn (its own or nested in a flow) also shows its bids, as the run viewer does: after
the turn's ``select`` step, before the winner's message, one line per agent with its score, its
recency-adjusted score, whether it cleared the threshold, and the winner (``bids=False`` hides
them). The ``bid`` step's payload holds the raw scores, the ``select`` step's the decision.

A turn the offline model answered without calling any of the tools it was offered (an
``offline_no_tool_call`` event of the run) gets a dim note under its message: ``(offline: no tool
matched "<first words of the request>"; tools: add, search)``.

Replies stream (``tokens``; by default when stdout is a terminal, ``fsmchat run --no-stream``
turns it off): the speaking agent's text is shown as the model writes it (above the status line on
a terminal, as a growing ``role: text`` line otherwise), then its message is posted whole. A
stream that broke after text was shown and is asked again says so (``StreamRetry``), and the text
starts over. A GroupChat's bids stream too, marked as bids: under ``bidding, turn 2:`` each
bidder's message as its ``respond`` call's arguments arrive (``BidDelta``; a panel ``TechCritic
(bidding)`` above the status line on a terminal, a growing ``  TechCritic (bidding): ...`` line
otherwise), then its score when its call returns (``on_bid``, which ``fsmchat run`` sets as
``fsmchat.patterns.group_chat.BIDS``: ``fsmchat.cli.showing_bids``): ``  TechCritic (bid 0.89):
...``, or `` -> bid 0.89`` ending the line that showed the whole message. When the round closes,
its bids are shown with the winner marked as above; they are decided by the whole bids, as without
streaming.

A ``LiveRun`` plugs into any pattern run: ``aexecute(task, observers=[view.on_event],
on_message=[view.on_message], on_start=[view.on_start], on_token=[view.on_token])``.
"""
from __future__ import annotations

import html
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, TextIO, TypedDict

from ..models import BidDelta, Message, RunResult, StreamRetry, TokenDelta, TraceEvent
from ..speakers import llm
from ..speakers.respond import BidOutcome

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.spinner import Spinner


class LiveRun:
    """Prints a run's messages as they are posted (``messages``) and a status line (``status``:
    None = when stderr is a terminal)."""

    def __init__(self, *, messages: bool = True, status: bool | None = None, label: str = "",
                 out: TextIO | None = None, err: TextIO | None = None, bids: bool = True, tokens: bool | None = None):
        self.messages = messages
        self.tokens = messages and ((out or sys.stdout).isatty() if tokens is None else tokens)
        self._writing: dict[str, str] = {}  # each agent's reply shown so far, until its message is posted
        self._bid_text: dict[str, str] = {}  # each bidder's message shown so far, until its bid returns
        self._raw_open: tuple[str, bool] | None = None  # plain output: the open line's agent, and whether a bid
        self._raw_line = ""  # ... and the bid text that line shows
        self.bids = bids
        self._raw: dict[str, dict[str, float]] = {}  # a GroupChat's latest raw scores, by its state prefix
        self._turns: dict[str, int] = {}  # GroupChat turns shown, by state prefix
        self._bidding: set[str] = set()  # GroupChats whose round's bids are being shown as they come
        self._seen = 0  # the run's events read so far (``offline_no_tool_call`` notes)
        self.out, self.err = out, err
        err_stream = err or sys.stderr
        self.status = err_stream.isatty() if status is None else status
        self.label = label
        self.state = ""
        self.ctx: object = None
        self.started = time.monotonic()
        self._live: Live | None = None
        self._console: Console | None = None
        self._spinner: Spinner | None = None

    # ---- the run's hooks ----
    def on_start(self, ctx: object) -> None:
        self.ctx = ctx
        self.started = time.monotonic()
        self._seen = len(getattr(ctx, "events", None) or ())  # a resumed run's earlier events are not news

    def on_event(self, ev: TraceEvent) -> None:
        self.state = ev.dest or ev.state
        if not (self.messages and self.bids) or not isinstance(ev.payload, dict):
            return
        prefix, _, short = ev.state.rpartition(".")
        if short == "bid" and ev.payload and all(isinstance(v, (int, float)) for v in ev.payload.values()):
            self._raw[prefix] = dict(ev.payload)
        elif short == "select" and "adjusted" in ev.payload and prefix in self._raw:
            self._bidding.discard(prefix)
            self._bid_text.clear()  # the round closed: a streamed bid no ``on_bid`` ended is void
            if self._raw_open is not None and self._raw_open[1]:
                self._end_raw()
            turn = self._turns[prefix] = self._turns.get(prefix, 0) + 1
            self._print_lines(bid_lines(turn, self._raw.pop(prefix), ev.payload), style="dim")

    def on_bid(self, agent: str, step: str | None, bid: BidOutcome) -> None:
        """A GroupChat bid as its bidder's call returns, before the round closes (``fsmchat run``
        sets ``fsmchat.patterns.group_chat.BIDS`` to it while it streams): ``  TechCritic (bid
        0.89): <its message>`` (``, silent`` without one), the round's first under ``bidding, turn 2:``;
        `` -> bid 0.89`` ends the open line that streamed its whole message (``on_token``)."""
        if not (self.messages and self.bids and self.tokens):
            return
        shown = self._bid_text.pop(agent, None)
        if shown is not None and self._raw_open == (agent, True) and self._raw_line.strip() == bid.message:
            out = self.out or sys.stdout  # the line shows the message: its score ends it
            out.write(f" -> bid {bid.score:.2f}\n")
            out.flush()
            self._raw_open = None
            return
        self._end_raw()
        lines = self._bidding_head(step)
        lines.append(f"  {agent} (bid {bid.score:.2f}): {bid.message}" if bid.message else
                     f"  {agent} (bid {bid.score:.2f}, silent)")
        self._print_lines(lines, style="dim")

    def _bidding_head(self, step: str | None) -> list[str]:
        """``bidding, turn 2:`` before the first bid shown of a round, else nothing."""
        prefix = (step or "").rpartition(".")[0]  # the bid state's GroupChat (one nested in a flow too)
        if prefix in self._bidding:
            return []
        self._bidding.add(prefix)
        return [f"bidding, turn {self._turns.get(prefix, 0) + 1}:"]

    def _bid_piece(self, item: BidDelta) -> None:
        """A piece of a bid's message, shown as it comes: in a ``(bidding)`` panel on a terminal,
        on a growing ``  TechCritic (bidding): ...`` line otherwise."""
        if not (self.messages and self.bids):
            return
        head = self._bidding_head(item.step)
        if head:
            self._end_raw()
            self._print_lines(head, style="dim")
        self._bid_text[item.agent] = self._bid_text.get(item.agent, "") + item.text
        if self._live is None:
            out = self.out or sys.stdout
            if self._raw_open != (item.agent, True):
                self._end_raw()
                out.write(f"  {item.agent} (bidding): ")
                self._raw_open, self._raw_line = (item.agent, True), ""
            self._raw_line += item.text
            out.write(item.text)
            out.flush()

    def _print_lines(self, lines: list[str], style: str) -> None:
        if self._console is not None:
            from rich.text import Text

            for ln in lines:
                self._console.print(Text(ln, style=style))
        else:
            out = self.out or sys.stdout
            out.write("".join(ln + "\n" for ln in lines))
            out.flush()

    def on_token(self, item: TokenDelta | BidDelta | StreamRetry) -> None:
        """A reply's delta or a bid's (shown as they come), or a retry of a shown stream (said, then
        started over)."""
        if not self.tokens:
            return
        if isinstance(item, BidDelta):
            self._bid_piece(item)
            return
        if isinstance(item, StreamRetry):
            bid = item.agent in self._bid_text and item.agent not in self._writing
            (self._bid_text if bid else self._writing).pop(item.agent, None)
            note = (f"  {item.agent}'s {'bid' if bid else 'reply'} broke after {item.shown} characters "
                    f"({item.reason}); asking again (attempt {item.attempt + 1})")
            self._end_raw()
            self._print_lines([note], style="yellow")
            return
        self._writing[item.agent] = self._writing.get(item.agent, "") + item.text
        if self._live is None:  # no live region: the reply grows on its own line
            out = self.out or sys.stdout
            if self._raw_open != (item.agent, False):
                self._end_raw()
                out.write(f"{item.agent}: ")
                self._raw_open = (item.agent, False)
            out.write(item.text)
            out.flush()

    def _end_raw(self) -> None:
        if self._raw_open is not None:
            out = self.out or sys.stdout
            out.write("\n")
            out.flush()
            self._raw_open = None

    def _notes(self, msg: Message) -> list[str]:
        """The notes under ``msg``: its speaker's ``offline_no_tool_call`` since the last message
        (the events of others, such as a GroupChat's losing bidders, are passed over)."""
        events = getattr(self.ctx, "events", None)
        if events is None:
            return []
        new, self._seen = events[self._seen:], len(events)
        return [offline_note(e) for e in new if isinstance(e, dict) and e.get("event") == "offline_no_tool_call"
                and e.get("agent") == msg.role]

    def on_message(self, msg: Message) -> None:
        if not self.messages:
            return
        out = self.out or sys.stdout
        notes = self._notes(msg)
        shown = self._writing.pop(msg.role, None)
        if shown is not None and self._live is None and self._raw_open == (msg.role, False):
            if shown == msg.content:  # its text is on the line already: end the line, add its tool calls
                self._end_raw()
                self._print_lines(call_lines(msg) + notes, style="dim")
                return
            self._end_raw()
        if self._console is not None:  # a terminal: a titled panel per message
            from rich.panel import Panel
            from rich.text import Text

            score = msg.metadata.get("score")
            title = Text(msg.role, style="bold") + (
                Text(f"  bid {score:.2f}", style="dim") if isinstance(score, (int, float)) else Text(""))
            self._console.print(Panel(Text(msg.content), title=title, title_align="left"))
            for line in call_lines(msg) + notes:
                self._console.print(Text(line, style="dim"))
        else:
            out.write(f"{msg.role}: {msg.content}\n")
            for line in call_lines(msg) + notes:
                out.write(line + "\n")
            out.flush()

    # ---- the status line ----
    def line(self) -> str:
        """``bid · turn 3 · 4 msgs · 7 calls · 1,234 tok · $0.0012 · 12.3s`` (state first)."""
        ctx = self.ctx
        parts = [self.state or ("loading litellm" if llm.loading() else "starting")]
        turn = getattr(ctx, "turn", None)
        if isinstance(turn, int):
            parts.append(f"turn {turn}")
        transcript = getattr(ctx, "transcript", None)
        if transcript is not None:
            parts.append(f"{len(transcript)} msgs")
        stats = getattr(ctx, "stats", None)
        if stats is not None:
            parts += [f"{stats.calls} calls", f"{stats.usage.get('total_tokens', 0):,} tok",
                      f"${stats.cost_usd:.4f}"]
        parts.append(f"{time.monotonic() - self.started:.1f}s")
        return " · ".join(parts)

    def _renderable(self) -> RenderableType:
        from rich.console import Group
        from rich.panel import Panel
        from rich.text import Text

        spinner = self._spinner
        if spinner is None:  # (the status line is not shown)
            return Group()
        spinner.update(text=Text(((self.label + " · ") if self.label else "") + self.line(), style="cyan",
                                       no_wrap=True, overflow="ellipsis"))
        writing = [Panel(Text(text), title=Text(f"{agent} (writing)", style="bold"), title_align="left")
                   for agent, text in list(self._writing.items())]
        writing += [Panel(Text(text, style="dim"), title=Text(f"{agent} (bidding)", style="dim bold"),
                          title_align="left") for agent, text in list(self._bid_text.items())]
        return Group(*writing, spinner) if writing else spinner

    # ---- showing ----
    def __enter__(self) -> "LiveRun":
        out = self.out or sys.stdout
        if self.messages and out.isatty():
            from rich.console import Console

            self._console = Console(file=self.out) if self.out is not None else Console()
        if self.status:
            from rich.console import Console
            from rich.live import Live
            from rich.spinner import Spinner

            self._spinner = Spinner("dots")
            # stdout on the same screen goes above the status line; stdout elsewhere is left alone
            live = self._live = Live(get_renderable=self._renderable, console=Console(file=self.err or sys.stderr),
                                     refresh_per_second=8, transient=True, redirect_stdout=out.isatty(),
                                     redirect_stderr=False)
            live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._end_raw()
        if self._live is not None:
            self._live.stop()
            self._live = None


class _Handle(Protocol):
    """What a notebook's ``display(obj, display_id=True)`` returns: the output it updates."""

    def update(self, obj: object) -> object: ...


class LiveHooks(TypedDict):
    """The run keywords ``NotebookLive.hooks()`` gives (``pattern.execute(task, **view.hooks())``)."""

    on_message: list[Callable[[Message], None]]
    on_token: list[Callable[[TokenDelta | BidDelta | StreamRetry], None]]


class NotebookLive:
    """A run shown in a notebook cell as it happens: one display (a table of the messages) that is
    updated in place as each message is posted and, while a reply streams, grows with its tokens
    (the row of the agent writing ends in "writing..."); a broken stream that is asked again says so
    in its row and starts over. ``pattern.execute(task, **view.hooks())``.

    Args:
        display: Shows the view and returns a handle with ``update(obj)``; by default IPython's
            ``display(obj, display_id=True)``.

    Examples:
        >>> from fsmchat import Message, TokenDelta
        >>> from fsmchat.cli.live import NotebookLive
        >>> shown = []
        >>> class Handle:
        ...     def update(self, obj):
        ...         shown.append(obj._repr_html_())
        >>> view = NotebookLive(display=lambda obj: Handle())
        >>> view.on_message(Message(role="User", content="Ship it?"))
        >>> view.on_token(TokenDelta("Critic", "turn_1", "Not "))
        >>> shown[-1].split("<tr>")[-1]
        '<td><b>Critic</b></td><td>Not  <i>writing...</i></td></tr></table>'
    """

    def __init__(self, display: Callable[[NotebookLive], _Handle] | None = None):
        self.rows: list[list[str]] = []  # [role, text, note]: note is "writing..." while a reply streams
        self._writing: dict[str, int] = {}  # agent -> its streaming row
        self._display = display
        self._handle: _Handle | None = None

    def hooks(self) -> LiveHooks:
        """The run keywords that feed this view: ``on_message`` and ``on_token``."""
        return {"on_message": [self.on_message], "on_token": [self.on_token]}

    def on_token(self, item: TokenDelta | BidDelta | StreamRetry) -> None:
        """A reply's delta, shown in its agent's row; a retry of a shown reply. A GroupChat's bids
        (``BidDelta``, and a retry of one) are not shown: only the winner's message is posted."""
        if isinstance(item, BidDelta):
            return
        row = self._writing.get(item.agent)
        if row is None and isinstance(item, StreamRetry):
            return  # a bid's stream (this view shows no bid): a reply's row is there before its retry
        if row is None:
            row = self._writing[item.agent] = len(self.rows)
            self.rows.append([item.agent, "", "writing..."])
        if isinstance(item, StreamRetry):
            self.rows[row][1:] = ["", f"the stream broke after {item.shown} characters ({item.reason}); "
                                      "asking again, writing..."]
        else:
            self.rows[row][1] += item.text
        self._show()

    def on_message(self, msg: Message) -> None:
        row = self._writing.pop(msg.role, None)
        if row is None:
            self.rows.append([msg.role, msg.content, ""])
        else:
            self.rows[row] = [msg.role, msg.content, ""]
        self._show()

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><td><b>{html.escape(role)}</b></td><td>{html.escape(text)}"
                       + (f" <i>{html.escape(note)}</i>" if note else "") + "</td></tr>"
                       for role, text, note in self.rows)
        return f"<table><tr><th>role</th><th>message</th></tr>{body}</table>"

    def _show(self) -> None:
        if self._handle is None:
            if self._display is None:
                from IPython.display import display

                show: Any = display  # IPython's display is untyped
                self._handle = show(self, display_id=True)
            else:
                self._handle = self._display(self)
        else:
            self._handle.update(self)


def bid_lines(turn: int, raw: dict[str, float], select: Mapping[str, object]) -> list[str]:
    """One GroupChat turn's bids, as ``fsmchat run`` prints them::

        bids, turn 2 (threshold 0.50):
          TechCritic    0.80 -> 0.80  cleared   <- wins
          TechOptimist  0.90 -> 0.60  cleared   (recency -0.30)
          Realist       0.40 -> 0.40  below
          Moderator     0.10          silent

    ``raw`` is the bid step's payload (agent -> score), ``select`` the select step's (``winner``,
    ``adjusted``: agent -> recency-adjusted score of each bid with a message, ``threshold``,
    ``invalid``: agent -> why its bid was malformed)."""
    adjusted = a if isinstance(a := select.get("adjusted"), dict) else {}
    winner, threshold = select.get("winner"), select.get("threshold")
    invalid = i if isinstance(i := select.get("invalid"), dict) else {}
    head = f"bids, turn {turn}" + (f" (threshold {threshold:.2f})" if isinstance(threshold, (int, float)) else "")
    width = max((len(n) for n in raw), default=0)
    lines = [head + ":"]
    for name, score in raw.items():
        adj = adjusted.get(name)
        if adj is None:
            cols, verdict = f"{score:.2f}        ", "silent" + (f" (invalid bid: {invalid[name]})" if name in invalid else "")
        else:
            cleared = isinstance(threshold, (int, float)) and adj > threshold
            cols, verdict = f"{score:.2f} -> {adj:.2f}", "cleared" if cleared else "below"
            notes = (["<- wins"] if name == winner else []) + (
                [f"(recency -{score - adj:.2f})"] if adj < score - 1e-9 else [])
            verdict = f"{verdict:<8}  " + "  ".join(notes) if notes else verdict
        lines.append(f"  {name:<{width}}  {cols}  {verdict}".rstrip())
    if winner is None:
        lines.append("  no bid cleared the threshold: nothing is posted (lull)")
    return lines


def call_lines(msg: Message) -> list[str]:
    """The tool calls a reply carries, one line each: name, arguments, result or error, duration."""
    lines = []
    for c in msg.tool_calls:
        args = ", ".join(f"{k}={v!r}" for k, v in c.arguments.items()) if isinstance(c.arguments, dict) \
            else str(c.arguments)
        outcome = c.result if c.ok else f"{c.status}: {c.error or c.result}"
        took = f" ({c.duration_s:.2f}s)" if c.duration_s is not None else ""
        lines.append(f"  tool {c.name}({args}) -> {outcome}{took}")
    return lines


def offline_note(event: Mapping[str, object]) -> str:
    """Why a turn of the offline model ran no tool (an ``offline_no_tool_call`` event)::

        (offline: no tool matched "Write a haiku about the sea"; tools: add, search)
    """
    tools = t if isinstance(t := event.get("tools"), list) else []
    return f'  (offline: no tool matched "{event.get("request", "")}"; tools: {", ".join(map(str, tools))})'


def summary(result: RunResult, elapsed: float | None = None, worst: int | None = None) -> str:
    """``-- stopped: lull after 6 messages, 18 model calls (worst case 24), 2,310 tokens, $0.0000 in 4.2s;
    path: ...`` (the worst case when the pattern can bound its calls)."""
    stats = getattr(result.context, "stats", None)
    cost = f", ${stats.cost_usd:.4f}" if stats is not None else ""
    took = f" in {elapsed:.1f}s" if elapsed is not None else ""
    bound = f" (worst case {worst})" if worst is not None else ""
    if result.waiting:
        return (f"-- waiting for a person at {result.path[-1]} after {len(result.transcript)} messages, {result.calls} "
                f"model calls{bound}, {result.usage.get('total_tokens', 0):,} tokens{cost}{took}; "
                f"path: {' -> '.join(result.path)}")
    return (f"-- stopped: {result.stop_reason} after {len(result.transcript)} messages, {result.calls} model calls"
            f"{bound}, "
            f"{result.usage.get('total_tokens', 0):,} tokens{cost}{took}; path: {' -> '.join(result.path)}")
