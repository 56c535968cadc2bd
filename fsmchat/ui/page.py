"""The viewer's HTML: one page shell for the runs list, a run, an exported report and the evaluation pages.

A page is static HTML with the viewer's stylesheet and script inline (vendored in
``fsmchat/ui/static``, no network) and its data as a JSON block the script renders with
``textContent`` only, so every model-written text is shown as text. A Content-Security-Policy
allows just those two inline blocks (by hash): even a text that slipped into the markup could not
run, and an exported report may not connect anywhere.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
from functools import lru_cache
from importlib import resources

from .. import __version__


HOME = '<a id="home" href="/">fsmchat runs</a><a id="evals-home" href="/evals">evaluations</a>'


@lru_cache(maxsize=None)
def asset(name: str) -> str:
    return resources.files("fsmchat.ui").joinpath("static").joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def data_json(data: object) -> str:
    """``data`` as JSON safe inside ``<script type="application/json">`` (no ``</script>``, no ``<!--``)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def page(data: dict[str, object], title: str, *, live: bool, report: bool = False) -> str:
    """A viewer page: ``data`` (``{"kind": "runs" | "run" | "evals" | "eval" | "eval_case", ...}``)
    rendered in the browser.

    ``live``: the page polls the server it came from (``/api/...``) until the run finishes;
    ``report``: an exported file, which may not connect anywhere (CSP ``connect-src 'none'``)."""
    css, js = asset("viewer.css"), asset("viewer.js")
    connect = "'none'" if report else "'self'"
    csp = (f"default-src 'none'; script-src {_sha256(js)}; style-src {_sha256(css)}; "
           f"img-src data:; connect-src {connect}; base-uri 'none'; form-action 'self'")
    settings = {"live": live, "report": report, "version": __version__}
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp, quote=False)}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{css}</style>\n</head>\n<body>\n"
            f'<header id="top">{"<b>fsmchat</b>" if report else HOME}<span id="where"></span></header>\n'
            f'<main id="app"><noscript>This page needs JavaScript to show the run.</noscript></main>\n'
            f'<script type="application/json" id="fsmchat-settings">{data_json(settings)}</script>\n'
            f'<script type="application/json" id="fsmchat-data">{data_json(data)}</script>\n'
            f"<script>{js}</script>\n</body></html>\n")


def error_page(title: str, message: str, hint: str = "") -> str:
    """A plain page for a store that cannot be read or a run that is not there (no script needed)."""
    css = asset("viewer.css")
    csp = f"default-src 'none'; style-src {_sha256(css)}; base-uri 'none'"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp, quote=False)}">\n'
            f"<title>{html.escape(title)}</title>\n<style>{css}</style>\n</head>\n<body>\n"
            f'<header id="top">{HOME}</header>\n'
            f'<main id="app"><section class="problem"><h1>{html.escape(title)}</h1>'
            f'<p id="problem">{html.escape(message)}</p>'
            + (f"<p>{html.escape(hint)}</p>" if hint else "") + "</section></main>\n</body></html>\n")
