"""The ``loop`` block: its body once per item of a list, ``begin -> next -> (body -> next | end)``;
with ``parallel=True`` a fork state, one branch run of the body per item."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable

from pydantic import model_validator

from ...checks import Count
from ...errors import ConfigError, bad_value
from ...graph.state_graph import StateGraph
from ..compile import Compiler, Join, bound, branch_reason, forked, halted, join_to, may_write
from ..context import FlowContext, Frame
from ..declare import ITEMS, STEPS, BlockConfig
from ..pattern_step import step_list
from ..task import Block


class LoopConfig(BlockConfig):
    """A loop's parameters, declared once (see ``fsmchat.flow.loop``)."""

    steps: Annotated[Any, STEPS] = None
    over: Annotated[Any, ITEMS] = "items"
    var_name: Any = "item"
    parallel: bool = False
    name: str = "loop"
    max_items: Annotated[int | None, Count(0, "the most items the loop accepts: a longer list is refused when the "
                                              "loop starts; it bounds max_calls()")] = None

    @model_validator(mode="after")
    def _check(self) -> "LoopConfig":
        over, var_name = self.over, self.var_name
        if isinstance(over, (list, tuple)):
            self.over = list(over)  # a literal list, fixed when the flow is built
        elif not isinstance(over, str) or not over:
            raise ConfigError(f"loop over= must name a variable holding a list, or be a list, got {over!r}")
        if not isinstance(var_name, str) or not var_name.isidentifier():
            raise bad_value("loop", "var_name", var_name, "a variable name such as 'item' (set to each item, "
                            "read as {{item}})", type_error=not isinstance(var_name, str))
        self.steps = step_list(self.steps, "loop")
        return self


@dataclass
class LoopFrame(Frame):
    """A loop's working state in a run: the items it iterates, and the index of the current one."""

    i: int = -1
    items: list[object] = field(default_factory=list)


