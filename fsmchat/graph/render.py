"""Layer 3: draw a ``StateGraph`` as DOT (via the ``graphviz`` package) and Mermaid text.

Both are built from the flattened graph, so the picture shows exactly what the engine runs:
nested subgraphs are clusters, guards are edge labels, and a run's trace can be overlaid
(visited states filled, edge hit counts on the labels).
"""
from __future__ import annotations

import hashlib
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import RenderError
from .state_graph import FlatGraph, StateGraph, Transition

DOT_HASH_MARK = "fsmchat-dot-sha256:"
INSTALL_HINT = ("install Graphviz with: apt-get install graphviz (Debian/Ubuntu), brew install graphviz "
                "(macOS) or choco install graphviz (Windows)")


def edge_text(t: Transition) -> str:
    g = t.guard_name
    if g is None:
        return t.label
    return f"[{g}]" if t.label == g else f"{t.label} [{g}]"


def _overlay(trace: Any) -> tuple[set[str], Counter]:
    """Visited states and (source, dest, label) hit counts of a run (a RunResult or a trace list)."""
    events = getattr(trace, "trace", trace) or []
    visited = {_drawn(e.state) for e in events}
    hits = Counter((_drawn(e.state), _drawn(e.dest), e.trigger) for e in events if e.dest is not None)
    return visited, hits


def _drawn(name: str) -> str:
    """A traced state as drawn: the runs of one branch per loop item (``each|1[3].x``) share the
    branch's states (``each|1.x``)."""
    return re.sub(r"\|(\d+)\[\d+\]\.", r"|\1.", name) if "[" in name else name


def _branch_graphs(flat: FlatGraph, prefix: str = "") -> list[tuple[str, str, FlatGraph]]:
    """(owner state id, branch id prefix, branch flat graph) for every fork state, recursively."""
    out = []
    for s in flat.states.values():
        for i, b in enumerate(s.branches, 1):
            bp = f"{prefix}{s.name}|{i}."
            bf = b.flatten()
            out.append((prefix + s.name, bp, bf))
            out.extend(_branch_graphs(bf, bp))
    return out


def to_dot(graph: StateGraph, trace: Any = None) -> str:
    import graphviz

    flat = graph.flatten()
    visited, hits = _overlay(trace) if trace is not None else (set(), Counter())
    dot = graphviz.Digraph(name=graph.name, graph_attr={"rankdir": "TB", "label": graph.description or graph.name,
                                                        "labelloc": "t", "fontname": "Helvetica"},
                           node_attr={"shape": "box", "style": "rounded", "fontname": "Helvetica",
                                      "fontsize": "11"},
                           edge_attr={"fontname": "Helvetica", "fontsize": "10"})
    dot.node("__start__", "", shape="circle", style="filled", fillcolor="black", width="0.2")
    bodies: dict[tuple[str, ...], graphviz.Digraph] = {(): dot}
    order: list[tuple[graphviz.Digraph, graphviz.Digraph]] = []
    labels: dict[tuple[str, ...], str] = {}

    def body(path: tuple[str, ...]) -> graphviz.Digraph:
        if path not in bodies:
            parent = body(path[:-1])
            sub = graphviz.Digraph(name="cluster_" + re.sub(r"\W", "_", path[-1]),
                                   graph_attr={"label": labels.get(path, path[-1]), "style": "rounded,dashed"})
            bodies[path] = sub
            order.append((parent, sub))
        return bodies[path]

    def emit(fg: FlatGraph, prefix: str, base: tuple[str, ...]) -> None:
        for cpath, desc in fg.clusters.items():
            short = cpath[-1].rsplit(".", 1)[-1]
            labels[base + tuple(prefix + c for c in cpath)] = short if desc in ("", short) else f"{short}\n{desc}"
        for s in fg.states.values():
            label = s.name.rsplit(".", 1)[-1] + (f"\n{s.description}" if s.description else "")
            attrs: dict[str, str] = {}
            if s.final:
                attrs.update(peripheries="2")
            if prefix + s.name in visited:
                attrs.update(style="rounded,filled", fillcolor="lightblue")
            body(base + tuple(prefix + c for c in s.cluster)).node(prefix + s.name, label, **attrs)
        for t in fg.transitions:
            text = "" if (t.guard is None and t.label == "next") else edge_text(t)
            attrs = {}
            n = hits.get((prefix + t.source, prefix + t.dest, t.label), 0)
            if trace is not None and n:
                text = f"{text} ×{n}".strip()
                attrs.update(penwidth="2", color="blue")
            body(base).edge(prefix + t.source, prefix + t.dest, text, **attrs)

    emit(flat, "", ())
    for owner, bp, bf in _branch_graphs(flat):
        owner_cluster = next((s.cluster for n, s in flat.states.items() if n == owner), ())
        cpath = tuple(owner_cluster) + (bp.rstrip("."),)
        labels[cpath] = f"{owner.rsplit('.', 1)[-1]} branch {bp.rstrip('.').rsplit('|', 1)[-1]}: {bf.name}"
        emit(bf, bp, cpath)
        body(()).edge(owner, bp + bf.initial, "fork", style="dashed")
    for parent, sub in reversed(order):  # innermost first, so nested clusters are complete when added
        parent.subgraph(sub)
    dot.edge("__start__", flat.initial)
    return dot.source


