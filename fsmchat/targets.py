"""Naming code from the command line and from configs: ``MODULE:ATTR``, ``path/file.py:ATTR``,
and the ``build()`` convention for files.

``MODULE:ATTR`` imports ``MODULE`` the usual way, with the current directory first on
``sys.path`` (``use_cwd``, as uvicorn and flask do), so ``fsmchat plan mychat:chat`` works next to
``mychat.py``. ``path/file.py:ATTR`` loads that file. A file named without ``:ATTR`` stands for its
top-level ``def build()``: a zero-argument function returning a pattern or a ``StateGraph``.
``defines_build`` answers whether a file has one by reading its source, without running it, so
scanning a folder never imports a file that is not a ``build()`` file.
"""
from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from .graph.state_graph import StateGraph

BUILD = "build"  # the zero-argument function a target file names by default


def use_cwd() -> None:
    """Put the current directory first on ``sys.path`` (the ``fsmchat`` script does not have it)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def split_target(spec: str) -> tuple[str, str | None]:
    """``"pkg.mod:attr"`` -> ``("pkg.mod", "attr")``; ``"path/x.py"`` -> ``("path/x.py", None)``."""
    where, sep, attr = spec.rpartition(":")
    if sep and where and attr and not (len(where) == 1 and where.isalpha()):  # not a Windows drive letter
        return where, attr
    if spec.endswith(".py"):
        return spec, None
    raise ValueError(f"target {spec!r} must look like MODULE:ATTR (e.g. mychat:chat), path/to/file.py:ATTR, "
                     f"or path/to/file.py (its {BUILD}() function)")


def load_module(where: str) -> ModuleType:
    """A module by dotted name, or a ``.py`` file by path."""
    return load_file(Path(where)) if where.endswith(".py") else importlib.import_module(where)


def load_target(spec: str) -> object:
    """``module:attr``, ``path/to/file.py:attr`` or ``path/to/file.py`` (its ``build``) -> the object."""
    return load_target_with_module(spec)[0]


def load_target_with_module(spec: str) -> tuple[object, ModuleType]:
    """The object ``spec`` names and the module it was found in."""
    where, attr = split_target(spec)
    if attr is None:
        if not defines_build(Path(where)):
            raise ValueError(f"{where} defines no top-level `def {BUILD}()`; name the object to use as "
                             f"{where}:ATTR, or add a zero-argument {BUILD}() returning a pattern or a StateGraph")
        attr = BUILD
    module = load_module(where)
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = [n for n in vars(obj) if not n.startswith("_")] if hasattr(obj, "__dict__") else []
            close = difflib.get_close_matches(part, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise AttributeError(f"{where} has no attribute {attr!r}{hint}") from None
    return obj, module


def load_file(path: Path) -> ModuleType:
    """Import a ``.py`` file as a module (its directory first on ``sys.path``, so its own imports work)."""
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    home = str(path.resolve().parent)
    if home not in sys.path:  # as ``python file.py`` would: the file's own imports find its neighbours
        sys.path.insert(0, home)
    spec = importlib.util.spec_from_file_location(f"fsmchat_target_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def defines_build(path: Path) -> bool:
    """Whether the file has a top-level ``def build(...)``, read from its source (nothing is run)."""
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == BUILD for node in tree.body)


def resolve_graph(obj: object) -> StateGraph:
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
