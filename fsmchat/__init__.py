"""fsmchat: multi-agent LLM conversations as explicit state graphs run by one engine.

Importing fsmchat never imports litellm (it costs seconds and reaches for the network);
the model layer imports it on first use.
"""
from .checkpoint import MemoryCheckpointer, SqliteCheckpointer, resume
from .engine import run, run_graph, run_sync
from .limits import Limits
from .errors import FsmchatError, GraphError, ModelCallError, NoTransitionError, RenderError, result_of
from .graph import StateGraph
from .models import Bid, Message, RunResult, TraceEvent, Transcript, format_output
from .flow import AgentFlow, Discussion, Flow, StepResult, Task, if_, loop, parallel, repeat, route, when
from .patterns import ChatContext, ExpertPanelDiscussion, GroupChat, OneOnOneDebate, Pattern, RoundRobinSwarm, \
    build_collaborative_task, build_turn_header, one_on_one_debate
from .speakers import RESPOND_TOOL, Agent, Turn

__version__ = "0.1.0"
__all__ = ["StateGraph", "GraphError", "RenderError", "NoTransitionError", "ModelCallError", "FsmchatError",
           "result_of", "run", "run_graph", "run_sync", "Bid", "Message", "RunResult", "TraceEvent",
           "Transcript", "format_output", "Agent", "Turn", "RESPOND_TOOL", "GroupChat", "Pattern",
           "ChatContext", "AgentFlow", "Flow", "Discussion", "StepResult", "Task", "loop", "parallel", "route",
           "if_", "when", "repeat", "RoundRobinSwarm", "build_turn_header", "build_collaborative_task",
           "OneOnOneDebate", "one_on_one_debate", "ExpertPanelDiscussion", "SqliteCheckpointer",
           "MemoryCheckpointer", "resume", "Limits"]
