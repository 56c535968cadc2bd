"""Layer 9: ``fsmchat run | render | graphs | plan``, thin over the layers above."""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

from . import gallery
from .errors import FsmchatError, watch_failures


def _run(args: argparse.Namespace) -> int:
    if args.model:
        os.environ["FSMCHAT_MODEL"] = args.model
    if args.task:
        os.environ["FSMCHAT_TASK"] = args.task
    path = Path(args.script)
    if not path.is_file():
        print(f"fsmchat run: no such file: {path}", file=sys.stderr)
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


def _render(args: argparse.Namespace) -> int:
    graph = gallery.resolve_graph(gallery.load_target(args.target))
    print(graph.render(args.output))
    return 0


def _graphs(args: argparse.Namespace) -> int:
    out, examples = Path(args.dir), Path(args.examples)
    if args.check:
        stale = gallery.check(out, examples)
        if stale:
            print("stale graphs (run `fsmchat graphs` to regenerate):\n  " + "\n  ".join(stale), file=sys.stderr)
            return 1
        print(f"{out}/ is up to date")
        return 0
    for p in gallery.write(out, examples):
        print(p)
    return 0


def _plan(args: argparse.Namespace) -> int:
    graph = gallery.resolve_graph(gallery.load_target(args.target))
    flat = graph.flatten()
    print(f"{graph.name}: {len(flat.states)} states, {len(flat.transitions)} transitions, initial {flat.initial!r}")
    for s in flat.states.values():
        kind = "final" if s.final else "state"
        print(f"  {kind} {s.name}" + (f"  -- {s.description}" if s.description else ""))
        for t in s.out:
            guard = f" [{t.guard_name}]" if t.guard is not None else ""
            print(f"      -> {t.dest} ({t.label}){guard}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fsmchat", description="Multi-agent conversations as state graphs.")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run an example script (offline model unless --model)")
    r.add_argument("script")
    r.add_argument("--model", help="litellm model, e.g. gpt-4o-mini or ollama_chat/llama3.1 (sets FSMCHAT_MODEL)")
    r.add_argument("--task", help="override the example's task (sets FSMCHAT_TASK)")
    r.set_defaults(fn=_run)
    d = sub.add_parser("render", help="render MODULE:ATTR (a graph, a pattern, or a factory) to a file")
    d.add_argument("target")
    d.add_argument("-o", "--output", required=True, help="out.svg | .png | .pdf | .dot | .mmd")
    d.set_defaults(fn=_render)
    g = sub.add_parser("graphs", help="regenerate graphs/ (or --check it is up to date)")
    g.add_argument("--check", action="store_true")
    g.add_argument("--dir", default="graphs")
    g.add_argument("--examples", default="examples")
    g.set_defaults(fn=_graphs)
    pl = sub.add_parser("plan", help="print the states and transitions of MODULE:ATTR")
    pl.add_argument("target")
    pl.set_defaults(fn=_plan)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (FsmchatError, ValueError, TypeError, FileNotFoundError, ImportError, AttributeError) as exc:
        print(f"fsmchat {args.cmd}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
