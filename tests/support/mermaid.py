"""Mermaid's own parser (installed once from the npm registry into the user's cache) and ``mermaid_parse.mjs``, for the diagram tests; skips without Node.js."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

MERMAID = "mermaid@11.17.2"
JSDOM = "jsdom@24.1.3"  # supports Node >= 18


def mermaid_parser():
    """A directory holding Mermaid's parser (installed once from the npm registry into the user's cache)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Mermaid's own parser needs Node.js and npm (not on PATH); "
                    "test_mermaid_groups_nest_as_dot_clusters checks the .mmd structure without them")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 18:
        pytest.skip(f"Mermaid's parser needs Node.js >= 18, found {version}")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fsmchat-tests" / \
        f"{MERMAID}-{JSDOM}".replace("@", "-")
    if not (cache / "node_modules" / "mermaid" / "package.json").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(cache), MERMAID, JSDOM],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.fail(f"npm could not install {MERMAID} and {JSDOM}: {r.stderr[-2000:]}")
    shutil.copy(Path(__file__).resolve().parent / "mermaid_parse.mjs", cache / "mermaid_parse.mjs")
    return node, cache
