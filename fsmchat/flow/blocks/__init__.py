"""The flow's block kinds, one module each, each declared once by its model (``fsmchat.flow.declare``)."""
from .discussion import Discussion, DiscussionConfig, DiscussionFrame
from .if_ import If, IfConfig
from .loop import Loop, LoopConfig, LoopFrame
from .parallel import Parallel, ParallelConfig
from .repeat import Repeat, RepeatConfig, RepeatFrame
from .route import Route, RouteConfig

__all__ = ["Discussion", "DiscussionConfig", "DiscussionFrame", "If", "IfConfig", "Loop", "LoopConfig", "LoopFrame",
           "Parallel", "ParallelConfig", "Repeat", "RepeatConfig", "RepeatFrame", "Route", "RouteConfig"]
