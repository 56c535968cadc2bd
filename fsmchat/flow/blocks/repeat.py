"""The ``repeat`` block: ``begin -> body -> check -> (body | done)``, at most ``max_iterations``
passes, bounded like turns (``fsmchat.graph.turns.add_turns``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import model_validator

from ...checks import Count
from ...graph.state_graph import StateGraph
from ...graph.turns import add_turns
from ..compile import Compiler, bound, bounded_exits, named
from ..context import FlowContext, Frame, compile_condition
from ..declare import STEPS, BlockConfig, condition_form
from ..pattern_step import step_list
from ..task import Block, fn_name


class RepeatConfig(BlockConfig):
    """A repeat's parameters, declared once (see ``fsmchat.flow.repeat``). In its config form
    ``until`` is an import path, ``until_expression`` a condition string."""

    steps: Annotated[Any, STEPS] = None
    until: Annotated[Any, condition_form("until_expression")] = None
    max_iterations: Annotated[int, Count(1, "the most passes")] = 10
    name: str = "repeat"

    @model_validator(mode="after")
    def _check(self) -> "RepeatConfig":
        self.steps = step_list(self.steps, "repeat")
        self.until = compile_condition(self.until, "repeat until") if self.until is not None else None
        return self


@dataclass
class RepeatFrame(Frame):
    """A repeat's working state in a run: passes made, and whether ``until`` held after the last."""

    n: int = 0
    met: bool = False


class Repeat(Block, kind="repeat", config=RepeatConfig):
    """The step ``repeat(...)`` returns (its parameters are ``repeat``'s)."""

    config: RepeatConfig

    def _repr_fields(self) -> list[str]:
        cfg = self.config
        return [*super()._repr_fields(), f"max_iterations={cfg.max_iterations}"] + \
            ([f"until={fn_name(cfg.until)}"] if cfg.until is not None else [])

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, object]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        return int(self.config.max_iterations) * bound(self.config.steps, items, requests, known)

    def compile(self, c: Compiler, g: StateGraph[FlowContext], state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        cfg = self.config
        g.subgraph(state, self.graph(c), f"until {getattr(cfg.until, '__name__', 'max')}, "
                                         f"at most {cfg.max_iterations}x")

    def graph(self, c: Compiler) -> StateGraph:
        cfg = self.config
        key = c.key()

        def begin(ctx: FlowContext) -> None:
            """reset the iteration count"""
            ctx.frames[key] = RepeatFrame()

        def check(ctx: FlowContext) -> int:
            """count a pass, evaluate until"""
            f = ctx.frame(key, RepeatFrame)
            f.n += 1
            f.met = bool(cfg.until(ctx)) if cfg.until is not None and not ctx.halted else False
            return f.n

        def iterations_left(ctx: FlowContext) -> bool:
            return ctx.frame(key, RepeatFrame).n < int(cfg.max_iterations)

        def met(ctx: FlowContext) -> bool:
            return ctx.frame(key, RepeatFrame).met

        named(iterations_left, "iterations_left", f"fewer than {cfg.max_iterations} passes")
        g = StateGraph(cfg.name, description="repeat")
        g.state("begin", begin)
        g.subgraph("body", c.sequence(cfg.steps, "body"), "")
        g.state("check", check)
        g.final("done")
        g.edge("begin", "body")
        return add_turns(g, [("body", "check")], exits=bounded_exits(met if cfg.until is not None else None),
                         more=iterations_left, exhausted=("done", "max_iterations"))
