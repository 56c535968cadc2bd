"""Draw fsmchat's layer diagram from the layer contract in ``pyproject.toml`` and today's imports.

    python docs/layers.py            # writes docs/diagrams/layers.dot, .svg and .mmd
    python docs/layers.py --check    # writes nothing; exits 1 naming stale, missing or orphan files

The layers are the ``[tool.importlinter]`` contract with ``id = "layers"`` (the one list of the
layer order; ``lint-imports`` checks it); the imports are grimp's graph of the package, the graph
import-linter checks. Each box is one entry of the contract (a module or a sub-package), each row
one layer, numbered from the bottom (ranks, not clusters: the arrows route far shorter). An arrow
is "imports": grey when it goes down (allowed), red, labelled with its number of import
statements, when it goes up or sideways between independent siblings (a contract violation), so
the picture stays honest while violations exist. The package facades ``fsmchat`` and
``fsmchat.graph`` only re-export and are in no layer, so they are not drawn.

This is a script of the repository, not a module of fsmchat: it reads this checkout's
``pyproject.toml`` and needs grimp (from import-linter, in the ``dev`` extra), neither of which an
installed fsmchat has. The files are kept by the gallery code of ``fsmchat graphs``: DOT and
Mermaid are compared as text, the SVG by the hash of the DOT it was rendered from.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # draw this checkout's fsmchat, whatever is installed

from fsmchat.cli.gallery import Gallery, tomllib  # noqa: E402

DIAGRAMS = ROOT / "docs" / "diagrams"
CONTRACT_ID = "layers"


class ContractError(ValueError):
    """pyproject.toml has no usable layers contract (what is missing is in the message)."""


@dataclass(frozen=True)
class Contract:
    """A layers contract: ``layers[0]`` is the top; each layer is a tuple of entries (module names
    relative to ``container``) and whether its entries must not import each other."""

    container: str
    layers: tuple[tuple[tuple[str, ...], bool], ...]

    def entries(self) -> list[str]:
        return [e for names, _ in self.layers for e in names]

    def level(self, entry: str) -> int:
        """The layer's number counted from the bottom (1 = the lowest)."""
        for i, (names, _) in enumerate(self.layers):
            if entry in names:
                return len(self.layers) - i
        raise KeyError(entry)

    def entry_of(self, module: str) -> str | None:
        """The contract entry that holds ``module`` (the longest matching one), None for a facade."""
        best = None
        for e in self.entries():
            full = f"{self.container}.{e}"
            if (module == full or module.startswith(full + ".")) and (best is None or len(e) > len(best)):
                best = e
        return best

    def independent(self, entry: str) -> bool:
        return next(ind for names, ind in self.layers if entry in names)


def read_contract(pyproject: Path = ROOT / "pyproject.toml", contract_id: str = CONTRACT_ID) -> Contract:
    """The layers contract ``contract_id`` of ``pyproject``'s ``[tool.importlinter]``."""
    table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("importlinter", {})
    found = [c for c in table.get("contracts", []) if c.get("id") == contract_id]
    if len(found) != 1 or found[0].get("type") != "layers":
        raise ContractError(f"{pyproject}: expected one [[tool.importlinter.contracts]] with id = {contract_id!r} "
                            f"and type = \"layers\", found {len(found)}")
    c = found[0]
    containers = c.get("containers", [])
    if len(containers) != 1:
        raise ContractError(f"{pyproject}: contract {contract_id!r} must name one container, got {containers!r}")
    layers = []
    for raw in c.get("layers", []):
        sep = "|" if "|" in raw else ":"
        names = tuple(part.strip() for part in raw.split(sep))
        layers.append((names, sep == "|"))
    if not layers:
        raise ContractError(f"{pyproject}: contract {contract_id!r} lists no layers")
    return Contract(containers[0], tuple(layers))


@dataclass(frozen=True)
class Arrow:
    """All imports from one entry to another: ``lines`` are (importing module, line number)."""

    source: str
    dest: str
    lines: tuple[tuple[str, int], ...]
    upward: bool  # a violation: up a layer, or between independent siblings


def arrows(contract: Contract, imports: Callable[[str], Any] | None = None) -> list[Arrow]:
    """Every entry-to-entry import of the package, in a stable order. ``imports`` builds the import
    graph (grimp's ``build_graph`` by default; a test passes a small fake)."""
    if imports is None:
        import grimp

        graph = grimp.build_graph(contract.container, cache_dir=None)
    else:
        graph = imports(contract.container)
    found: dict[tuple[str, str], set[tuple[str, int]]] = defaultdict(set)
    for importer in graph.modules:
        src = contract.entry_of(importer)
        if src is None:
            continue
        for imported in graph.find_modules_directly_imported_by(importer):
            dst = contract.entry_of(imported)
            if dst is None or dst == src:
                continue
            for d in graph.get_import_details(importer=importer, imported=imported):
                found[src, dst].add((importer, d["line_number"]))
    out = []
    for (src, dst), lines in found.items():
        a, b = contract.level(src), contract.level(dst)
        upward = a < b or (a == b and contract.independent(src))
        out.append(Arrow(src, dst, tuple(sorted(lines)), upward))
    return sorted(out, key=lambda x: (-contract.level(x.source), x.source, -contract.level(x.dest), x.dest))


