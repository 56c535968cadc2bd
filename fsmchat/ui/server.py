"""``fsmchat ui``: a local web app over one checkpoint store (Starlette + uvicorn, the ``fsmchat[ui]`` extra).

Pages: ``/`` (every run), ``/runs/{run_id}`` (one run, replayed step by step); their data at
``/api/runs`` and ``/api/runs/{run_id}``, which the pages poll while a run executes. The store's
evaluations: ``/evals`` (every one), ``/evals/{eval_id}`` (variants side by side per case, score
differences from ``?baseline=VARIANT``), ``/evals/{eval_id}/case?name=CASE&a=VARIANT&b=VARIANT&repeat=N``
(one case's runs, two transcripts diffed); their data under ``/api/evals``. Every request reads the
store afresh, read-only; a store that cannot be read gets a page saying why.

It answers only requests whose ``Host`` is the address it serves or a localhost name with its port
(``localhost``, ``127.0.0.1``, ``[::1]``), or a name given with ``--allow-host``; any other gets
421 with a short text, so a web page whose DNS name is rebound to 127.0.0.1 cannot read the runs.
Every response forbids framing (``X-Frame-Options: DENY``, ``frame-ancestors 'none'``).
"""
from __future__ import annotations

import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from ..errors import FsmchatError, bad_value
from ..common.masking import redact
from .page import error_page, page
from .report import data_at, eval_case_data, eval_data, evals_data, runs_data, run_data
from .store import EvalNotFound, RunNotFound, StoreUnreadable, open_view, store_label

if TYPE_CHECKING:  # the ui extra's: imported where they are used
    import uvicorn
    from starlette.applications import Starlette
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_HOST = "127.0.0.1"  # this machine only, unless told otherwise
DEFAULT_PORT = 8765
MISSING_EXTRA = "the viewer's web server needs the ui extra: pip install 'fsmchat[ui]' (Starlette and uvicorn)"
LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")
NO_FRAMES = [(b"x-frame-options", b"DENY"), (b"content-security-policy", b"frame-ancestors 'none'")]


def _split_host(value: str) -> tuple[str, int | None]:
    """``"Example.com:8765"`` -> ``("example.com", 8765)``; ``"[::1]"`` -> ``("[::1]", None)``."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        name, port = name + "]", rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port = value.partition(":")
    return name, int(port) if port.isdigit() else None


_HOST_NAME = re.compile(r"^(\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9.-]*[a-z0-9])?)(:\d{1,5})?$", re.I)


class HostCheck:
    """ASGI middleware: a request is served only when its ``Host`` is one of the viewer's names,
    else 421 and a short text. Every response, a refused one included, carries
    ``X-Frame-Options: DENY`` and ``Content-Security-Policy: frame-ancestors 'none'``.

    ``served``: the names answered on ``port`` (the address served and the localhost names);
    ``allow``: more names (``--allow-host``), ``NAME`` on any port or ``NAME:PORT`` on that one."""

    def __init__(self, inner: ASGIApp, served: Iterable[str], port: int | None, allow: Iterable[str] = ()):
        allow = list(allow)
        for name in allow:
            if not isinstance(name, str) or not _HOST_NAME.match(name):
                raise bad_value("the viewer", "--allow-host", name, "a host name or NAME:PORT as a browser sends it "
                                "in Host (no scheme, path or spaces), e.g. viewer.example or viewer.example:8443")
        self.inner, self.port = inner, port
        self.names = {_split_host(n)[0] for n in served}
        self.extra = [_split_host(n) for n in allow]
        self.shown = sorted(f"{n}:{port}" if port else n for n in self.names) + allow

    def allows(self, host: str) -> bool:
        name, port = _split_host(host)
        if name in self.names and (port or 80) == (self.port or 80):
            return True
        return any(name == n and (p is None or p == (port or 80)) for n, p in self.extra)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)

        async def framed(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *NO_FRAMES]}
            await send(message)

        host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "")
        if self.allows(host):
            return await self.inner(scope, receive, framed)
        body = (f"fsmchat ui: this viewer answers only to {', '.join(self.shown)}, not to Host {host!r}; "
                f"to allow that name, start it with --allow-host {_split_host(host)[0] or 'NAME'}\n").encode()
        await framed({"type": "http.response.start", "status": 421,
                      "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                  (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class BadQuery(FsmchatError, ValueError):
    """A page's query parameter is missing or not what it must be (400, saying which)."""


