"""Layer 18, the run viewer: ``fsmchat ui`` (a local web app over a checkpoint store) and
``fsmchat report`` (one run as a self-contained HTML file), which read stores and never write them;
and ``fsmchat serve`` (``fsmchat.ui.serve``), an HTTP API that runs registered patterns into a store.

``fsmchat.ui.store`` reads, ``fsmchat.ui.view`` shapes a run for its page (``fsmchat.ui.evalview`` an
evaluation and one case of it, two transcripts diffed), ``fsmchat.ui.page`` writes
the HTML (stylesheet and script vendored in ``static/``), ``fsmchat.ui.report`` exports a run and
``fsmchat.ui.server`` serves them (Starlette and uvicorn: ``pip install 'fsmchat[ui]'``).
"""
from .report import write_report
from .store import EvalNotFound, RunNotFound, Store, StoreUnreadable

__all__ = ["EvalNotFound", "RunNotFound", "Store", "StoreUnreadable", "write_report"]
