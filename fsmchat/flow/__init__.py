"""Layer 16: workflows (AgentFlow) with the Discussion step and the combinators."""
from .compile import StepError
from .context import FlowContext, Frame, StepResult, flow_input
from .declare import STEPS, BlockConfig
from .flow import AgentFlow, Flow, FlowConfig
from .pattern_step import PatternStep
from .steps import Discussion, Task, ask_human, if_, loop, parallel, repeat, route, when
from .task import Block

__all__ = ["AgentFlow", "Flow", "FlowConfig", "Discussion", "Task", "StepResult", "StepError", "FlowContext",
           "flow_input", "loop", "parallel", "route", "if_", "when", "repeat", "ask_human", "Block",
           "PatternStep", "BlockConfig", "Frame", "STEPS"]
