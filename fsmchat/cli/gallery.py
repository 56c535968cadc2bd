"""A checked-in gallery of rendered graphs: one .dot, .svg and .mmd per graph, in one folder.

What goes in it is a ``Gallery``: named targets (``MODULE:ATTR`` or ``path/file.py:ATTR``, each a
pattern, a ``StateGraph`` or a zero-argument factory of one), optionally a folder of example
scripts (every ``*.py`` not starting with ``_`` that has a top-level ``def build()``: others are
never imported, only listed as skipped) and optionally fsmchat's own patterns. A project names its
gallery on the command line (``fsmchat graphs --target mychat:chat --dir graphs``) or once in its
``pyproject.toml``::

    [tool.fsmchat.graphs]
    dir = "graphs"                       # where the files go (default "graphs")
    targets = ["mychat:chat"]            # or a table: {chat = "mychat:chat"}
    examples = "examples"                # a folder of build() scripts (files example_<stem>.*)
    builtins = false                     # fsmchat's own patterns (fsmchat's repository sets true)

``write`` regenerates the files; ``check`` names the stale, missing and orphan ones (files of the
gallery's kinds that nothing draws any more). DOT and Mermaid are compared as text; an SVG is
checked by the hash of the DOT it was rendered from (stamped into it), never byte for byte, since
Graphviz versions differ in coordinates and fonts.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Container, Iterator, Mapping

from ..graph.render import dot_hash, render_svg, svg_dot_hash
from ..graph.state_graph import StateGraph
from ..targets import BUILD, defines_build, load_file, load_target, resolve_graph, split_target
from ..errors import FsmchatError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# built-in patterns: gallery name -> "module:zero-arg factory returning a StateGraph"
PATTERNS: dict[str, str] = {
    "group_chat": "fsmchat.patterns.group_chat:example_graph",
    "round_robin": "fsmchat.patterns.round_robin:example_graph",
    "one_on_one_debate": "fsmchat.patterns.debate:example_graph",
    "one_on_one_debate_function": "fsmchat.patterns.debate:example_function_graph",
    "expert_panel": "fsmchat.patterns.panel:example_graph",
    "selector_group_chat": "fsmchat.patterns.selector:example_graph",
    "handoffs": "fsmchat.patterns.handoffs:example_graph",
    "discussion_channel": "fsmchat.network.graphs:example_lifecycle_graph",
    "discussion_turns": "fsmchat.network.graphs:example_turn_graph",
}
KINDS = (".dot", ".svg", ".mmd")  # the files each graph gets
CONFIG_TABLE = "tool.fsmchat.graphs"


def target_graph(target: str) -> StateGraph:
    """The graph ``MODULE:ATTR`` names (a graph, a pattern, or a factory of one)."""
    return resolve_graph(load_target(target))


def example_graph(path: Path) -> StateGraph:
    """The graph of an example file's ``build()``."""
    return resolve_graph(getattr(load_file(path), BUILD))


class GalleryConfigError(FsmchatError, ValueError):
    """A ``[tool.fsmchat.graphs]`` table, or a command line, that does not describe a gallery."""


@dataclass
class Gallery:
    """What a gallery draws: ``targets`` (file name -> target), an ``examples`` folder, the built-ins."""

    targets: dict[str, str] = field(default_factory=dict)
    examples: Path | None = None
    builtins: bool = False
    dir: Path = Path("graphs")
    skipped: list[Path] = field(default_factory=list)  # example files without build(): never imported
    drawings: int = 0  # graphs drawn by the last write (one .dot, .mmd and .svg each)
    files: int = 0     # files the gallery held after the last write

    @property
    def empty(self) -> bool:
        return not (self.targets or self.examples or self.builtins)

    def entries(self) -> Iterator[tuple[str, Callable[[], StateGraph]]]:
        """(file name stem, factory of the graph), in a stable order; the names must be unique."""
        seen: dict[str, str] = {}

        def claim(name: str, source: str) -> str:
            if name in seen:
                raise GalleryConfigError(f"two graphs would be written as {name}.*: {seen[name]} and {source}; "
                                         "give one a name (NAME=MODULE:ATTR, or a targets table)")
            seen[name] = source
            return name

        if self.builtins:
            for name, target in PATTERNS.items():
                yield claim(name, target), functools.partial(target_graph, target)
        for name, target in self.targets.items():
            yield claim(name, target), functools.partial(target_graph, target)
        self.skipped = []
        if self.examples is not None:
            if not self.examples.is_dir():
                raise FileNotFoundError(f"examples folder {self.examples} does not exist")
            for path in sorted(self.examples.glob("*.py")):
                if path.name.startswith("_"):
                    continue
                if not defines_build(path):
                    self.skipped.append(path)
                    continue
                yield claim(f"example_{path.stem}", str(path)), functools.partial(example_graph, path)

    def expected_files(self) -> dict[str, tuple[str, str]]:
        """file name -> (kind, content or DOT)."""
        out: dict[str, tuple[str, str]] = {}
        for name, make in self.entries():
            g = make()
            dot = g.to_dot()
            out[f"{name}.dot"] = ("text", dot)
            out[f"{name}.mmd"] = ("text", g.to_mermaid())
            out[f"{name}.svg"] = ("svg", dot)
        return out

    def write(self, prune: bool = False, force: bool = False) -> tuple[list[Path], list[Path]]:
        """Bring every file up to date; returns (written, orphans), the orphans deleted when ``prune``.
        A file already current (as ``check`` judges it) is left alone, so an unchanged gallery
        renders nothing; ``force`` rewrites every file. ``drawings`` and ``files`` are set to what the
        gallery holds afterwards."""
        expected = self.expected_files()
        self.dir.mkdir(parents=True, exist_ok=True)
        written = []
        for fname, (kind, content) in expected.items():
            p = self.dir / fname
            if not force and _current(p, kind, content):
                continue
            p.write_text(render_svg(content) if kind == "svg" else content)
            written.append(p)
        self.files = len(expected)
        self.drawings = sum(1 for kind, _ in expected.values() if kind == "svg")
        orphans = self._orphans(expected)
        if prune:
            for p in orphans:
                p.unlink()
        return written, orphans

    def check(self) -> list[str]:
        """Files that are missing, stale, or orphans (of the gallery's kinds, drawn by nothing)."""
        expected = self.expected_files()
        stale = []
        for fname, (kind, content) in expected.items():
            p = self.dir / fname
            if not p.is_file():
                stale.append(f"{fname} (missing)")
            elif not _current(p, kind, content):
                stale.append(fname)
        stale += [f"{p.name} (orphan: nothing draws it; delete it or run `fsmchat graphs --prune`)"
                  for p in self._orphans(expected)]
        return stale

    def report_check(self, fix: str, where: str = "") -> int:
        """``--check`` on the command line: say whether the folder is up to date (the stale files on
        stderr, with the command ``fix`` that regenerates them); returns the exit code, 1 if not."""
        stale = self.check()
        place = f" ({where})" if where else ""
        if stale:
            print(f"{self.dir}/ is out of date{place}; run `{fix}` to regenerate:\n  " + "\n  ".join(stale),
                  file=sys.stderr)
            return 1
        print(f"{self.dir}/ is up to date{place}")
        return 0

    def _orphans(self, expected: Container[str]) -> list[Path]:
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir() if p.is_file() and p.suffix in KINDS and p.name not in expected)