_MERMAID_WORDS = {"end", "state", "note", "direction", "classDef", "class", "style", "click", "default"}


def _mid(name: str) -> str:
    mid = re.sub(r"\W", "_", name)
    return mid + "_" if mid in _MERMAID_WORDS else mid


def _mtext(text: str) -> str:
    return text.replace(":", " -").replace("\n", " ").replace(";", ",").replace("#", "")


def to_mermaid(graph: StateGraph, trace: Any = None) -> str:
    flat = graph.flatten()
    visited, hits = _overlay(trace) if trace is not None else (set(), Counter())
    lines = ["stateDiagram-v2", f"    %% {graph.name}: {_mtext(graph.description)}".rstrip(": ")]

    def emit(path: tuple[str, ...], indent: str) -> None:
        for s in flat.states.values():
            if s.cluster != path:
                continue
            short = s.name.rsplit(".", 1)[-1]
            label = short + (f" ({_mtext(s.description)})" if s.description else "")
            lines.append(f'{indent}state "{label}" as {_mid(s.name)}')
        for sub in sorted((c for c in flat.clusters if len(c) == len(path) + 1 and c[:len(path)] == path),
                          key=lambda c: list(flat.clusters).index(c)):
            lines.append(f"{indent}state {_mid(sub[-1])} {{")
            emit(sub, indent + "    ")
            lines.append(f"{indent}}}")

    emit((), "    ")
    for owner, bp, bf in _branch_graphs(flat):
        lines.append(f"    state {_mid(bp.rstrip('.'))} {{")
        for s in bf.states.values():
            lines.append(f'        state "{s.name.rsplit(".", 1)[-1]}" as {_mid(bp + s.name)}')
        for t in bf.transitions:
            text = edge_text(t) if not (t.guard is None and t.label == "next") else ""
            lines.append(f"        {_mid(bp + t.source)} --> {_mid(bp + t.dest)}" + (f" : {_mtext(text)}" if text else ""))
        lines.append("    }")
        lines.append(f"    {_mid(owner)} --> {_mid(bp + bf.initial)} : fork")
    lines.append(f"    [*] --> {_mid(flat.initial)}")
    for t in flat.transitions:
        text = edge_text(t) if not (t.guard is None and t.label == "next") else ""
        n = hits.get((t.source, t.dest, t.label), 0)
        if trace is not None and n:
            text = f"{text} x{n}".strip()
        lines.append(f"    {_mid(t.source)} --> {_mid(t.dest)}" + (f" : {_mtext(text)}" if text else ""))
    for s in flat.states.values():
        if s.final:
            lines.append(f"    {_mid(s.name)} --> [*]")
    if visited:
        lines.append("    classDef visited fill:#add8e6,stroke:#1f4e79")
        drawn = [*flat.states, *(bp + n for _o, bp, bf in _branch_graphs(flat) for n in bf.states)]
        lines.append("    class " + ",".join(_mid(n) for n in drawn if n in visited) + " visited")
    return "\n".join(lines) + "\n"


def dot_hash(dot_source: str) -> str:
    return hashlib.sha256(dot_source.encode()).hexdigest()


def svg_dot_hash(svg_text: str) -> str | None:
    """The DOT hash an fsmchat-rendered SVG was stamped with (None if absent)."""
    m = re.search(DOT_HASH_MARK + r"([0-9a-f]{64})", svg_text)
    return m.group(1) if m else None


def render_svg(dot_source: str) -> str:
    """SVG text of a DOT source, stamped with the DOT's hash so checks never compare coordinates."""
    if shutil.which("dot") is None:
        raise RenderError(f"Graphviz's 'dot' program is not on PATH (needed for .svg/.png/.pdf); {INSTALL_HINT}. "
                          ".dot and .mmd output work without it.")
    import graphviz

    svg = graphviz.Source(dot_source).pipe(format="svg").decode()
    stamp = f"<!-- {DOT_HASH_MARK}{dot_hash(dot_source)} -->\n"
    return svg.replace("<svg", stamp + "<svg", 1)


def render(graph: StateGraph, path: str | Path, trace: Any = None) -> str:
    """Write ``graph`` to ``path``; the format comes from the suffix (svg, png, pdf, dot/gv, mmd)."""
    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt in ("dot", "gv"):
        p.write_text(to_dot(graph, trace))
    elif fmt in ("mmd", "mermaid"):
        p.write_text(to_mermaid(graph, trace))
    elif fmt == "svg":
        p.write_text(render_svg(to_dot(graph, trace)))
    elif fmt in ("png", "pdf"):
        if shutil.which("dot") is None:
            raise RenderError(f"Graphviz's 'dot' program is not on PATH (needed for .{fmt}); {INSTALL_HINT}. "
                              ".dot and .mmd output work without it.")
        import graphviz

        p.write_bytes(graphviz.Source(to_dot(graph, trace)).pipe(format=fmt))
    else:
        raise RenderError(f"cannot render to {p.name!r}: unknown suffix {p.suffix!r}; "
                          "use .svg, .png, .pdf, .dot, .gv or .mmd")
    return str(p)