def _id(entry: str) -> str:
    return "m_" + re.sub(r"\W", "_", entry)


def _where(contract: Contract, arrow: Arrow) -> str:
    """How many import statements a violation is, per importing module: ``1 import`` or
    ``flow.steps: 3 imports``. Counts, not line numbers, so an edit elsewhere in the file leaves
    the drawing as it is; ``lint-imports`` names the lines."""
    counts: dict[str, int] = defaultdict(int)
    for module, _line in arrow.lines:
        counts[module] += 1
    base = f"{contract.container}.{arrow.source}"
    parts = []
    for module, n in sorted(counts.items()):
        name = f"{module[len(contract.container) + 1:]}: " if module != base else ""
        parts.append(f"{name}{n} import{'s' if n > 1 else ''}")
    return " / ".join(parts)


TITLE = "fsmchat layers: each imports only the rows below it"
LEGEND = ("grey arrow: an import down the layers (allowed); red arrow: an import up, or between "
          "independent siblings (a violation of the contract), labelled with its import statements")


@dataclass
class LayerDiagram:
    """The diagram of ``contract`` with ``arrows``, as DOT and Mermaid text."""

    contract: Contract
    arrows: list[Arrow] = field(default_factory=list)

    def violations(self) -> list[Arrow]:
        return [a for a in self.arrows if a.upward]

    def to_dot(self) -> str:
        import graphviz

        c = self.contract
        dot = graphviz.Digraph(name="layers", graph_attr={
            "rankdir": "TB", "newrank": "true", "ranksep": "0.5", "fontname": "Helvetica", "labelloc": "t",
            "label": f"<<b>{TITLE}</b><br/><font point-size=\"9\">{LEGEND}</font>>"},
            node_attr={"shape": "box", "style": "rounded", "fontname": "Helvetica", "fontsize": "11"},
            edge_attr={"fontname": "Helvetica", "fontsize": "9"})
        for names, _independent in c.layers:  # one rank per row, its number at the left
            level = c.level(names[0])
            with dot.subgraph(name=f"row{level}", graph_attr={"rank": "same"}) as same:
                same.node(f"row{level}", f"row {level}", shape="plaintext", fontcolor="grey40")
                for e in names:
                    same.node(_id(e), e)
        for upper, lower in zip(c.layers, c.layers[1:]):  # keep the rows stacked in the contract's order
            dot.edge(f"row{c.level(upper[0][0])}", f"row{c.level(lower[0][0])}", style="invis", weight="10")
        for a in self.arrows:
            if a.upward:
                dot.edge(_id(a.source), _id(a.dest), _where(c, a), color="firebrick", fontcolor="firebrick",
                         penwidth="2", constraint="false")
            else:
                dot.edge(_id(a.source), _id(a.dest), color="grey70", arrowsize="0.6")
        return dot.source

    def to_mermaid(self) -> str:
        c = self.contract
        lines = ["flowchart TB", f"    %% {TITLE}", f"    %% {LEGEND}"]
        for names, _ in c.layers:
            level = c.level(names[0])
            lines.append(f'    subgraph layer{level}["row {level}"]')
            lines.append("        direction LR")
            lines += [f'        {_id(e)}["{e}"]' for e in names]
            lines.append("    end")
        for upper, lower in zip(c.layers, c.layers[1:]):
            lines.append(f"    layer{c.level(upper[0][0])} ~~~ layer{c.level(lower[0][0])}")
        kinds: dict[bool, list[str]] = {False: [], True: []}  # link indexes (the ~~~ links count too)
        for i, a in enumerate(self.arrows, start=len(c.layers) - 1):
            label = f'|"{_where(c, a)}"|' if a.upward else ""
            lines.append(f"    {_id(a.source)} -->{label} {_id(a.dest)}")
            kinds[a.upward].append(str(i))
        for upward, style in ((False, "stroke:#b3b3b3"), (True, "stroke:#b22222,stroke-width:2px,color:#b22222")):
            if kinds[upward]:
                lines.append(f"    linkStyle {','.join(kinds[upward])} {style}")
        return "\n".join(lines) + "\n"


def diagram(pyproject: Path = ROOT / "pyproject.toml") -> LayerDiagram:
    contract = read_contract(pyproject)
    return LayerDiagram(contract, arrows(contract))


class LayerGallery(Gallery):
    """The gallery of ``fsmchat graphs`` with one entry, the layer diagram (same write and check)."""

    def __init__(self, make: Callable[[], LayerDiagram] = diagram, dir: Path = DIAGRAMS):
        super().__init__(dir=dir)
        self.make = make

    def entries(self) -> Iterator[tuple[str, Callable[[], Any]]]:
        yield "layers", self.make


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the files are not up to date")
    args = p.parse_args(argv)
    g = LayerGallery()
    if args.check:
        return g.report_check("python docs/layers.py")
    for path in g.write(prune=True)[0]:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