def whole(text: str | None, name: str) -> int | None:
    """A query parameter that is a whole number from 1 (None when absent); ``BadQuery`` when not."""
    if text is None or text == "":
        return None
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise BadQuery(f"?{name}={text!r} is invalid: a whole number from 1")
    return int(text)


def guarded(inner: ASGIApp, host: str, port: int, allow: Iterable[str] = ()) -> HostCheck:
    """``inner`` behind ``HostCheck`` for a server listening on ``host:port``."""
    served = [f"[{host}]" if ":" in host else host, *LOCAL_NAMES]
    return HostCheck(inner, served, port, allow)


def app(db: str | Path) -> Starlette:
    """The ASGI app serving the store at ``db``, an SQLite file or a PostgreSQL URI (``guarded`` puts
    the Host check in front of it)."""
    try:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import HTMLResponse, JSONResponse, Response
        from starlette.routing import Route
    except ImportError as exc:
        raise ImportError(MISSING_EXTRA) from exc

    store = open_view(db)
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}

    def problem(exc: Exception, status: int) -> Response:
        if isinstance(exc, RunNotFound):
            return HTMLResponse(error_page("No such run", str(exc), "The runs list shows the runs this store holds."),
                                status, headers)
        if isinstance(exc, EvalNotFound):
            return HTMLResponse(error_page("No such evaluation", str(exc), "The evaluations list (/evals) shows the "
                                           "evaluations this store keeps."), status, headers)
        if isinstance(exc, BadQuery):
            return HTMLResponse(error_page("Bad address", str(exc)), status, headers)
        return HTMLResponse(error_page("This store cannot be read", str(exc)), status, headers)

    def answer(data: Callable[[], dict[str, object]], title: Callable[[dict[str, object]], str], api: bool) -> Response:
        """``data()`` as the page titled ``title(data)`` (or as JSON for ``api``), or the page or
        JSON saying why not: 400 for a bad query, 404 for what the store does not hold, 500 when
        the store cannot be read."""
        try:
            got = data()
        except (BadQuery, EvalNotFound, RunNotFound, StoreUnreadable) as exc:
            status = 400 if isinstance(exc, BadQuery) else 500 if isinstance(exc, StoreUnreadable) else 404
            return JSONResponse({"error": redact(str(exc))}, status, headers) if api else problem(exc, status)
        return JSONResponse(got, 200, headers) if api else HTMLResponse(page(got, title(got), live=False), 200, headers)

    def evals_page(request: Request, api: bool = False) -> Response:
        return answer(lambda: evals_data(store), lambda d: f"fsmchat evaluations: {store.name}", api)

    def eval_page(request: Request, api: bool = False) -> Response:
        q = request.query_params
        return answer(lambda: eval_data(store, request.path_params["eval_id"], q.get("baseline") or None),
                      lambda d: f"evaluation {data_at(d, 'eval', 'name')} {data_at(d, 'eval', 'eval_id')}", api)

    def case_page(request: Request, api: bool = False) -> Response:
        q = request.query_params

        def data() -> dict[str, object]:
            name = q.get("name")
            if not name:
                raise BadQuery("this page needs ?name=CASE (the case's name, as the evaluation page links it)")
            return eval_case_data(store, request.path_params["eval_id"], name, q.get("a") or None, q.get("b") or None,
                                  whole(q.get("repeat"), "repeat"))

        return answer(data, lambda d: f"case {d['case']} of evaluation {data_at(d, 'eval', 'name')}", api)

    def runs_page(request: Request) -> Response:
        try:
            return HTMLResponse(page(runs_data(store), f"fsmchat runs: {store.name}", live=True), 200, headers)
        except StoreUnreadable as exc:
            return problem(exc, 500)

    def run_page(request: Request) -> Response:
        try:
            data = run_data(store, request.path_params["run_id"])
        except RunNotFound as exc:
            return problem(exc, 404)
        except StoreUnreadable as exc:
            return problem(exc, 500)
        return HTMLResponse(page(data, f"{data_at(data, 'run', 'pattern') or 'run'} {data_at(data, 'run', 'run_id')}",
                                 live=True), 200, headers)

    def runs_api(request: Request) -> Response:
        try:
            return JSONResponse(runs_data(store), 200, headers)
        except StoreUnreadable as exc:
            return JSONResponse({"error": redact(str(exc))}, 500, headers)

    def run_api(request: Request) -> Response:
        """The run's data, or ``{"unchanged": true}`` when the caller already has its ``steps`` and ``status``."""
        try:
            data = run_data(store, request.path_params["run_id"], known=(request.query_params.get("steps"),
                                                                         request.query_params.get("status")))
        except RunNotFound as exc:
            return JSONResponse({"error": redact(str(exc))}, 404, headers)
        except StoreUnreadable as exc:
            return JSONResponse({"error": redact(str(exc))}, 500, headers)
        return JSONResponse(data, 200, headers)

    def api(view: Callable[..., Response]) -> Callable[[Request], Response]:
        return lambda request: view(request, api=True)

    return Starlette(routes=[Route("/", runs_page), Route("/runs/{run_id:path}", run_page),
                             Route("/api/runs", runs_api), Route("/api/runs/{run_id:path}", run_api),
                             Route("/evals", evals_page), Route("/evals/{eval_id}", eval_page),
                             Route("/evals/{eval_id}/case", case_page), Route("/api/evals", api(evals_page)),
                             Route("/api/evals/{eval_id}", api(eval_page)),
                             Route("/api/evals/{eval_id}/case", api(case_page))])


