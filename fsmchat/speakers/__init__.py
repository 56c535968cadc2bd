"""Layer 10: participants (litellm agents, callables, people), their tools and the respond tool."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common.facade import lazy_exports

_MODULES = {  # each module -> the public names it defines
    '.agent': ('Agent', 'CallableSpeaker', 'Turn', 'as_speaker', 'check_roster', 'conversation_view'),
    '.context': ('LastMessages', 'Summarize'),
    '.ratelimit': ('RateLimit', 'rate_limit'),
    '.human': ('Approve', 'Edit', 'Human', 'Pending', 'Reject', 'Say'),
    '.handoff': ('Handoff',),
    '.mcp': ('MCPServer',),
    '.respond': ('RESPOND_TOOL', 'BidOutcome', 'parse_bid'),
    '.tools': ('Tool', 'ToolError', 'ToolSource'),
}
__all__ = ["Agent", "CallableSpeaker", "Turn", "as_speaker", "check_roster", "conversation_view",
           "RESPOND_TOOL", "BidOutcome", "parse_bid", "Human", "Approve", "Edit", "Reject", "Say", "Pending",
           "Tool", "ToolError", "ToolSource", "MCPServer", "Handoff", "RateLimit", "rate_limit",
           "LastMessages", "Summarize"]
__getattr__, __dir__ = lazy_exports(__name__, _MODULES)

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly (``__all__`` re-exports them)
    from .agent import Agent, CallableSpeaker, Turn, as_speaker, check_roster, conversation_view
    from .context import LastMessages, Summarize
    from .ratelimit import RateLimit, rate_limit
    from .human import Approve, Edit, Human, Pending, Reject, Say
    from .handoff import Handoff
    from .mcp import MCPServer
    from .respond import RESPOND_TOOL, BidOutcome, parse_bid
    from .tools import Tool, ToolError, ToolSource
