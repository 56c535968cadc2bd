"""Layer 4: draw a graph as DOT (via the ``graphviz`` package) and Mermaid text.

Both are written from one plain ``Drawing`` of the flattened graph (nodes, nested groups, edges
with their kind), which the graph makes itself (``StateGraph.drawing``): this module knows no
``StateGraph``, only a ``Drawable`` (anything with a ``name``, a ``description`` and a
``drawing(trace)``), so it sits below the graph layer and ``StateGraph``'s conveniences
(``graph.render("x.svg")``, ``graph.to_dot()``) call it directly. The picture shows exactly what
the engine runs and the two syntaxes agree:
nested subgraphs and branch runs are groups nested alike, guards are ``[guard]`` edge labels, and
a run's trace can be overlaid (visited states filled, edge hit counts on the labels).

Edge kinds (a legend on every DOT drawing, a comment in Mermaid): *guarded* ``[guard]`` edges are
tried in declared order; a *fallback* (dashed, plain label) is taken when no guard passed; an
*always* edge (solid, no label) is a state's only way on; a *stop* edge (red) enters a final state and
ends the run; *fork*/*join* edges (dotted) start a fork state's branch runs and lead each branch's
final states to the join bar, from which the fork state's own transitions leave. A state where the
run may stop for a person (``waits``) is filled amber with a bold border (Mermaid: ``class waits``).
"""
from __future__ import annotations

import hashlib
import html
import re
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence, TypeAlias

from ..errors import RenderError
from ..models import split_branch

DOT_HASH_MARK = "fsmchat-dot-sha256:"
INSTALL_HINT = ("install Graphviz with: apt-get install graphviz (Debian/Ubuntu), brew install graphviz "
                "(macOS) or choco install graphviz (Windows)")

# what each edge kind means, in the words of the legend (DOT) and the header comment (Mermaid)
LEGEND = {
    "guarded": "[guard]: guarded edge, taken when guard(ctx) is true (tried in declared order)",
    "fallback": "dashed (plain label or none): fallback, taken when no guard passed",
    "stop": "red: stop edge, enters a final state (double border) and ends the run",
    "fork": "dotted: fork into branch runs, each branch's final states join at the bar",
    "halt": "grey, thin: halt, taken from any step of a group when one failed or stopped the flow (drawn "
            "once per group, from its first step)",
    "waits": "amber, bold border: waits for a person (the run stops there, checkpointed, until resumed "
             "with an answer)",
}
WAITS_FILL, WAITS_BORDER = "#fff3cd", "#b8860b"  # amber: where a person is asked


def distinct_names(names: Sequence[str], reserved: Iterable[str] = ()) -> list[str]:
    """``names`` with a suffix ``_2``, ``_3`` ... on each that would repeat an earlier one or a
    ``reserved`` one (deterministic: in order). The one collision rule of state names, Mermaid
    node ids and DOT cluster names."""
    taken = set(reserved)
    out = []
    for base in names:
        candidate, k = base, 2
        while candidate in taken:
            candidate, k = f"{base}_{k}", k + 1
        taken.add(candidate)
        out.append(candidate)
    return out


# ---- the plain drawing both syntaxes are written from ----
@dataclass
class Node:
    id: str
    label: str  # short name, then the description on a second line
    group: tuple[str, ...]  # enclosing groups (cluster / branch ids), outermost first
    final: bool = False
    join: bool = False  # the join bar of a fork state
    visited: bool = False
    waits: bool = False  # the run may stop here for a person


@dataclass
class Edge:
    source: str
    dest: str
    text: str
    kind: str  # always | guarded | fallback | fork | join
    stop: bool = False  # enters a final state of the run
    hits: int = 0
    origin: str = ""  # the state the transition leaves (``source`` is the join bar of a fork state)
    label: str = ""  # the transition's label: the ``trigger`` of a trace event that took it


