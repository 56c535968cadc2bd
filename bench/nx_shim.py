"""What-if for cold start (used by whatif.py): a stand-in ``networkx`` with just what
``StateGraph.validate`` calls (``MultiDiGraph``/``DiGraph`` building, ``has_path``,
``simple_cycles``, ``ancestors``) in plain Python, installed in ``sys.modules`` before fsmchat is
imported. It measures what validating without networkx would save at start-up; it is not a
networkx replacement (graphs here have tens of states).
"""
from __future__ import annotations

import sys
import types
from typing import Any, Iterator


class DiGraph:
    def __init__(self, data: Any = None, name: str = "") -> None:
        self.succ: dict[Any, dict[Any, dict[str, Any]]] = {}
        self.name = name
        if data is not None:
            for n in data.succ:
                self.add_node(n)
            for u, vs in data.succ.items():
                for v in vs:
                    self.add_edge(u, v)

    def add_node(self, n: Any, **attrs: Any) -> None:
        self.succ.setdefault(n, {})

    def add_edge(self, u: Any, v: Any, **attrs: Any) -> None:
        self.add_node(u)
        self.add_node(v)
        self.succ[u][v] = attrs


MultiDiGraph = DiGraph


def _reach(succ: dict[Any, Any], start: Any) -> set[Any]:
    seen, todo = {start}, [start]
    while todo:
        for v in succ.get(todo.pop(), ()):
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return seen


def has_path(g: DiGraph, a: Any, b: Any) -> bool:
    return b in _reach(g.succ, a)


def ancestors(g: DiGraph, n: Any) -> set[Any]:
    pred: dict[Any, list[Any]] = {}
    for u, vs in g.succ.items():
        for v in vs:
            pred.setdefault(v, []).append(u)
    return _reach(pred, n) - {n}


def simple_cycles(g: DiGraph) -> Iterator[list[Any]]:
    """Cycles of a graph whose nodes have out-degree <= 1 (validate's "forced" graph)."""
    done: set[Any] = set()
    for start in g.succ:
        path, index, n = [], {}, start
        while n is not None and n not in done and n not in index:
            index[n] = len(path)
            path.append(n)
            nxt = list(g.succ.get(n, ()))
            n = nxt[0] if nxt else None
        if n is not None and n in index:
            yield path[index[n]:]
        done.update(path)


def install() -> None:
    mod = types.ModuleType("networkx")
    mod.DiGraph, mod.MultiDiGraph = DiGraph, MultiDiGraph  # type: ignore[attr-defined]
    mod.has_path, mod.ancestors, mod.simple_cycles = has_path, ancestors, simple_cycles  # type: ignore[attr-defined]
    sys.modules["networkx"] = mod


install()
