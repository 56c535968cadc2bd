"""Layer 6: conversation patterns, each compiled to a StateGraph and run by the one engine."""
from .base import ChatContext, Pattern
from .group_chat import GroupChat, GroupChatConfig, compile_group_chat

__all__ = ["Pattern", "ChatContext", "GroupChat", "GroupChatConfig", "compile_group_chat"]
