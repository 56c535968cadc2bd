"""Layer 9: one run shown as it happens (``fsmchat run``).

Each message is printed the moment it is posted; below them a status line (the current state,
turn, model calls, tokens, cost, elapsed time) redraws a few times a second, so it keeps moving
while a model thinks. The status line is rich's ``Live`` display on stderr, drawn only when stderr
is a terminal; messages go to stdout (as panels on a terminal, as plain ``role: text`` lines
otherwise, flushed one by one so a pipe sees each as it happens).

A ``LiveRun`` plugs into any pattern run: ``aexecute(task, observers=[view.on_event],
on_message=[view.on_message], on_start=[view.on_start])``.
"""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from .models import Message, RunResult, TraceEvent


class LiveRun:
    """Prints a run's messages as they are posted (``messages``) and a status line (``status``:
    None = when stderr is a terminal)."""

    def __init__(self, *, messages: bool = True, status: bool | None = None, label: str = "",
                 out: TextIO | None = None, err: TextIO | None = None):
        self.messages = messages
        self.out, self.err = out, err
        err_stream = err or sys.stderr
        self.status = err_stream.isatty() if status is None else status
        self.label = label
        self.state = ""
        self.ctx: Any = None
        self.started = time.monotonic()
        self._live: Any = None
        self._console: Any = None
        self._spinner: Any = None

    # ---- the run's hooks ----
    def on_start(self, ctx: Any) -> None:
        self.ctx = ctx
        self.started = time.monotonic()

    def on_event(self, ev: TraceEvent) -> None:
        self.state = ev.dest or ev.state

    def on_message(self, msg: Message) -> None:
        if not self.messages:
            return
        out = self.out or sys.stdout
        if self._console is not None:  # a terminal: a titled panel per message
            from rich.panel import Panel
            from rich.text import Text

            score = msg.metadata.get("score")
            title = Text(msg.role, style="bold") + (
                Text(f"  bid {score:.2f}", style="dim") if isinstance(score, (int, float)) else Text(""))
            self._console.print(Panel(Text(msg.content), title=title, title_align="left"))
            for line in call_lines(msg):
                self._console.print(Text(line, style="dim"))
        else:
            out.write(f"{msg.role}: {msg.content}\n")
            for line in call_lines(msg):
                out.write(line + "\n")
            out.flush()

    # ---- the status line ----
    def line(self) -> str:
        """``bid · turn 3 · 4 msgs · 7 calls · 1,234 tok · $0.0012 · 12.3s`` (state first)."""
        ctx = self.ctx
        parts = [self.state or "starting"]
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

    def _renderable(self) -> Any:
        from rich.text import Text

        self._spinner.update(text=Text(((self.label + " · ") if self.label else "") + self.line(), style="cyan",
                                       no_wrap=True, overflow="ellipsis"))
        return self._spinner

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
            self._live = Live(get_renderable=self._renderable, console=Console(file=self.err or sys.stderr),
                              refresh_per_second=8, transient=True, redirect_stdout=out.isatty(),
                              redirect_stderr=False)
            self._live.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


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
