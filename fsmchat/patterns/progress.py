"""A batch's progress bar (rich, on stderr): done/total, failed, elapsed and ETA.

Shown by default when stderr is a terminal (``progress=None``); ``True`` forces it and ``False``
hides it. Used by every batch: a pattern's local ``run_batch`` and ``fsmchat.patterns.distributed``.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported only when a bar is shown
    from rich.progress import Progress


def progress_wanted(progress: bool | None) -> bool:
    """``progress=`` as given, or (None) whether stderr is a terminal."""
    if progress is None:
        return sys.stderr.isatty()
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None (show it on a terminal), got {progress!r}")
    return progress


class ProgressBar:
    """Counts finished and failed tasks; draws them when enabled (``progress_wanted``)."""

    def __init__(self, total: int, progress: bool | None, label: str):
        self.total, self.done, self.failed = total, 0, 0
        self.bar: Progress | None = None
        if progress_wanted(progress):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
                TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("failed [red]{task.fields[failed]}"), TimeElapsedColumn(),
                                TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True))
            self.bar.start()
            self.tid = self.bar.add_task(label, total=total, failed=0)

    def add(self, ok: int, failed: int) -> None:
        self.done += ok + failed
        self.failed += failed
        if self.bar is not None:
            self.bar.update(self.tid, completed=self.done, failed=self.failed)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
