"""The command line: ``fsmchat run | resume | eval | render | graphs | plan | ui | serve | report | runs |
history | fork`` (layer 19, thin over the layers below), and the live view of a run (``live``).

One module per command group: ``run`` (run, resume, eval; people answering on the terminal),
``viewer`` (ui, serve, report), ``graphs`` (render, plan, graphs), ``history`` (runs, history,
fork), and ``commands`` (the parser and ``main``). Targets name code the way uvicorn and flask do:
``MODULE:ATTR`` (imported with the current directory first on ``sys.path``), ``path/file.py:ATTR``,
or ``path/file.py`` for the file's top-level ``def build()`` (``fsmchat.targets``).

The names load on first use (``from fsmchat.cli import LiveRun`` loads no command).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common.facade import lazy_exports

_MODULES = {  # each module -> the public names it defines
    ".commands": ("main", "parser"),
    ".run": ("EXIT_BUDGET", "EXIT_DEADLINE", "EXIT_WAITING", "ask_terminal", "showing_bids"),
    ".live": ("LiveRun", "NotebookLive", "summary"),
}
__all__ = ["main", "parser", "EXIT_BUDGET", "EXIT_DEADLINE", "EXIT_WAITING", "ask_terminal", "showing_bids", "LiveRun",
           "NotebookLive", "summary"]
__getattr__, __dir__ = lazy_exports(__name__, _MODULES)

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly (``__all__`` re-exports them)
    from .live import LiveRun, NotebookLive, summary
    from .commands import main, parser
    from .run import EXIT_BUDGET, EXIT_DEADLINE, EXIT_WAITING, ask_terminal, showing_bids
