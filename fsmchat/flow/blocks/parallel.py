"""The ``parallel`` block: a fork state, one branch run per step on a copy of the variables,
joined in declaration order."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import model_validator

from ...checks import Count
from ...graph.state_graph import StateGraph
from ..compile import Compiler, bound, branch_reason, join_to, split_into
from ..context import FlowContext
from ..declare import STEPS, BlockConfig
from ..pattern_step import step_list
from ..task import Block


class ParallelConfig(BlockConfig):
    """A parallel step's parameters, declared once (see ``fsmchat.flow.parallel``)."""

    steps: Annotated[Any, STEPS] = None
    name: str = "parallel"
    max_concurrency: Annotated[int | None, Count(1, "the most branches running at once; 1: one after another, in "
                                                    "order; None: all")] = None

    @model_validator(mode="after")
    def _check(self) -> "ParallelConfig":
        self.steps = step_list(list(self.steps), "parallel")
        return self


class Parallel(Block, kind="parallel", config=ParallelConfig):
    """The parallel step ``parallel(...)`` returns (its parameters are ``parallel``'s)."""

    forks = True
    config: ParallelConfig

    def writes(self, var: str) -> bool:
        """Whether this block itself sets variable ``var`` (its own output variables)."""
        return var == "parallel_outputs"

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, object]) -> int:
        """The most model calls one run of this block can make (see ``fsmchat.flow.compile.bound``)."""
        return sum(bound([x], items, requests, known) for x in self.config.steps)

    def compile(self, c: Compiler, g: StateGraph[FlowContext], state: str) -> None:
        """Declare this block as ``state`` of ``g`` (a subgraph, or a fork state)."""
        branches = [c.sequence([s], f"{state}_{i + 1}", reason=branch_reason) for i, s in enumerate(self.config.steps)]
        limit = self.config.max_concurrency
        how = "concurrently" if limit is None or limit >= len(branches) else \
            "one after another" if limit == 1 else f"at most {limit} at once"
        g.fork(state, branches, split_into(len(branches)), join_to("parallel_outputs"),
               f"{len(branches)} branches {how}", max_concurrency=limit)