@dataclass
class Drawing:
    name: str
    title: str
    initial: str
    nodes: list[Node] = field(default_factory=list)
    groups: dict[tuple[str, ...], str] = field(default_factory=dict)  # group path -> label, parents first
    edges: list[Edge] = field(default_factory=list)
    overlay: bool = False

    def kinds(self) -> set[str]:
        found = {e.kind for e in self.edges} | ({"stop"} if any(e.stop for e in self.edges) else set())
        found |= {"waits"} if any(n.waits for n in self.nodes) else set()
        found |= {"halt"} if any(is_halt(e) for e in self.edges) else set()
        return found | ({"fork"} if "join" in found else set())


def is_halt(e: Edge) -> bool:
    """A flow's ``[halted]`` edge: every step has one, to the done state of its group."""
    return e.kind == "guarded" and e.label == "halt"


class TracedStep(Protocol):
    """One step of a run as an overlay reads it (a ``TraceEvent`` is one)."""

    @property
    def state(self) -> str: ...

    @property
    def dest(self) -> str | None: ...

    @property
    def trigger(self) -> str | None: ...


class Traced(Protocol):
    """A run's result as an overlay reads it (a ``RunResult`` is one): its steps in order."""

    @property
    def trace(self) -> Sequence[TracedStep]: ...


Trace: TypeAlias = "Traced | Sequence[TracedStep] | None"  # what a drawing overlays: a run's result or its steps


class Drawable(Protocol):
    """What this module draws: a graph with a name and a description that makes its own plain
    ``Drawing``, ``trace`` overlaid (``StateGraph`` is one)."""

    name: str
    description: str

    def drawing(self, trace: Trace = None) -> Drawing: ...


def _overlay(trace: Trace) -> tuple[set[str], Counter[tuple[str, str, str | None]], Counter[str], Counter[str]]:
    """A run's (a RunResult's or a trace list's) visited states, (source, dest, label) hit counts,
    and per drawn state the branch runs that started there and that ended there."""
    events: Sequence[TracedStep] = (trace.trace if not isinstance(trace, Sequence) and trace is not None
                                    else trace or [])
    visited = {_drawn(e.state) for e in events}
    hits = Counter((_drawn(e.state), _drawn(e.dest), e.trigger) for e in events if e.dest is not None)
    starts: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    ended: dict[str, bool] = {}  # per branch run id: did its last step end it (a later step starts it anew)
    for e in events:
        run, _ = split_branch(e.state)
        if run:
            if ended.get(run, True):
                starts[_drawn(e.state)] += 1
            ended[run] = e.dest is None
            if e.dest is None:
                ends[_drawn(e.state)] += 1
    return visited, hits, starts, ends


def _drawn(name: str) -> str:
    """A traced state as drawn: the runs of one branch per loop item (``each|1[3].x``) share the
    branch's states (``each|1.x``)."""
    return re.sub(r"\|(\d+)\[\d+\]\.", r"|\1.", name) if "[" in name else name


def overlay(d: Drawing, trace: Trace) -> Drawing:
    """Overlay a run's trace (a RunResult or a list of trace events) on the plain drawing ``d``:
    visited states filled, edge hit counts. Returns ``d``."""
    visited, hits, starts, ends = _overlay(trace)
    d.overlay = True
    for n in d.nodes:
        n.visited = any(k[0] == n.id.removesuffix("|join") for k in hits) if n.join else n.id in visited
    for e in d.edges:
        e.hits = (starts[e.dest] if e.kind == "fork" else ends[e.source] if e.kind == "join"
                  else hits.get((e.origin, e.dest, e.label), 0))
    return d


def step_marks(d: Drawing, state: str, trigger: str | None, dest: str | None) -> tuple[int | None, int | None]:
    """Where one trace event is in ``d``: the index of the state's node and of the edge the step
    took (None when not drawn, e.g. a terminal event has no edge)."""
    src = _drawn(state)
    node = next((i for i, n in enumerate(d.nodes) if n.id == src), None)
    if dest is None:
        return node, None
    to = _drawn(dest)
    edge = next((i for i, e in enumerate(d.edges) if (e.origin, e.dest, e.label) == (src, to, trigger)), None)
    return node, edge


