"""``fsmchat ui``, ``fsmchat serve`` and ``fsmchat report``: the run viewer and the HTTP API."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from ..targets import BUILD, load_target_with_module, split_target
from ..ui import RunNotFound, write_report
from ..ui import serve as serve_api
from ..ui.server import serve
from ..ui.store import is_dsn, open_view


# ---- ui, report: the run viewer (fsmchat.ui) ----
def _store_arg(cmd: str, db: str) -> str | Path | None:
    if is_dsn(db):
        return db
    path = Path(db)
    if not path.is_file():
        print(f"fsmchat {cmd}: no such checkpoint store: {db} (runs are stored with `fsmchat run ... --checkpoint "
              f"{db}` or checkpoint=SqliteCheckpointer({db!r}))", file=sys.stderr)
        return None
    return path


def ui_command(args: argparse.Namespace) -> int:
    db = _store_arg("ui", args.db)
    if db is None:
        return 2

    serve(db, args.host, args.port, args.allow_host or ())
    return 0


def serve_command(args: argparse.Namespace) -> int:
    patterns: dict[str, serve_api.Registered] = {}
    for spec in args.target or ():
        name, eq, target = spec.partition("=")
        if not eq:
            name, target = "", spec
        where, attr = split_target(target)
        name = name or attr or Path(where).stem
        if name in patterns:
            raise ValueError(f"two --target values are named {name!r}; name them NAME=TARGET")
        obj, _module = load_target_with_module(target)
        ref = f"{Path(where).resolve()}:{attr or BUILD}" if where.endswith(".py") else target
        patterns[name] = serve_api.Registered.of(name, obj, ref)
    for spec in args.config or ():
        name, eq, file = spec.partition("=")
        if not eq or not name or not file:
            raise ValueError(f"--config {spec!r} must look like NAME=FILE.json (a pattern's to_config() as JSON)")
        if name in patterns:
            raise ValueError(f"two patterns are named {name!r}; give each --target and --config its own NAME")
        patterns[name] = serve_api.Registered.config(name, Path(file).read_text(encoding="utf-8"),
                                                     allow=args.allow or (), trusted=args.trusted)
    if not patterns:
        raise ValueError("fsmchat serve needs a pattern to serve: --target NAME=TARGET or --config NAME=FILE.json")
    token = args.token or os.environ.get(serve_api.TOKEN_ENV) or None
    serve_api.serve(args.store, patterns, args.host, args.port, token, args.allow_host or (),
                    max_body_bytes=args.max_body_bytes, max_text_chars=args.max_text_chars)
    return 0


def report_command(args: argparse.Namespace) -> int:
    db = _store_arg("report", args.db)
    if db is None:
        return 2

    try:
        path = write_report(db, args.run_id, args.output)
    except RunNotFound as exc:
        ids = open_view(db).summaries()
        listed = ", ".join(r["run_id"] for r in ids[:10]) + (f" (+{len(ids) - 10} more)" if len(ids) > 10 else "")
        print(f"fsmchat report: {exc}; " + (f"its runs, newest first: {listed}" if ids else "it holds no runs yet"),
              file=sys.stderr)
        return 2
    print(path)
    return 0


