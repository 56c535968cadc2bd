"""MkDocs hook (mkdocs.yml ``hooks:``): the site's home page is the repository's README.md.

The README links into docs/ as a repository page does (``docs/viewer.png``); on the site the home
page lives in docs/, so those links lose the prefix. Nothing else changes, so the README stays the
one text of the home page.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parent.parent / "README.md"


def home_page(text: str) -> str:
    """README text as docs/index.md: ``](docs/x)`` links become ``](x)``."""
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "index.md", content=home_page(README.read_text(encoding="utf-8"))))
    return files