@dataclass
class Running:
    """A viewer server running in a thread of this process (``start``); ``stop()`` ends it."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join()


class ViewerError(FsmchatError, OSError):
    """The viewer's server could not start."""


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (``port=0``: a free one); a clear error when it cannot be."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ViewerError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port "
                          "(or --host)") from None
    return sock


def _server(db: str | Path, sock: socket.socket, allow: Iterable[str]) -> uvicorn.Server:
    try:
        import uvicorn
    except ImportError as exc:
        raise ImportError(MISSING_EXTRA) from exc
    host, port = sock.getsockname()[:2]
    try:
        guarded_app = guarded(app(db), host, port, allow)
    except Exception:
        sock.close()
        raise
    return uvicorn.Server(uvicorn.Config(guarded_app, log_level="warning", access_log=False, lifespan="off"))


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def start(db: str | Path, host: str = DEFAULT_HOST, port: int = 0, allow_hosts: Iterable[str] = ()) -> Running:
    """Serve ``db`` from a background thread (``port=0``: a free port); returns once it accepts requests.
    ``allow_hosts``: more ``Host`` names it answers to (``NAME`` or ``NAME:PORT``)."""
    sock = listen(host, port)
    return in_thread(_server(db, sock, allow_hosts), sock, "fsmchat-ui",
                     f"the viewer's server stopped while starting on {host}:{port} (see the error above)")


def in_thread(server: uvicorn.Server, sock: socket.socket, name: str, failed: str) -> Running:
    """Run the uvicorn ``server`` on ``sock`` in a daemon thread named ``name``; return once it
    accepts requests (``ViewerError(failed)`` if it stopped first)."""
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise ViewerError(failed)
        time.sleep(0.01)
    return Running(url_of(sock), server, thread)


def serve(db: str | Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, allow_hosts: Iterable[str] = ()) -> None:
    """Serve ``db`` in the foreground until interrupted (``fsmchat ui``); ``allow_hosts`` as in ``start``."""
    sock = listen(host, port)
    server = _server(db, sock, allow_hosts)
    print(f"fsmchat ui: serving {store_label(db)} read-only at {url_of(sock)}/ (Ctrl-C stops it)", flush=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shut down cleanly, then re-raised the Ctrl-C
        print("fsmchat ui: stopped", flush=True)
