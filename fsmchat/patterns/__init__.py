"""Layer 6: conversation patterns, each compiled to a StateGraph and run by the one engine."""
from .base import ChatContext, Pattern, PatternConfig
from .debate import DebateConfig, OneOnOneDebate, compile_debate, one_on_one_debate
from .group_chat import GroupChat, GroupChatConfig, compile_group_chat
from .panel import ExpertPanelDiscussion, PanelConfig, compile_panel
from .round_robin import RoundRobinConfig, RoundRobinSwarm, build_collaborative_task, build_turn_header, \
    compile_round_robin

__all__ = ["Pattern", "PatternConfig", "ChatContext", "GroupChat", "GroupChatConfig", "compile_group_chat",
           "RoundRobinSwarm", "RoundRobinConfig", "compile_round_robin", "build_turn_header",
           "build_collaborative_task", "OneOnOneDebate", "one_on_one_debate", "DebateConfig", "compile_debate",
           "ExpertPanelDiscussion", "PanelConfig", "compile_panel"]
