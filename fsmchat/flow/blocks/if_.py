"""The ``if_`` block (also ``when``): ``check -> (then | else | done)``."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import model_validator

from ...graph.state_graph import StateGraph
from ..compile import Compiler, bound
from ..context import FlowContext, compile_condition
from ..declare import MORE_STEPS, STEPS, BlockConfig, condition_form
from ..pattern_step import step_list
from ..task import Block, fn_name, step_names


class IfConfig(BlockConfig):
    """An ``if_``'s parameters, declared once (see ``fsmchat.flow.if_``). In its config form
    ``condition`` is an import path, ``expression`` a condition string such as ``"{{x}} > 1"``."""

    condition: Annotated[Any, condition_form("expression")] = None
    then_steps: Annotated[Any, STEPS] = None
    else_steps: Annotated[Any, MORE_STEPS] = None
    name: str = "if"

    @model_validator(mode="after")
    def _check(self) -> "IfConfig":
        self.condition = compile_condition(self.condition, "if_ condition")
        self.then_steps = step_list(self.then_steps, "if_ then_steps")
        self.else_steps = step_list(self.else_steps, "if_ else_steps") if self.else_steps else []
        return self


class If(Block, kind="if", config=IfConfig, owner="if_"):
    """The step ``if_(...)`` returns (its parameters are ``if_``'s)."""

    config: IfConfig

    def _repr_fields(self) -> list[str]:
        cfg = self.config
        return [f"condition={fn_name(cfg.condition)}", f"then={step_names(cfg.then_steps)!r}"] + \
            ([f"else={step_names(cfg.else_steps)!r}"] if cfg.else_steps else [])

    def children(self) -> list[object]:
        """The steps this block holds, in declaration order."""
        return [*self.config.then_steps, *self.config.else_steps]

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, object]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        cfg = self.config
        return max(bound(cfg.then_steps, items, requests, known), bound(cfg.else_steps, items, requests, known))

    def compile(self, c: Compiler, g: StateGraph[FlowContext], state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        cond = self.config.condition
        g.subgraph(state, self.graph(c), f"if {cond.__doc__ or cond.__name__}")

    def graph(self, c: Compiler) -> StateGraph:
        cfg = self.config
        g = StateGraph(cfg.name, description="if")
        g.state("check", None, cfg.condition.__doc__ or cfg.condition.__name__)
        g.subgraph("then", c.sequence(cfg.then_steps, "then"), "")
        if cfg.else_steps:
            g.subgraph("else", c.sequence(cfg.else_steps, "else"), "")
        g.final("done")
        g.edge("check", "then", when=cfg.condition)
        g.edge("check", "else" if cfg.else_steps else "done", label="otherwise")
        g.edge("then", "done")
        if cfg.else_steps:
            g.edge("else", "done")
        return g
