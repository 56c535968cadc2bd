"""Every import path the README and the docs show resolves: each `from fsmchat... import name` line of
their code blocks, and each `fsmchat.x.y` they name in backticks, imports (a module moved into a
package keeps the paths users read)."""
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HISTORY = {"benchmarks-history.md"}  # past measurements name the modules of their day
ATTRIBUTES = {"fsmchat.task", "fsmchat.tool_calls", "fsmchat.tool_result"}  # span attributes and log keys, not paths
FROM = re.compile(r"^\s*from (fsmchat(?:\.\w+)*) import \(?([\w, ]+)\)?\s*$", re.M)
DOTTED = re.compile(r"`(fsmchat(?:\.\w+)+)(?:\(\)|\([^`]*\))?`")


def shown() -> list[tuple[str, str]]:
    """(page, dotted path) for every path a page shows."""
    out = []
    for page in PAGES:
        if page.name in HISTORY:
            continue
        text = page.read_text()
        for module, names in FROM.findall(text):
            out += [(page.name, f"{module}.{n.strip()}") for n in names.split(",") if n.strip()]
        out += [(page.name, path) for path in DOTTED.findall(text) if path not in ATTRIBUTES]
    return sorted(set(out))


def resolves(path: str) -> bool:
    parts = path.split(".")
    for k in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        try:
            for name in parts[k:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def test_the_pages_show_import_paths():
    paths = {p for _, p in shown()}
    assert len(paths) >= 40, sorted(paths)
    assert {"fsmchat.store.Store", "fsmchat.store.register_codec", "fsmchat.evals.Eval"} <= paths


@pytest.mark.parametrize("page, path", shown())
def test_every_import_path_a_page_shows_resolves(page, path):
    assert resolves(path), f"{page} shows {path}, which does not import"


@pytest.mark.parametrize("old, new", [("fsmchat.checkpoint", "fsmchat.store.checkpoint"),
                                      ("fsmchat.checkpoint_pg", "fsmchat.store.postgres"),
                                      ("fsmchat.statelog", "fsmchat.store.statelog"),
                                      ("fsmchat.timetravel", "fsmchat.store.timetravel"),
                                      ("fsmchat.writer", "fsmchat.store.writer"),
                                      ("fsmchat.pytest_plugin", "fsmchat.testing.plugin"),
                                      ("fsmchat.gallery", "fsmchat.cli.gallery"),
                                      ("fsmchat.config_values", "fsmchat.config.values"),
                                      ("fsmchat.kinds", "fsmchat.config.kinds"),
                                      ("fsmchat.distributed", "fsmchat.patterns.distributed"),
                                      ("fsmchat.progress", "fsmchat.patterns.progress"),
                                      ("fsmchat.deadline", "fsmchat.speakers.deadline"),
                                      ("fsmchat.masking", "fsmchat.common.masking"),
                                      ("fsmchat.facade", "fsmchat.common.facade")])
def test_a_module_moved_into_a_package_keeps_its_old_import_path(old, new):
    """Users' imports and MODULE:ATTR references stored before a move resolve to the same module."""
    assert importlib.import_module(old) is importlib.import_module(new)
    assert importlib.import_module(old).__name__ == new
