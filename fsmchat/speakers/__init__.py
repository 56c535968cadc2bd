"""Layer 5: participants (litellm agents, callables) and the respond tool."""
from .agent import Agent, CallableSpeaker, Turn, as_speaker, check_roster, conversation_view
from .respond import RESPOND_TOOL, BidOutcome, parse_bid

__all__ = ["Agent", "CallableSpeaker", "Turn", "as_speaker", "check_roster", "conversation_view",
           "RESPOND_TOOL", "BidOutcome", "parse_bid"]
