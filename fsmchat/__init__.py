"""fsmchat: multi-agent LLM conversations as explicit state graphs run by one engine.

``import fsmchat`` is cheap: public names load on first use (PEP 562), and litellm is imported
only on the first model call (it costs seconds and, unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is
set, fetches a price list over the network; fsmchat sets it unless you did).
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from .common.facade import MovedModules, lazy_exports

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

# modules that moved into packages keep their old import paths (and the MODULE:ATTR references
# stored before the move)
MOVED = {"fsmchat.checkpoint": "fsmchat.store.checkpoint", "fsmchat.checkpoint_pg": "fsmchat.store.postgres",
         "fsmchat.writer": "fsmchat.store.writer", "fsmchat.group_commit": "fsmchat.store.group_commit",
         "fsmchat.statelog": "fsmchat.store.statelog", "fsmchat.timetravel": "fsmchat.store.timetravel",
         "fsmchat.live": "fsmchat.cli.live",
         "fsmchat.pytest_plugin": "fsmchat.testing.plugin", "fsmchat.gallery": "fsmchat.cli.gallery",
         "fsmchat.config_values": "fsmchat.config.values", "fsmchat.kinds": "fsmchat.config.kinds",
         "fsmchat.distributed": "fsmchat.patterns.distributed", "fsmchat.progress": "fsmchat.patterns.progress",
         "fsmchat.deadline": "fsmchat.speakers.deadline",
         "fsmchat.masking": "fsmchat.common.masking", "fsmchat.facade": "fsmchat.common.facade"}
if not any(isinstance(f, MovedModules) for f in sys.meta_path):
    sys.meta_path.append(MovedModules(MOVED))

_EXPORTS: dict[str, str] = {
    # layers 2-11 (the rows of docs/architecture.md's table): models, errors, graphs, engine, stores, config
    "Bid": "models", "Message": "models", "RunResult": "models", "StopReason": "models", "TraceEvent": "models",
    "TokenDelta": "models", "BidDelta": "models", "StreamRetry": "models", "StreamItem": "models",
    "RunEvent": "events", "parse_events": "events",
    "Transcript": "models", "format_output": "models",
    "FsmchatError": "errors", "GraphError": "errors", "ModelCallError": "errors", "NoTransitionError": "errors",
    "RenderError": "errors", "result_of": "errors", "MCPServerError": "errors", "ContextTooLong": "errors",
    "StateGraph": "graph",
    "run": "engine", "run_graph": "engine", "GraphRun": "engine", "run_sync": "engine",
    "SqliteCheckpointer": "store.checkpoint", "MemoryCheckpointer": "store.checkpoint", "resume": "store.checkpoint",
    "PostgresCheckpointer": "store.postgres",
    "fork": "store.timetravel", "ForkEdit": "store.timetravel", "ForkError": "store.timetravel",
    "HistoryStep": "store.statelog",
    "Limits": "limits", "from_config": "config.convert", "UntrustedReference": "trust",
    # layer 10: speakers
    "Agent": "speakers", "Turn": "speakers", "RESPOND_TOOL": "speakers",
    "Human": "speakers", "Approve": "speakers", "Edit": "speakers", "Reject": "speakers", "Say": "speakers",
    "Pending": "speakers", "Tool": "speakers", "ToolError": "speakers", "ToolSource": "speakers",
    "MCPServer": "speakers", "Handoff": "speakers",
    "ToolCallEntry": "models",
    "RateLimit": "speakers", "rate_limit": "speakers", "LastMessages": "speakers", "Summarize": "speakers",
    # layer 15: patterns
    "Pattern": "patterns", "ChatContext": "patterns", "GroupChat": "patterns", "RoundRobinSwarm": "patterns",
    "build_turn_header": "patterns", "build_collaborative_task": "patterns", "OneOnOneDebate": "patterns",
    "one_on_one_debate": "patterns", "ExpertPanelDiscussion": "patterns", "SelectorGroupChat": "patterns",
    "Handoffs": "patterns", "Swarm": "patterns",
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


__getattr__, __dir__ = lazy_exports(__name__, {f".{module}": [n for n, m in _EXPORTS.items() if m == module]
                                               for module in set(_EXPORTS.values())})


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly (``as``: re-exported)
    from .store.checkpoint import (
        MemoryCheckpointer as MemoryCheckpointer, SqliteCheckpointer as SqliteCheckpointer, resume as resume)
    from .store.postgres import PostgresCheckpointer as PostgresCheckpointer
    from .config.convert import from_config as from_config
    from .engine import GraphRun as GraphRun, run as run, run_graph as run_graph, run_sync as run_sync
    from .errors import (
        ContextTooLong as ContextTooLong, FsmchatError as FsmchatError, GraphError as GraphError,
        MCPServerError as MCPServerError, ModelCallError as ModelCallError, NoTransitionError as NoTransitionError,
        RenderError as RenderError, result_of as result_of)
    from .flow import (
        AgentFlow as AgentFlow, Discussion as Discussion, Flow as Flow, StepResult as StepResult, Task as Task,
        ask_human as ask_human, flow_input as flow_input, if_ as if_, loop as loop, parallel as parallel,
        repeat as repeat, route as route, when as when)
    from .graph import StateGraph as StateGraph
    from .limits import Limits as Limits
    from .models import (
        Bid as Bid, BidDelta as BidDelta, Message as Message, RunResult as RunResult, StopReason as StopReason,
        StreamItem as StreamItem, StreamRetry as StreamRetry, TokenDelta as TokenDelta, ToolCallEntry as ToolCallEntry,
        TraceEvent as TraceEvent, Transcript as Transcript, format_output as format_output)
    from .events import RunEvent as RunEvent, parse_events as parse_events
    from .network import (
        EV_CHANNEL_CLOSED as EV_CHANNEL_CLOSED, EV_CHANNEL_EXPIRED as EV_CHANNEL_EXPIRED,
        EV_CHANNEL_INVITE as EV_CHANNEL_INVITE, EV_CHANNEL_INVITE_ACK as EV_CHANNEL_INVITE_ACK,
        EV_CHANNEL_INVITE_REJECT as EV_CHANNEL_INVITE_REJECT, EV_CHANNEL_OPENED as EV_CHANNEL_OPENED,
        EV_EXPECTATION_VIOLATED as EV_EXPECTATION_VIOLATED, EV_TEXT as EV_TEXT, EV_TURN_FAILED as EV_TURN_FAILED,
        ORDERING_ROUND_ROBIN as ORDERING_ROUND_ROBIN, Channel as Channel, DiscussionState as DiscussionState,
        Envelope as Envelope, Hub as Hub, HubClient as HubClient, ManualClock as ManualClock,
        MemoryKnowledgeStore as MemoryKnowledgeStore, NetworkError as NetworkError, NotFoundError as NotFoundError,
        ProtocolError as ProtocolError, TurnFailed as TurnFailed, turn_within as turn_within,
        wait_for_text_count as wait_for_text_count)
    from .patterns import (
        ChatContext as ChatContext, ExpertPanelDiscussion as ExpertPanelDiscussion, GroupChat as GroupChat,
        Handoffs as Handoffs, OneOnOneDebate as OneOnOneDebate, Pattern as Pattern,
        RoundRobinSwarm as RoundRobinSwarm, SelectorGroupChat as SelectorGroupChat, Swarm as Swarm,
        build_collaborative_task as build_collaborative_task, build_turn_header as build_turn_header,
        one_on_one_debate as one_on_one_debate)
    from .speakers import (
        RESPOND_TOOL as RESPOND_TOOL, Agent as Agent, Approve as Approve, Edit as Edit, Handoff as Handoff,
        Human as Human,
        LastMessages as LastMessages, MCPServer as MCPServer, Pending as Pending, RateLimit as RateLimit,
        Reject as Reject, Say as Say, Summarize as Summarize, Tool as Tool, ToolError as ToolError,
        ToolSource as ToolSource, Turn as Turn, rate_limit as rate_limit)
    from .store.statelog import HistoryStep as HistoryStep
    from .store.timetravel import ForkEdit as ForkEdit, ForkError as ForkError, fork as fork
    from .trust import UntrustedReference as UntrustedReference
