"""fsmchat: multi-agent LLM conversations as explicit state graphs run by one engine.

``import fsmchat`` is cheap: public names load on first use (PEP 562), and litellm is imported
only on the first model call (it costs seconds and, unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is
set, fetches a price list over the network; fsmchat sets it unless you did).
"""
from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # layers 2-11 (the rows of docs/architecture.md's table): models, errors, graphs, engine, stores, config
    "Bid": "models", "Message": "models", "RunResult": "models", "StopReason": "models", "TraceEvent": "models",
    "TokenDelta": "models", "StreamRetry": "models",
    "Transcript": "models", "format_output": "models",
    "FsmchatError": "errors", "GraphError": "errors", "ModelCallError": "errors", "NoTransitionError": "errors",
    "RenderError": "errors", "result_of": "errors", "MCPServerError": "errors", "ContextTooLong": "errors",
    "StateGraph": "graph",
    "run": "engine", "run_graph": "engine", "GraphRun": "engine", "run_sync": "engine",
    "SqliteCheckpointer": "checkpoint", "MemoryCheckpointer": "checkpoint", "resume": "checkpoint",
    "PostgresCheckpointer": "checkpoint_pg",
    "fork": "timetravel", "ForkEdit": "timetravel", "ForkError": "timetravel", "HistoryStep": "statelog",
    "Limits": "limits", "from_config": "config", "UntrustedReference": "trust",
    # layer 10: speakers
    "Agent": "speakers", "Turn": "speakers", "RESPOND_TOOL": "speakers",
    "Human": "speakers", "Approve": "speakers", "Edit": "speakers", "Reject": "speakers", "Say": "speakers",
    "Pending": "speakers", "Tool": "speakers", "ToolError": "speakers", "ToolSource": "speakers",
    "MCPServer": "speakers",
    "ToolCallEntry": "models",
    "RateLimit": "speakers", "rate_limit": "speakers", "LastMessages": "speakers", "Summarize": "speakers",
    # layer 15: patterns
    "Pattern": "patterns", "ChatContext": "patterns", "GroupChat": "patterns", "RoundRobinSwarm": "patterns",
    "build_turn_header": "patterns", "build_collaborative_task": "patterns", "OneOnOneDebate": "patterns",
    "one_on_one_debate": "patterns", "ExpertPanelDiscussion": "patterns",
    # layer 16: flow
    "AgentFlow": "flow", "Flow": "flow", "Discussion": "flow", "StepResult": "flow", "Task": "flow", "loop": "flow",
    "parallel": "flow", "route": "flow", "if_": "flow", "when": "flow", "repeat": "flow", "flow_input": "flow",
    "ask_human": "flow",
    # layer 17: network (hub, discussion channels)
    "Hub": "network", "HubClient": "network", "Channel": "network", "MemoryKnowledgeStore": "network",
    "wait_for_text_count": "network", "DiscussionState": "network", "Envelope": "network", "EV_TEXT": "network",
    "EV_CHANNEL_INVITE": "network", "EV_CHANNEL_INVITE_ACK": "network", "EV_CHANNEL_INVITE_REJECT": "network",
    "EV_CHANNEL_OPENED": "network", "EV_CHANNEL_CLOSED": "network", "EV_CHANNEL_EXPIRED": "network",
    "EV_TURN_FAILED": "network", "EV_EXPECTATION_VIOLATED": "network", "ORDERING_ROUND_ROBIN": "network",
    "NetworkError": "network", "TurnFailed": "network", "ProtocolError": "network", "NotFoundError": "network", "turn_within": "network",
    "ManualClock": "network",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fsmchat' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .checkpoint import MemoryCheckpointer, SqliteCheckpointer, resume
    from .checkpoint_pg import PostgresCheckpointer
    from .statelog import HistoryStep
    from .timetravel import ForkEdit, ForkError, fork
    from .config import from_config
    from .engine import GraphRun, run, run_graph, run_sync
    from .errors import ContextTooLong, FsmchatError, GraphError, MCPServerError, ModelCallError, NoTransitionError, \
        RenderError, result_of
    from .flow import (AgentFlow, Discussion, Flow, StepResult, Task, ask_human, flow_input, if_, loop, parallel,
                       repeat, route, when)
    from .graph import StateGraph
    from .limits import Limits
    from .trust import UntrustedReference
    from .models import Bid, Message, RunResult, StopReason, ToolCallEntry, TraceEvent, Transcript, format_output
    from .patterns import ChatContext, ExpertPanelDiscussion, GroupChat, OneOnOneDebate, Pattern, \
        RoundRobinSwarm, build_collaborative_task, build_turn_header, one_on_one_debate
    from .network import EV_CHANNEL_CLOSED, EV_CHANNEL_EXPIRED, EV_CHANNEL_INVITE, EV_CHANNEL_INVITE_ACK, \
        EV_CHANNEL_INVITE_REJECT, EV_CHANNEL_OPENED, EV_EXPECTATION_VIOLATED, EV_TEXT, EV_TURN_FAILED, \
        ORDERING_ROUND_ROBIN, Channel, DiscussionState, Envelope, Hub, HubClient, ManualClock, \
        MemoryKnowledgeStore, NetworkError, NotFoundError, ProtocolError, TurnFailed, turn_within, wait_for_text_count
    from .speakers import RESPOND_TOOL, Agent, Approve, Edit, Human, LastMessages, MCPServer, Pending, Reject, Say, \
        Summarize, Tool, ToolError, ToolSource, Turn