class Loop(Block, kind="loop", config=LoopConfig):
    """The loop step ``loop(...)`` returns (its parameters are ``loop``'s)."""

    config: LoopConfig

    def _repr_fields(self) -> list[str]:
        cfg = self.config
        return [f"over={cfg.over!r}", *super()._repr_fields()] + (["parallel=True"] if cfg.parallel else []) + \
            ([f"max_items={cfg.max_items}"] if cfg.max_items is not None else [])

    @property
    def forks(self) -> bool:  # type: ignore[override]  # Block's class attribute, computed for a loop
        return self.config.parallel

    def writes(self, var: str) -> bool:
        """Whether this block itself sets variable ``var`` (its own output variables)."""
        return var in (self.config.var_name, "loop_index", "loop_outputs")

    def check_run(self, variables: dict[str, object]) -> None:
        """Refuse a run whose declared ``variables`` this block cannot use (before any call)."""
        over = self.config.over
        if not isinstance(over, str):
            return  # a literal list
        items = variables.get(over)
        if items is not None and not isinstance(items, (list, tuple)):
            raise ConfigError(f"AgentFlow: loop over={over!r} is invalid: expected a list, the variable "
                              f"holds a {type(items).__name__} (for a dict, loop over list(d.items()) or "
                              "list(d))")

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, object]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        cfg = self.config
        if isinstance(cfg.over, list):
            if may_write(cfg.steps, cfg.var_name):
                drop = {k: v for k, v in known.items() if k != cfg.var_name}
                return sum(bound(cfg.steps, items, requests, drop) for _ in cfg.over)
            return sum(bound(cfg.steps, items, requests, {**known, cfg.var_name: x}) for x in cfg.over)
        n = items.get(cfg.over, cfg.max_items)
        if n is None:
            raise ValueError(f"max_calls: loop {cfg.name!r} iterates over {cfg.over!r}, a list only known when it "
                             f"runs; declare loop(..., max_items=N) (a longer list is then refused when the "
                             f"loop starts) or give its length: max_calls({cfg.over}=N)")
        return int(n) * bound(cfg.steps, items, requests, known)

    def compile(self, c: Compiler, g: StateGraph[FlowContext], state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        cfg = self.config
        if cfg.parallel:
            body = c.sequence(cfg.steps, f"{state}_body", reason=branch_reason)
            g.fork(state, [body], *self.fork_parts(), f"each {cfg.var_name} in {over_text(self)}, concurrently")
        else:
            g.subgraph(state, self.graph(c), f"each {cfg.var_name} in {over_text(self)}")

    def graph(self, c: Compiler) -> StateGraph:
        lp, cfg = self, self.config
        key = c.key()

        def begin(ctx: FlowContext) -> int:
            """read the list to iterate"""
            items = loop_items(ctx, lp)
            ctx.frames[key] = LoopFrame(items=items)
            return len(items)

        def next_item(ctx: FlowContext) -> object:
            """set item and loop_index"""
            f = ctx.frame(key, LoopFrame)
            f.i += 1
            if f.i < len(f.items):
                ctx.variables[cfg.var_name] = f.items[f.i]
                ctx.variables["loop_index"] = f.i
                return f.i
            return None

        def has_item(ctx: FlowContext) -> bool:
            """items left"""
            f = ctx.frame(key, LoopFrame)
            return f.i < len(f.items)

        def end(ctx: FlowContext) -> None:
            """unset item and loop_index (they are scoped to the loop)"""
            ctx.variables.pop(cfg.var_name, None)
            ctx.variables.pop("loop_index", None)

        g = StateGraph(cfg.name, description=f"loop over {over_text(lp)}")
        g.state("begin", begin).state("next", next_item)
        g.subgraph("body", c.sequence(cfg.steps, "body"), "")
        g.state("end", end)
        g.final("done")
        g.edge("begin", "next")
        g.edge("next", "body", when=has_item)
        g.edge("next", "end", label="exhausted")
        g.edge("body", "end", when=halted, label="halt")
        g.edge("body", "next")
        g.edge("end", "done")
        return g

    def fork_parts(self) -> tuple[Callable[[FlowContext], list[tuple[int, FlowContext, int]]], Join]:
        lp, var_name = self, self.config.var_name

        def split_items(ctx: FlowContext) -> list[tuple[int, FlowContext, int]]:
            """one child run of the body per item, with item and loop_index set"""
            children = []
            for i, item in enumerate(loop_items(ctx, lp)):
                child = ctx.child()
                child.variables[var_name], child.variables["loop_index"] = item, i
                children.append((0, forked(child), i))
            return children

        join = join_to("loop_outputs", unset=(var_name, "loop_index"))
        return split_items, join


def over_text(lp: Loop) -> str:
    """How a loop's list is named in the diagram: the variable, a short literal list of plain
    values as written, or a literal list's length."""
    over = lp.config.over
    if isinstance(over, str):
        return over
    shown = repr(over)
    plain = all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in over)
    return shown if plain and len(shown) <= 60 else f"a list of {len(over)}"


def loop_items(ctx: FlowContext, lp: Loop) -> list[object]:
    """The items a loop iterates this run (refused when not a list, or over its ``max_items``)."""
    over = lp.config.over
    if isinstance(over, list):
        return copy.deepcopy(over)  # a literal list: the same items every run
    try:
        items = ctx.lookup(over)
    except KeyError:
        raise ValueError(f"loop over={over!r}: no such variable; variables are {sorted(ctx.variables)}") from None
    if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
        raise ValueError(f"loop over={over!r}: expected a list, got {type(items).__name__}"
                         + (" (loop over list(d.items()) or list(d) instead)" if isinstance(items, dict) else ""))
    items = list(items)
    cap = lp.config.max_items
    if cap is not None and len(items) > cap:
        raise ValueError(f"loop {lp.config.name!r}: {over!r} holds {len(items)} items, over its max_items={cap} "
                         "(the bound max_calls() promised)")
    return items
