"""Layer 9: ``fsmchat run | render | graphs | plan | ui | report``, thin over the layers above.

Targets name code the way uvicorn and flask do: ``MODULE:ATTR`` (imported with the current
directory first on ``sys.path``), ``path/file.py:ATTR``, or ``path/file.py`` for the file's
top-level ``def build()`` (``fsmchat.targets``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import runpy
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import __version__, gallery
from .errors import FsmchatError, watch_failures
from .targets import BUILD, defines_build, load_target_with_module, resolve_graph, split_target, use_cwd

TARGET_HELP = ("MODULE:ATTR (e.g. mychat:chat, found from the current directory), path/file.py:ATTR, "
               f"or path/file.py (its top-level {BUILD}() function)")


# ---- run ----
def _run(args: argparse.Namespace) -> int:
    if args.model:
        os.environ["FSMCHAT_MODEL"] = args.model
    if args.task:
        os.environ["FSMCHAT_TASK"] = args.task
    where, attr = split_target(args.target)
    if attr is None and not Path(where).is_file():
        print(f"fsmchat run: no such file: {where}", file=sys.stderr)
        return 2
    pattern, module = _pattern_of(args.target, where, attr)
    if pattern is None:  # a plain script (no build() returning a pattern): run it as __main__
        return _run_script(Path(where), args)
    task = args.task or getattr(module, "TASK", None)
    if not isinstance(task, str) or not task.strip():
        print(f"fsmchat run: no task for {args.target}: pass --task TEXT (or define TASK = \"...\" in "
              f"{Path(module.__file__).name if getattr(module, '__file__', None) else module.__name__})",
              file=sys.stderr)
        return 2
    return _run_pattern(pattern, task, args)


def _pattern_of(spec: str, where: str, attr: str | None) -> tuple[Any, Any]:
    """(the pattern ``spec`` names, its module), or (None, None) for a script to run as ``__main__``."""
    from .patterns.base import Pattern

    if attr is None and not defines_build(Path(where)):
        return None, None
    obj, module = load_target_with_module(spec)
    made = obj() if callable(obj) and not isinstance(obj, Pattern) else obj
    if isinstance(made, Pattern):
        return made, module
    if attr is None:  # build() drew a graph (e.g. a hub channel's): the script itself is the run
        return None, None
    raise TypeError(f"{spec} is a {type(made).__name__}, not a pattern (GroupChat, AgentFlow, ...) or a "
                    "zero-argument factory of one")


def _run_pattern(pattern: Any, task: str, args: argparse.Namespace) -> int:
    if args.report and not Path(args.report).resolve().parent.is_dir():
        print(f"fsmchat run: --report {args.report}: its folder does not exist (nothing was run)", file=sys.stderr)
        return 2
    limits = {k: v for k, v in (("max_model_calls", args.max_calls), ("deadline_s", args.deadline)) if v is not None}
    if limits:
        current = pattern.limits.model_dump(exclude_defaults=True) if pattern.limits is not None else {}
        pattern.with_limits(**{**current, **limits})
    with contextlib.ExitStack() as stack:
        store = args.checkpoint
        if args.report and not store:  # a report needs the run in a store: a temporary one, deleted afterwards
            store = str(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fsmchat-run-"))) / "run.db")
        checkpoint = None
        if store:
            from .checkpoint import SqliteCheckpointer

            checkpoint = SqliteCheckpointer(store)
            stack.callback(checkpoint.close)
        return _run_and_report(pattern, task, args, checkpoint, store)


def _run_and_report(pattern: Any, task: str, args: argparse.Namespace, checkpoint: Any, store: str | None) -> int:
    from .engine import run_sync
    from .live import LiveRun, summary

    view = LiveRun(messages=not (args.quiet or args.json), status=False if args.quiet else None,
                   label=getattr(pattern, "name", "") or type(pattern).__name__)
    started = time.monotonic()
    try:
        with view:
            result = run_sync(lambda: pattern.aexecute(task, observers=[view.on_event], on_message=[view.on_message],
                                                       on_start=[view.on_start], checkpoint=checkpoint))
    except KeyboardInterrupt:
        print("fsmchat run: interrupted", file=sys.stderr)
        return 130
    elapsed = time.monotonic() - started
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    elif args.quiet:
        if result.ok:
            out = result.output
            print(out if isinstance(out, str) else json.dumps(out, indent=2, ensure_ascii=False, default=str))
    else:
        try:
            worst = pattern.max_calls()
        except (ValueError, TypeError):  # a loop over a list only known at run time has no bound
            worst = None
        print(f"\n{summary(result, elapsed, worst)}", flush=True)
    if args.checkpoint:
        print(f"fsmchat run: run id {result.run_id} checkpointed in {args.checkpoint}", file=sys.stderr)
    if args.report:
        from .ui.report import write_report

        print(f"fsmchat run: report written to {write_report(store, result.run_id, args.report)}", file=sys.stderr)
    if not result.ok:
        print(f"fsmchat run: {args.target} failed (stop reason {result.stop_reason!r}): "
              f"{type(result.error).__name__}: {result.error}", file=sys.stderr)
        return 1
    return 0


def _run_script(path: Path, args: argparse.Namespace) -> int:
    needs = [flag for flag, on in (("--json", args.json), ("--quiet", args.quiet), ("--checkpoint", args.checkpoint),
                                   ("--report", args.report),
                                   ("--max-calls", args.max_calls), ("--deadline", args.deadline)) if on]
    if needs:
        print(f"fsmchat run: {', '.join(needs)} need(s) a pattern, and {path} is a plain script (no top-level "
              f"{BUILD}() returning a pattern); add one, or name the pattern as {path}:ATTR", file=sys.stderr)
        return 2
    sys.argv = [str(path)]
    failed = watch_failures()
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    except BaseException as exc:  # the script's own error, or a run's error it re-raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        seen = [r for r in failed if r.error is exc]
        print(f"fsmchat run: {path.name} failed: {type(exc).__name__}: {exc}" +
              (f" (stop reason {seen[0].stop_reason!r})" if seen else ""), file=sys.stderr)
        return 1
    for r in failed:  # runs that failed although the script went on (it ignored result.error)
        print(f"fsmchat run: a run failed (stop reason {r.stop_reason!r}): {type(r.error).__name__}: {r.error}",
              file=sys.stderr)
    return 1 if failed else 0


# ---- ui, report: the run viewer (fsmchat.ui) ----
def _store_arg(cmd: str, db: str) -> Path | None:
    path = Path(db)
    if not path.is_file():
        print(f"fsmchat {cmd}: no such checkpoint store: {db} (runs are stored with `fsmchat run ... --checkpoint "
              f"{db}` or checkpoint=SqliteCheckpointer({db!r}))", file=sys.stderr)
        return None
    return path


def _ui(args: argparse.Namespace) -> int:
    db = _store_arg("ui", args.db)
    if db is None:
        return 2
    from .ui.server import serve

    serve(db, args.host, args.port)
    return 0


def _report(args: argparse.Namespace) -> int:
    db = _store_arg("report", args.db)
    if db is None:
        return 2
    from .ui import RunNotFound, Store, write_report

    try:
        path = write_report(db, args.run_id, args.output)
    except RunNotFound as exc:
        ids = Store(db).summaries()
        listed = ", ".join(r["run_id"] for r in ids[:10]) + (f" (+{len(ids) - 10} more)" if len(ids) > 10 else "")
        print(f"fsmchat report: {exc}; " + (f"its runs, newest first: {listed}" if ids else "it holds no runs yet"),
              file=sys.stderr)
        return 2
    print(path)
    return 0


# ---- render, plan ----
def _render(args: argparse.Namespace) -> int:
    graph = resolve_graph(load_target_with_module(args.target)[0])
    print(graph.render(args.output))
    return 0


def _plan(args: argparse.Namespace) -> int:
    graph = resolve_graph(load_target_with_module(args.target)[0])
    flat = graph.flatten()
    print(f"{graph.name}: {len(flat.states)} states, {len(flat.transitions)} transitions, initial {flat.initial!r}")
    for s in flat.states.values():
        kind = "final" if s.final else "state"
        print(f"  {kind} {s.name}" + (f"  -- {s.description}" if s.description else ""))
        for t in s.out:
            guard = f" [{t.guard_name}]" if t.guard is not None else ""
            print(f"      -> {t.dest} ({t.label}){guard}")
    return 0


# ---- graphs ----
NO_GALLERY = """\
fsmchat graphs: nothing to draw here. No --target, --examples or --builtins was given, and {where}.
Name the graphs of your project, for example:
  fsmchat graphs --target mychat:chat --dir graphs      # MODULE:ATTR (from this folder) or path/file.py:ATTR
  fsmchat graphs --examples examples --dir graphs       # every examples/*.py with a top-level def build()