def drawing_data(d: Drawing) -> dict[str, object]:
    """``d`` as JSON-able data (what a checkpoint stores so a viewer can draw the run's graph)."""
    return {"name": d.name, "title": d.title, "initial": d.initial,
            "nodes": [asdict(n) for n in d.nodes], "edges": [asdict(e) for e in d.edges],
            "groups": [[list(path), label] for path, label in d.groups.items()]}


def drawing_from_data(data: dict[str, Any]) -> Drawing:  # type: ignore[explicit-any]  # stored JSON, checked here
    """The ``Drawing`` that ``drawing_data`` wrote (``KeyError``/``TypeError`` when it is not one)."""
    return Drawing(data["name"], data["title"], data["initial"],
                   nodes=[Node(**{**n, "group": tuple(n["group"])}) for n in data["nodes"]],
                   groups={tuple(path): label for path, label in data["groups"]},
                   edges=[Edge(**e) for e in data["edges"]])


def _children(d: Drawing, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [g for g in d.groups if len(g) == len(path) + 1 and g[:len(path)] == path]


def _edge_group(e: Edge, where: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The innermost group holding both ends of ``e`` (where Mermaid wants the edge written)."""
    a, b = where[e.source], where[e.dest]
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


# ---- DOT ----
def _dot_legend(d: Drawing) -> str:
    rows = [LEGEND[k] for k in LEGEND if k in d.kinds()]
    text = "<br/>".join(html.escape(r, quote=False) for r in rows)
    title = html.escape(d.title, quote=False).replace("\n", "<br/>")
    return f'<<b>{title}</b><br/><font point-size="9">{text}</font>>' if rows else f"<<b>{title}</b>>"


def to_dot(graph: Drawable, trace: Trace = None) -> str:
    """Return ``graph`` as DOT text, with a legend of the edge kinds it uses.

    The text is deterministic (checks compare it); Graphviz is not needed to write it.

    Args:
        graph: The graph to draw (flattened: nested graphs are clusters).
        trace: A ``RunResult`` (or list of ``TraceEvent``) to overlay: visited states filled,
            edge hit counts on the labels.

    Returns:
        The DOT source.

    Examples:
        >>> from fsmchat import StateGraph
        >>> def answered(ctx):
        ...     return ctx["knocks"] >= 2
        >>> door = (StateGraph("door", description="knock until someone answers").state("knock")
        ...         .final("open").edge("knock", "open", when=answered).edge("knock", "knock", label="again"))
        >>> from fsmchat.graph import to_dot
        >>> for line in to_dot(door).splitlines():
        ...     if "->" in line:
        ...         print(line.strip())
        knock -> open [label="[answered]" color=firebrick fontcolor=firebrick]
        knock -> knock [label=again style=dashed]
        __start__ -> knock
    """
    return dot_source(graph.drawing(trace))


def dot_source(d: Drawing, ids: bool = False) -> str:
    """DOT text of a drawing; ``ids`` gives each node and edge an SVG id (``n<i>``/``e<i>``, by its
    index in ``d``) so a page can find the element of a state or a step."""
    import graphviz

    # top to bottom in declaration order: the out-edges of a state keep their declared order left to right
    # (a fan-out's branches 1, 2, 3), clusters are ranked with the rest (newrank)
    dot = graphviz.Digraph(name=d.name, graph_attr={"rankdir": "TB", "label": _dot_legend(d),
                                                        "labelloc": "t", "fontname": "Helvetica",
                                                        "ordering": "out", "newrank": "true"},
                           node_attr={"shape": "box", "style": "rounded", "fontname": "Helvetica",
                                      "fontsize": "11"},
                           edge_attr={"fontname": "Helvetica", "fontsize": "10"})
    dot.node("__start__", "", shape="circle", style="filled", fillcolor="black", width="0.2")
    groups = list(d.groups)  # a cluster's name is global in DOT: two groups never share one
    clusters = dict(zip(groups, distinct_names(["cluster_" + re.sub(r"\W", "_", g[-1]) for g in groups])))

    def nodes_of(body: graphviz.Digraph, path: tuple[str, ...]) -> None:
        for i, n in enumerate(d.nodes):
            if n.group != path:
                continue
            attrs: dict[str, str] = {"id": f"n{i}"} if ids else {}
            if n.join:
                attrs.update(shape="box", style="filled", fillcolor="blue" if n.visited else "black",
                             color="blue" if n.visited else "black", height="0.06", width="1.2", fixedsize="true")
                body.node(n.id, "", **attrs)
                continue
            if n.final:
                attrs.update(peripheries="2")
            if n.waits:
                attrs.update(style="rounded,filled,bold", fillcolor=WAITS_FILL, color=WAITS_BORDER)
            if n.visited:
                attrs.update(style="rounded,filled" + (",bold" if n.waits else ""), fillcolor="lightblue")
            body.node(n.id, n.label, **attrs)
        for sub in _children(d, path):
            cluster = graphviz.Digraph(name=clusters[sub],
                                       graph_attr={"label": d.groups[sub], "style": "rounded,dashed"})
            nodes_of(cluster, sub)
            body.subgraph(cluster)

    nodes_of(dot, ())
    where = {n.id: n.group for n in d.nodes}
    halts_drawn: set[tuple[tuple[str, ...], str]] = set()  # (group, dest) whose halt edge is drawn
    labelled: set[tuple[str, str]] = set()  # (source, dest) of the visible edges drawn with a label
    for i, e in enumerate(d.edges):
        attrs: dict[str, str] = {"id": f"e{i}"} if ids else {}
        text = e.text
        if is_halt(e) and not (d.overlay and e.hits):
            # quiet and out of the layout's way: the steps stay in a column, the halts go around it
            attrs.update(color="gray60", fontcolor="gray45", fontsize="8", penwidth="0.6", arrowsize="0.5",
                         constraint="false", samehead=f"halt_{e.dest}")
            key = (where.get(e.source, ()), e.dest)
            if key in halts_drawn:  # drawn once per group: the others are kept (ids, overlay) but unseen
                attrs.update(style="invis")
            else:
                text += " (any step)"
            halts_drawn.add(key)
            dot.edge(e.source, e.dest, text, **attrs)
            continue
        if e.kind == "fallback":
            attrs.update(style="dashed")
        elif e.kind in ("fork", "join"):
            attrs.update(style="dotted")
        if e.stop:
            attrs.update(color="firebrick", fontcolor="firebrick")
        if d.overlay and e.hits:
            text = f"{text} ×{e.hits}".strip()
            attrs.update(penwidth="2", color="blue")
        if text and (e.source, e.dest) in labelled:  # a second labelled edge between the same two states:
            attrs.update(xlabel=text)  # placed where it overlaps no other label ("until [until_met]", "rounds")
            text = ""
        if text:
            labelled.add((e.source, e.dest))
        dot.edge(e.source, e.dest, text, **attrs)
    dot.edge("__start__", d.initial)
    source: str = dot.source
    return source


# ---- Mermaid ----
_MERMAID_WORDS = {"end", "state", "note", "direction", "classDef", "class", "style", "click", "default"}


def _mid(name: str) -> str:
    mid = re.sub(r"\W", "_", name)
    return mid + "_" if mid in _MERMAID_WORDS else mid


def mermaid_ids(d: Drawing) -> dict[str, str]:
    """The Mermaid id of every node and group of ``d``: its name with each non-word character as
    ``_`` (a Mermaid keyword gets a trailing ``_``), made distinct in drawing order
    (``distinct_names``), so ``a.b`` and ``a_b`` stay two states."""
    names = list(dict.fromkeys([n.id for n in d.nodes] + [g[-1] for g in d.groups]))
    return dict(zip(names, distinct_names([_mid(x) for x in names])))


def _mtext(text: str) -> str:
    return text.replace(":", " -").replace("\n", " ").replace(";", ",").replace("#", "")


_MERMAID_LEGEND = {
    "guarded": "[guard] a guarded edge, taken when guard(ctx) is true (tried in declared order)",
    "fallback": "a plain label (or none, beside guarded edges) is a fallback, taken when no guard passed",
    "stop": "X --> [*] a final state, where the run ends",
    "fork": "a fork state starts its branch groups, whose final states lead to its join",
    "waits": "class waits (amber) a state where the run stops for a person and resumes with their answer",
}


def to_mermaid(graph: Drawable, trace: Trace = None) -> str:
    """Return ``graph`` as Mermaid ``stateDiagram-v2`` text (GitHub and JupyterLab draw it).

    Args:
        graph: The graph to draw (nested graphs are composite states).
        trace: A ``RunResult`` (or list of ``TraceEvent``) to overlay: visited states get the class
            ``visited``, edges their hit counts.

    Returns:
        The Mermaid text.

    Examples:
        >>> from fsmchat import StateGraph
        >>> def tired(ctx):
        ...     return True
        >>> day = (StateGraph("day", description="work until tired").state("work").final("rest")
        ...        .edge("work", "rest", when=tired).edge("work", "work", label="more"))
        >>> from fsmchat.graph import to_mermaid
        >>> print(to_mermaid(day))
        stateDiagram-v2
            %% day: work until tired
            %% legend: [guard] a guarded edge, taken when guard(ctx) is true (tried in declared order)
            %% legend: a plain label (or none, beside guarded edges) is a fallback, taken when no guard passed
            %% legend: X --> [*] a final state, where the run ends
            state "work" as work
            state "rest" as rest
            [*] --> work
            work --> rest : [tired]
            work --> work : more
            rest --> [*]
        <BLANKLINE>
    """
    d = graph.drawing(trace)
    lines = ["stateDiagram-v2", f"    %% {graph.name}: {_mtext(graph.description)}".rstrip(": ")]
    lines += [f"    %% legend: {_MERMAID_LEGEND[k]}" for k in _MERMAID_LEGEND if k in d.kinds()]
    where = {n.id: n.group for n in d.nodes}
    ids = mermaid_ids(d)
    edges_in: dict[tuple[str, ...], list[Edge]] = {}
    for e in d.edges:
        edges_in.setdefault(_edge_group(e, where), []).append(e)

    def edge_line(e: Edge) -> str:
        text = e.text
        if d.overlay and e.hits:
            text = f"{text} x{e.hits}".strip()
        return f"{ids[e.source]} --> {ids[e.dest]}" + (f" : {_mtext(text)}" if text else "")

    def group(path: tuple[str, ...], indent: str) -> None:
        for n in d.nodes:
            if n.group == path:
                short, _, desc = n.label.partition("\n")
                label = _mtext(f"{short} ({desc})" if desc else short)
                lines.append(f"{indent}state {ids[n.id]} <<join>>" if n.join else
                             f'{indent}state "{label}" as {ids[n.id]}')
        for sub in _children(d, path):
            lines.append(f"{indent}state {ids[sub[-1]]} {{")
            group(sub, indent + "    ")
            lines.append(f"{indent}}}")
        if not path:
            lines.append(f"{indent}[*] --> {ids[d.initial]}")
        lines.extend(indent + edge_line(e) for e in edges_in.get(path, []))

    group((), "    ")
    for n in d.nodes:
        if n.final and not n.group:
            lines.append(f"    {ids[n.id]} --> [*]")
    asks = [n.id for n in d.nodes if n.waits]
    if asks:
        lines.append(f"    classDef waits fill:{WAITS_FILL},stroke:{WAITS_BORDER},stroke-width:2px")
        lines.append("    class " + ",".join(ids[n] for n in asks) + " waits")
    seen = [n.id for n in d.nodes if n.visited]
    if seen:
        lines.append("    classDef visited fill:#add8e6,stroke:#1f4e79")
        lines.append("    class " + ",".join(ids[n] for n in seen) + " visited")
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

    svg: str = graphviz.Source(dot_source).pipe(format="svg").decode()
    stamp = f"<!-- {DOT_HASH_MARK}{dot_hash(dot_source)} -->\n"
    return svg.replace("<svg", stamp + "<svg", 1)


# ---- notebooks (Jupyter's rich display) ----
def has_graphviz() -> bool:
    """Whether Graphviz's ``dot`` program is on PATH (SVG needs it; DOT and Mermaid text do not)."""
    return shutil.which("dot") is not None


def to_svg(graph: Drawable, trace: Trace = None) -> str:
    """Return ``graph`` as SVG text, stamped with the hash of the DOT it was drawn from.

    Args:
        graph: The graph to draw.
        trace: A ``RunResult`` (or list of ``TraceEvent``) to overlay.

    Raises:
        RenderError: Graphviz's ``dot`` program is not on PATH.

    Examples:
        >>> from fsmchat import StateGraph
        >>> from fsmchat.graph.render import to_svg
        >>> svg = to_svg(StateGraph("g").state("a").final("b").edge("a", "b"))
        >>> svg.startswith("<?xml"), "fsmchat-dot-sha256:" in svg
        (True, True)
    """
    return render_svg(to_dot(graph, trace))


def mime_bundle(graph: Drawable, trace: Trace = None) -> dict[str, str]:
    """What a notebook shows for the graph: its SVG, or (without Graphviz) its Mermaid text as a
    fenced ``mermaid`` block, which JupyterLab and GitHub draw."""
    if has_graphviz():
        return {"image/svg+xml": to_svg(graph, trace)}
    return {"text/markdown": f"```mermaid\n{to_mermaid(graph, trace)}```\n"}


def to_html(graph: Drawable, trace: Trace = None) -> str:
    """Return an HTML fragment of ``graph`` for a page or a notebook cell.

    The SVG inline, or (without Graphviz) the Mermaid text, escaped, in a ``<pre class="mermaid">``
    with a note saying why.

    Args:
        graph: The graph to draw.
        trace: A ``RunResult`` (or list of ``TraceEvent``) to overlay.

    Examples:
        >>> from fsmchat import StateGraph
        >>> from fsmchat.graph.render import to_html
        >>> to_html(StateGraph("g").state("a").final("b").edge("a", "b"))[:4]
        '<svg'
    """
    if has_graphviz():
        svg = to_svg(graph, trace)
        return svg[svg.index("<svg"):]  # no XML declaration or doctype inside HTML
    return (f"<p><em>Graphviz's dot is not installed ({html.escape(INSTALL_HINT)}); the graph as Mermaid:</em></p>"
            f'<pre class="mermaid">{html.escape(to_mermaid(graph, trace))}</pre>')


def render(graph: Drawable, path: str | Path, trace: Trace = None) -> str:
    """Write ``graph`` to ``path`` in the format its suffix names.

    Args:
        graph: The graph to draw.
        path: ``.svg``, ``.png``, ``.pdf`` (these need Graphviz), ``.dot``/``.gv`` or ``.mmd``.
        trace: A ``RunResult`` (or list of ``TraceEvent``) to overlay.

    Returns:
        The path written, as a string.

    Raises:
        RenderError: An unknown suffix, or Graphviz's ``dot`` is missing for SVG, PNG or PDF.

    Examples:
        >>> from fsmchat import StateGraph
        >>> from fsmchat.graph import render
        >>> g = StateGraph("g").state("a").final("b").edge("a", "b")
        >>> render(g, "g.mmd")
        'g.mmd'
        >>> open("g.mmd").read().splitlines()[0]
        'stateDiagram-v2'
    """
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
