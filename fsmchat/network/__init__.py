"""Layer 17: the AG2-style network (hub, clients, channels) and its discussion channel.

A channel's lifecycle (``pending -> active -> closed | expired``) and the discussion adapter's
turn rule (``awaiting_<p> -> awaiting_<next>``) are ``StateGraph``s, stepped by the engine's ``GraphRun.fire`` on
the engine's machines and rendered like every other pattern.

```python
hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0)
alice = await hub.register(Agent("alice", prompt="The optimist. One short sentence."))
bob = await hub.register(Agent("bob", prompt="The realist. One short sentence."))
channel = await alice.open(type="discussion", target=[bob.agent_id],
                           knobs={"ordering": ORDERING_ROUND_ROBIN, "max_texts": 6})
await channel.send("Topic: should every developer learn Rust?")
await wait_for_text_count(hub, channel.channel_id, expected=6)
```
"""
from .adapter import DiscussionAdapter, DiscussionState, check_knobs, participant_order
from .channel import ChannelRuntime, HubLink
from .speaking import ChannelSpeaking
from .client import Channel, HubClient
from .clock import ManualClock
from .errors import ChannelLimitError, HubClosed, NetworkError, NotFoundError, ProtocolError, TurnFailed
from .events import EV_CHANNEL_CLOSED, EV_CHANNEL_EXPIRED, EV_CHANNEL_INVITE, EV_CHANNEL_INVITE_ACK, \
    EV_CHANNEL_INVITE_REJECT, EV_CHANNEL_OPENED, EV_EXPECTATION_VIOLATED, EV_TEXT, EV_TOOL_CALLS, EV_TOOL_DECISION, \
    EV_TOOL_RESULT, EV_TURN_FAILED, MAX_CUSTOM_EVENTS, MAX_EVENT_BYTES, ORDERING_ROUND_ROBIN, Envelope, NetworkEvent
from .expectations import DEFAULT_EXPECTATIONS, Expectation, turn_within
from .graphs import LIFECYCLE, ChannelContext, example_lifecycle_graph, example_turn_graph, lifecycle_graph, \
    turn_graph
from .handler import CLOSE_TOOL, DefaultHandler
from .hub import Hub, wait_for_text_count
from .services import HANDLER_COUNTS, HubServices
from .stats import TurnStats
from .store import KnowledgeStore, MemoryKnowledgeStore, SQLiteKnowledgeStore
from .view import WindowedSummary, window_size, windowed_view

__all__ = [
    "Hub", "HubClient", "Channel", "ChannelRuntime", "ChannelSpeaking", "HubLink", "HubServices", "HANDLER_COUNTS",
    "MAX_CUSTOM_EVENTS", "MAX_EVENT_BYTES", "MemoryKnowledgeStore", "SQLiteKnowledgeStore", "KnowledgeStore",
    "wait_for_text_count",
    "DiscussionAdapter", "DiscussionState", "check_knobs", "participant_order",
    "EV_TEXT", "EV_CHANNEL_INVITE", "EV_CHANNEL_INVITE_ACK", "EV_CHANNEL_INVITE_REJECT", "EV_CHANNEL_OPENED",
    "EV_CHANNEL_CLOSED", "EV_CHANNEL_EXPIRED", "EV_TURN_FAILED", "EV_EXPECTATION_VIOLATED",
    "EV_TOOL_CALLS", "EV_TOOL_RESULT", "EV_TOOL_DECISION",
    "ORDERING_ROUND_ROBIN", "Envelope", "NetworkEvent",
    "NetworkError", "ProtocolError", "NotFoundError", "TurnFailed", "HubClosed", "ChannelLimitError",
    "Expectation", "turn_within", "DEFAULT_EXPECTATIONS", "ManualClock",
    "WindowedSummary", "windowed_view", "window_size", "CLOSE_TOOL", "DefaultHandler", "TurnStats",
    "LIFECYCLE", "ChannelContext", "lifecycle_graph", "turn_graph", "example_lifecycle_graph",
    "example_turn_graph",
]
