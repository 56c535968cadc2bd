"""Layer 5: participants (litellm agents, callables, people) and the respond tool."""
from .agent import Agent, CallableSpeaker, Turn, as_speaker, check_roster, conversation_view
from .ratelimit import RateLimit, rate_limit
from .human import Approve, Edit, Human, Pending, Reject, Say
from .respond import RESPOND_TOOL, BidOutcome, parse_bid

__all__ = ["Agent", "CallableSpeaker", "Turn", "as_speaker", "check_roster", "conversation_view",
           "RESPOND_TOOL", "BidOutcome", "parse_bid", "RateLimit", "rate_limit", "Human", "Approve", "Edit", "Reject",
           "Say", "Pending"]
