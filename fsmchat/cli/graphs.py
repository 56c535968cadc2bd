"""``fsmchat render``, ``fsmchat plan`` and ``fsmchat graphs``: drawings of graphs and the gallery."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import gallery
from ..targets import BUILD, load_target_with_module, resolve_graph


# ---- render, plan ----
def render_command(args: argparse.Namespace) -> int:
    graph = resolve_graph(load_target_with_module(args.target)[0])
    print(graph.render(args.output))
    return 0


def plan_command(args: argparse.Namespace) -> int:
    graph = resolve_graph(load_target_with_module(args.target)[0])
    flat = graph.flatten()
    print(f"{graph.name}: {len(flat.states)} states, {len(flat.transitions)} transitions, initial {flat.initial!r}")
    for s in flat.states.values():
        kind = "final" if s.final else "waits" if s.waits else "state"
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
        found, pyproject = gallery.configured(Path.cwd())
        if found is None or pyproject is None:
            where = (f"{pyproject} has no [{gallery.CONFIG_TABLE}] table" if pyproject is not None
                     else "there is no pyproject.toml here or in a parent folder")
            return None, where
        g = found
        sys.path.insert(0, str(pyproject.parent))  # its targets import from the project's root
        where = f"{pyproject} [{gallery.CONFIG_TABLE}]"
    if args.dir:
        g.dir = Path(args.dir)
    return g, where


def graphs_command(args: argparse.Namespace) -> int:
    g, where = _gallery_of(args)
    if g is None:
        print(NO_GALLERY.format(where=where), file=sys.stderr)
        return 2
    if args.check:
        return g.report_check("fsmchat graphs", where)
    written, orphans = g.write(prune=args.prune, force=args.force)
    rewritten = f"; {len(written)} rewritten" if written else ""
    print(f"{g.dir}/: {g.drawings} drawing{'s' if g.drawings != 1 else ''} up to date ({g.files} files{rewritten})")
    if args.verbose:
        for p in written:
            print(f"  wrote {p}")
    for p in g.skipped:
        print(f"skipped {p}: no top-level def {BUILD}() (not imported)", file=sys.stderr)
    for p in orphans:
        print(f"{'deleted' if args.prune else 'orphan (nothing draws it; --prune deletes it)'}: {p}", file=sys.stderr)
    return 0