def _current(path: Path, kind: str, content: str) -> bool:
    """Whether ``path`` already holds ``content``: text compared as text, an SVG by the DOT hash
    stamped into it."""
    if not path.is_file():
        return False
    if kind == "svg":
        return svg_dot_hash(path.read_text()) == dot_hash(content)
    return path.read_text() == content


def target_name(spec: str) -> tuple[str, str]:
    """``"NAME=MODULE:ATTR"`` -> (NAME, target); otherwise the name is the attribute's last part
    (``mychat:chat`` -> ``chat``) or, for a file's ``build``, the file's stem."""
    name, eq, target = spec.partition("=")
    if eq and name and ":" not in name and "/" not in name:
        return name, target
    where, attr = split_target(spec)
    if attr is None or attr == BUILD:
        return Path(where).stem if where.endswith(".py") else where.rpartition(".")[2], spec
    return attr.rpartition(".")[2], spec


def from_table(table: Mapping[str, object], root: Path, where: str) -> Gallery:
    """A ``Gallery`` from a ``[tool.fsmchat.graphs]`` table; paths are relative to ``root``."""
    known = {"dir", "targets", "examples", "builtins"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise GalleryConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    raw = table.get("targets", [])
    if isinstance(raw, dict):
        targets = {str(k): str(v) for k, v in raw.items()}
    elif isinstance(raw, list) and all(isinstance(t, str) for t in raw):
        targets = dict(target_name(t) for t in raw)
    else:
        raise GalleryConfigError(f"{where}: targets must be a list of \"MODULE:ATTR\" or a table NAME = \"MODULE:ATTR\"")
    folder, examples, builtins = table.get("dir", "graphs"), table.get("examples"), table.get("builtins", False)
    if not isinstance(folder, str):
        raise GalleryConfigError(f"{where}: dir must be a folder path (a string), got {folder!r}")
    if examples is not None and not isinstance(examples, str):  # (TOML has no null: None is a missing key)
        raise GalleryConfigError(f"{where}: examples must be a folder path (a string), got {examples!r}")
    if not isinstance(builtins, bool):
        raise GalleryConfigError(f"{where}: builtins must be true or false, got {builtins!r}")
    return Gallery(targets=targets, examples=root / examples if examples is not None else None,
                   builtins=builtins, dir=root / folder)


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` or a parent (the project's root), if any."""
    for folder in [start, *start.parents]:
        if (folder / "pyproject.toml").is_file():
            return folder / "pyproject.toml"
    return None


def configured(start: Path) -> tuple[Gallery | None, Path | None]:
    """The gallery the nearest ``pyproject.toml`` names (None if it has no ``[tool.fsmchat.graphs]``),
    and that file."""
    pyproject = find_pyproject(start.resolve())
    if pyproject is None:
        return None, None
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    table = data.get("tool", {}).get("fsmchat", {}).get("graphs")
    if table is None:
        return None, pyproject
    if not isinstance(table, dict):
        raise GalleryConfigError(f"{pyproject}: [{CONFIG_TABLE}] must be a table")
    return from_table(table, pyproject.parent, f"{pyproject} [{CONFIG_TABLE}]"), pyproject


# ---- the plain functions earlier versions offered: built-ins plus an examples folder ----
def write(out_dir: Path, examples_dir: Path | None) -> list[Path]:
    return Gallery(examples=examples_dir, builtins=True, dir=out_dir).write()[0]


def check(out_dir: Path, examples_dir: Path | None) -> list[str]:
    """Names of files in ``out_dir`` that are missing, stale or orphans."""
    return Gallery(examples=examples_dir, builtins=True, dir=out_dir).check()


def entries(examples_dir: Path | None) -> Iterator[tuple[str, Callable[[], StateGraph]]]:
    """(name, graph factory) of the built-ins and of the examples folder's ``build()`` files."""
    return Gallery(examples=examples_dir, builtins=True).entries()