or once in pyproject.toml, then plain `fsmchat graphs` (and `fsmchat graphs --check` in CI):
  [tool.fsmchat.graphs]
  dir = "graphs"
  targets = ["mychat:chat"]      # a pattern, a StateGraph, or a zero-argument factory of one
  examples = "examples"          # optional
  builtins = false               # true adds fsmchat's own patterns
Nothing was written."""


def _gallery_of(args: argparse.Namespace) -> tuple[gallery.Gallery | None, str]:
    """The gallery the command line names, else the one pyproject.toml names (None: neither)."""
    if args.target or args.examples or args.builtins:
        g = gallery.Gallery(targets=dict(gallery.target_name(t) for t in args.target or []),
                            examples=Path(args.examples) if args.examples else None, builtins=args.builtins)
        if len(g.targets) != len(args.target or []):
            raise gallery.GalleryConfigError("two --target values share a file name; name them NAME=MODULE:ATTR")
        where = "the command line"
    else:
        g, pyproject = gallery.configured(Path.cwd())
        if g is None:
            where = (f"{pyproject} has no [{gallery.CONFIG_TABLE}] table" if pyproject is not None
                     else "there is no pyproject.toml here or in a parent folder")
            return None, where
        sys.path.insert(0, str(pyproject.parent))  # its targets import from the project's root
        where = f"{pyproject} [{gallery.CONFIG_TABLE}]"
    if args.dir:
        g.dir = Path(args.dir)
    return g, where


def _graphs(args: argparse.Namespace) -> int:
    g, where = _gallery_of(args)
    if g is None:
        print(NO_GALLERY.format(where=where), file=sys.stderr)
        return 2
    if args.check:
        stale = g.check()
        if stale:
            print(f"{g.dir}/ is out of date ({where}); run `fsmchat graphs` to regenerate:\n  " + "\n  ".join(stale),
                  file=sys.stderr)
            return 1
        print(f"{g.dir}/ is up to date ({where})")
        return 0
    written, orphans = g.write(prune=args.prune)
    for p in written:
        print(p)
    for p in g.skipped:
        print(f"skipped {p}: no top-level def {BUILD}() (not imported)", file=sys.stderr)
    for p in orphans:
        print(f"{'deleted' if args.prune else 'orphan (nothing draws it; --prune deletes it)'}: {p}", file=sys.stderr)
    return 0


# ---- the parser ----
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fsmchat", description="Multi-agent conversations as state graphs: run them "
                                "live, render them, keep a gallery of their graphs.")
    p.add_argument("--version", action="version", version=f"fsmchat {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a pattern live: messages as they are posted, a status line while models think",
                       description="Run a pattern once, printing each message as it is posted and a status line "
                       "(state, turn, model calls, tokens, cost, elapsed) while models think. A file whose "
                       f"{BUILD}() does not return a pattern is run as a plain script.")
    r.add_argument("target", metavar="TARGET", help=f"the pattern: {TARGET_HELP}; a factory is called with no arguments")
    r.add_argument("--task", help="the task to run (default: the module's TASK; also sets FSMCHAT_TASK for scripts)")
    r.add_argument("--model", help="litellm model for every agent without its own, e.g. gpt-4o-mini or "
                   "ollama_chat/llama3.1 (sets FSMCHAT_MODEL; default: the offline simulation)")
    r.add_argument("-q", "--quiet", action="store_true", help="no live messages or status line; print only the output")
    r.add_argument("--json", action="store_true", help="print the RunResult as JSON on stdout (status line still on "
                   "a terminal's stderr)")
    r.add_argument("--checkpoint", metavar="PATH", help="commit every step to this SQLite file (resumable; the run id "
                   "is printed on stderr)")
    r.add_argument("--report", metavar="FILE", help="after the run, write it as one self-contained HTML page (the run "
                   "viewer's, offline); the run goes to --checkpoint's store, or a temporary one")
    r.add_argument("--max-calls", type=int, metavar="N", help="stop (stop reason 'budget') before request N+1 to a "
                   "model (sets max_model_calls)")
    r.add_argument("--deadline", type=float, metavar="SECONDS", help="stop (stop reason 'deadline') after this many "
                   "seconds, keeping the transcript so far (sets deadline_s)")
    r.set_defaults(fn=_run)

    d = sub.add_parser("render", help="render a graph to .svg/.png/.pdf/.dot/.mmd")
    d.add_argument("target", metavar="TARGET", help=f"a StateGraph, a pattern or a factory of one: {TARGET_HELP}")
    d.add_argument("-o", "--output", required=True, metavar="FILE", help="out.svg | .png | .pdf (need Graphviz's "
                   "dot) | .dot | .mmd; the suffix picks the format")
    d.set_defaults(fn=_render)

    g = sub.add_parser("graphs", help="regenerate (or --check) a gallery of graph files, e.g. graphs/",
                       description="Write one .dot, .svg and .mmd per graph of your project into a folder, or check "
                       "it is up to date. Name the graphs with --target/--examples/--builtins, or in pyproject.toml "
                       f"under [{gallery.CONFIG_TABLE}] (keys dir, targets, examples, builtins). Only files named "
                       f"as targets, and example files with a top-level def {BUILD}(), are imported.")
    g.add_argument("--target", action="append", metavar="[NAME=]TARGET", help=f"a graph to draw: {TARGET_HELP}; "
                   "files are named NAME.* (default: ATTR, or the file's stem for build). Repeatable")
    g.add_argument("--examples", metavar="DIR", help=f"also every DIR/*.py (not _*) with a top-level def {BUILD}(), "
                   "as example_<stem>.*; other files are skipped, never imported")
    g.add_argument("--builtins", action="store_true", help="also fsmchat's own patterns")
    g.add_argument("--dir", metavar="DIR", help="the gallery folder (default: the config's dir, else graphs)")
    g.add_argument("--check", action="store_true", help="write nothing; exit 1 naming missing, stale and orphan files")
    g.add_argument("--prune", action="store_true", help="delete orphan .dot/.svg/.mmd files (drawn by nothing)")
    g.set_defaults(fn=_graphs)

    u = sub.add_parser("ui", help="watch and replay the runs of a checkpoint store in the browser (read-only)",
                       description="Serve a local web app over a checkpoint store: every run, and each run replayed step "
                       "by step on its graph (bids, transcript, usage, config). A run still executing in another process "
                       "updates live. The store is opened read-only. Needs the ui extra: pip install 'fsmchat[ui]'.")
    u.add_argument("--db", required=True, metavar="PATH", help="the SQLite checkpoint store (e.g. runs.db)")
    u.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    u.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    u.set_defaults(fn=_ui)

    rp = sub.add_parser("report", help="write one run as a self-contained HTML file (offline, for a review)",
                        description="Write the run viewer's page of one run as a single HTML file: graph, step replay, "
                        "bids, transcript, usage and config inline; it opens from file:// with no network.")
    rp.add_argument("run_id", metavar="RUN_ID", help="the run's id (printed by fsmchat run --checkpoint)")
    rp.add_argument("--db", required=True, metavar="PATH", help="the SQLite checkpoint store holding the run")
    rp.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write, e.g. run.html")
    rp.set_defaults(fn=_report)

    pl = sub.add_parser("plan", help="print a graph's states and transitions")
    pl.add_argument("target", metavar="TARGET", help=f"a StateGraph, a pattern or a factory of one: {TARGET_HELP}")
    pl.set_defaults(fn=_plan)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    use_cwd()
    try:
        return args.fn(args)
    except (FsmchatError, ValueError, TypeError, FileNotFoundError, ImportError, AttributeError) as exc:
        print(f"fsmchat {args.cmd}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
