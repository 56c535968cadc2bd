"""``fsmchat ui``: a local web app over one checkpoint store (Starlette + uvicorn, the ``fsmchat[ui]`` extra).

Pages: ``/`` (every run), ``/runs/{run_id}`` (one run, replayed step by step); their data at
``/api/runs`` and ``/api/runs/{run_id}``, which the pages poll while a run executes. Every request
reads the store afresh, read-only; a store that cannot be read gets a page saying why.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FsmchatError
from .page import error_page, page
from .report import runs_data, run_data
from .store import RunNotFound, Store, StoreUnreadable

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MISSING_EXTRA = "the viewer's web server needs the ui extra: pip install 'fsmchat[ui]' (Starlette and uvicorn)"


def app(db: str | Path) -> Any:
    """The ASGI app serving the store at ``db``."""
    try:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import HTMLResponse, JSONResponse, Response
        from starlette.routing import Route
    except ImportError as exc:
        raise ImportError(MISSING_EXTRA) from exc

    store = Store(db)
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}

    def problem(exc: Exception, status: int) -> Response:
        if isinstance(exc, RunNotFound):
            return HTMLResponse(error_page("No such run", str(exc), "The runs list shows the runs this store holds."),
                                status, headers)
        return HTMLResponse(error_page("This store cannot be read", str(exc)), status, headers)

    def runs_page(request: Request) -> Response:
        try:
            return HTMLResponse(page(runs_data(store), f"fsmchat runs: {store.path.name}", live=True), 200, headers)
        except StoreUnreadable as exc:
            return problem(exc, 500)

    def run_page(request: Request) -> Response:
        try:
            data = run_data(store, request.path_params["run_id"])
        except RunNotFound as exc:
            return problem(exc, 404)
        except StoreUnreadable as exc:
            return problem(exc, 500)
        return HTMLResponse(page(data, f"{data['run']['pattern'] or 'run'} {data['run']['run_id']}", live=True),
                            200, headers)

    def runs_api(request: Request) -> Response:
        try:
            return JSONResponse(runs_data(store), 200, headers)
        except StoreUnreadable as exc:
            return JSONResponse({"error": str(exc)}, 500, headers)

    def run_api(request: Request) -> Response:
        """The run's data, or ``{"unchanged": true}`` when the caller already has its ``steps`` and ``status``."""
        try:
            data = run_data(store, request.path_params["run_id"], known=(request.query_params.get("steps"),
                                                                         request.query_params.get("status")))
        except RunNotFound as exc:
            return JSONResponse({"error": str(exc)}, 404, headers)
        except StoreUnreadable as exc:
            return JSONResponse({"error": str(exc)}, 500, headers)
        return JSONResponse(data, 200, headers)

    return Starlette(routes=[Route("/", runs_page), Route("/runs/{run_id:path}", run_page),
                             Route("/api/runs", runs_api), Route("/api/runs/{run_id:path}", run_api)])


@dataclass
class Running:
    """A viewer server running in a thread of this process (``start``); ``stop()`` ends it."""

    url: str
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join()


def _server(db: str | Path, host: str, port: int) -> Any:
    try:
        import uvicorn
    except ImportError as exc:
        raise ImportError(MISSING_EXTRA) from exc
    return uvicorn.Server(uvicorn.Config(app(db), host=host, port=port, log_level="warning", access_log=False,
                                         lifespan="off"))


def start(db: str | Path, host: str = DEFAULT_HOST, port: int = 0) -> Running:
    """Serve ``db`` from a background thread (``port=0``: a free port); returns when it is listening."""
    server = _server(db, host, port)
    thread = threading.Thread(target=server.run, name="fsmchat-ui", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise OSError(f"the viewer could not listen on {host}:{port} (see the error above)")
        time.sleep(0.01)
    sock = server.servers[0].sockets[0].getsockname()
    return Running(f"http://{_url_host(host)}:{sock[1]}", server, thread)


def serve(db: str | Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve ``db`` in the foreground until interrupted (``fsmchat ui``)."""
    server = _server(db, host, port)
    print(f"fsmchat ui: serving {db} read-only at http://{_url_host(host)}:{port}/ (Ctrl-C stops it)", flush=True)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits when it cannot listen (it logged why)
        if exc.code not in (None, 0):
            raise ViewerError(f"cannot listen on {host}:{port} (in use, or not an address of this machine); "
                              "pick another with --port/--host") from None


class ViewerError(FsmchatError, OSError):
    """The viewer's server could not start."""


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
