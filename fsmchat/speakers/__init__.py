"""Layer 10: participants (litellm agents, callables, people), their tools and the respond tool."""
from .agent import Agent, CallableSpeaker, Turn, as_speaker, check_roster, conversation_view
from .context import LastMessages, Summarize
from .ratelimit import RateLimit, rate_limit
from .human import Approve, Edit, Human, Pending, Reject, Say
from .handoff import Handoff
from .mcp import MCPServer
from .respond import RESPOND_TOOL, BidOutcome, parse_bid
from .tools import Tool, ToolError, ToolSource

__all__ = ["Agent", "CallableSpeaker", "Turn", "as_speaker", "check_roster", "conversation_view",
           "RESPOND_TOOL", "BidOutcome", "parse_bid", "Human", "Approve", "Edit", "Reject", "Say", "Pending",
           "Tool", "ToolError", "ToolSource", "MCPServer", "Handoff", "RateLimit", "rate_limit",
           "LastMessages", "Summarize"]
