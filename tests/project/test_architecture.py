"""docs/architecture.md and its layer diagram: the diagram is drawn from the one layer contract in
pyproject.toml and today's imports and is up to date, its red arrows are exactly the violations
lint-imports reports, the doc's layer table follows the contract, and its worked example runs."""
import ast
import importlib
import importlib.util
import json
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCH = (ROOT / "docs" / "architecture.md").read_text()


def load_layers():
    spec = importlib.util.spec_from_file_location("docs_layers", ROOT / "docs" / "layers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_layers"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


layers = load_layers()


def test_the_checked_in_layer_diagram_is_up_to_date():
    """Like `fsmchat graphs --check`: DOT and Mermaid compared as text, the SVG by its DOT's hash."""
    assert layers.LayerGallery().check() == [], "run `python docs/layers.py` to redraw docs/diagrams/"


class FakeGraph:
    """The part of grimp's ImportGraph that `arrows` reads."""

    def __init__(self, imports):
        self.imports = imports  # (importer, imported, line)
        self.modules = {m for i in imports for m in i[:2]}

    def find_modules_directly_imported_by(self, module):
        return {b for a, b, _ in self.imports if a == module}

    def get_import_details(self, importer, imported):
        return [{"line_number": n} for a, b, n in self.imports if (a, b) == (importer, imported)]


def toy_contract():
    return layers.Contract("pkg", ((("top",), True), (("a", "b"), True), (("c", "d"), False), (("low",), True)))


def test_arrows_go_red_up_the_layers_and_between_independent_siblings_only():
    graph = FakeGraph([
        ("pkg.top", "pkg.a", 3),        # down: allowed
        ("pkg.a", "pkg.b", 5),          # independent siblings: a violation
        ("pkg.c", "pkg.d", 8),          # siblings of a ":" layer: allowed
        ("pkg.low.x", "pkg.top", 7),    # up, from a submodule: a violation
        ("pkg.low.x", "pkg.top", 9),
        ("pkg.low", "pkg", 1),          # the package facade is in no layer: not drawn
        ("pkg.a", "pkg.a.inner", 2),    # inside one entry: not drawn
    ])
    found = layers.arrows(toy_contract(), imports=lambda container: graph)
    assert [(a.source, a.dest, a.lines, a.upward) for a in found] == [
        ("top", "a", (("pkg.top", 3),), False),
        ("a", "b", (("pkg.a", 5),), True),
        ("c", "d", (("pkg.c", 8),), False),
        ("low", "top", (("pkg.low.x", 7), ("pkg.low.x", 9)), True),
    ]
    d = layers.LayerDiagram(toy_contract(), found)
    dot = d.to_dot()
    assert 'm_low -> m_top [label="low.x: 2 imports" color=firebrick constraint=false fontcolor=firebrick penwidth=2]' \
        in dot
    assert 'm_a -> m_b [label="1 import" color=firebrick' in dot
    assert "m_top -> m_a [arrowsize=0.6 color=grey70]" in dot
    assert "m_c -> m_d [arrowsize=0.6 color=grey70]" in dot
    mmd = d.to_mermaid()
    # 3 invisible links stack the 4 rows (links 0-2), then the arrows in order (links 3-6)
    assert '    m_a -->|"1 import"| m_b\n' in mmd and '    m_low -->|"low.x: 2 imports"| m_top\n' in mmd
    assert "    linkStyle 3,5 stroke:#b3b3b3\n" in mmd
    assert "    linkStyle 4,6 stroke:#b22222,stroke-width:2px,color:#b22222\n" in mmd
    assert [toy_contract().level(e) for e in ("top", "a", "b", "c", "low")] == [4, 3, 3, 2, 1]


def test_a_changed_layer_order_makes_the_check_fail(tmp_path):
    """Swap two layers in a copy of the contract: the drawn files no longer match, and say which."""
    text = (ROOT / "pyproject.toml").read_text()
    assert '    "flow",\n    "patterns",\n' in text
    swapped = tmp_path / "pyproject.toml"
    swapped.write_text(text.replace('    "flow",\n    "patterns",\n', '    "patterns",\n    "flow",\n'))
    gallery = layers.LayerGallery(dir=tmp_path / "diagrams")
    gallery.write()
    assert gallery.check() == []
    stale = layers.LayerGallery(make=lambda: layers.diagram(swapped), dir=tmp_path / "diagrams").check()
    assert stale == ["layers.dot", "layers.mmd", "layers.svg"]


def test_a_missing_contract_is_refused_saying_what_is_expected(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.importlinter]\nroot_packages = ['fsmchat']\n")
    with pytest.raises(layers.ContractError, match="expected one \\[\\[tool.importlinter.contracts\\]\\] with "
                                                   "id = 'layers' and type = \"layers\", found 0"):
        layers.read_contract(tmp_path / "pyproject.toml")


def lint_imports() -> subprocess.CompletedProcess:
    """``lint-imports`` of this tree: every contract in pyproject.toml's ``[tool.importlinter]``."""
    exe = Path(sys.executable).with_name("lint-imports")
    exe = str(exe) if exe.is_file() else shutil.which("lint-imports")
    assert exe is not None, "lint-imports is in the dev extra (pip install -e '.[dev]')"
    return subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_the_red_arrows_are_the_violations_lint_imports_reports():
    r = lint_imports()
    reported = set(re.findall(r"^(\S+) is not allowed to import (\S+):$", r.stdout, re.M))
    d = layers.diagram()
    c = d.contract
    drawn = {(f"fsmchat.{a.source}", f"fsmchat.{a.dest}") for a in d.violations()}
    assert r.returncode == (1 if drawn else 0), r.stdout[-2000:] + r.stderr[-2000:]
    # lint-imports names the entries of the two layers; the diagram the entries of both ends
    assert reported == drawn, (reported, drawn)
    assert all(c.entry_of(m) for pair in reported for m in pair)


def test_the_layer_mermaid_parses():
    from support.mermaid import mermaid_parser

    node, cache = mermaid_parser()
    path = ROOT / "docs" / "diagrams" / "layers.mmd"
    r = subprocess.run([node, str(cache / "mermaid_parse.mjs"), str(path)], capture_output=True, text=True,
                       cwd=cache, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.splitlines()[0]) == {"file": str(path), "ok": True}


def test_the_doc_lists_every_layer_of_the_contract_top_down():
    """The table under "Layers" has one row per layer, its entries in the contract's order."""
    contract = layers.read_contract()
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", ARCH, re.M)
    assert [(int(n), [e.strip(" `") for e in names.split(",")]) for n, names in rows] == \
        [(contract.level(names[0]), list(names)) for names, _ in contract.layers]
    assert "diagrams/layers.svg" in ARCH


LAYER_IN_DOCSTRING = re.compile(r"\ALayer (\d+)\b")
LAYER_COMMENT = re.compile(r"^\s*# layer (\d+): (\w+)", re.M)


def layer_claims(package: Path = ROOT / "fsmchat") -> list[tuple[str, int]]:
    """(module, the layer number it names) for every module whose docstring starts "Layer N", and
    (entry, N) for every "# layer N: entry" comment of the package facade."""
    claims = []
    for path in sorted(package.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        m = LAYER_IN_DOCSTRING.match(doc)
        if m:
            claims.append((module_name(path, package.parent), int(m.group(1))))
    facade = (package / "__init__.py").read_text() if (package / "__init__.py").is_file() else ""
    claims += [(f"{package.name}.{entry}", int(n)) for n, entry in LAYER_COMMENT.findall(facade)]
    return claims


def wrong_layer_numbers(contract, claims: list[tuple[str, int]]) -> list[str]:
    """The claims whose number is not the row of the module's entry in the contract (the table's)."""
    bad = []
    for module, n in claims:
        entry = contract.entry_of(module)
        if entry is None:
            bad.append(f"{module} says layer {n}, but it is in no layer of the contract")
        elif contract.level(entry) != n:
            bad.append(f"{module} says layer {n}, but {entry!r} is row {contract.level(entry)}")
    return bad


def test_every_layer_number_in_the_code_is_the_row_of_the_doc_table():
    """One numbering: a module docstring's "Layer N" and the facade's "# layer N" comments are
    the rows of docs/architecture.md's table (the contract, counted from the bottom)."""
    contract = layers.read_contract()
    claims = layer_claims()
    assert len(claims) >= 20, claims  # the numbered modules are found
    assert wrong_layer_numbers(contract, claims) == []


def test_a_wrong_layer_number_is_named(tmp_path):
    pkg = tmp_path / "fsmchat"
    (pkg / "patterns").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The facade."""\nX = {\n    # layer 10: speakers\n}\n')
    (pkg / "patterns" / "__init__.py").write_text('"""Layer 6: conversation patterns."""\n')
    (pkg / "models.py").write_text('"""Layer 2: the data."""\n')
    claims = layer_claims(pkg)
    assert claims == [("fsmchat.models", 2), ("fsmchat.patterns", 6), ("fsmchat.speakers", 10)]
    assert wrong_layer_numbers(layers.read_contract(), claims) == [
        "fsmchat.patterns says layer 6, but 'patterns' is row 15"]


def adding_a_pattern():
    section = ARCH.split("## Adding a pattern", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)
    printed = re.findall(r"```text\n(.*?)```", section, re.S)
    return code, printed


def test_the_adding_a_pattern_example_runs_and_prints_what_the_doc_shows(tmp_path):
    code, printed = adding_a_pattern()
    assert len(code) == 2 and len(printed) == 1
    assert sum(len(block.splitlines()) for block in code) < 60
    script = tmp_path / "moderated_round_robin.py"
    script.write_text("".join(code) + "\nfrom fsmchat.testing import assert_trace_is_path\n"
                      "assert_trace_is_path(chat.graph, result)\n")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == printed[0]
    assert r.stdout.splitlines() == [
        "rounds | seed -> turns -> sum_up -> turns -> sum_up -> done | 6 calls at most",
        "['skeptic: Only with a rollback plan.', 'host: Summary of 6 messages: Friday, with a rollback plan.']",
        "ModeratedRoundRobin: moderator is missing: it is required"]


# ---- what the tests hold the imports to (docs/architecture.md, "What the tests hold the imports to") ----
PACKAGE = ROOT / "fsmchat"


def test_every_import_contract_is_kept():
    """`lint-imports` (the contracts of pyproject.toml: the layers, no cycles) passes; a failure names
    the broken contracts and lint-imports' own report (the offending import lines)."""
    r = lint_imports()
    broken = re.findall(r"^(.+) BROKEN$", r.stdout, re.M)
    report = r.stdout.partition("Broken contracts")[2] or r.stdout + r.stderr
    assert r.returncode == 0 and not broken, f"broken import contracts: {broken}\n{report[-4000:]}"
    assert re.search(r"^Contracts: 2 kept, 0 broken\.$", r.stdout, re.M), r.stdout[-2000:]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The absolute module names an import statement names (``from . import x``: the submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level == 0:
        return [node.module or ""]
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return [".".join(base + [node.module])] if node.module else [".".join(base + [a.name]) for a in node.names]


class FunctionImports(ast.NodeVisitor):
    """Import statements inside a function (or lambda) body, ``if TYPE_CHECKING:`` blocks left out."""

    def __init__(self, module: str, is_package: bool):
        self.module, self.is_package, self.depth = module, is_package, 0
        self.found: list[tuple[str, int, str]] = []  # (importing module, line, imported module)

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
                (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        if self.depth:
            self.found += [(self.module, node.lineno, m) for m in imported_modules(node, self.module, self.is_package)]

    visit_ImportFrom = visit_Import


def function_level_imports(package: Path = PACKAGE) -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(package.rglob("*.py")):
        finder = FunctionImports(module_name(path, package.parent), path.name == "__init__.py")
        finder.visit(ast.parse(path.read_text(), str(path)))
        found += finder.found
    return found


def lazy_import_table(text: str = ARCH) -> dict[str, set[str]]:
    """The documented lazy imports: imported module -> the modules (relative to fsmchat) allowed to."""
    section = text.split("### What the tests hold the imports to", 1)[1]
    rows = re.findall(r"^\s*\| `([\w.]+)` \| ([^|]+) \| [^|]+ \|$", section, re.M)
    return {imported: {f"fsmchat.{m.strip(' `')}" for m in where.split(",")} for imported, where in rows}


def undocumented(imports: list[tuple[str, int, str]], table: dict[str, set[str]]) -> tuple[list[str], list[str]]:
    """(the function-level imports no row allows, the (row, importer) pairs no import uses)."""
    used: set[tuple[str, str]] = set()
    bad = []
    for importer, line, imported in imports:
        rows = [r for r in table if (imported == r or imported.startswith(r + ".")) and importer in table[r]]
        if rows:
            used.add((max(rows, key=len), importer))
        else:
            bad.append(f"{importer}:{line} imports {imported}")
    stale = [f"{r} in {m}" for r, where in table.items() for m in sorted(where) if (r, m) not in used]
    return bad, stale


def test_function_level_imports_are_only_the_documented_lazy_ones():
    table = lazy_import_table()
    assert {"litellm", "graphviz", "ray", "networkx"} <= set(table), table
    bad, stale = undocumented(function_level_imports(), table)
    assert bad == [], ("import these at the top of the module (a function-level import is for the heavy or "
                       "optional dependencies docs/architecture.md lists, measured):\n" + "\n".join(bad))
    assert stale == [], "docs/architecture.md lists lazy imports no module makes any more: " + ", ".join(stale)


def private_reads(package: Path = PACKAGE) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls``/``super()`` and this module defines no
    ``_name`` (so it is another module's private attribute), and ``from fsmchat... import _name``.
    Special names (``__x__``) and sunder protocol hooks (``_repr_mimebundle_``) are public."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        own: set[str] = set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                own.add(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and \
                    isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
                own.add(n.attr)
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                own.add(n.target.id)
        where = path.relative_to(package.parent)

        def private(name: str) -> bool:
            return name.startswith("_") and not name.startswith("__") and not name.endswith("_")

        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and private(n.attr) and n.attr not in own:
                v = n.value
                if not ((isinstance(v, ast.Name) and v.id in ("self", "cls")) or
                        (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super")):
                    found.append(f"{where}:{n.lineno}: {ast.unparse(n)}")
            if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").split(".")[0] == package.name):
                found += [f"{where}:{n.lineno}: from {'.' * n.level}{n.module or ''} import {a.name}"
                          for a in n.names if private(a.name)]
    return found


def test_no_module_reads_another_modules_private_attributes():
    assert private_reads() == [], "use (or add) a public name instead:\n" + "\n".join(private_reads())


def test_the_import_and_private_checks_catch_what_they_forbid(tmp_path):
    """The rules broken on purpose in a toy package: each check names exactly the offending lines."""
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("_cache = {}\n\n\nclass Store:\n    def __init__(self):\n        self._rows = []\n")
    (pkg / "sub" / "high.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..low import Store, _cache\n"          # line 2: a private name of another module
        "if TYPE_CHECKING:\n"
        "    from ..low import Store as S\n"          # module level, type-only: allowed
        "def f(store):\n"
        "    import graphviz\n"                       # line 6: documented lazy import
        "    from .. import low\n"                    # line 7: an fsmchat import hidden in a function
        "    if TYPE_CHECKING:\n"
        "        from . import other\n"               # type-only, even in a function: allowed
        "    g = lambda: __import__('json')\n"        # not an import statement
        "    return store._rows, self_like()._rows, low._cache\n"  # line 11: two private reads
        "class K:\n"
        "    _own = 1\n"
        "    def m(self, other):\n"
        "        return self._own, other._own, super()._x, self._repr_mimebundle_\n")  # same module / special
    found = function_level_imports(pkg)
    assert found == [("toy.sub.high", 6, "graphviz"), ("toy.sub.high", 7, "toy.low")]
    bad, stale = undocumented(found, {"graphviz": {"toy.sub.high"}, "ray": {"toy.sub.high"}})
    assert bad == ["toy.sub.high:7 imports toy.low"] and stale == ["ray in toy.sub.high"]
    assert private_reads(pkg) == ["toy/sub/high.py:2: from ..low import _cache",
                                  "toy/sub/high.py:11: store._rows", "toy/sub/high.py:11: self_like()._rows",
                                  "toy/sub/high.py:11: low._cache"]


def test_the_folder_list_names_every_package_and_only_packages_that_exist():
    """docs/architecture.md's "Folders" table: one row per package of fsmchat/, none missing, none extra."""
    section = ARCH.split("## Folders", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `fsmchat/(\w+)/` \|", section, re.M))
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert listed == packages, (sorted(listed - packages), sorted(packages - listed))


def test_no_lazy_facade_exports_a_name_that_is_also_one_of_its_submodules():
    """A facade's name that is also a submodule of its package (``fsmchat.cli.main`` was both the
    function and the module) is the module whenever something imported the submodule first: then
    ``from fsmchat.cli import main`` and the console script got a module, depending on import order."""
    import fsmchat

    facades = {"fsmchat": fsmchat}
    for name in ("speakers", "patterns", "store", "cli", "evals"):
        facades[f"fsmchat.{name}"] = importlib.import_module(f"fsmchat.{name}")
    clashes = []
    for package, module in facades.items():
        submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
        clashes += [f"{package}.{n}" for n in module.__all__ if n in submodules]
    assert clashes == []


def test_no_module_is_over_800_lines_and_none_of_the_network_package_over_450():
    """Small modules with one job each: the sizes docs/architecture.md's folder list promises."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / "fsmchat").rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > 800} == {}
    assert {p: n for p, n in sizes.items() if p.startswith("fsmchat/network/") and n > 450} == {}
