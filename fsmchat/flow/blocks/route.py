"""The ``route`` block: ``decide -> (to_<key> | default | done)``, the first key said in the
previous output (or equal to a variable, with ``on``)."""
from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import model_validator

from ...errors import ConfigError, bad_value
from ...graph.state_graph import StateGraph, state_names
from ..compile import UNKNOWN, Compiler, bound, known_value, named
from ..context import FlowContext
from ..declare import MORE_STEPS, ROUTES, BlockConfig
from ..pattern_step import step_list
from ..task import Block, step_names


class RouteConfig(BlockConfig):
    """A route's parameters, declared once (see ``fsmchat.flow.route``)."""

    routes: Annotated[Any, ROUTES] = None
    default: Annotated[Any, MORE_STEPS] = None
    name: str = "route"
    on: Any = None

    @model_validator(mode="after")
    def _check(self) -> "RouteConfig":
        routes, on = self.routes, self.on
        if not isinstance(routes, dict) or not routes:
            raise ConfigError("route needs routes={'key': [steps], ...} with at least one key")
        for k in routes:
            if not isinstance(k, str) or not k.strip():
                raise bad_value("route", "routes key", k, "a non-empty string, matched as a whole word in the "
                                "previous output", type_error=not isinstance(k, str))
        if on is not None and (not isinstance(on, str) or not all(p.isidentifier() for p in on.split("."))):
            raise bad_value("route", "on", on, "a variable name such as 'phase' (or 'phase.name'), whose value is "
                            "compared exactly with the keys", type_error=not isinstance(on, str))
        self.routes = {k: step_list(v, f"route {k!r}") for k, v in routes.items()}
        self.default = step_list(self.default, "route default") if self.default else []
        return self


class Route(Block, kind="route", config=RouteConfig):
    """The route step ``route(...)`` returns (its parameters are ``route``'s)."""

    config: RouteConfig

    def _repr_fields(self) -> list[str]:
        cfg = self.config
        return [f"routes={list(cfg.routes)!r}"] + ([f"default={step_names(cfg.default)!r}"] if cfg.default else [])

    def says(self, key: str, text: object) -> bool:
        """Whether ``key`` appears as a whole word in ``text`` (case-insensitive)."""
        return re.search(rf"\b{re.escape(key)}\b", str(text or ""), re.IGNORECASE) is not None

    def value(self, ctx: FlowContext) -> object:
        """What the route looks at: the variable ``on`` (None when unset), else the previous output."""
        if self.config.on is None:
            return ctx.previous_result
        try:
            return ctx.lookup(self.config.on)
        except KeyError:
            return None

    def matches(self, key: str, value: object) -> bool:
        """With ``on``: the value equals ``key`` exactly (case-sensitive); else ``key`` is said in it."""
        return (value is not None and str(value) == key) if self.config.on is not None else self.says(key, value)

    def decide(self, ctx: FlowContext) -> str | None:
        """match a key in the previous output (or, with on=, equal to that variable)"""
        cfg = self.config
        value = self.value(ctx)
        key = next((k for k in cfg.routes if self.matches(k, value)), None)
        if key is None:
            seen = {"value": str(value)[:200], "on": cfg.on} if cfg.on is not None else \
                {"previous_output": str(value)[:200]}
            ctx.events.append({"event": "route_no_match", "route": cfg.name, "keys": list(cfg.routes),
                               "default": bool(cfg.default), **seen,
                               "note": "no key matched; " + ("the default steps run" if cfg.default else
                                                             "no default, so the route runs no step")})
        return key

    def children(self) -> list[object]:
        """The steps this block holds, in declaration order."""
        return [*(x for v in self.config.routes.values() for x in v), *self.config.default]

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, object]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        cfg = self.config
        value = known_value(known, cfg.on) if cfg.on is not None else UNKNOWN
        if value is not UNKNOWN:  # the variable is known (a loop over a literal list): only its branch counts
            key = next((k for k in cfg.routes if self.matches(k, value)), None)
            return bound(cfg.routes[key] if key is not None else cfg.default, items, requests, known)
        return max([bound(v, items, requests, known) for v in cfg.routes.values()]
                   + [bound(cfg.default, items, requests, known)])

    def compile(self, c: Compiler, g: StateGraph[FlowContext], state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        g.subgraph(state, self.graph(c), "first key said in the previous output" if self.config.on is None
                   else f"the key equal to {self.config.on}")

    def graph(self, c: Compiler) -> StateGraph:
        r, cfg = self, self.config
        g = StateGraph(cfg.name, description="route")
        g.state("decide", r.decide, "match a key in the previous output" if cfg.on is None else f"look up {cfg.on}")
        states = list(zip(cfg.routes, state_names(list(cfg.routes), reserved=["decide", "default", "done"],
                                                   prefix="to_", fallback="route")))
        for k, st in states:
            g.subgraph(st, c.sequence(cfg.routes[k], st), f"route {k!r}")
        if cfg.default:
            g.subgraph("default", c.sequence(cfg.default, "default"), "no key matched")
        g.final("done")
        for k, st in states:
            def matches(ctx: FlowContext, k: str = k) -> bool:
                return r.matches(k, r.value(ctx))

            key = st.removeprefix("to_")  # the key as its state names it: distinct keys, distinct labels
            g.edge("decide", st, when=named(matches, f"says_{key}" if cfg.on is None else f"{cfg.on}_is_{key}",
                                            f"previous output says {k!r}" if cfg.on is None else f"{cfg.on} == {k!r}"))
        g.edge("decide", "default" if cfg.default else "done", label="no_match")
        for _, st in states:
            g.edge(st, "done")
        if cfg.default:
            g.edge("default", "done")
        return g
