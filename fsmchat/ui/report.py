"""The viewer's page data, and ``fsmchat report``: one run's page as a single self-contained HTML file.

The server and the report build the same data (``run_data``) and the same page (``page.page``); a
report only has it all inline and never connects anywhere, so it opens from ``file://`` offline.
The evaluation pages' data (``evals_data``, ``eval_data``, ``eval_case_data``) is masked by the same
rule as a run's.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping

from ..common.masking import redact_data
from .page import page
from .evalview import case_view, eval_view, evals_view
from .store import STATUSES, CheckpointView, Store, open_view
from .view import run_view


def runs_data(store: Store | CheckpointView) -> dict[str, object]:
    """The runs page's data, secrets masked (``fsmchat.common.masking.redact_data``)."""
    return redact_data({"kind": "runs", "store": store.label, "statuses": list(STATUSES),
                        "runs": store.summaries()})


def run_data(store: Store | CheckpointView, run_id: str, known: tuple[object, object] = (None, None)) -> dict[str, object]:
    """The run page's data, secrets masked; ``{"unchanged": True}`` when ``known`` (steps, status)
    already matches, found without reading the run (a live page polls a long run cheaply while
    nothing changes)."""
    steps, status = known
    if steps is not None:
        n, now = store.progress(run_id)
        if str(n) == str(steps) and status == now:
            return {"unchanged": True}
    data = {"kind": "run", "store": store.label, **run_view(store.run(run_id), time.time())}
    return redact_data(data, keep=("svg",))  # one rule for every text the page and a report show


def evals_data(store: Store | CheckpointView) -> dict[str, object]:
    """The evaluations page's data, secrets masked."""
    return redact_data({"kind": "evals", "store": store.label, "evals": evals_view(store.evaluations())})


def eval_data(store: Store | CheckpointView, eval_id: str, baseline: str | None = None) -> dict[str, object]:
    """One evaluation's page data (``baseline``: the variant the others are compared with), secrets masked."""
    return redact_data({"store": store.label, **eval_view(store.evaluation(eval_id), baseline)})


def eval_case_data(store: Store | CheckpointView, eval_id: str, case: str, a: str | None = None,
                   b: str | None = None, repeat: int | None = None) -> dict[str, object]:
    """One case of an evaluation: its runs, and variant ``a``'s and ``b``'s transcripts diffed, secrets masked."""
    return redact_data({"store": store.label, **case_view(store.evaluation(eval_id), case, a, b, repeat, store.run)})


def data_at(data: Mapping[str, object], *keys: str) -> object:
    """``data[k1][k2]...`` of a page's data (None where a key is missing): what its title shows."""
    value: object = data
    for k in keys:
        value = value.get(k) if isinstance(value, dict) else None
    return value


def report_html(store: Store | CheckpointView, run_id: str) -> str:
    data = run_data(store, run_id)
    return page(data, f"fsmchat report: {data_at(data, 'run', 'pattern') or 'run'} {run_id}", live=False, report=True)


def write_report(db: str | Path, run_id: str, out: str | Path) -> Path:
    """Write run ``run_id`` of the store at ``db`` to ``out`` as one self-contained HTML file.

    What ``fsmchat report`` writes: the viewer's page with its script, stylesheet and SVG inline;
    it opens from ``file://`` and connects nowhere.

    Args:
        db: The ``SqliteCheckpointer`` file (opened read-only), or a PostgreSQL URI
            (``postgresql://...``: read with ``PostgresCheckpointer``'s reading methods).
        run_id: The run to show.
        out: The HTML file to write.

    Returns:
        The path written.

    Raises:
        RunNotFound: The store has no such run.
        StoreUnreadable: The file is missing, corrupted or not a checkpoint store.

    Examples:
        >>> from fsmchat import RoundRobinSwarm, SqliteCheckpointer
        >>> from fsmchat.ui import write_report
        >>> def host(turn):
        ...     return "Welcome."
        >>> _ = RoundRobinSwarm(agents=[host]).execute("Hello?", checkpoint=SqliteCheckpointer("report.db"), run_id="r1")
        >>> path = write_report("report.db", "r1", "run.html")
        >>> path.name, path.read_text().startswith("<!DOCTYPE html>")
        ('run.html', True)
    """
    text = report_html(open_view(db), run_id)
    path = Path(out)
    path.write_text(text, encoding="utf-8")
    return path
