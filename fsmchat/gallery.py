"""The checked-in gallery (``graphs/``): one .dot, .svg and .mmd per built-in pattern and example.

``write(dir)`` regenerates it; ``check(dir)`` names the stale files. DOT and Mermaid are compared
as text; an SVG is checked by the hash of the DOT it was rendered from (stamped into it), never
byte for byte, since Graphviz versions differ in coordinates and fonts.
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any, Callable, Iterator

from .graph.render import dot_hash, render_svg, svg_dot_hash
from .graph.state_graph import StateGraph

# built-in patterns: gallery name -> "module:zero-arg factory returning a StateGraph"
PATTERNS: dict[str, str] = {
    "group_chat": "fsmchat.patterns.group_chat:example_graph",
    "round_robin": "fsmchat.patterns.round_robin:example_graph",
    "one_on_one_debate": "fsmchat.patterns.debate:example_graph",
    "one_on_one_debate_function": "fsmchat.patterns.debate:example_function_graph",
    "expert_panel": "fsmchat.patterns.panel:example_graph",
    "discussion_channel": "fsmchat.network.graphs:example_lifecycle_graph",
    "discussion_turns": "fsmchat.network.graphs:example_turn_graph",
}


def resolve_graph(obj: Any) -> StateGraph:
    """A StateGraph from a graph, a pattern (``.graph``) or a zero-argument factory of either."""
    for _ in range(3):
        if isinstance(obj, StateGraph):
            return obj
        graph = getattr(obj, "graph", None)
        if isinstance(graph, StateGraph):
            return graph
        if callable(obj):
            obj = obj()
            continue
        break
    raise TypeError(f"expected a StateGraph, an object with a .graph, or a zero-argument factory of one; "
                    f"got {type(obj).__name__}")


def load_target(spec: str) -> Any:
    """``module:attr`` or ``path/to/file.py:attr`` -> the object."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise ValueError(f"target {spec!r} must look like MODULE:ATTR or path/to/file.py:ATTR")
    if where.endswith(".py"):
        module = load_file(Path(where))
    else:
        module = importlib.import_module(where)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def load_file(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(f"fsmchat_example_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entries(examples_dir: Path | None) -> Iterator[tuple[str, Callable[[], StateGraph]]]:
    for name, target in PATTERNS.items():
        yield name, (lambda t=target: resolve_graph(load_target(t)))
    if examples_dir is not None and examples_dir.is_dir():
        for path in sorted(examples_dir.glob("*.py")):
            if path.name.startswith("_"):
                continue
            yield f"example_{path.stem}", (lambda p=path: resolve_graph(load_file(p).build))


def expected_files(examples_dir: Path | None) -> dict[str, tuple[str, str]]:
    """file name -> (kind, content or DOT hash)."""
    out: dict[str, tuple[str, str]] = {}
    for name, make in entries(examples_dir):
        g = make()
        dot = g.to_dot()
        out[f"{name}.dot"] = ("text", dot)
        out[f"{name}.mmd"] = ("text", g.to_mermaid())
        out[f"{name}.svg"] = ("svg", dot)
    return out


def write(out_dir: Path, examples_dir: Path | None) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, (kind, content) in expected_files(examples_dir).items():
        p = out_dir / fname
        p.write_text(render_svg(content) if kind == "svg" else content)
        written.append(p)
    return written


def check(out_dir: Path, examples_dir: Path | None) -> list[str]:
    """Names of files in ``out_dir`` that are missing or do not match the code."""
    stale = []
    for fname, (kind, content) in expected_files(examples_dir).items():
        p = out_dir / fname
        if not p.is_file():
            stale.append(f"{fname} (missing)")
        elif kind == "svg":
            if svg_dot_hash(p.read_text()) != dot_hash(content):
                stale.append(fname)
        elif p.read_text() != content:
            stale.append(fname)
    return stale
