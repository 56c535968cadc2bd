"""docs/architecture.md and its layer diagram: the diagram is drawn from the one layer contract in
pyproject.toml and today's imports and is up to date, its red arrows are exactly the violations
lint-imports reports, the doc's layer table follows the contract, and its worked example runs."""
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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


def lint_imports():
    exe = Path(sys.executable).with_name("lint-imports")
    return str(exe) if exe.is_file() else shutil.which("lint-imports")


def test_the_red_arrows_are_the_violations_lint_imports_reports():
    exe = lint_imports()
    assert exe is not None, "lint-imports is in the dev extra (pip install -e '.[dev]')"
    r = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    reported = set(re.findall(r"^(\S+) is not allowed to import (\S+):$", r.stdout, re.M))
    d = layers.diagram()
    c = d.contract
    drawn = {(f"fsmchat.{a.source}", f"fsmchat.{a.dest}") for a in d.violations()}
    assert r.returncode == (1 if drawn else 0), r.stdout[-2000:] + r.stderr[-2000:]
    # lint-imports names the entries of the two layers; the diagram the entries of both ends
    assert reported == drawn, (reported, drawn)
    assert all(c.entry_of(m) for pair in reported for m in pair)


def test_the_layer_mermaid_parses():
    from test_diagrams import mermaid_parser

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


def adding_a_pattern():
    section = ARCH.split("## Adding a pattern", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)
    printed = re.findall(r"```text\n(.*?)```", section, re.S)
    return code, printed


def test_the_adding_a_pattern_example_runs_and_prints_what_the_doc_shows(tmp_path):
    code, printed = adding_a_pattern()
    assert len(code) == 2 and len(printed) == 1
    assert sum(len(block.splitlines()) for block in code) < 60
    script = tmp_path / "draft_review.py"
    script.write_text("".join(code) + "\nfrom fsmchat.testing import assert_trace_is_path\n"
                      "assert_trace_is_path(chat.graph, result)\n")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == printed[0]
    assert r.stdout.splitlines()[0] == "approved | seed -> draft -> review -> draft -> review -> done | 6 calls at most"
